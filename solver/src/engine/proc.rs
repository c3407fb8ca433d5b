//! One processor as the cost model sees it, and the device-level state
//! every operator shares.

use std::collections::HashMap;

use hetero_plan::predictor::gemm_bytes;
use hetero_plan::{
    DType, GemmShape, LinearCost, LinearOp, OperandOrder, Phase, ProcessorKind, StageSmall,
    WeightMode,
};

use super::{HOST_BYTES, INF};
use crate::OffloadStrategy;
use crate::oracle::GemmModel;

/// One processor, resolved: its model in the chosen dtype and the overhead
/// constants the cost model uses.
#[derive(Clone)]
pub(crate) struct Proc<'a> {
    pub id: String,
    pub kind: ProcessorKind,
    /// Runs on whichever of the host's CPU cores are free, not on a group
    /// of its own: an OpenCL CPU device such as PoCL (the cpu backend's
    /// processors each own a core group).
    pub on_all_host_cores: bool,
    pub static_graphs: bool,
    pub unified: bool,
    /// Work is submitted to a queue (a GPU): in a split, the next kernel of
    /// the non-dominant side is submitted only after the dominant side ends.
    pub queue: bool,
    pub tile: u32,
    pub dtype: DType,
    /// The latency model: the oracle's, or its compiled form.
    pub model: std::sync::Arc<dyn GemmModel + Send + 'a>,
    /// Host notices completion, µs (poll where it can, else blocking wait).
    pub sync_us: f64,
    /// The same with a blocking wait, µs: what a runtime that blocks
    /// (`--sync block`) pays instead of `sync_us`.
    pub sync_block_us: f64,
    /// Submitting one kernel to an empty queue, µs.
    pub submit_us: f64,
    /// What the host adds around one device-timed run alone, through the
    /// backend's launch path, µs (`op_overhead`), where measured, with the
    /// wait of `sync_us`.
    pub op_overhead_us: Option<f64>,
    /// The same with a blocking wait, where measured apart.
    pub op_overhead_block_us: Option<f64>,
    /// The overhead after a processor on host memory has run, both waits
    /// alternately (`launch_overhead_after_cpu`), where measured.
    pub launch_overhead_after_cpu_us: Option<f64>,
    /// Added to [`alone_overhead_us`](Self::alone_overhead_us) and its
    /// blocking twin: in offload mode, what `launch_overhead_after_cpu` measured
    /// beyond the two waits' `op_overhead` ([`Proc::after_host_extra_us`]),
    /// else 0.
    pub alone_extra_us: f64,
    /// Share of its alone-bandwidth left while another processor streams.
    pub concurrent: f64,
    pub copy_h2d: Option<LinearCost>,
    pub copy_d2h: Option<LinearCost>,
    /// `write_input` / `read_output` as the runtime drives them, against
    /// f32 bytes: preferred over the DMA copies where measured.
    pub stage_in: Option<LinearCost>,
    pub stage_out: Option<LinearCost>,
    pub stage_out_aw: Option<LinearCost>,
    /// The staged costs of sizes that cross inside the launch, where the
    /// processor has them: they replace the three lines above up to their
    /// `max_bytes`.
    pub stage_small: Option<StageSmall>,
    pub prepare: Option<LinearCost>,
    /// A static-graph processor's graphs: weights baked in, one graph per
    /// layer and weight matrix (`Static`), or weights as an input tensor,
    /// one graph per operator shared by its layers (`Input`). The graph-set
    /// step chooses ([`crate::graphs`]).
    pub graph_weights: WeightMode,
    /// Can take part in a split (unified memory, or copy costs known).
    pub can_split: bool,
    /// Its latency model predicts device-timer times (kernel only): the
    /// host's submit and completion notice come on top even when it runs
    /// alone. Host-clock times (the cpu backend) include them already.
    pub device_timed: bool,
    /// Device memory in bytes, where the processor has its own and the
    /// profile records it.
    pub memory_bytes: Option<u64>,
}

impl Proc<'_> {
    /// Reads its operands from host memory: a CPU, or any processor on
    /// unified memory.
    pub fn host_memory(&self) -> bool {
        self.kind == ProcessorKind::Cpu || self.unified
    }
    /// A GPU with memory of its own.
    pub fn discrete_gpu(&self) -> bool {
        self.kind == ProcessorKind::Gpu && !self.unified
    }
    pub fn abytes(&self) -> f64 {
        self.dtype.activation_bits() as f64 / 8.0
    }
    pub fn wbytes(&self) -> f64 {
        self.dtype.weight_bits() as f64 / 8.0
    }
    /// Preparing a graph of M × K × N, µs (0 where the prepare cost was
    /// not measured): the profile's line against the bytes the graph
    /// moves, activations and weights in this dtype's sizes
    /// ([`gemm_bytes`]), so a larger M costs more to prepare too.
    pub fn prepare_us(&self, m: u32, k: u32, n: u32) -> f64 {
        match (self.prepare, GemmShape::new(m, k, n)) {
            (Some(c), Some(shape)) => c.at(gemm_bytes(shape, self.dtype)),
            _ => 0.0,
        }
    }
    /// The memory one graph of M rows, K inputs and N outputs holds, bytes:
    /// its activation buffers, and its weights where they are baked in.
    pub fn graph_bytes(&self, m: u32, k: u32, n: u32) -> f64 {
        let weights = match self.graph_weights {
            WeightMode::Static => k as f64 * n as f64 * self.wbytes(),
            WeightMode::Input => 0.0,
        };
        m as f64 * (k + n) as f64 * self.abytes() + weights
    }
    /// How many graphs `op` needs per prepared size: one per layer and
    /// weight matrix with static weights, one shared by all of them with
    /// weights as inputs.
    pub fn graphs_per_size(&self, op: &LinearOp) -> f64 {
        match self.graph_weights {
            WeightMode::Static => op.layers.max(1) as f64 * op.count.max(1) as f64,
            WeightMode::Input => 1.0,
        }
    }
    /// Preparing and holding `op`'s graphs of `m` rows over `n` of its
    /// output rows: `(µs, bytes)`, every graph the size needs.
    pub fn op_graphs(&self, op: &LinearOp, m: u32, n: u32) -> (f64, f64) {
        let g = self.graphs_per_size(op);
        (
            g * self.prepare_us(m, op.k, n),
            g * self.graph_bytes(m, op.k, n),
        )
    }
    /// What a weights-as-inputs graph pays per run for its `k × rows`
    /// weights, µs: the runtime writes them into the graph's input tensor
    /// (their dtype's bytes) through the processor's host-to-device copy,
    /// else its staged input line. Nothing for static weights, nor where
    /// neither line was measured (a processor on unified memory reads them
    /// where they are, as it does its activations).
    pub fn weights_in_us(&self, k: u32, rows: u32) -> f64 {
        match self.graph_weights {
            WeightMode::Static => 0.0,
            WeightMode::Input => self
                .copy_h2d
                .or(self.stage_in)
                .map_or(0.0, |c| c.at(k as f64 * rows as f64 * self.wbytes())),
        }
    }
    /// What the host adds to one run of this processor alone, µs: for a
    /// device-timed processor, the launch and completion notice around its
    /// device time, else nothing. Measured as such where the predictor has
    /// `op_overhead` (submit to the wait's return less the run's device
    /// time, through the backend's own launch path). Else `submit_us`
    /// (launch on an empty queue to the host seeing it end) and `sync_us`
    /// (launch to the host's wait or poll returning), which each time a
    /// whole round trip of an empty, directly launched kernel: the larger
    /// is taken once, not their sum. That overstates it: on an H100 host,
    /// about 7.5 µs per operator beyond device time and copies against
    /// 9.8 µs for either benchmark, and 7.4–7.7 µs against 9.5 with the
    /// CUDA graph launch.
    pub fn alone_overhead_us(&self) -> f64 {
        if self.device_timed {
            self.op_overhead_us
                .unwrap_or_else(|| self.submit_us.max(self.sync_us))
                + self.alone_extra_us
        } else {
            0.0
        }
    }

    /// How much more a launch costs after a processor on host memory has
    /// run than alone (`launch_overhead_after_cpu` against the mean of the two
    /// waits' `op_overhead`, as it alternates them), µs; `None` where
    /// either was not measured. At least 0: a launch is not faster for
    /// following a CPU part.
    pub fn after_host_extra_us(&self) -> Option<f64> {
        let after = self.launch_overhead_after_cpu_us?;
        let poll = self.op_overhead_us?;
        let both = self
            .op_overhead_block_us
            .map_or(poll, |block| (poll + block) / 2.0);
        Some((after - both).max(0.0))
    }

    /// [`alone_overhead_us`](Self::alone_overhead_us) when the runtime
    /// waits by blocking: the blocking operator overhead where measured
    /// apart, else the same figure (older profiles measured both waits in
    /// one row), else the larger of submit and the blocking sync.
    pub fn alone_overhead_block_us(&self) -> f64 {
        if self.device_timed {
            self.op_overhead_block_us
                .or(self.op_overhead_us)
                .unwrap_or_else(|| self.submit_us.max(self.sync_block_us))
                + self.alone_extra_us
        } else {
            0.0
        }
    }

    /// Staging a run alone: the runtime keeps activations in host memory
    /// between operators, so a processor copies its input in and its output
    /// back even when it runs alone. Zero where no copy cost was measured
    /// (the solver notes that for a discrete processor).
    pub fn alone_copy_us(&self, elems_in: f64, elems_out: f64, order: OperandOrder) -> f64 {
        if !self.unified && self.copy_h2d.is_none() && self.stage_in.is_none() {
            0.0
        } else {
            self.copy_us(elems_in, elems_out, order)
        }
    }

    /// Moving `elems_in` activations to the processor and `elems_out`
    /// results back. They cross as f32 ([`HOST_BYTES`] each), the runtime's
    /// host format: a processor that computes in 16 bits converts on its
    /// side. The staged data path (`stage_in`/`stage_out`, measured through
    /// the backend's own calls) is used where the predictor has it, in the
    /// operand order the processor runs (an `aw` output may be transposed
    /// on the device), else the DMA copies. Sizes that cross inside the
    /// launch take their own lines (`stage_small`): host copies, whose DMA
    /// the latency model carries.
    ///
    /// On unified memory only the staged path counts: no DMA is needed, but
    /// runtime-min's backends still copy into their own buffers (and
    /// transpose for the operand order) where they measured that; a side
    /// without such a line costs nothing, as every unified side did before
    /// profiles measured it.
    pub fn copy_us(&self, elems_in: f64, elems_out: f64, order: OperandOrder) -> f64 {
        let (bytes_in, bytes_out) = (elems_in * HOST_BYTES, elems_out * HOST_BYTES);
        let (dma_in, dma_out, missing) = if self.unified {
            (None, None, 0.0)
        } else {
            (self.copy_h2d, self.copy_d2h.or(self.copy_h2d), INF)
        };
        let small = |bytes: f64| self.stage_small.filter(|s| bytes <= s.max_bytes as f64);
        let h2d = small(bytes_in)
            .and_then(|s| s.stage_in)
            .or(self.stage_in)
            .or(dma_in)
            .map(|c| c.at(bytes_in))
            .unwrap_or(missing);
        let (stage_out, stage_out_aw) = match small(bytes_out) {
            Some(s) if s.stage_out.or(s.stage_out_aw).is_some() => (s.stage_out, s.stage_out_aw),
            _ => (self.stage_out, self.stage_out_aw),
        };
        let staged_out = match order {
            OperandOrder::Aw => stage_out_aw.or(stage_out),
            OperandOrder::Transposed => stage_out.or(stage_out_aw),
        };
        let d2h = staged_out
            .or(dma_out)
            .map(|c| c.at(bytes_out))
            .unwrap_or(missing);
        h2d + d2h
    }
}

/// The graphs of one static-graph processor, for one phase.
#[derive(Debug, Clone, Default)]
pub(crate) struct StaticGraphs {
    pub p: usize,
    pub prefill: Vec<u32>,
    pub decode: Vec<u32>,
}

impl StaticGraphs {
    pub fn sizes(&self, phase: Phase) -> &[u32] {
        match phase {
            Phase::Prefill => &self.prefill,
            Phase::Decode => &self.decode,
        }
    }
}

/// What each of two processors that time-share the same host cores keeps
/// of its speed alone (both run all-core thread pools: on a 2-core x86-64
/// machine a split of cpu:0 and PoCL ran at 1.7-2.3x its prediction
/// without it; `docs/decisions.md`).
pub(crate) const CORE_SHARE: f64 = 0.5;

/// Device-level state shared by every operator.
#[derive(Clone)]
pub(crate) struct Setup<'a> {
    pub procs: Vec<Proc<'a>>,
    pub row_align: u32,
    pub graphs: Vec<StaticGraphs>,
    /// Offload mode: (cpu, gpu) indices, the strategy and the resident rows
    /// per operator and group of layers.
    pub offload: Option<OffloadSetup>,
    /// Every candidate is costed at every length
    /// ([`Settings::exhaustive`](crate::Settings::exhaustive), and always in
    /// offload mode); else lengths are solved in blocks
    /// (`solve::sampled`).
    pub exhaustive: bool,
}

impl Setup<'_> {
    /// The host copy of `bytes` that runtime-min makes when it scatters a
    /// part's rows of fewer than all the columns into the merged output
    /// (one thread, row by row, from the part's staging buffer): the
    /// fastest host-memory copy line among the CPU processors (their
    /// `copy_h2d` microbenchmark is such a copy), 0 without one. On an
    /// H100 host, offload mode copied 10.75 MB of scattered output at 300
    /// tokens in about 0.7 ms, which no term had before this one
    /// (`docs/benchmarks.md`, offload).
    pub fn scatter_us(&self, bytes: f64) -> f64 {
        self.procs
            .iter()
            .filter(|p| p.kind == ProcessorKind::Cpu)
            .filter_map(|p| p.copy_h2d.map(|c| c.at(bytes)))
            .min_by(f64::total_cmp)
            .unwrap_or(0.0)
    }
}

/// Offload mode's processors, the way of running the model, and the rows
/// each operator keeps resident on the GPU per group of layers.
#[derive(Debug, Clone)]
pub(crate) struct OffloadSetup {
    /// The CPU; `None` where the GPU runs alone (`gpu-stream`).
    pub cpu: Option<usize>,
    pub gpu: usize,
    /// The strategy the plan takes (never [`OffloadStrategy::Best`] once
    /// the solver has chosen).
    pub strategy: OffloadStrategy,
    /// Per operator, its groups of layers in order (an operator absent:
    /// one group, nothing resident).
    pub resident: HashMap<String, Vec<LayerGroup>>,
}

/// Layers `first..first + layers` of an operator, with `rows` of its output
/// rows resident on the GPU in each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct LayerGroup {
    pub first: u32,
    pub layers: u32,
    pub rows: u32,
}

/// The groups of `op` in `resident`, or one group of all its layers with
/// nothing resident.
pub(crate) fn groups_of(
    resident: &HashMap<String, Vec<LayerGroup>>,
    op: &LinearOp,
) -> Vec<LayerGroup> {
    match resident.get(&op.name) {
        Some(g) if !g.is_empty() => g.clone(),
        _ => vec![LayerGroup {
            first: 0,
            layers: op.layers,
            rows: 0,
        }],
    }
}

/// Which candidates a group of layers may take in offload mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum GroupMode {
    /// The CPU alone.
    Cpu,
    /// The GPU alone: resident rows, the rest copied every run (no CC rows).
    Gpu,
    /// Any: the CPU or the GPU alone, or a CC/CG/GG slicing.
    Any,
}

impl OffloadSetup {
    /// The groups of layers of `op`, in order.
    pub fn groups(&self, op: &LinearOp) -> Vec<LayerGroup> {
        groups_of(&self.resident, op)
    }

    /// The rows of `op` resident in its first layer.
    pub fn first_rows(&self, op: &str) -> u32 {
        self.resident
            .get(op)
            .and_then(|g| g.first())
            .map_or(0, |g| g.rows)
    }

    /// What a group with `rows` of `n` resident may run as under the
    /// strategy: `layer-split` runs a whole resident layer on the GPU
    /// alone and any other on the CPU alone.
    pub fn mode(&self, rows: u32, n: u32) -> GroupMode {
        match self.strategy {
            OffloadStrategy::Cpu => GroupMode::Cpu,
            OffloadStrategy::GpuStream => GroupMode::Gpu,
            OffloadStrategy::LayerSplit if rows >= n => GroupMode::Gpu,
            OffloadStrategy::LayerSplit => GroupMode::Cpu,
            OffloadStrategy::Sliced | OffloadStrategy::Best => GroupMode::Any,
        }
    }
}
