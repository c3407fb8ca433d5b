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

/// The token embedding.
#[derive(Debug)]
pub(crate) enum Embedding {
    /// `vocab × hidden`, read from the checkpoint.
    Dense(Vec<f32>),
    /// Each row drawn from a seed when it is looked up (uniform in
    /// `[-1, 1)`), so a large vocabulary takes no memory.
    Synthetic {
        /// The seed.
        seed: u64,
    },
}

impl Embedding {
    /// Appends token `tok`'s row of `h` values to `x`.
    pub fn push_row(&self, tok: u32, h: usize, x: &mut Vec<f32>) {
        let t = tok as usize;
        match self {
            Embedding::Dense(e) => x.extend_from_slice(&e[t * h..(t + 1) * h]),
            Embedding::Synthetic { seed } => {
                let s = seed ^ (tok as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                x.extend(hetero_agent::verify::random_vec(h, s));
            }
        }
    }
}

/// Every host tensor, as f32.
#[derive(Debug)]
pub(crate) struct HostTensors {
    pub embed: Embedding,
    pub final_norm: Vec<f32>,
    /// One per layer, or one that every layer uses (shared synthetic
    /// weights).
    pub layers: Vec<LayerTensors>,
}

impl HostTensors {
    /// The tensors layer `l` runs with.
    pub fn layer(&self, l: usize) -> &LayerTensors {
        &self.layers[l.min(self.layers.len() - 1)]
    }

    /// Seeded synthetic tensors for `cfg`: norm weights near 1, biases
    /// near 0 and an embedding uniform in `[-1, 1)`, so that activations
    /// stay finite through every layer; `share` keeps one layer's worth.
    pub fn synthetic(cfg: &DecoderConfig, seed: u64, share: bool) -> HostTensors {
        let (h, q, kv) = (cfg.hidden, cfg.q_dim(), cfg.kv_dim());
        let draw = |n: usize, what: u64, scale: f32, offset: f32| -> Vec<f32> {
            let v = hetero_agent::verify::random_vec(n, seed ^ what.rotate_left(29));
            v.into_iter().map(|x| offset + scale * x).collect()
        };
        let layer = |l: u64| {
            let at = (l + 1) << 8;
            LayerTensors {
                attn_norm: draw(h, at | 1, 0.1, 1.0),
                mlp_norm: draw(h, at | 2, 0.1, 1.0),
                qkv_bias: cfg.qkv_bias.then(|| {
                    [
                        draw(q, at | 3, 0.1, 0.0),
                        draw(kv, at | 4, 0.1, 0.0),
                        draw(kv, at | 5, 0.1, 0.0),
                    ]
                }),
                o_bias: cfg.o_bias.then(|| draw(h, at | 6, 0.1, 0.0)),
            }
        };
        let count = if share { 1 } else { cfg.layers };
        HostTensors {
            embed: Embedding::Synthetic {
                seed: seed ^ 0xe3be,
            },
            final_norm: draw(h, 7, 0.1, 1.0),
            layers: (0..count as u64).map(layer).collect(),
        }
    }

    /// Bytes [`HostTensors::synthetic`] takes.
    pub fn synthetic_bytes(cfg: &DecoderConfig, share: bool) -> u128 {
        let per_layer = 2 * cfg.hidden
            + if cfg.qkv_bias {
                cfg.q_dim() + 2 * cfg.kv_dim()
            } else {
                0
            }
            + if cfg.o_bias { cfg.hidden } else { 0 };
        let count = if share { 1 } else { cfg.layers };
        ((count * per_layer + cfg.hidden) * 4) as u128
    }
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
            embed: Embedding::Dense(ckpt.read_f32(&self.embed)?),
            final_norm: ckpt.read_f32(&self.final_norm)?,
            layers,
        })
    }
}
