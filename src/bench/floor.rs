//! The physical floor of a decode step under a GPU memory budget: every
//! weight is read once per token, the resident ones from the GPU's own
//! memory, the others from host memory by the CPU and over PCIe at once.
//!
//! ```text
//! floor = (bytes not resident) / (CPU + PCIe bandwidth, measured side by side)
//!       + (resident bytes)     / (GPU memory bandwidth)
//! ```
//!
//! At most the budget is resident: the floor is the best any plan under
//! that budget can do on these bandwidths, whatever it keeps resident.

use hetero_plan::{DType, ModelSpec};
use serde::Serialize;

/// The floor and what it is made of.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Floor {
    /// Weight bytes one decode step reads (every GEMM of every layer, the
    /// active experts only, lm_head included).
    pub weight_bytes: u64,
    /// Of which resident on the GPU: the budget, or every weight when
    /// they fit it.
    pub resident_bytes: u64,
    /// Of which read from host memory: `weight_bytes - resident_bytes`.
    pub host_bytes: u64,
    /// The CPU's and the GPU's host-to-device reads side by side, GB/s.
    pub host_gbps: f64,
    /// The GPU's reads of its own memory, GB/s.
    pub gpu_gbps: f64,
    /// The floor of one decode step, µs.
    pub decode_step_us: f64,
}

/// Weight bytes one decode step of `model` reads in `dtype`.
pub fn decode_weight_bytes(model: &ModelSpec, dtype: DType) -> u64 {
    let bytes = (dtype.weight_bits() as u64).div_ceil(8);
    (model.ops.iter())
        .map(|o| o.k as u64 * o.n as u64 * o.active as u64 * o.layers as u64 * bytes)
        .sum()
}

impl Floor {
    /// The floor of `weight_bytes` under `budget` bytes of GPU memory.
    pub fn new(weight_bytes: u64, budget: u64, host_gbps: f64, gpu_gbps: f64) -> Floor {
        let resident_bytes = budget.min(weight_bytes);
        let host_bytes = weight_bytes - resident_bytes;
        // bytes / (GB/s) = ns; / 1e3 = µs.
        let us = |bytes: u64, gbps: f64| match bytes {
            0 => 0.0,
            b => b as f64 / gbps / 1e3,
        };
        Floor {
            weight_bytes,
            resident_bytes,
            host_bytes,
            host_gbps,
            gpu_gbps,
            decode_step_us: us(host_bytes, host_gbps) + us(resident_bytes, gpu_gbps),
        }
    }

    /// The fraction of the floor a decode step of `step_us` reaches
    /// (1: at the floor).
    pub fn fraction(&self, step_us: f64) -> f64 {
        self.decode_step_us / step_us
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_reads_the_budget_from_the_gpu_and_the_rest_from_the_host() {
        // 16 GB, 4 GB resident: 12 GB at 110 GB/s and 4 GB at 2000 GB/s.
        let f = Floor::new(16_000_000_000, 4_000_000_000, 110.0, 2000.0);
        assert_eq!(f.host_bytes, 12_000_000_000);
        let want = 12e9 / 110e9 * 1e6 + 4e9 / 2000e9 * 1e6;
        assert!((f.decode_step_us - want).abs() < 1e-6, "{f:?}");
        assert!((f.fraction(2.0 * want) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn a_budget_past_the_weights_leaves_nothing_on_the_host() {
        let f = Floor::new(1000, 5000, 0.0, 1.0);
        assert_eq!((f.resident_bytes, f.host_bytes), (1000, 0));
        assert_eq!(f.decode_step_us, 1.0);
    }

    #[test]
    fn llama_8b_reads_its_linear_weights_once_per_token() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let m =
            hetero_plan::hf::load_config(&root.join("datasets/models/llama-3.1-8b.json")).unwrap();
        // `hetero model show`: 7 504 658 432 linear parameters per token.
        assert_eq!(decode_weight_bytes(&m, DType::F16), 2 * 7_504_658_432);
        assert_eq!(decode_weight_bytes(&m, DType::F32), 4 * 7_504_658_432);
    }
}
