//! The tensors the decoder keeps on the host (the token embedding, the
//! norms, the attention biases), found and checked in the checkpoint
//! before anything is read; the GEMMs' tensors are checked by
//! [`crate::weights::linear_tensors`] at the same time.

use hetero_plan::ModelSpec;

use super::Checkpoint;
use super::config::DecoderConfig;
use crate::Result;

/// The names of one layer's host tensors.
#[derive(Debug, Clone)]
struct LayerNames {
    attn_norm: String,
    mlp_norm: String,
    /// q, k and v biases.
    qkv_bias: Option<[String; 3]>,
    o_bias: Option<String>,
}

/// The names of every host tensor, each checked for its shape.
#[derive(Debug, Clone)]
pub(crate) struct HostNames {
    embed: String,
    final_norm: String,
    layers: Vec<LayerNames>,
}

/// One layer's host tensors.
#[derive(Debug)]
pub(crate) struct LayerTensors {
    pub attn_norm: Vec<f32>,
    pub mlp_norm: Vec<f32>,
    pub qkv_bias: Option<[Vec<f32>; 3]>,
    pub o_bias: Option<Vec<f32>>,
}

/// Every host tensor, as f32.
#[derive(Debug)]
pub(crate) struct HostTensors {
    /// `vocab × hidden`.
    pub embed: Vec<f32>,
    pub final_norm: Vec<f32>,
    pub layers: Vec<LayerTensors>,
}

/// Checks that every tensor the decoder needs is in the checkpoint with
/// its shape (the GEMMs' too), reading none; returns the host tensors'
/// names.
pub(crate) fn check(
    ckpt: &Checkpoint,
    cfg: &DecoderConfig,
    model: &ModelSpec,
) -> Result<HostNames> {
    let embed = ckpt
        .names()
        .find(|n| n.ends_with("embed_tokens.weight"))
        .cloned()
        .ok_or_else(|| {
            ckpt.bad("missing tensor `model.embed_tokens.weight` (the token embedding)".into())
        })?;
    let prefix = embed.trim_end_matches("embed_tokens.weight").to_string();
    let want = |name: String, shape: &[usize], what: &str| -> Result<String> {
        if ckpt.info(&name).is_none() {
            return Err(ckpt.bad(format!("missing tensor `{name}` ({what}, shape {shape:?})")));
        }
        let info = ckpt.float_info(&name)?;
        if info.shape != shape {
            return Err(ckpt.bad(format!(
                "tensor `{name}` ({what}) has shape {:?}; the model needs {shape:?}",
                info.shape
            )));
        }
        Ok(name)
    };
    let (h, q, kv) = (cfg.hidden, cfg.q_dim(), cfg.kv_dim());
    let embed = want(embed, &[cfg.vocab, h], "the token embedding")?;
    let final_norm = want(format!("{prefix}norm.weight"), &[h], "the final norm")?;
    let mut layers = Vec::with_capacity(cfg.layers);
    for l in 0..cfg.layers {
        let at = |s: &str| format!("{prefix}layers.{l}.{s}");
        let bias = |p: &str, n: usize| {
            want(
                at(&format!("self_attn.{p}_proj.bias")),
                &[n],
                &format!("layer {l}'s {p} bias"),
            )
        };
        layers.push(LayerNames {
            attn_norm: want(at("input_layernorm.weight"), &[h], "a norm")?,
            mlp_norm: want(at("post_attention_layernorm.weight"), &[h], "a norm")?,
            qkv_bias: match cfg.qkv_bias {
                true => Some([bias("q", q)?, bias("k", kv)?, bias("v", kv)?]),
                false => None,
            },
            o_bias: match cfg.o_bias {
                true => Some(bias("o", h)?),
                false => None,
            },
        });
    }
    crate::weights::linear_tensors(ckpt, model)?;
    Ok(HostNames {
        embed,
        final_norm,
        layers,
    })
}

impl HostNames {
    /// Bytes the host tensors take as f32.
    pub fn bytes(&self, ckpt: &Checkpoint) -> u128 {
        let mut names = vec![&self.embed, &self.final_norm];
        for l in &self.layers {
            names.extend([&l.attn_norm, &l.mlp_norm]);
            names.extend(l.qkv_bias.iter().flatten());
            names.extend(l.o_bias.iter());
        }
        names
            .iter()
            .filter_map(|n| ckpt.info(n))
            .map(|i| i.shape.iter().product::<usize>() as u128 * 4)
            .sum()
    }

    /// Reads them.
    pub fn read(&self, ckpt: &Checkpoint) -> Result<HostTensors> {
        let layers = self
            .layers
            .iter()
            .map(|l| {
                Ok(LayerTensors {
                    attn_norm: ckpt.read_f32(&l.attn_norm)?,
                    mlp_norm: ckpt.read_f32(&l.mlp_norm)?,
                    qkv_bias: match &l.qkv_bias {
                        Some([q, k, v]) => {
                            Some([ckpt.read_f32(q)?, ckpt.read_f32(k)?, ckpt.read_f32(v)?])
                        }
                        None => None,
                    },
                    o_bias: l.o_bias.as_ref().map(|o| ckpt.read_f32(o)).transpose()?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(HostTensors {
            embed: ckpt.read_f32(&self.embed)?,
            final_norm: ckpt.read_f32(&self.final_norm)?,
            layers,
        })
    }
}
