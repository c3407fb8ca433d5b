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
    let text = crate::read_text(path)?;
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

    /// The experts of a layer (read from `field`) and the experts each
    /// token picks (`num_experts_per_tok`), which cannot be more.
    fn routing(&self, field: &str, experts: Option<u32>, top_k: Option<u32>) -> Result<(u32, u32)> {
        let e = self.get(field, experts)?;
        let k = self.get("num_experts_per_tok", top_k)?;
        if k > e {
            return Err(Error::Invalid {
                path: self.path.to_path_buf(),
                field: "num_experts_per_tok".into(),
                message: format!("{k} experts per token, but {field} is {e}"),
            });
        }
        Ok((e, k))
    }

    /// A size derived from the config (`what`, computed in 64 bits), or an
    /// error naming `field` when it does not fit the 32 bits of a GEMM
    /// dimension.
    fn size(&self, field: &str, what: &str, value: u64) -> Result<u32> {
        u32::try_from(value).map_err(|_| Error::Invalid {
            path: self.path.to_path_buf(),
            field: field.into(),
            message: format!(
                "{what} = {value} is more than a GEMM dimension holds ({})",
                u32::MAX
            ),
        })
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

/// The layer dimensions every architecture needs.
struct Dims {
    hidden: u32,
    layers: u32,
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    vocab: u32,
}

/// The config's `model_type`, which must be one of [`SUPPORTED`].
fn model_type(path: &Path, c: &HfConfig) -> Result<String> {
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
    Ok(model_type)
}

/// Reads the layer dimensions; `kv_heads` defaults to `heads` and
/// `head_dim` to `hidden / heads`.
fn read_dims(need: &Need, c: &HfConfig) -> Result<Dims> {
    let hidden = need.get("hidden_size", c.hidden_size)?;
    let layers = need.get("num_hidden_layers", c.num_hidden_layers)?;
    let heads = need.get("num_attention_heads", c.num_attention_heads)?;
    let vocab = need.get("vocab_size", c.vocab_size)?;
    let kv_heads = match c.num_key_value_heads {
        Some(_) => need.get("num_key_value_heads", c.num_key_value_heads)?,
        None => heads,
    };
    crate::model::check_heads(heads, kv_heads).map_err(|message| Error::Invalid {
        path: need.path.to_path_buf(),
        field: "num_key_value_heads".into(),
        message,
    })?;
    // An explicit head_dim wins (Gemma 2 2B: 8 heads × 256 = 2048 ≠ 2304).
    let head_dim = match c.head_dim {
        Some(_) => need.get("head_dim", c.head_dim)?,
        None if hidden % heads == 0 => hidden / heads,
        None => {
            return Err(Error::Invalid {
                path: need.path.to_path_buf(),
                field: "num_attention_heads".into(),
                message: format!(
                    "hidden_size {hidden} is not divisible by {heads} heads and there is no head_dim"
                ),
            });
        }
    };
    Ok(Dims {
        hidden,
        layers,
        heads,
        kv_heads,
        head_dim,
        vocab,
    })
}

/// The attention projections: one fused QKV GEMM (phi3, internlm2) or
/// separate Q, K and V, then the output projection.
fn attention(need: &Need, model_type: &str, d: &Dims) -> Result<Vec<LinearOp>> {
    let (h, l) = (d.hidden, d.layers);
    let heads = |n: u32| n as u64 * d.head_dim as u64;
    let q_out = need.size("num_attention_heads", "heads × head_dim", heads(d.heads))?;
    let kv_out = need.size(
        "num_key_value_heads",
        "key/value heads × head_dim",
        heads(d.kv_heads),
    )?;
    let a = OpRole::Attention;
    let fused = |qkv: &str, o: &str| -> Result<Vec<LinearOp>> {
        let qkv_out = need.size(
            "num_attention_heads",
            "the fused QKV projection's outputs",
            q_out as u64 + 2 * kv_out as u64,
        )?;
        Ok(vec![
            op("attn_qkv", qkv, a, h, qkv_out, l),
            op("attn_o", o, a, q_out, h, l),
        ])
    };
    Ok(match model_type {
        "phi3" => fused("self_attn.qkv_proj", "self_attn.o_proj")?,
        "internlm2" => fused("attention.wqkv", "attention.wo")?,
        _ => vec![
            op("attn_q", "self_attn.q_proj", a, h, q_out, l),
            op("attn_k", "self_attn.k_proj", a, h, kv_out, l),
            op("attn_v", "self_attn.v_proj", a, h, kv_out, l),
            op("attn_o", "self_attn.o_proj", a, q_out, h, l),
        ],
    })
}

/// A gated MLP's three GEMMs, gate, up and down, each named
/// `(name, hf_name)`: `hidden -> inter` twice, then `inter -> hidden`.
fn gated(
    names: [(&str, &str); 3],
    role: OpRole,
    hidden: u32,
    inter: u32,
    layers: u32,
) -> [LinearOp; 3] {
    let [(g, hf_g), (u, hf_u), (d, hf_d)] = names;
    [
        op(g, hf_g, role, hidden, inter, layers),
        op(u, hf_u, role, hidden, inter, layers),
        op(d, hf_d, role, inter, hidden, layers),
    ]
}

/// The feed-forward GEMMs of each architecture: a dense MLP, or a router
/// and experts.
fn feed_forward(model_type: &str, need: &Need, c: &HfConfig, d: &Dims) -> Result<Vec<LinearOp>> {
    let (h, l) = (d.hidden, d.layers);
    let inter = || need.get("intermediate_size", c.intermediate_size);
    let ops = match model_type {
        "phi3" => {
            let inter = inter()?;
            let gate_up = need.size(
                "intermediate_size",
                "the fused gate and up projections' outputs (2 × intermediate_size)",
                2 * inter as u64,
            )?;
            vec![
                op(
                    "ffn_gate_up",
                    "mlp.gate_up_proj",
                    OpRole::Mlp,
                    h,
                    gate_up,
                    l,
                ),
                op("ffn_down", "mlp.down_proj", OpRole::Mlp, inter, h, l),
            ]
        }
        "internlm2" => {
            let names = [
                ("ffn_gate", "feed_forward.w1"),
                ("ffn_up", "feed_forward.w3"),
                ("ffn_down", "feed_forward.w2"),
            ];
            gated(names, OpRole::Mlp, h, inter()?, l).to_vec()
        }
        "mixtral" => mixtral_experts(need, c, d, inter()?)?,
        "qwen2_moe" => qwen2_moe(need, c, d)?,
        _ => gated(DENSE, OpRole::Mlp, h, inter()?, l).to_vec(),
    };
    Ok(ops)
}

/// The dense gated MLP's names in llama-like layouts.
const DENSE: [(&str, &str); 3] = [
    ("ffn_gate", "mlp.gate_proj"),
    ("ffn_up", "mlp.up_proj"),
    ("ffn_down", "mlp.down_proj"),
];

/// `experts` gated experts of which `top_k` run per token, their GEMMs
/// named `expert_gate`, `expert_up` and `expert_down` after `hf` (the same
/// order).
fn routed(hf: [&str; 3], d: &Dims, inter: u32, layers: u32, e: u32, top_k: u32) -> [LinearOp; 3] {
    let [g, u, dn] = hf;
    let names = [("expert_gate", g), ("expert_up", u), ("expert_down", dn)];
    gated(names, OpRole::Expert, d.hidden, inter, layers).map(|o| experts(o, e, top_k))
}

/// Mixtral: a router and `num_local_experts` gated experts in every layer.
fn mixtral_experts(need: &Need, c: &HfConfig, d: &Dims, inter: u32) -> Result<Vec<LinearOp>> {
    let (e, k) = need.routing(
        "num_local_experts",
        c.num_local_experts,
        c.num_experts_per_tok,
    )?;
    let (h, l) = (d.hidden, d.layers);
    let hf = [
        "block_sparse_moe.experts.w1",
        "block_sparse_moe.experts.w3",
        "block_sparse_moe.experts.w2",
    ];
    let mut ops = vec![op(
        "moe_router",
        "block_sparse_moe.gate",
        OpRole::Router,
        h,
        e,
        l,
    )];
    ops.extend(routed(hf, d, inter, l, e, k));
    Ok(ops)
}

/// Qwen2-MoE: sparse layers have a router, gated experts and an optional
/// shared expert; the other layers a dense MLP.
fn qwen2_moe(need: &Need, c: &HfConfig, d: &Dims) -> Result<Vec<LinearOp>> {
    let (e, k) = need.routing("num_experts", c.num_experts, c.num_experts_per_tok)?;
    let moe_inter = need.get("moe_intermediate_size", c.moe_intermediate_size)?;
    let (h, l) = (d.hidden, d.layers);
    let step = c.decoder_sparse_step.unwrap_or(1).max(1);
    // Transformers: a layer is sparse when it is not listed in
    // mlp_only_layers and (index + 1) is a multiple of the step.
    // Counted, not enumerated: a config may claim billions of layers.
    let mut dense_only: Vec<u32> = c.mlp_only_layers.clone();
    dense_only.sort_unstable();
    dense_only.dedup();
    let listed = dense_only
        .iter()
        .filter(|&&i| i < l && (i as u64 + 1) % step as u64 == 0)
        .count() as u32;
    let sparse = l / step - listed;
    let dense = l - sparse;
    let mut ops = Vec::new();
    if dense > 0 {
        let inter = need.get("intermediate_size", c.intermediate_size)?;
        ops.extend(gated(DENSE, OpRole::Mlp, h, inter, dense));
    }
    if sparse > 0 {
        ops.push(op("moe_router", "mlp.gate", OpRole::Router, h, e, sparse));
        let hf = [
            "mlp.experts.gate_proj",
            "mlp.experts.up_proj",
            "mlp.experts.down_proj",
        ];
        ops.extend(routed(hf, d, moe_inter, sparse, e, k));
        if let Some(shared) = c.shared_expert_intermediate_size.filter(|s| *s > 0) {
            let names = [
                ("shared_gate", "mlp.shared_expert.gate_proj"),
                ("shared_up", "mlp.shared_expert.up_proj"),
                ("shared_down", "mlp.shared_expert.down_proj"),
            ];
            ops.extend(gated(names, OpRole::SharedExpert, h, shared, sparse));
            ops.push(op(
                "shared_expert_gate",
                "mlp.shared_expert_gate",
                OpRole::SharedExpert,
                h,
                1,
                sparse,
            ));
        }
    }
    Ok(ops)
}

/// The lm_head is a GEMM even when its weights are the tied embedding.
/// During prefill only the last position's logits are needed.
fn lm_head(model_type: &str, d: &Dims) -> LinearOp {
    let head_name = if model_type == "internlm2" {
        "output"
    } else {
        "lm_head"
    };
    let mut head = op("lm_head", head_name, OpRole::LmHead, d.hidden, d.vocab, 1);
    head.prefill_m = MRule::LastToken;
    head
}

fn build(path: &Path, c: HfConfig, fallback_name: &str) -> Result<ModelSpec> {
    let model_type = model_type(path, &c)?;
    let need = Need {
        path,
        model_type: &model_type,
    };
    let d = read_dims(&need, &c)?;
    let mut ops = attention(&need, &model_type, &d)?;
    ops.extend(feed_forward(&model_type, &need, &c, &d)?);
    ops.push(lm_head(&model_type, &d));
    let tied_default = matches!(model_type.as_str(), "gemma" | "gemma2");
    Ok(ModelSpec {
        schema_version: SchemaVersion,
        name: c
            .name_or_path
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| fallback_name.to_string()),
        tied_embeddings: c.tie_word_embeddings.unwrap_or(tied_default),
        model_type,
        layers: d.layers,
        hidden: d.hidden,
        heads: d.heads,
        kv_heads: d.kv_heads,
        head_dim: d.head_dim,
        vocab: d.vocab,
        ops,
    })
}
