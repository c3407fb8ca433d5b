//! Predicted time to first token and time per output token, from a plan
//! alone: every GEMM's decision cost plus the non-GEMM operators' costs on
//! their placement (with the copies and synchronisation it implies), per
//! operator, so a runtime can print each prediction beside its measurement.
//!
//! The costs are the plan's: medians, as the latency models predict them
//! (`hetero run` also reports them scaled by each processor's mean over
//! median; [`SolverInfo::mean_over_median`](crate::SolverInfo)).

use serde::Serialize;

use crate::{Phase, Plan};

/// One operator's predicted time in a pass (a prefill or a decode step).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpForecast {
    /// A GEMM's canonical name (`attn_q`) or a non-GEMM operator's
    /// ([`NonGemmOp::as_str`](crate::NonGemmOp::as_str): `attention`).
    pub op: String,
    /// A GEMM (else a non-GEMM operator).
    pub gemm: bool,
    /// Where it runs: the processors of the GEMM's strategy, or the
    /// non-GEMM placement of each range of layers (`host`, a processor id).
    pub at: Vec<String>,
    /// Layers it runs in.
    pub layers: u32,
    /// Predicted time over all its layers, µs.
    pub us: f64,
    /// Of which synchronisation, µs.
    pub sync_us: f64,
    /// Of which copies, µs.
    pub copy_us: f64,
}

/// A pass's predicted time, operator by operator.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PassForecast {
    /// The phase.
    pub phase: Phase,
    /// The prompt length (prefill) or the context length (decode).
    pub len: u32,
    /// GEMMs first, in plan order, then the non-GEMM operators.
    pub ops: Vec<OpForecast>,
    /// The GEMMs' sum, µs.
    pub gemm_us: f64,
    /// The non-GEMM operators' sum, µs.
    pub non_gemm_us: f64,
    /// The whole pass, µs.
    pub total_us: f64,
    /// The plan has no costs of non-GEMM operators (written before the
    /// solver placed them, or solved without a CPU model for the host):
    /// the total covers the GEMMs alone.
    pub gemms_only: bool,
}

/// A generation's predicted times.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GenerationForecast {
    /// Prompt tokens.
    pub prompt: u32,
    /// Tokens generated (the first by the prefill).
    pub new_tokens: u32,
    /// Time to first token: the prefill of the prompt, µs.
    pub ttft_us: f64,
    /// Time per output token after the first: the mean decode step over
    /// the generation's contexts, per token it emits, µs.
    pub per_token_us: f64,
    /// The prefill, operator by operator.
    pub prefill: PassForecast,
    /// The first decode step (context `prompt + 1`), operator by operator.
    pub first_step: PassForecast,
}

/// A length the plan has no decision for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotCovered {
    /// The operator; empty when the plan has no operator in the phase.
    pub op: String,
    /// Its phase.
    pub phase: Phase,
    /// The length asked for.
    pub len: u32,
}

impl std::fmt::Display for NotCovered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.op.is_empty() {
            return write!(
                f,
                "the plan has no {} decisions; solve it with that phase",
                self.phase
            );
        }
        write!(
            f,
            "the plan has no {} decision for `{}` at length {}; solve it with lengths that cover it",
            self.phase, self.op, self.len
        )
    }
}

impl std::error::Error for NotCovered {}

impl Plan {
    /// Tokens per decode step: the non-GEMM placement's, else the
    /// smallest decode length the plan has (1 without decode tables).
    pub fn decode_tokens(&self) -> u32 {
        if let Some(ng) = &self.non_gemm {
            return ng.decode_tokens;
        }
        self.ops
            .iter()
            .filter(|o| o.phase == Phase::Decode)
            .filter_map(|o| o.spans.first().map(|s| s.from))
            .min()
            .unwrap_or(1)
    }

    /// The predicted prefill of a prompt of `prompt` tokens.
    pub fn forecast_prefill(&self, prompt: u32) -> Result<PassForecast, NotCovered> {
        self.forecast(Phase::Prefill, prompt, prompt)
    }

    /// The predicted decode step at context length `context` (the step's
    /// tokens included).
    pub fn forecast_decode(&self, context: u32) -> Result<PassForecast, NotCovered> {
        self.forecast(Phase::Decode, self.decode_tokens(), context)
    }

    /// Time to first token of a `prompt`-token prompt and the mean time per
    /// output token over `new_tokens` tokens generated after it.
    pub fn forecast_generation(
        &self,
        prompt: u32,
        new_tokens: u32,
    ) -> Result<GenerationForecast, NotCovered> {
        let prefill = self.forecast_prefill(prompt)?;
        let first_step = self.forecast_decode(prompt + 1)?;
        let step = self.decode_tokens().max(1);
        // Steps after the prefill's token, each emitting `step` tokens.
        let steps = (new_tokens.saturating_sub(1)).div_ceil(step).max(1);
        let mut sum = 0.0;
        for i in 0..steps {
            sum += self.forecast_decode(prompt + 1 + i * step)?.total_us;
        }
        Ok(GenerationForecast {
            prompt,
            new_tokens,
            ttft_us: prefill.total_us,
            per_token_us: sum / (steps * step) as f64,
            prefill,
            first_step,
        })
    }

    /// A pass: the GEMMs at `gemm_len`, the non-GEMM operators at `len`.
    fn forecast(&self, phase: Phase, gemm_len: u32, len: u32) -> Result<PassForecast, NotCovered> {
        if !self.ops.iter().any(|o| o.phase == phase) {
            return Err(NotCovered {
                op: String::new(),
                phase,
                len: gemm_len,
            });
        }
        let mut ops = vec![];
        for o in self.ops.iter().filter(|o| o.phase == phase) {
            let d = o.at(gemm_len).ok_or_else(|| NotCovered {
                op: o.op.clone(),
                phase,
                len: gemm_len,
            })?;
            let layers = o.layers as f64;
            ops.push(OpForecast {
                op: o.op.clone(),
                gemm: true,
                at: d
                    .strategy
                    .processors()
                    .into_iter()
                    .map(String::from)
                    .collect(),
                layers: o.layers,
                us: d.cost.total_us * layers,
                sync_us: d.cost.sync_us * layers,
                copy_us: d.cost.copy_us * layers,
            });
        }
        let gemm_us = ops.iter().map(|o| o.us).sum();
        ops.extend(self.non_gemm_forecast(phase, len));
        let total_us = ops.iter().map(|o| o.us).sum();
        Ok(PassForecast {
            phase,
            len,
            gemm_us,
            non_gemm_us: total_us - gemm_us,
            total_us,
            gemms_only: !ops.iter().any(|o| !o.gemm),
            ops,
        })
    }

    /// The non-GEMM operators of a pass, each summed over its layers'
    /// placements.
    fn non_gemm_forecast(&self, phase: Phase, len: u32) -> Vec<OpForecast> {
        let Some(ng) = &self.non_gemm else {
            return vec![];
        };
        let mut out: Vec<OpForecast> = vec![];
        for p in ng.of_phase(phase) {
            let layers = p.layers.count();
            for c in &p.chosen.ops {
                let Some(k) = c.at(len) else { continue };
                let name = c.op.as_str();
                let i = match out.iter().position(|o| o.op == name) {
                    Some(i) => i,
                    None => {
                        out.push(OpForecast {
                            op: name.into(),
                            gemm: false,
                            at: vec![],
                            layers: 0,
                            us: 0.0,
                            sync_us: 0.0,
                            copy_us: 0.0,
                        });
                        out.len() - 1
                    }
                };
                let o = &mut out[i];
                if !o.at.contains(&p.chosen.at) {
                    o.at.push(p.chosen.at.clone());
                }
                o.layers += layers;
                o.us += k.total_us() * layers as f64;
                o.sync_us += k.sync_us * layers as f64;
                o.copy_us += k.copy_us * layers as f64;
            }
        }
        out
    }
}
