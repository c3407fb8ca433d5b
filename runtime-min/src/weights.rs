//! Where the weights come from: seeded synthetic values, or a safetensors
//! checkpoint whose tensors are matched to the model's operators and checked
//! shape by shape before anything runs.
//!
//! A checkpoint stores a linear layer as PyTorch does, `weight[N, K]` (out
//! features × in features); the runtime's GEMM is `C[M,N] = A[M,K]·W[K,N]`,
//! so tensors are transposed to `W[K,N]` when read. Names follow the Hugging
//! Face layout: `<prefix>layers.<i>.<hf_name>.weight`, experts as
//! `...experts.<e>.<proj>.weight`, the head as `lm_head.weight` (or the tied
//! `embed_tokens.weight`). F32, F16 and BF16 tensors are read; quantised
//! checkpoints are refused by name. A checkpoint is one file or shards
//! ([`Checkpoint`]); each tensor is read when its GEMM is prepared.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use hetero_plan::{LinearOp, ModelSpec, OpRole};

use crate::Result;
use crate::model::Checkpoint;

/// Where the weights come from.
#[derive(Debug, Clone, PartialEq)]
pub enum WeightSource {
    /// Uniform in `[-1, 1)` from a seed, distinct per operator, layer and
    /// instance (or per operator only with `share_layers`, which keeps one
    /// layer's worth in memory and lets every layer run it).
    Synthetic {
        /// The seed.
        seed: u64,
        /// Every layer uses layer 0's weights (and the same prepared GEMMs).
        share_layers: bool,
    },
    /// A safetensors checkpoint: a file, a `model.safetensors.index.json`
    /// of shards, or a folder holding one of them.
    Safetensors(PathBuf),
}

impl Default for WeightSource {
    fn default() -> Self {
        WeightSource::Synthetic {
            seed: 0x5eed,
            share_layers: false,
        }
    }
}

/// Opened weights.
pub(crate) enum Weights {
    Synthetic {
        seed: u64,
        share_layers: bool,
    },
    File {
        ckpt: Checkpoint,
        /// (op name, layer, instance) → tensor name.
        map: HashMap<(String, u32, u32), String>,
    },
}

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The seed of a synthetic activation for an operator at `m` rows.
pub(crate) fn activation_seed(seed: u64, op: &str, m: u32) -> u64 {
    seed ^ fnv(op).rotate_left(17) ^ ((m as u64) << 40) ^ 0xa5a5
}

impl Weights {
    pub fn open(source: &WeightSource, model: &ModelSpec) -> Result<Weights> {
        match source {
            WeightSource::Synthetic { seed, share_layers } => Ok(Weights::Synthetic {
                seed: *seed,
                share_layers: *share_layers,
            }),
            WeightSource::Safetensors(path) => open_file(path, model),
        }
    }

    /// The layer whose weights (and prepared GEMMs) layer `layer` uses.
    pub fn weight_layer(&self, layer: u32) -> u32 {
        match self {
            Weights::Synthetic {
                share_layers: true, ..
            } => 0,
            _ => layer,
        }
    }

    /// `W[K,N]` row-major f32 of an operator's instance in a layer (a
    /// checkpoint's tensor is read from its file now).
    pub fn get(&self, op: &LinearOp, layer: u32, instance: u32) -> Result<Vec<f32>> {
        let (k, n) = (op.k as usize, op.n as usize);
        match self {
            Weights::Synthetic { seed, .. } => {
                let s = seed
                    ^ fnv(&op.name)
                    ^ ((self.weight_layer(layer) as u64) << 32)
                    ^ ((instance as u64) << 48);
                Ok(hetero_agent::verify::random_vec(k * n, s))
            }
            Weights::File { ckpt, map } => {
                let t = ckpt.read_f32(&map[&(op.name.clone(), layer, instance)])?;
                // The tensor is [N, K]; W is [K, N].
                let mut w = vec![0f32; k * n];
                transpose::transpose(&t, &mut w, k, n);
                Ok(w)
            }
        }
    }
}

/// The expected tensor name of an operator, for messages.
fn example_name(op: &LinearOp, layer: u32, instance: u32) -> String {
    if op.role == OpRole::LmHead {
        return format!("{}.weight", op.hf_name);
    }
    format!("model.layers.{layer}.{}.weight", expert_name(op, instance))
}

/// `mlp.experts.gate_proj` → `mlp.experts.3.gate_proj` for instance 3.
fn expert_name(op: &LinearOp, instance: u32) -> String {
    if op.count > 1
        && let Some(i) = op.hf_name.rfind("experts.")
    {
        let (head, tail) = op.hf_name.split_at(i + "experts.".len());
        return format!("{head}{instance}.{tail}");
    }
    op.hf_name.clone()
}

/// `...layers.<i>.<suffix>` → i.
fn layer_of(name: &str, suffix: &str) -> Option<u32> {
    let rest = name.strip_suffix(suffix)?.strip_suffix('.')?;
    let (head, idx) = rest.rsplit_once('.')?;
    if !(head == "layers" || head.ends_with(".layers")) {
        return None;
    }
    idx.parse().ok()
}

fn open_file(path: &Path, model: &ModelSpec) -> Result<Weights> {
    let ckpt = Checkpoint::open(path)?;
    let map = linear_tensors(&ckpt, model)?;
    Ok(Weights::File { ckpt, map })
}

/// The checkpoint's tensor of every operator, layer and instance, each
/// checked for its shape: (op name, layer, instance) → tensor name.
pub(crate) fn linear_tensors(
    ckpt: &Checkpoint,
    model: &ModelSpec,
) -> Result<HashMap<(String, u32, u32), String>> {
    let mut map = HashMap::new();
    for op in &model.ops {
        for (layer, inst, name) in op_tensors(ckpt, model, op)? {
            let shape = &ckpt.float_info(&name)?.shape;
            if *shape != [op.n as usize, op.k as usize] {
                return Err(ckpt.bad(format!(
                    "tensor `{name}` (`{}` layer {layer}) has shape {shape:?}; the model needs [{}, {}] (N = {} out features, K = {} in features)",
                    op.name, op.n, op.k, op.n, op.k
                )));
            }
            map.insert((op.name.clone(), layer, inst), name);
        }
    }
    Ok(map)
}

/// The tensors of one operator: (layer, instance, tensor name).
fn op_tensors(
    ckpt: &Checkpoint,
    model: &ModelSpec,
    op: &LinearOp,
) -> Result<Vec<(u32, u32, String)>> {
    let mut found = Vec::new();
    for inst in 0..op.count {
        if op.role == OpRole::LmHead {
            let own = format!("{}.weight", op.hf_name);
            let name = ckpt
                .names()
                .find(|n| **n == own || n.ends_with(&format!(".{own}")))
                .or_else(|| {
                    model.tied_embeddings.then(|| {
                        ckpt.names().find(|n| {
                            n.ends_with("embed_tokens.weight")
                                || n.ends_with("tok_embeddings.weight")
                        })
                    })?
                })
                .ok_or_else(|| {
                    ckpt.bad(format!(
                        "no tensor for `{}`: expected `{own}`{}",
                        op.name,
                        if model.tied_embeddings {
                            " or the tied `model.embed_tokens.weight`"
                        } else {
                            ""
                        }
                    ))
                })?;
            found.push((0, inst, name.clone()));
            continue;
        }
        let suffix = format!("{}.weight", expert_name(op, inst));
        let mut layers: Vec<(u32, String)> = ckpt
            .names()
            .filter_map(|n| layer_of(n, &suffix).map(|l| (l, n.clone())))
            .collect();
        layers.sort();
        if layers.len() != op.layers as usize {
            return Err(ckpt.bad(format!(
                "`{}` ({}): found {} layer tensors named like `{}`, the model has {} layers of it",
                op.name,
                op.hf_name,
                layers.len(),
                example_name(op, 0, inst),
                op.layers
            )));
        }
        // The l-th layer that has the operator, in index order.
        for (l, (_, name)) in layers.into_iter().enumerate() {
            found.push((l as u32, inst, name));
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_and_expert_names() {
        assert_eq!(
            layer_of(
                "model.layers.12.self_attn.q_proj.weight",
                "self_attn.q_proj.weight"
            ),
            Some(12)
        );
        assert_eq!(
            layer_of(
                "layers.0.self_attn.q_proj.weight",
                "self_attn.q_proj.weight"
            ),
            Some(0)
        );
        assert_eq!(
            layer_of(
                "model.layers.1.mlp.shared_expert.gate_proj.weight",
                "mlp.gate_proj.weight"
            ),
            None
        );
        assert_eq!(
            layer_of(
                "model.notlayers.1.self_attn.q_proj.weight",
                "self_attn.q_proj.weight"
            ),
            None
        );
        let mut op = crate::testutil::linear("expert_gate", 8, 4);
        op.hf_name = "mlp.experts.gate_proj".into();
        op.count = 4;
        assert_eq!(expert_name(&op, 3), "mlp.experts.3.gate_proj");
    }

    #[test]
    fn synthetic_weights_are_seeded_and_shared_on_request() {
        let op = crate::testutil::linear("ffn_up", 8, 4);
        let w = Weights::Synthetic {
            seed: 1,
            share_layers: false,
        };
        assert_eq!(w.get(&op, 2, 0).unwrap(), w.get(&op, 2, 0).unwrap());
        assert_ne!(w.get(&op, 1, 0).unwrap(), w.get(&op, 2, 0).unwrap());
        let s = Weights::Synthetic {
            seed: 1,
            share_layers: true,
        };
        assert_eq!(s.get(&op, 1, 0).unwrap(), s.get(&op, 2, 0).unwrap());
        assert_eq!(s.weight_layer(5), 0);
    }
}
