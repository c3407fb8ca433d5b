//! What each non-GEMM operator of one layer costs on one placement, at one
//! length: the GEMM-shaped parts of attention through the placed
//! processor's fitted latency model, everything else as bytes over its
//! memory bandwidth, plus the launches and copies the placement adds.

use hetero_plan::{GemmShape, ModelSpec, NonGemmKnot, NonGemmOp, OperandOrder, Phase};

use crate::engine::Proc;
use crate::oracle::GemmModel;
use crate::solve::round2;

/// The dimensions of a layer the non-GEMM operators see.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct LayerDims {
    pub hidden: f64,
    pub heads: u32,
    pub kv_heads: u32,
    pub head_dim: u32,
    /// Elements per token the gated activation produces (the FFN's
    /// intermediate size, over every active expert of a MoE layer).
    pub gated: f64,
}

impl LayerDims {
    pub fn of(model: &ModelSpec) -> LayerDims {
        let gated = model
            .ops
            .iter()
            .map(|o| match o.name.as_str() {
                "ffn_gate" | "shared_gate" => o.n as f64,
                "ffn_gate_up" => o.n as f64 / 2.0,
                "expert_gate" => o.n as f64 * o.active as f64,
                _ => 0.0,
            })
            .sum();
        LayerDims {
            hidden: model.hidden as f64,
            heads: model.heads,
            kv_heads: model.kv_heads,
            head_dim: model.head_dim,
            gated,
        }
    }
}

/// Where the non-GEMM operators would run, as the cost model needs it.
pub(crate) struct Runner<'a> {
    /// `host` or the processor id.
    pub at: String,
    /// The processor whose latency model and bandwidth it is costed with
    /// (for the host, a CPU processor of the predictor).
    pub processor: String,
    /// The latency model attention's products are predicted with.
    pub model: &'a dyn GemmModel,
    /// Bytes of one activation element there.
    pub elem_bytes: f64,
    /// Streaming bandwidth, GB/s (= bytes per ns; ×1e3 per µs).
    pub bandwidth_gbps: f64,
    /// A processor away from the host: launches and copies through its
    /// measured costs. `None` for the host, which runs on the activations
    /// in host memory where the GEMMs leave them.
    pub device: Option<&'a Proc<'a>>,
}

/// Kernel launches an operator makes per layer on a processor.
fn launches(op: NonGemmOp) -> f64 {
    match op {
        // QKᵀ, softmax, PV.
        NonGemmOp::Attention => 3.0,
        NonGemmOp::Norm | NonGemmOp::Residual => 2.0,
        NonGemmOp::Rope | NonGemmOp::Activation => 1.0,
    }
}

/// What one launch of a non-GEMM kernel adds on a processor, µs: the
/// launch and completion notice of a device-timed one (as for a GEMM run
/// alone), else the larger of its submit and sync costs, which a
/// host-clocked GEMM model carries but bytes over bandwidth do not.
fn launch_us(p: &Proc) -> f64 {
    if p.device_timed {
        p.alone_overhead_us()
    } else {
        p.submit_us.max(p.sync_us)
    }
}

impl Runner<'_> {
    fn gemm_us(&self, m: u32, k: u32, n: u32) -> f64 {
        GemmShape::new(m, k, n)
            .and_then(|s| self.model.predict_us(s, OperandOrder::Aw))
            .unwrap_or(f64::INFINITY)
    }

    fn stream_us(&self, elems: f64) -> f64 {
        elems * self.elem_bytes / (self.bandwidth_gbps * 1e3)
    }

    /// `op`'s cost per layer when `tokens` tokens attend to `context`
    /// (prefill: both the prompt length; decode: the step's tokens and the
    /// context length).
    pub fn knot(&self, dims: &LayerDims, op: NonGemmOp, tokens: u32, context: u32) -> NonGemmKnot {
        let t = tokens as f64;
        let (h, d) = (dims.hidden, dims.head_dim as f64);
        let q = dims.heads as f64 * d;
        let kv = dims.kv_heads as f64 * d;
        // (compute, elements read from host memory, elements written back)
        let (compute, elems_in, elems_out) = match op {
            NonGemmOp::Attention => {
                // Per KV head, its group's queries stacked as rows: QKᵀ is
                // (tokens·group)×head_dim×context, PV (tokens·group)×context×head_dim.
                let kv_heads = dims.kv_heads.max(1);
                let rows = tokens.saturating_mul((dims.heads / kv_heads).max(1));
                let products = self.gemm_us(rows, dims.head_dim, context)
                    + self.gemm_us(rows, context, dims.head_dim);
                let scores = dims.heads as f64 * t * context as f64;
                // Softmax reads and writes the scores; the new keys and
                // values are written to the cache.
                let streamed = self.stream_us(2.0 * scores + 2.0 * t * kv);
                (
                    kv_heads as f64 * products + streamed,
                    t * (q + 2.0 * kv),
                    t * q,
                )
            }
            NonGemmOp::Rope => {
                let e = t * (q + kv);
                (self.stream_us(2.0 * e), e, e)
            }
            // Two norms, each reading and writing a token's hidden state.
            NonGemmOp::Norm => (self.stream_us(4.0 * t * h), 2.0 * t * h, 2.0 * t * h),
            NonGemmOp::Activation => {
                let g = t * dims.gated;
                (self.stream_us(3.0 * g), 2.0 * g, g)
            }
            // Two adds, each reading two hidden states and writing one.
            NonGemmOp::Residual => (self.stream_us(6.0 * t * h), 4.0 * t * h, 2.0 * t * h),
        };
        let (sync_us, copy_us) = match self.device {
            Some(p) => (
                launches(op) * launch_us(p),
                p.alone_copy_us(elems_in, elems_out, OperandOrder::Aw),
            ),
            None => (0.0, 0.0),
        };
        NonGemmKnot {
            len: context,
            compute_us: round2(compute),
            sync_us: round2(sync_us),
            copy_us: round2(copy_us),
        }
    }
}

/// Tokens and context of a pass at length `len` of `phase`.
pub(crate) fn tokens_and_context(phase: Phase, len: u32, decode_tokens: u32) -> (u32, u32) {
    match phase {
        Phase::Prefill => (len, len),
        Phase::Decode => (decode_tokens, len),
    }
}
