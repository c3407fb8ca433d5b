//! Simulated processors with paper-like parameters, for tests, examples and
//! benchmarks. **Their times are a timing model, not measurements**: every
//! processor here is marked `simulated: true`.
//!
//! The NPU model follows HeteroLLM §3.2: stage performance (every dimension
//! padded to the 32-wide array, and a floor below which the array is not
//! filled), order sensitivity (weight-stationary: the `aw` order is several
//! times slower than `transposed`) and shape sensitivity (a long reduction
//! dimension, like the FFN down-projection's, runs far below peak).
//! The GPU is a roofline. Overheads are of the order HeteroLLM reports
//! (polling sync in microseconds, GPU submission in tens of microseconds,
//! about 40-45 GB/s per processor alone and 60 GB/s together in decode).

use hetero_plan::predictor::gemm_bytes;
use hetero_plan::{
    Capabilities, DType, GemmShape, LinearCost, OperandOrder, Overheads, Processor, ProcessorApi,
    ProcessorKind,
};

use crate::oracle::{GemmModel, LatencyOracle};

/// A simulated GEMM timing model.
#[derive(Debug, Clone, PartialEq)]
pub enum SynthModel {
    /// `launch + max(flops / peak, bytes / bandwidth)`.
    Roofline {
        /// GFLOP/s.
        peak_gflops: f64,
        /// GB/s.
        bw_gbps: f64,
        /// µs.
        launch_us: f64,
    },
    /// A weight-stationary NPU (see the module docs).
    Npu {
        /// GFLOP/s on aligned shapes in the preferred order.
        peak_gflops: f64,
        /// GB/s.
        bw_gbps: f64,
        /// µs per graph execution.
        launch_us: f64,
        /// The array edge (stage size).
        stage: u32,
        /// M below this costs as much as this (the array is not filled).
        min_m: u32,
        /// Slow-down of the `aw` order.
        order_penalty: f64,
        /// Slow-down `(K / shape_k)^shape_exp` when K > `shape_k`: a long
        /// reduction dimension (the FFN down-projection's) keeps reloading
        /// the stationary weights.
        shape_exp: f64,
        /// The K above which the shape penalty starts.
        shape_k: u32,
    },
}

impl SynthModel {
    /// Simulated latency, µs.
    pub fn time_us(&self, shape: GemmShape, dtype: DType, order: OperandOrder) -> f64 {
        let bytes = gemm_bytes(shape, dtype);
        match *self {
            SynthModel::Roofline {
                peak_gflops,
                bw_gbps,
                launch_us,
            } => launch_us + (shape.flops() / (peak_gflops * 1e3)).max(bytes / (bw_gbps * 1e3)),
            SynthModel::Npu {
                peak_gflops,
                bw_gbps,
                launch_us,
                stage,
                min_m,
                order_penalty,
                shape_exp,
                shape_k,
            } => {
                let (m, k, n) = shape.mkn();
                let pad = |d: u32| d.div_ceil(stage) as f64 * stage as f64;
                let flops = 2.0 * pad(m).max(min_m as f64) * pad(k) * pad(n);
                let mut slow = (k as f64 / shape_k as f64).max(1.0).powf(shape_exp);
                if order == OperandOrder::Aw {
                    slow *= order_penalty;
                }
                let compute = flops * slow / (peak_gflops * 1e3);
                launch_us + compute.max(bytes / (bw_gbps * 1e3))
            }
        }
    }
}

struct Bound {
    model: SynthModel,
    dtype: DType,
}

impl GemmModel for Bound {
    fn predict_us(&self, shape: GemmShape, order: OperandOrder) -> Option<f64> {
        Some(self.model.time_us(shape, self.dtype, order))
    }

    /// Both simulated models grow with M and with N (padding rounds up,
    /// the roofline's two terms grow): the least M and N give the bound.
    fn lower_bound_us(
        &self,
        m: std::ops::RangeInclusive<u32>,
        k: u32,
        n: std::ops::RangeInclusive<u32>,
        order: OperandOrder,
    ) -> Option<f64> {
        let shape = GemmShape::new(*m.start(), k, *n.start())?;
        Some(self.model.time_us(shape, self.dtype, order))
    }
}

/// A simulated device: processors, their timing models and overheads.
pub struct Synthetic {
    processors: Vec<Processor>,
    models: Vec<Bound>,
    overheads: Vec<Overheads>,
}

impl Synthetic {
    /// Builds a device from `(processor, model, overheads)`; every model
    /// answers for f16.
    pub fn new(parts: Vec<(Processor, SynthModel, Overheads)>) -> Synthetic {
        let mut s = Synthetic {
            processors: vec![],
            models: vec![],
            overheads: vec![],
        };
        for (p, m, o) in parts {
            s.processors.push(p);
            s.models.push(Bound {
                model: m,
                dtype: DType::F16,
            });
            s.overheads.push(o);
        }
        s
    }

    /// Mutable access to a processor's overheads (for tests that vary them).
    pub fn overheads_mut(&mut self, id: &str) -> Option<&mut Overheads> {
        self.overheads.iter_mut().find(|o| o.processor == id)
    }

    /// Mutable access to a processor's description.
    pub fn processor_mut(&mut self, id: &str) -> Option<&mut Processor> {
        self.processors.iter_mut().find(|p| p.id == id)
    }

    /// Mutable access to a processor's timing model.
    pub fn model_mut(&mut self, id: &str) -> Option<&mut SynthModel> {
        let i = self.processors.iter().position(|p| p.id == id)?;
        Some(&mut self.models[i].model)
    }
}

impl LatencyOracle for Synthetic {
    fn processors(&self) -> &[Processor] {
        &self.processors
    }

    fn gemm_model(&self, processor: &str, dtype: DType) -> Option<&dyn GemmModel> {
        let i = self.processors.iter().position(|p| p.id == processor)?;
        (self.models[i].dtype == dtype).then(|| &self.models[i] as &dyn GemmModel)
    }

    fn dtypes(&self, processor: &str) -> Vec<DType> {
        match self.processors.iter().position(|p| p.id == processor) {
            Some(i) => vec![self.models[i].dtype],
            None => vec![],
        }
    }

    fn overheads(&self, processor: &str) -> Overheads {
        self.overheads
            .iter()
            .find(|o| o.processor == processor)
            .cloned()
            .unwrap_or_else(|| Overheads {
                processor: processor.into(),
                ..Default::default()
            })
    }
}

fn processor(id: &str, kind: ProcessorKind, caps: Capabilities) -> Processor {
    Processor {
        id: id.into(),
        kind,
        api: ProcessorApi::Sim,
        name: format!("{id} (simulated, paper-like parameters)"),
        driver: String::new(),
        capabilities: Capabilities {
            dtypes: vec![DType::F16],
            ..caps
        },
        simulated: true,
        emulated: false,
    }
}

/// The simulated mobile GPU: 1.5 TFLOP/s, 45 GB/s, 20 µs launch.
pub fn mobile_gpu(id: &str) -> (Processor, SynthModel, Overheads) {
    (
        processor(
            id,
            ProcessorKind::Gpu,
            Capabilities {
                unified_memory: true,
                host_flag: true,
                ..Default::default()
            },
        ),
        SynthModel::Roofline {
            peak_gflops: 1500.0,
            bw_gbps: 45.0,
            launch_us: 20.0,
        },
        Overheads {
            processor: id.into(),
            submit_empty_us: Some(30.0),
            submit_busy_us: Some(35.0),
            sync_block_us: Some(120.0),
            sync_poll_us: Some(10.0),
            bandwidth_gbps: Some(45.0),
            concurrent_factor: Some(0.7),
            ..Default::default()
        },
    )
}

/// The simulated mobile NPU: 10× the GPU on aligned shapes (15 TFLOP/s),
/// stage size 32, 40 GB/s, graphs prepared at 20 ms + 3 ms per MB of weights
/// (about 0.1 s for a 4096×4096 f16 weight, the order QNN's HTP emulator
/// reports for finalising such a graph).
pub fn mobile_npu(id: &str) -> (Processor, SynthModel, Overheads) {
    (
        processor(
            id,
            ProcessorKind::Npu,
            Capabilities {
                static_graphs: true,
                unified_memory: true,
                host_flag: true,
                tile: Some(32),
                ..Default::default()
            },
        ),
        SynthModel::Npu {
            peak_gflops: 15000.0,
            bw_gbps: 40.0,
            launch_us: 30.0,
            stage: 32,
            min_m: 64,
            order_penalty: 4.0,
            shape_exp: 1.5,
            shape_k: 4096,
        },
        Overheads {
            processor: id.into(),
            sync_block_us: Some(100.0),
            sync_poll_us: Some(10.0),
            prepare: Some(LinearCost {
                alpha_us: 20_000.0,
                beta_us_per_byte: 0.003,
            }),
            bandwidth_gbps: Some(40.0),
            concurrent_factor: Some(0.7),
            ..Default::default()
        },
    )
}

/// A paper-like mobile SoC: `npu` (static graphs) and `gpu`, unified memory.
pub fn paper_like_npu_gpu() -> Synthetic {
    Synthetic::new(vec![mobile_npu("npu"), mobile_gpu("gpu")])
}

/// Two identical simulated GPUs sharing memory.
pub fn identical_gpus() -> Synthetic {
    Synthetic::new(vec![mobile_gpu("gpu0"), mobile_gpu("gpu1")])
}

/// A simulated discrete-GPU host (ScheInfer testbed-like): a 16-core CPU
/// (1.5 TFLOP/s, 80 GB/s) and a PCIe GPU (100 TFLOP/s, 900 GB/s, 16 GB)
/// with copies at 7 µs + 25 GB/s.
pub fn discrete_cpu_gpu() -> Synthetic {
    let copy = LinearCost {
        alpha_us: 7.0,
        beta_us_per_byte: 1.0 / 25e3,
    };
    Synthetic::new(vec![
        (
            processor(
                "cpu",
                ProcessorKind::Cpu,
                Capabilities {
                    unified_memory: true,
                    compute_units: Some(16),
                    ..Default::default()
                },
            ),
            SynthModel::Roofline {
                peak_gflops: 1500.0,
                bw_gbps: 80.0,
                launch_us: 5.0,
            },
            Overheads {
                processor: "cpu".into(),
                sync_block_us: Some(5.0),
                ..Default::default()
            },
        ),
        (
            processor(
                "cuda",
                ProcessorKind::Gpu,
                Capabilities {
                    unified_memory: false,
                    memory_bytes: Some(16 << 30),
                    launch_copy_max_bytes: None,
                    ..Default::default()
                },
            ),
            SynthModel::Roofline {
                peak_gflops: 100_000.0,
                bw_gbps: 900.0,
                launch_us: 10.0,
            },
            Overheads {
                processor: "cuda".into(),
                copy_h2d: Some(copy),
                copy_d2h: Some(copy),
                submit_empty_us: Some(9.0),
                sync_block_us: Some(9.0),
                ..Default::default()
            },
        ),
    ])
}
