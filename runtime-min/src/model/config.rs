//! The decoder's own reading of a Hugging Face `config.json`: what the
//! GEMM view ([`ModelSpec`]) leaves out (norm epsilon, RoPE, biases,
//! fused projections, the activation), and the refusal of families whose
//! features the decoder does not implement.

use std::path::Path;

use hetero_plan::ModelSpec;
use serde::Deserialize;

use crate::{Error, Result};

/// The families the decoder runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Llama 1-3 (llama3 `rope_scaling` included).
    Llama,
    /// Qwen2 (q/k/v biases, often tied embeddings).
    Qwen2,
    /// Mistral.
    Mistral,
    /// Phi-3 (fused `qkv_proj` and `gate_up_proj`).
    Phi3,
}

/// How RoPE frequencies are scaled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RopeScaling {
    /// None (`rope_scaling` absent, or type `default`).
    None,
    /// Positions divided by a factor (`linear`).
    Linear {
        /// The factor.
        factor: f64,
    },
    /// Llama 3's frequency-dependent scaling.
    Llama3 {
        /// The factor low frequencies are divided by.
        factor: f64,
        /// Wavelengths longer than `original / low_freq_factor` are scaled.
        low_freq_factor: f64,
        /// Wavelengths shorter than `original / high_freq_factor` are kept.
        high_freq_factor: f64,
        /// The context length the model was trained at.
        original_max_position_embeddings: f64,
    },
}

/// Everything the decoder needs beyond the GEMMs.
#[derive(Debug, Clone)]
pub struct DecoderConfig {
    /// The family.
    pub family: Family,
    /// Hidden size.
    pub hidden: usize,
    /// The MLP's intermediate size.
    pub inter: usize,
    /// Decoder layers.
    pub layers: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Per-head dimension.
    pub head_dim: usize,
    /// Vocabulary.
    pub vocab: usize,
    /// RMSNorm epsilon.
    pub eps: f32,
    /// RoPE base.
    pub rope_theta: f64,
    /// RoPE scaling.
    pub rope_scaling: RopeScaling,
    /// q, k and v projections have biases.
    pub qkv_bias: bool,
    /// The output projection has a bias (llama `attention_bias`).
    pub o_bias: bool,
    /// One fused QKV projection and one fused gate/up projection.
    pub fused: bool,
    /// The most positions the model was made for.
    pub max_positions: Option<usize>,
    /// Attention sees only this many positions back, where the family
    /// applies a window.
    pub sliding_window: Option<usize>,
}

/// The fields of `config.json` the decoder reads.
#[derive(Deserialize)]
struct Raw {
    model_type: Option<String>,
    rms_norm_eps: Option<f64>,
    rope_theta: Option<f64>,
    rope_scaling: Option<serde_json::Value>,
    /// Newer transformers: theta, type and scaling in one object.
    rope_parameters: Option<serde_json::Value>,
    max_position_embeddings: Option<usize>,
    attention_bias: Option<bool>,
    mlp_bias: Option<bool>,
    hidden_act: Option<String>,
    sliding_window: Option<usize>,
    use_sliding_window: Option<bool>,
    partial_rotary_factor: Option<f64>,
}

/// Why a family the config importer reads does not run here.
fn refusal(model_type: &str) -> Option<&'static str> {
    Some(match model_type {
        "gemma" => {
            "the embedding scaled by √hidden, (1 + w) RMSNorm weights and the GeLU MLP are not implemented"
        }
        "gemma2" => {
            "logit soft-capping, sliding-window attention and the extra norms around each block are not implemented"
        }
        "mixtral" | "qwen2_moe" => {
            "routed mixture-of-experts feed-forward (router, top-k experts) is not implemented"
        }
        "internlm2" => "its interleaved fused wqkv layout is not implemented",
        "qwen3" => "per-head RMSNorm of queries and keys (q_norm, k_norm) is not implemented",
        _ => return None,
    })
}

impl DecoderConfig {
    /// Reads `config.json` beside the model's GEMM view; refuses a family
    /// or a setting the decoder does not implement (exit 2, naming it).
    pub fn load(path: &Path, model: &ModelSpec) -> Result<DecoderConfig> {
        let text = hetero_plan::read_text(path)?;
        let raw: Raw = serde_json::from_str(&text).map_err(|e| {
            Error::File(hetero_plan::Error::Parse {
                path: path.to_path_buf(),
                field: ".".into(),
                line: e.line(),
                column: e.column(),
                message: e.to_string(),
            })
        })?;
        let unsupported = |field: &str, message: String| {
            Error::File(hetero_plan::Error::Invalid {
                path: path.to_path_buf(),
                field: field.into(),
                message,
            })
        };
        let model_type = raw.model_type.clone().unwrap_or_default();
        if let Some(why) = refusal(&model_type) {
            return Err(unsupported(
                "model_type",
                format!("{model_type}: {why} in the decoder"),
            ));
        }
        let family = match model_type.as_str() {
            "llama" => Family::Llama,
            "qwen2" => Family::Qwen2,
            "mistral" => Family::Mistral,
            "phi3" => Family::Phi3,
            other => {
                return Err(unsupported(
                    "model_type",
                    format!("{other}: the decoder runs llama, qwen2, mistral and phi3"),
                ));
            }
        };
        if let Some(act) = raw.hidden_act.as_deref().filter(|a| *a != "silu") {
            return Err(unsupported(
                "hidden_act",
                format!("`{act}`: the decoder's MLP is SwiGLU (silu)"),
            ));
        }
        if raw.mlp_bias == Some(true) {
            return Err(unsupported(
                "mlp_bias",
                "biases in the MLP projections are not implemented".into(),
            ));
        }
        let params = raw.rope_parameters.as_ref().filter(|v| v.is_object());
        let param = |k: &str| params.and_then(|p| p.get(k)).and_then(|v| v.as_f64());
        let partial = raw.partial_rotary_factor.or(param("partial_rotary_factor"));
        if let Some(f) = partial.filter(|f| *f != 1.0) {
            return Err(unsupported(
                "partial_rotary_factor",
                format!("{f}: partial rotary embeddings are not implemented"),
            ));
        }
        let (field, scaling) = match params {
            Some(p) => ("rope_parameters", Some(p)),
            None => ("rope_scaling", raw.rope_scaling.as_ref()),
        };
        let rope_scaling = rope_scaling(scaling).map_err(|m| unsupported(field, m))?;
        let window = match family {
            Family::Mistral | Family::Phi3 => raw.sliding_window,
            Family::Qwen2 if raw.use_sliding_window == Some(true) => raw.sliding_window,
            _ => None,
        };
        let inter = model
            .op("ffn_down")
            .map(|o| o.k as usize)
            .expect("every dense family has ffn_down");
        Ok(DecoderConfig {
            family,
            hidden: model.hidden as usize,
            inter,
            layers: model.layers as usize,
            heads: model.heads as usize,
            kv_heads: model.kv_heads as usize,
            head_dim: model.head_dim as usize,
            vocab: model.vocab as usize,
            eps: raw.rms_norm_eps.unwrap_or(1e-6) as f32,
            rope_theta: param("rope_theta").or(raw.rope_theta).unwrap_or(10_000.0),
            rope_scaling,
            qkv_bias: family == Family::Qwen2 || raw.attention_bias == Some(true),
            o_bias: family != Family::Qwen2 && raw.attention_bias == Some(true),
            fused: family == Family::Phi3,
            max_positions: raw.max_position_embeddings,
            sliding_window: window,
        })
    }

    /// Query outputs (heads × head_dim).
    pub fn q_dim(&self) -> usize {
        self.heads * self.head_dim
    }

    /// Key (or value) outputs (kv_heads × head_dim).
    pub fn kv_dim(&self) -> usize {
        self.kv_heads * self.head_dim
    }

    /// Refuses a context of `positions` the model or the decoder cannot
    /// attend over.
    pub fn check_context(&self, positions: usize) -> Result<()> {
        if let Some(w) = self.sliding_window.filter(|w| positions > *w) {
            return Err(Error::arg(
                "--max-new",
                format!(
                    "prompt and new tokens make {positions} positions; sliding-window attention (window {w}) is not implemented, so at most {w} run"
                ),
            ));
        }
        if let Some(m) = self.max_positions.filter(|m| positions > *m) {
            return Err(Error::arg(
                "--max-new",
                format!(
                    "prompt and new tokens make {positions} positions; the model has max_position_embeddings {m}"
                ),
            ));
        }
        Ok(())
    }
}

/// `rope_scaling` (or `rope_parameters`): absent, `default`, `linear` or
/// `llama3`; others are refused by type.
fn rope_scaling(v: Option<&serde_json::Value>) -> std::result::Result<RopeScaling, String> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(RopeScaling::None);
    };
    let kind = v
        .get("rope_type")
        .or_else(|| v.get("type"))
        .and_then(|t| t.as_str())
        .unwrap_or("default");
    let num = |k: &str| {
        v.get(k)
            .and_then(|x| x.as_f64())
            .ok_or_else(|| format!("`{kind}` scaling needs a number `{k}`"))
    };
    match kind {
        "default" => Ok(RopeScaling::None),
        "linear" => Ok(RopeScaling::Linear {
            factor: num("factor")?,
        }),
        "llama3" => Ok(RopeScaling::Llama3 {
            factor: num("factor")?,
            low_freq_factor: num("low_freq_factor")?,
            high_freq_factor: num("high_freq_factor")?,
            original_max_position_embeddings: num("original_max_position_embeddings")?,
        }),
        other => Err(format!(
            "`{other}` scaling is not implemented (the decoder has default, linear and llama3)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<DecoderConfig> {
        let dir = hetero_test_support::temp_dir("dec-config");
        let p = dir.path().join("config.json");
        std::fs::write(&p, text).unwrap();
        let model = hetero_plan::hf::load_config(&p)?;
        DecoderConfig::load(&p, &model)
    }

    const BASE: &str = r#""hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256"#;

    #[test]
    fn families_read_their_features_and_others_are_refused_by_name() {
        let q = load(&format!(r#"{{"model_type": "qwen2", {BASE}}}"#)).unwrap();
        assert!(q.qkv_bias && !q.o_bias && !q.fused && q.inter == 128 && q.kv_dim() == 32);
        let p = load(&format!(r#"{{"model_type": "phi3", {BASE}}}"#)).unwrap();
        assert!(p.fused);
        let l = load(&format!(
            r#"{{"model_type": "llama", {BASE}, "rope_scaling": {{"rope_type": "llama3", "factor": 8.0,
            "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}}}"#
        ))
        .unwrap();
        assert!(matches!(l.rope_scaling, RopeScaling::Llama3 { factor, .. } if factor == 8.0));
        let e = load(&format!(r#"{{"model_type": "gemma2", {BASE}}}"#))
            .unwrap_err()
            .to_string();
        assert!(e.contains("gemma2") && e.contains("soft-capping"), "{e}");
        let e = load(&format!(
            r#"{{"model_type": "llama", {BASE}, "rope_scaling": {{"type": "yarn", "factor": 4.0}}}}"#
        ))
        .unwrap_err()
        .to_string();
        assert!(e.contains("rope_scaling") && e.contains("yarn"), "{e}");
        // Newer transformers put theta and the scaling in rope_parameters.
        let n = load(&format!(
            r#"{{"model_type": "llama", {BASE}, "rope_parameters": {{"rope_theta": 500000.0,
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64}}}}"#
        ))
        .unwrap();
        assert_eq!(n.rope_theta, 500000.0);
        assert!(matches!(n.rope_scaling, RopeScaling::Llama3 { .. }));
        let m = load(&format!(
            r#"{{"model_type": "mistral", {BASE}, "sliding_window": 8}}"#
        ))
        .unwrap();
        assert!(m.check_context(8).is_ok() && m.check_context(9).is_err());
    }
}
