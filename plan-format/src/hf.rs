//! Model import from a Hugging Face `config.json`.
//!
//! The GEMM operators of one decoder layer plus the lm_head are derived from
//! the architecture's published layout. Only weight matrices count as
//! parameters here; biases, norms and embeddings are not GEMMs.

use std::path::Path;

use serde::Deserialize;

use crate::model::{LinearOp, MRule, ModelSpec, OpRole};
use crate::{Error, Result, SchemaVersion, Validate};

/// The `model_type` values this build understands.
pub const SUPPORTED: [&str; 10] = [
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "phi3",
    "gemma",
    "gemma2",
    "internlm2",
    "mixtral",
    "qwen2_moe",
];

/// The fields of `config.json` that matter; all optional here, required per
/// architecture below.
#[derive(Debug, Deserialize)]
struct HfConfig {
    model_type: Option<String>,
    #[serde(rename = "_name_or_path")]
    name_or_path: Option<String>,
    hidden_size: Option<u32>,
    intermediate_size: Option<u32>,
    num_hidden_layers: Option<u32>,
    num_attention_heads: Option<u32>,
    num_key_value_heads: Option<u32>,
    head_dim: Option<u32>,
    vocab_size: Option<u32>,
    tie_word_embeddings: Option<bool>,
    // mixtral
    num_local_experts: Option<u32>,
    // mixtral, qwen2_moe
    num_experts_per_tok: Option<u32>,
    // qwen2_moe
    num_experts: Option<u32>,
    moe_intermediate_size: Option<u32>,
    shared_expert_intermediate_size: Option<u32>,
    decoder_sparse_step: Option<u32>,
    #[serde(default)]
    mlp_only_layers: Vec<u32>,
}

/// Reads a `config.json` and derives the model's operators.
pub fn load_config(path: &Path) -> Result<ModelSpec> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let fallback = path
        .parent()
        .filter(|_| path.file_name().is_some_and(|n| n == "config.json"))
        .and_then(|p| p.file_name())
        .or_else(|| path.file_stem())
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    from_str(path, &text, &fallback)
}

/// Derives the operators from the text of a `config.json`; `path` names the
/// source in errors and `fallback_name` is used when the config has no
/// `_name_or_path`.
pub fn from_str(path: &Path, text: &str, fallback_name: &str) -> Result<ModelSpec> {
    let cfg: HfConfig = crate::io::parse_json(path, text)?;
    let spec = build(path, cfg, fallback_name)?;
    spec.validate().map_err(|(field, message)| Error::Invalid {
        path: path.to_path_buf(),
        field,
        message,
    })?;
    Ok(spec)
}

struct Need<'a> {
    path: &'a Path,
    model_type: &'a str,
}

impl Need<'_> {
    fn get(&self, field: &str, v: Option<u32>) -> Result<u32> {
        match v {
            Some(0) => Err(Error::Invalid {
                path: self.path.to_path_buf(),
                field: field.into(),
                message: "must be at least 1".into(),
            }),
            Some(v) => Ok(v),
            None => Err(Error::MissingField {
                path: self.path.to_path_buf(),
                field: field.into(),
                context: Some(format!("required for model_type `{}`", self.model_type)),
            }),
        }
    }
}

fn op(name: &str, hf_name: &str, role: OpRole, k: u32, n: u32, layers: u32) -> LinearOp {
    LinearOp {
        name: name.into(),
        hf_name: hf_name.into(),
        role,
        k,
        n,
        count: 1,
        active: 1,
        layers,
        prefill_m: MRule::Tokens,
        decode_m: MRule::Tokens,
    }
}

fn experts(mut o: LinearOp, experts: u32, top_k: u32) -> LinearOp {
    o.count = experts;
    o.active = top_k;
    let rule = MRule::Routed { top_k, experts };
    o.prefill_m = rule;
    o.decode_m = rule;
    o
}

fn build(path: &Path, c: HfConfig, fallback_name: &str) -> Result<ModelSpec> {
    let model_type = c.model_type.clone().ok_or_else(|| Error::MissingField {
        path: path.to_path_buf(),
        field: "model_type".into(),
        context: Some(format!("one of {}", SUPPORTED.join(", "))),
    })?;
    if !SUPPORTED.contains(&model_type.as_str()) {
        return Err(Error::UnknownModelType {
            path: path.to_path_buf(),
            model_type,
            supported: SUPPORTED.to_vec(),
        });
    }
    let need = Need {
        path,
        model_type: &model_type,
    };
    let hidden = need.get("hidden_size", c.hidden_size)?;
    let layers = need.get("num_hidden_layers", c.num_hidden_layers)?;
    let heads = need.get("num_attention_heads", c.num_attention_heads)?;
    let vocab = need.get("vocab_size", c.vocab_size)?;
    let kv_heads = match c.num_key_value_heads {
        Some(_) => need.get("num_key_value_heads", c.num_key_value_heads)?,
        None => heads,
    };
    // An explicit head_dim wins (Gemma 2 2B: 8 heads × 256 = 2048 ≠ 2304).
    let head_dim = match c.head_dim {
        Some(_) => need.get("head_dim", c.head_dim)?,
        None if hidden % heads == 0 => hidden / heads,
        None => {
            return Err(Error::Invalid {
                path: path.to_path_buf(),
                field: "num_attention_heads".into(),
                message: format!(
                    "hidden_size {hidden} is not divisible by {heads} heads and there is no head_dim"
                ),
            });
        }
    };
    let q_out = heads * head_dim;
    let kv_out = kv_heads * head_dim;
    let l = layers;
    let mut ops = Vec::new();

    // Attention.
    match model_type.as_str() {
        "phi3" => {
            ops.push(op(
                "attn_qkv",
                "self_attn.qkv_proj",
                OpRole::Attention,
                hidden,
                q_out + 2 * kv_out,
                l,
            ));
            ops.push(op(
                "attn_o",
                "self_attn.o_proj",
                OpRole::Attention,
                q_out,
                hidden,
                l,
            ));
        }
        "internlm2" => {
            ops.push(op(
                "attn_qkv",
                "attention.wqkv",
                OpRole::Attention,
                hidden,
                q_out + 2 * kv_out,
                l,
            ));
            ops.push(op(
                "attn_o",
                "attention.wo",
                OpRole::Attention,
                q_out,
                hidden,
                l,
            ));
        }
        _ => {
            ops.push(op(
                "attn_q",
                "self_attn.q_proj",
                OpRole::Attention,
                hidden,
                q_out,
                l,
            ));
            ops.push(op(
                "attn_k",
                "self_attn.k_proj",
                OpRole::Attention,
                hidden,
                kv_out,
                l,
            ));
            ops.push(op(
                "attn_v",
                "self_attn.v_proj",
                OpRole::Attention,
                hidden,
                kv_out,
                l,
            ));
            ops.push(op(
                "attn_o",
                "self_attn.o_proj",
                OpRole::Attention,
                q_out,
                hidden,
                l,
            ));
        }
    }

    // Feed-forward.
    match model_type.as_str() {
        "phi3" => {
            let inter = need.get("intermediate_size", c.intermediate_size)?;
            ops.push(op(
                "ffn_gate_up",
                "mlp.gate_up_proj",
                OpRole::Mlp,
                hidden,
                2 * inter,
                l,
            ));
            ops.push(op(
                "ffn_down",
                "mlp.down_proj",
                OpRole::Mlp,
                inter,
                hidden,
                l,
            ));
        }
        "internlm2" => {
            let inter = need.get("intermediate_size", c.intermediate_size)?;
            ops.push(op(
                "ffn_gate",
                "feed_forward.w1",
                OpRole::Mlp,
                hidden,
                inter,
                l,
            ));
            ops.push(op(
                "ffn_up",
                "feed_forward.w3",
                OpRole::Mlp,
                hidden,
                inter,
                l,
            ));
            ops.push(op(
                "ffn_down",
                "feed_forward.w2",
                OpRole::Mlp,
                inter,
                hidden,
                l,
            ));
        }
        "mixtral" => {
            let inter = need.get("intermediate_size", c.intermediate_size)?;
            let e = need.get("num_local_experts", c.num_local_experts)?;
            let k = need.get("num_experts_per_tok", c.num_experts_per_tok)?;
            ops.push(op(
                "moe_router",
                "block_sparse_moe.gate",
                OpRole::Router,
                hidden,
                e,
                l,
            ));
            ops.push(experts(
                op(
                    "expert_gate",
                    "block_sparse_moe.experts.w1",
                    OpRole::Expert,
                    hidden,
                    inter,
                    l,
                ),
                e,
                k,
            ));
            ops.push(experts(
                op(
                    "expert_up",
                    "block_sparse_moe.experts.w3",
                    OpRole::Expert,
                    hidden,
                    inter,
                    l,
                ),
                e,
                k,
            ));
            ops.push(experts(
                op(
                    "expert_down",
                    "block_sparse_moe.experts.w2",
                    OpRole::Expert,
                    inter,
                    hidden,
                    l,
                ),
                e,
                k,
            ));
        }
        "qwen2_moe" => {
            let e = need.get("num_experts", c.num_experts)?;
            let k = need.get("num_experts_per_tok", c.num_experts_per_tok)?;
            let moe_inter = need.get("moe_intermediate_size", c.moe_intermediate_size)?;
            let step = c.decoder_sparse_step.unwrap_or(1).max(1);
            // Transformers: a layer is sparse when it is not listed in
            // mlp_only_layers and (index + 1) is a multiple of the step.
            let sparse = (0..l)
                .filter(|i| !c.mlp_only_layers.contains(i) && (i + 1) % step == 0)
                .count() as u32;
            let dense = l - sparse;
            if dense > 0 {
                let inter = need.get("intermediate_size", c.intermediate_size)?;
                ops.push(op(
                    "ffn_gate",
                    "mlp.gate_proj",
                    OpRole::Mlp,
                    hidden,
                    inter,
                    dense,
                ));
                ops.push(op(
                    "ffn_up",
                    "mlp.up_proj",
                    OpRole::Mlp,
                    hidden,
                    inter,
                    dense,
                ));
                ops.push(op(
                    "ffn_down",
                    "mlp.down_proj",
                    OpRole::Mlp,
                    inter,
                    hidden,
                    dense,
                ));
            }
            if sparse > 0 {
                ops.push(op(
                    "moe_router",
                    "mlp.gate",
                    OpRole::Router,
                    hidden,
                    e,
                    sparse,
                ));
                ops.push(experts(
                    op(
                        "expert_gate",
                        "mlp.experts.gate_proj",
                        OpRole::Expert,
                        hidden,
                        moe_inter,
                        sparse,
                    ),
                    e,
                    k,
                ));
                ops.push(experts(
                    op(
                        "expert_up",
                        "mlp.experts.up_proj",
                        OpRole::Expert,
                        hidden,
                        moe_inter,
                        sparse,
                    ),
                    e,
                    k,
                ));
                ops.push(experts(
                    op(
                        "expert_down",
                        "mlp.experts.down_proj",
                        OpRole::Expert,
                        moe_inter,
                        hidden,
                        sparse,
                    ),
                    e,
                    k,
                ));
                if let Some(shared) = c.shared_expert_intermediate_size.filter(|s| *s > 0) {
                    ops.push(op(
                        "shared_gate",
                        "mlp.shared_expert.gate_proj",
                        OpRole::SharedExpert,
                        hidden,
                        shared,
                        sparse,
                    ));
                    ops.push(op(
                        "shared_up",
                        "mlp.shared_expert.up_proj",
                        OpRole::SharedExpert,
                        hidden,
                        shared,
                        sparse,
                    ));
                    ops.push(op(
                        "shared_down",
                        "mlp.shared_expert.down_proj",
                        OpRole::SharedExpert,
                        shared,
                        hidden,
                        sparse,
                    ));
                    ops.push(op(
                        "shared_expert_gate",
                        "mlp.shared_expert_gate",
                        OpRole::SharedExpert,
                        hidden,
                        1,
                        sparse,
                    ));
                }
            }
        }
        _ => {
            let inter = need.get("intermediate_size", c.intermediate_size)?;
            ops.push(op(
                "ffn_gate",
                "mlp.gate_proj",
                OpRole::Mlp,
                hidden,
                inter,
                l,
            ));
            ops.push(op("ffn_up", "mlp.up_proj", OpRole::Mlp, hidden, inter, l));
            ops.push(op(
                "ffn_down",
                "mlp.down_proj",
                OpRole::Mlp,
                inter,
                hidden,
                l,
            ));
        }
    }

    // The lm_head is a GEMM even when its weights are the tied embedding.
    // During prefill only the last position's logits are needed.
    let tied_default = matches!(model_type.as_str(), "gemma" | "gemma2");
    let tied = c.tie_word_embeddings.unwrap_or(tied_default);
    let head_name = if model_type == "internlm2" {
        "output"
    } else {
        "lm_head"
    };
    let mut head = op("lm_head", head_name, OpRole::LmHead, hidden, vocab, 1);
    head.prefill_m = MRule::LastToken;
    ops.push(head);

    Ok(ModelSpec {
        schema_version: SchemaVersion,
        name: c
            .name_or_path
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| fallback_name.to_string()),
        model_type,
        layers,
        hidden,
        heads,
        kv_heads,
        head_dim,
        vocab,
        tied_embeddings: tied,
        ops,
    })
}
