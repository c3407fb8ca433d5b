use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{Fingerprint, GemmShape, SchemaVersion, Validate};

/// The two phases of LLM inference.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// The prompt: M is the sequence length.
    Prefill,
    /// Token generation: M is the number of tokens decoded at once (1, or n
    /// for speculative decoding).
    Decode,
}

impl Phase {
    /// The lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Prefill => "prefill",
            Phase::Decode => "decode",
        }
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Phase {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "prefill" => Ok(Phase::Prefill),
            "decode" => Ok(Phase::Decode),
            _ => Err(format!("unknown phase `{s}`; expected prefill or decode")),
        }
    }
}

/// What part of the model an operator belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OpRole {
    /// Attention projections.
    Attention,
    /// The dense feed-forward block.
    Mlp,
    /// The MoE router.
    Router,
    /// A routed expert's projection.
    Expert,
    /// An always-active shared expert's projection (qwen2_moe).
    SharedExpert,
    /// The output projection onto the vocabulary.
    LmHead,
}

/// How many activation rows (M) an operator sees, given the tokens of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MRule {
    /// Every token: M = tokens.
    Tokens,
    /// Only the last token (the lm_head during prefill needs one row of logits).
    LastToken,
    /// Routed experts: each token picks `top_k` of `experts`. With T tokens
    /// and balanced routing, `min(experts, T·top_k)` experts run, each on
    /// `ceil(T·top_k / active)` rows.
    Routed {
        /// Experts chosen per token.
        top_k: u32,
        /// Experts in the layer.
        experts: u32,
    },
}

/// One linear (GEMM) operator of a decoder layer, or the lm_head.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LinearOp {
    /// Canonical name used by plans and the command line (`attn_q`, `ffn_down`, `lm_head`).
    pub name: String,
    /// The module name in the architecture's checkpoint (`self_attn.q_proj`).
    pub hf_name: String,
    /// Which block it belongs to.
    pub role: OpRole,
    /// Input features (K).
    pub k: u32,
    /// Output features (N).
    pub n: u32,
    /// Instances per layer (experts: the number of experts).
    pub count: u32,
    /// Instances one token passes through (experts: top-k; otherwise `count`).
    pub active: u32,
    /// Layers that contain the operator (the lm_head: 1).
    pub layers: u32,
    /// Rows per instance during prefill.
    pub prefill_m: MRule,
    /// Rows per instance during decode.
    pub decode_m: MRule,
}

impl LinearOp {
    /// The GEMMs one layer runs for this operator when `tokens` tokens go
    /// through it: `(shape, instances)`.
    pub fn gemms(&self, phase: Phase, tokens: u32) -> Option<(GemmShape, u32)> {
        let rule = match phase {
            Phase::Prefill => self.prefill_m,
            Phase::Decode => self.decode_m,
        };
        let tokens = tokens.max(1);
        let (m, instances) = match rule {
            MRule::Tokens => (tokens, self.count),
            MRule::LastToken => (1, self.count),
            MRule::Routed { top_k, experts } => {
                let assignments = tokens as u64 * top_k as u64;
                let active = assignments.min(experts as u64).max(1);
                (assignments.div_ceil(active) as u32, active as u32)
            }
        };
        Some((GemmShape::new(m, self.k, self.n)?, instances))
    }

    /// Weights a token multiplies through in this operator, over all layers
    /// (at most `u64::MAX`; a validated model never reaches it).
    pub fn params_per_token(&self) -> u64 {
        saturating_u64(self.weights(self.active))
    }

    /// Weights stored for this operator, over all layers (at most
    /// `u64::MAX`; a validated model never reaches it).
    pub fn params_stored(&self) -> u64 {
        saturating_u64(self.weights(self.count))
    }

    /// `K × N × instances × layers`, exact: four 32-bit factors fit 128 bits.
    fn weights(&self, instances: u32) -> u128 {
        self.k as u128 * self.n as u128 * instances as u128 * self.layers as u128
    }
}

/// A model as the solver sees it: the GEMM operators of its decoder layers
/// plus the lm_head, with their shapes in each phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ModelSpec {
    /// File format version.
    pub schema_version: SchemaVersion,
    /// Model name (`_name_or_path`, or the config's file name).
    pub name: String,
    /// Hugging Face `model_type`.
    pub model_type: String,
    /// Decoder layers.
    pub layers: u32,
    /// Hidden size.
    pub hidden: u32,
    /// Attention heads.
    pub heads: u32,
    /// Key/value heads (GQA).
    pub kv_heads: u32,
    /// Per-head dimension.
    pub head_dim: u32,
    /// Vocabulary size.
    pub vocab: u32,
    /// The lm_head shares the embedding's weights (it is still a GEMM).
    pub tied_embeddings: bool,
    /// The operators.
    pub ops: Vec<LinearOp>,
}

impl ModelSpec {
    /// The fingerprint plans record. The hash covers everything but the
    /// name (which may come from the config's file name), so a renamed copy
    /// of a config still matches; the name is kept for people.
    pub fn fingerprint(&self) -> Fingerprint {
        let unnamed = ModelSpec {
            name: String::new(),
            ..self.clone()
        };
        let mut f = Fingerprint::of(self.name.clone(), &unnamed);
        f.name = self.name.clone();
        f
    }

    /// Looks an operator up by canonical name.
    pub fn op(&self, name: &str) -> Option<&LinearOp> {
        self.ops.iter().find(|o| o.name == name)
    }

    /// Weights a token multiplies through: active experts only, lm_head included.
    pub fn linear_params_per_token(&self) -> u64 {
        self.ops
            .iter()
            .map(LinearOp::params_per_token)
            .fold(0, u64::saturating_add)
    }

    /// Weights of every linear operator, all experts, lm_head included.
    pub fn linear_params_stored(&self) -> u64 {
        self.ops
            .iter()
            .map(LinearOp::params_stored)
            .fold(0, u64::saturating_add)
    }

    /// Every operator's stored weights added exactly, or `None` past 128
    /// bits.
    fn weights_stored(&self) -> Option<u128> {
        self.ops
            .iter()
            .try_fold(0u128, |sum, o| sum.checked_add(o.weights(o.count)))
    }
}

fn saturating_u64(v: u128) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}

/// Refuses attention heads that grouped-query attention cannot share out:
/// every key/value head serves the same number of query heads, so `heads`
/// must be a multiple of `kv_heads`.
pub fn check_heads(heads: u32, kv_heads: u32) -> Result<(), String> {
    if kv_heads == 0 || heads % kv_heads != 0 {
        return Err(format!(
            "{heads} attention heads cannot be grouped over {kv_heads} key/value heads: the attention heads must be a multiple of the key/value heads"
        ));
    }
    Ok(())
}

impl Validate for ModelSpec {
    fn validate(&self) -> Result<(), (String, String)> {
        for (field, v) in [
            ("layers", self.layers),
            ("hidden", self.hidden),
            ("heads", self.heads),
            ("kv_heads", self.kv_heads),
            ("head_dim", self.head_dim),
            ("vocab", self.vocab),
        ] {
            if v == 0 {
                return Err((field.into(), "must be at least 1".into()));
            }
        }
        check_heads(self.heads, self.kv_heads).map_err(|m| ("kv_heads".to_string(), m))?;
        if self.ops.is_empty() {
            return Err(("ops".into(), "a model needs at least one operator".into()));
        }
        for (i, op) in self.ops.iter().enumerate() {
            for (phase, rule) in [("prefill_m", op.prefill_m), ("decode_m", op.decode_m)] {
                if let MRule::Routed { top_k, experts } = rule
                    && (top_k == 0 || top_k > experts)
                {
                    return Err((
                        format!("ops[{i}].{phase}.top_k"),
                        format!("must be between 1 and the {experts} experts"),
                    ));
                }
            }
            for (field, v) in [
                ("k", op.k),
                ("n", op.n),
                ("count", op.count),
                ("layers", op.layers),
            ] {
                if v == 0 {
                    return Err((format!("ops[{i}].{field}"), "must be at least 1".into()));
                }
            }
            if op.active == 0 || op.active > op.count {
                return Err((
                    format!("ops[{i}].active"),
                    format!("must be between 1 and count ({})", op.count),
                ));
            }
            if self.ops[..i].iter().any(|o| o.name == op.name) {
                return Err((
                    format!("ops[{i}].name"),
                    format!("duplicate operator `{}`", op.name),
                ));
            }
        }
        if self.weights_stored().is_none_or(|w| w > u64::MAX as u128) {
            return Err((
                "ops".into(),
                "the operators' weights (K × N × instances × layers, added) are more than 64 bits count: no machine holds such a model".into(),
            ));
        }
        Ok(())
    }
}
