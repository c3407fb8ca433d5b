//! Processors as the solver sees them, per-operator prediction tables, and
//! candidate generation with the HeteroLLM cost model.

use std::collections::HashMap;

use hetero_plan::{
    DType, GemmShape, LinearCost, LinearOp, OperandOrder, Phase, ProcessorKind, RowPart, SeqPart,
    StageSmall, Strategy, StrategyKind,
};

use crate::oracle::GemmModel;

pub(crate) const INF: f64 = f64::INFINITY;

/// A vector of at most `N` items stored inline (candidates have at most
/// three parts; the hot loop makes millions of them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Small<T: Copy + Default, const N: usize> {
    len: u8,
    items: [T; N],
}

impl<T: Copy + Default, const N: usize> Small<T, N> {
    pub fn new() -> Self {
        Small {
            len: 0,
            items: [T::default(); N],
        }
    }

    pub fn from_slice(s: &[T]) -> Self {
        let mut v = Self::new();
        for &x in s {
            v.push(x);
        }
        v
    }

    pub fn push(&mut self, x: T) {
        assert!((self.len as usize) < N, "more than {N} parts");
        self.items[self.len as usize] = x;
        self.len += 1;
    }
}

impl<T: Copy + Default, const N: usize> std::ops::Deref for Small<T, N> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.items[..self.len as usize]
    }
}

impl<T: Copy + Default, const N: usize> std::ops::DerefMut for Small<T, N> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.items[..self.len as usize]
    }
}

/// Parts of a candidate: processor index and rows.
/// Bytes of one activation value in host memory: runtime-min keeps
/// activations as f32 between operators (the type of the agent's `Gemm`
/// interface), so every copy to and from a processor moves f32.
pub(crate) const HOST_BYTES: f64 = 4.0;

pub(crate) type RowParts = Small<(usize, u32), 3>;
/// Per-part times.
pub(crate) type Times = Small<f64, 3>;

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
    /// alternately (`op_overhead_after`), where measured.
    pub op_overhead_after_us: Option<f64>,
    /// Added to [`alone_overhead_us`](Self::alone_overhead_us) and its
    /// blocking twin: in offload mode, what `op_overhead_after` measured
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
    /// Can take part in a split (unified memory, or copy costs known).
    pub can_split: bool,
    /// Its latency model predicts device-timer times (kernel only): the
    /// host's submit and completion notice come on top even when it runs
    /// alone. Host-clock times (the cpu backend) include them already.
    pub device_timed: bool,
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
    /// What the host adds to one run of this processor alone, µs: for a
    /// device-timed processor, the launch and completion notice around its
    /// device time, else nothing. Measured as such where the predictor has
    /// `op_overhead` (submit to the wait's return less the run's device
    /// time, through the backend's own launch path). Else `submit_us`
    /// (launch on an empty queue to the host seeing it end) and `sync_us`
    /// (launch to the host's wait or poll returning), which each time a
    /// whole round trip of an empty, directly launched kernel: the larger
    /// is taken once, not their sum. That overstated it (H100, session 29:
    /// about 7.5 µs per operator beyond device time and copies, against
    /// 9.8 µs for either benchmark; with the CUDA graph launch of session
    /// 30, 7.4–7.7 µs against 9.5).
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
    /// run than alone (`op_overhead_after` against the mean of the two
    /// waits' `op_overhead`, as it alternates them), µs; `None` where
    /// either was not measured. At least 0: a launch is not faster for
    /// following a CPU part.
    pub fn after_host_extra_us(&self) -> Option<f64> {
        let after = self.op_overhead_after_us?;
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
            OperandOrder::WtAt => stage_out.or(stage_out_aw),
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
/// of its speed alone (both run all-core thread pools: on this project's
/// 2-core VM a split of cpu:0 and PoCL ran at 1.7-2.3x its prediction
/// without it; `docs/decisions.md`).
pub const CORE_SHARE: f64 = 0.5;

/// Device-level state shared by every operator.
#[derive(Clone)]
pub(crate) struct Setup<'a> {
    pub procs: Vec<Proc<'a>>,
    pub row_align: u32,
    pub graphs: Vec<StaticGraphs>,
    /// Offload mode: (cpu, gpu) indices and the resident rows per operator.
    pub offload: Option<OffloadSetup>,
}

impl Setup<'_> {
    /// The host copy of `bytes` that runtime-min makes when it scatters a
    /// part's rows of fewer than all the columns into the merged output
    /// (one thread, row by row, from the part's staging buffer): the
    /// fastest host-memory copy line among the CPU processors (their
    /// `copy_h2d` microbenchmark is such a copy), 0 without one. An H100
    /// host's offload replay copied 10.75 MB of scattered output at 300
    /// tokens in about 0.7 ms, which no term had (`docs/benchmarks.md`,
    /// Runtime, "Session 39").
    pub fn scatter_us(&self, bytes: f64) -> f64 {
        self.procs
            .iter()
            .filter(|p| p.kind == ProcessorKind::Cpu)
            .filter_map(|p| p.copy_h2d.map(|c| c.at(bytes)))
            .min_by(f64::total_cmp)
            .unwrap_or(0.0)
    }
}

#[derive(Debug, Clone)]
pub(crate) struct OffloadSetup {
    pub cpu: usize,
    pub gpu: usize,
    pub resident: HashMap<String, u32>,
}

/// A candidate's shape, with processor indices.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Shape {
    Single {
        p: usize,
        padded_to: Option<u32>,
        online: bool,
    },
    /// Output rows split; `graph`: the static part runs the prepared graph
    /// of this M (bigger than M: hybrid cutting).
    Rows {
        parts: RowParts,
        graph: Option<u32>,
    },
    /// Sequence split: `graphs` on static `s`, `rest` tokens on `d`.
    Seq {
        s: usize,
        graphs: Vec<u32>,
        d: Option<usize>,
        rest: u32,
    },
    Chunked {
        s: usize,
        chunk: u32,
        chunks: u32,
    },
    Offload {
        cpu: usize,
        gpu: usize,
        cc: u32,
        cg: u32,
        gg: u32,
        gpu_tokens: u32,
    },
}

pub(crate) type FamilyKey = (StrategyKind, Small<usize, 3>, u8);

/// A costed candidate. `parts` follow the processor order of the shape.
#[derive(Debug, Clone)]
pub(crate) struct Cand {
    pub shape: Shape,
    pub parts: Times,
    pub sync: f64,
    /// `sync` were the runtime to wait by blocking (`--sync block`).
    pub sync_block: f64,
    pub copy: f64,
    pub total: f64,
    /// How the sync was charged, for explanations.
    pub sync_rule: &'static str,
}

impl Cand {
    pub fn kind(&self, m: u32) -> StrategyKind {
        match &self.shape {
            Shape::Single { .. } => StrategyKind::Single,
            Shape::Rows { graph: Some(g), .. } if *g > m => StrategyKind::Hybrid,
            Shape::Rows { parts, .. } if parts.len() > 2 => StrategyKind::ThreeWay,
            Shape::Rows { .. } => StrategyKind::RowCut,
            Shape::Seq { graphs, .. } if graphs.len() > 1 => StrategyKind::MultiSeq,
            Shape::Seq { .. } => StrategyKind::SeqCut,
            Shape::Chunked { .. } => StrategyKind::Chunked,
            Shape::Offload { .. } => StrategyKind::Offload,
        }
    }

    /// Processor indices in part order.
    pub fn procs(&self) -> Small<usize, 3> {
        match &self.shape {
            Shape::Single { p, .. } => Small::from_slice(&[*p]),
            Shape::Rows { parts, .. } => {
                let mut v = Small::new();
                for x in parts.iter() {
                    v.push(x.0);
                }
                v
            }
            Shape::Seq { s, d, .. } => match d {
                Some(d) => Small::from_slice(&[*s, *d]),
                None => Small::from_slice(&[*s]),
            },
            Shape::Chunked { s, .. } => Small::from_slice(&[*s]),
            Shape::Offload { cpu, gpu, .. } => Small::from_slice(&[*cpu, *gpu]),
        }
    }

    /// Candidates of one family compete; the runner-up is the best of
    /// another family.
    pub fn family(&self, m: u32) -> FamilyKey {
        let mut p = self.procs();
        p.sort_unstable();
        // Online prepare and ScheInfer's token assignment are families of
        // their own.
        let variant = match self.shape {
            Shape::Single { online: true, .. } => 1,
            Shape::Offload { gpu_tokens, .. } if gpu_tokens > 0 => 1,
            _ => 0,
        };
        (self.kind(m), p, variant)
    }

    /// The plan strategy for rows `m` (a padded row cut is a hybrid).
    pub fn strategy(&self, procs: &[Proc], m: u32) -> Strategy {
        let id = |p: usize| procs[p].id.clone();
        match &self.shape {
            Shape::Single {
                p,
                padded_to,
                online,
            } => Strategy::Single {
                processor: id(*p),
                padded_to: *padded_to,
                online_prepare: *online,
            },
            Shape::Rows { parts, graph } => {
                let rows: Vec<RowPart> = parts
                    .iter()
                    .map(|&(p, rows)| RowPart {
                        processor: id(p),
                        rows,
                        graph: if procs[p].static_graphs { *graph } else { None },
                    })
                    .collect();
                match graph {
                    Some(g) if *g > m => Strategy::Hybrid {
                        padded_to: *g,
                        parts: rows,
                    },
                    _ => Strategy::RowCut { parts: rows },
                }
            }
            Shape::Seq { s, graphs, d, rest } => {
                let mut parts = vec![SeqPart {
                    processor: id(*s),
                    tokens: graphs.iter().sum(),
                    graphs: graphs.clone(),
                }];
                if let Some(d) = d {
                    parts.push(SeqPart {
                        processor: id(*d),
                        tokens: *rest,
                        graphs: vec![],
                    });
                }
                Strategy::SeqCut { parts }
            }
            Shape::Chunked { s, chunk, chunks } => Strategy::Chunked {
                processor: id(*s),
                chunk: *chunk,
                chunks: *chunks,
            },
            Shape::Offload {
                cpu,
                gpu,
                cc,
                cg,
                gg,
                gpu_tokens,
            } => Strategy::Offload {
                cpu: id(*cpu),
                gpu: id(*gpu),
                cc_rows: *cc,
                cg_rows: *cg,
                gg_rows: *gg,
                gpu_tokens: *gpu_tokens,
            },
        }
    }

    /// The candidate in words.
    pub fn label(&self, procs: &[Proc], m: u32) -> String {
        let id = |p: usize| procs[p].id.as_str();
        match &self.shape {
            Shape::Single {
                p,
                padded_to: Some(g),
                ..
            } if *g > m => format!("{} padded to {g}", id(*p)),
            Shape::Single {
                p,
                padded_to: Some(g),
                ..
            } => format!("{} graph {g}", id(*p)),
            Shape::Single {
                p, online: true, ..
            } => {
                format!("{} online prepare of M={m}", id(*p))
            }
            Shape::Single { p, .. } => format!("{} alone", id(*p)),
            Shape::Rows { parts, graph } => {
                let list: Vec<String> = parts
                    .iter()
                    .map(|&(p, r)| format!("{} {r}", id(p)))
                    .collect();
                match graph {
                    Some(g) if *g > m => format!("rows {} (padded to {g})", list.join(" / ")),
                    _ => format!("rows {}", list.join(" / ")),
                }
            }
            Shape::Seq { s, graphs, d, rest } => {
                let g: Vec<String> = graphs.iter().map(u32::to_string).collect();
                match d {
                    Some(d) => format!("tokens {} [{}] + {} {rest}", id(*s), g.join("+"), id(*d)),
                    None => format!("tokens {} [{}]", id(*s), g.join("+")),
                }
            }
            Shape::Chunked { s, chunk, chunks } => {
                format!("{} {chunks} chunks of {chunk}", id(*s))
            }
            Shape::Offload {
                cc,
                cg,
                gg,
                gpu_tokens,
                gpu,
                ..
            } => {
                if *gpu_tokens > 0 {
                    format!(
                        "offload cc {cc} / cg {cg} / gg {gg} rows (decode slicing), {gpu_tokens} tokens of cc on {}",
                        id(*gpu)
                    )
                } else {
                    format!("offload cc {cc} / cg {cg} / gg {gg} rows")
                }
            }
        }
    }

    pub fn scale(mut self, by: f64) -> Cand {
        if by != 1.0 {
            for p in self.parts.iter_mut() {
                *p *= by;
            }
            self.sync *= by;
            self.sync_block *= by;
            self.copy *= by;
            self.total *= by;
        }
        self
    }
}

/// The row share prepared at each size, sorted by size: `(size, rows, the
/// static part's time at that share)`.
#[derive(Debug, Clone, Default)]
pub(crate) struct RowShares(pub Vec<(u32, u32, f64)>);

impl RowShares {
    pub fn get(&self, size: u32) -> Option<(u32, f64)> {
        self.0
            .binary_search_by_key(&size, |x| x.0)
            .ok()
            .map(|i| (self.0[i].1, self.0[i].2))
    }
}

/// The best total among families other than the best candidate's.
fn second_family_best(cands: &[Cand], m: u32) -> f64 {
    let Some(best) = cands.iter().min_by(|a, b| a.total.total_cmp(&b.total)) else {
        return INF;
    };
    let fam = best.family(m);
    cands
        .iter()
        .filter(|c| c.family(m) != fam)
        .map(|c| c.total)
        .fold(INF, f64::min)
}

/// Per-static-processor state of one operator.
pub(crate) struct StaticCtx {
    pub p: usize,
    /// Prepared sizes (M), increasing.
    pub sizes: Vec<u32>,
    /// `exact[t]`: least time to run exactly `t` tokens as prepared graphs
    /// one after the other (INF when no combination adds up to `t`).
    pub exact: Vec<f64>,
    /// The last graph of that combination.
    pub back: Vec<u32>,
    /// Values of `t` with a finite `exact[t]`, increasing.
    pub reach: Vec<u32>,
    /// The row share prepared at each size (when a row cut can use it) and
    /// the static part's time at that share.
    pub row_share: RowShares,
}

impl StaticCtx {
    pub fn smallest_ge(&self, m: u32) -> Option<u32> {
        let i = self.sizes.partition_point(|&g| g < m);
        self.sizes.get(i).copied()
    }

    pub fn has(&self, m: u32) -> bool {
        self.sizes.binary_search(&m).is_ok()
    }

    pub fn graphs_for(&self, mut t: u32) -> Vec<u32> {
        let mut v = vec![];
        while t > 0 {
            let g = self.back[t as usize];
            v.push(g);
            t -= g;
        }
        v.sort_unstable_by(|a, b| b.cmp(a));
        v
    }
}

/// Predictions of one operator in one phase, shared by the graph-set choice,
/// the solve and explanations.
pub(crate) struct Tables {
    /// Operand order per processor.
    pub orders: Vec<OperandOrder>,
    /// `full[p][m]`: time of the whole operator (all N) at M = m.
    pub full: Vec<Vec<f64>>,
}

impl Tables {
    /// Predicts M = 1..=`top` on every processor (in parallel). The orders
    /// are chosen over lengths up to `max_m` unless given.
    ///
    /// With `static_m`, static-graph processors are predicted only at those
    /// M (their graph sizes); other entries are NaN and predicted on demand.
    pub fn new(
        setup: &Setup,
        op: &LinearOp,
        phase: Phase,
        top: u32,
        max_m: u32,
        orders: Option<Vec<OperandOrder>>,
        static_m: Option<&[u32]>,
    ) -> Tables {
        use rayon::prelude::*;
        let (k, n) = (op.k, op.n);
        let orders: Vec<OperandOrder> = orders.unwrap_or_else(|| {
            setup
                .procs
                .iter()
                .map(|p| choose_order(p, k, n, phase, max_m))
                .collect()
        });
        let full = setup
            .procs
            .iter()
            .zip(&orders)
            .map(|(p, &o)| match static_m {
                Some(ms) if p.static_graphs => {
                    let mut v = vec![f64::NAN; top.max(1) as usize + 1];
                    for &m in ms {
                        if let Some(slot) = v.get_mut(m as usize) {
                            *slot = predict(p, m, k, n, o);
                        }
                    }
                    v
                }
                _ => std::iter::once(INF)
                    .chain(
                        (1..=top.max(1))
                            .into_par_iter()
                            .map(|m| predict(p, m, k, n, o))
                            .collect::<Vec<f64>>(),
                    )
                    .collect(),
            })
            .collect();
        Tables { orders, full }
    }
}

/// The table size an operator needs: every M it sees and every graph size.
pub(crate) fn table_top(setup: &Setup, phase: Phase, max_m: u32) -> u32 {
    let max_g = setup
        .graphs
        .iter()
        .flat_map(|g| g.sizes(phase).iter().copied())
        .max()
        .unwrap_or(0);
    max_m.max(max_g).max(1)
}

/// One operator in one phase: prediction tables and candidate generation.
pub(crate) struct OpCtx<'s, 'a> {
    pub setup: &'s Setup<'a>,
    pub op: &'s LinearOp,
    pub phase: Phase,
    pub k: u32,
    pub n: u32,
    pub tables: std::sync::Arc<Tables>,
    pub statics: Vec<StaticCtx>,
    /// Offload mode: rows resident on the GPU.
    pub resident: Option<u32>,
    /// Offload mode: the CC rows of the one-token decode slicing.
    pub decode_cc: std::sync::OnceLock<Option<u32>>,
    /// Skip candidates that can be neither winner nor runner-up (off when
    /// explaining, which lists every family).
    pub prune: bool,
}

/// The candidates of one cell.
pub(crate) struct Cell {
    pub m: u32,
    pub instances: u32,
    /// Best candidate per family, cheapest first.
    pub cands: Vec<Cand>,
}

impl<'s, 'a> OpCtx<'s, 'a> {
    /// Builds the tables up to M = `max_m` (and every graph size).
    pub fn new(setup: &'s Setup<'a>, op: &'s LinearOp, phase: Phase, max_m: u32) -> Self {
        let top = table_top(setup, phase, max_m);
        let t = Tables::new(setup, op, phase, top, max_m, None, None);
        Self::with_tables(setup, op, phase, std::sync::Arc::new(t))
    }

    /// Builds the context on tables made earlier.
    pub fn with_tables(
        setup: &'s Setup<'a>,
        op: &'s LinearOp,
        phase: Phase,
        tables: std::sync::Arc<Tables>,
    ) -> Self {
        let mut cx = OpCtx {
            setup,
            op,
            phase,
            k: op.k,
            n: op.n,
            tables,
            statics: vec![],
            resident: setup
                .offload
                .as_ref()
                .map(|o| o.resident.get(&op.name).copied().unwrap_or(0)),
            prune: true,
            decode_cc: std::sync::OnceLock::new(),
        };
        if setup.offload.is_none() {
            for g in &setup.graphs {
                let sizes = if last_token_only(op, phase) {
                    vec![1]
                } else {
                    g.sizes(phase).to_vec()
                };
                let top = cx
                    .tables
                    .full
                    .first()
                    .map_or(1, |v| v.len() - 1)
                    .max(sizes.last().copied().unwrap_or(0) as usize);
                let st = cx.static_ctx(g.p, sizes, top);
                cx.statics.push(st);
            }
        }
        cx
    }

    /// The operand order of processor `p`.
    pub fn order(&self, p: usize) -> OperandOrder {
        self.tables.orders[p]
    }

    /// Time of the whole operator at M = m on `p` (from the table when it
    /// covers `m`).
    pub fn full(&self, p: usize, m: u32) -> f64 {
        match self.tables.full[p].get(m as usize) {
            Some(t) if !t.is_nan() => *t,
            _ => predict(&self.setup.procs[p], m, self.k, self.n, self.order(p)),
        }
    }

    fn static_ctx(&self, p: usize, sizes: Vec<u32>, top: usize) -> StaticCtx {
        let mut exact = vec![INF; top + 1];
        let mut back = vec![0u32; top + 1];
        exact[0] = 0.0;
        // Larger graphs first: on ties, fewer graphs.
        let graph_us: Vec<(usize, u32, f64)> = sizes
            .iter()
            .rev()
            .map(|&g| (g as usize, g, self.full(p, g)))
            .collect();
        for t in 1..=top {
            for &(gu, g, tg) in &graph_us {
                if gu <= t && exact[t - gu].is_finite() {
                    let c = exact[t - gu] + tg;
                    if c < exact[t] {
                        exact[t] = c;
                        back[t] = g;
                    }
                }
            }
        }
        let reach = (1..=top as u32)
            .filter(|&t| exact[t as usize].is_finite())
            .collect();
        let mut st = StaticCtx {
            p,
            sizes: sizes.clone(),
            exact,
            back,
            reach,
            row_share: RowShares::default(),
        };
        // A row-share graph is prepared only where a row cut beats the
        // static processor alone at that very size.
        for &g in &sizes {
            if let Some(c) = self.best_free_rows(p, g)
                && c.total < self.full(p, g)
            {
                let (_, rows) = match &c.shape {
                    Shape::Rows { parts, .. } => *parts.iter().find(|x| x.0 == p).unwrap(),
                    _ => unreachable!(),
                };
                st.row_share.0.push((g, rows, self.time(p, g, rows)));
            }
        }
        st
    }

    /// The share of its speed alone that `p` keeps while it runs a part of
    /// a split beside the processors in `with`. Two processors on the same
    /// host cores (a cpu-backend group and an OpenCL CPU device such as
    /// PoCL, which takes every core) time-share them: at most
    /// [`CORE_SHARE`] each, in every phase. Otherwise the parts share
    /// memory bandwidth, which matters in decode: the measured concurrent
    /// factor there, 1 in prefill. A discrete GPU's resident weights are in
    /// memory of its own, which no other processor reads: 1. Its measured
    /// factor is about its weight copies from host memory
    /// (`bandwidth_concurrent`), which offload's CG rows make
    /// ([`crate::offload::beside_each_other`]).
    pub fn contention(&self, p: usize, with: impl IntoIterator<Item = usize>) -> f64 {
        let procs = &self.setup.procs;
        let cpu = |q: usize| procs[q].kind == ProcessorKind::Cpu;
        let mut others: Small<usize, 8> = Small::new();
        for q in with.into_iter().filter(|&q| q != p) {
            others.push(q);
        }
        let shares_cores = cpu(p)
            && others
                .iter()
                .any(|&q| cpu(q) && (procs[p].on_all_host_cores || procs[q].on_all_host_cores));
        if shares_cores {
            procs[p].concurrent.min(CORE_SHARE)
        } else if self.phase == Phase::Decode
            && !procs[p].discrete_gpu()
            && !(procs[p].host_memory() && others.iter().all(|&q| procs[q].discrete_gpu()))
        {
            procs[p].concurrent
        } else {
            // Beside discrete GPUs whose weights are resident, a processor
            // on host memory shares no bandwidth: its measured factor is
            // about those GPUs copying from host memory
            // (`bandwidth_concurrent`), which only offload's CG rows do.
            1.0
        }
    }

    /// Time of M = m over `rows` output rows on processor `p`, µs.
    pub fn time(&self, p: usize, m: u32, rows: u32) -> f64 {
        if rows == self.n {
            return self.full(p, m);
        }
        predict(&self.setup.procs[p], m, self.k, rows, self.order(p))
    }

    pub fn dynamic(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.setup.procs.len()).filter(|&p| !self.setup.procs[p].static_graphs)
    }

    fn splittable(&self, p: usize) -> bool {
        self.setup.procs[p].can_split
    }

    /// Row alignment for this operator (halved until two parts fit).
    pub fn align(&self) -> u32 {
        let mut a = self.setup.row_align.max(1);
        while a > 1 && self.n < 2 * a {
            a /= 2;
        }
        a
    }

    /// Assembles a candidate: `max(parts) + sync + copy`, with each part of
    /// a split slowed by its [`contention`](Self::contention).
    pub fn finish(&self, shape: Shape, raw: &[(usize, f64)], copy: f64) -> Cand {
        let procs = &self.setup.procs;
        let split = raw.len() > 1;
        let mut parts = Times::new();
        for &(p, t) in raw {
            parts.push(if split {
                t / self.contention(p, raw.iter().map(|&(q, _)| q))
            } else {
                t
            });
        }
        let ((sync, sync_block), rule) = if split {
            let dom = (0..parts.len())
                .max_by(|&a, &b| parts[a].total_cmp(&parts[b]))
                .unwrap();
            let dp = &procs[raw[dom].0];
            let submits: f64 = raw
                .iter()
                .enumerate()
                .filter(|&(i, &(p, _))| i != dom && procs[p].queue)
                .map(|(_, &(p, _))| procs[p].submit_us)
                .sum();
            let rule = if submits > 0.0 {
                "sync on the dominant side + resubmission of the queued side"
            } else if dp.queue {
                "queue-dominant: sync on it, no resubmission"
            } else {
                "sync on the dominant side"
            };
            ((dp.sync_us + submits, dp.sync_block_us + submits), rule)
        } else {
            ((0.0, 0.0), "")
        };
        let max = parts.iter().cloned().fold(0.0, f64::max);
        Cand {
            shape,
            total: max + sync + copy,
            parts,
            sync,
            sync_block,
            copy,
            sync_rule: rule,
        }
    }

    /// One dynamic processor alone: its GEMM, plus what runtime-min adds
    /// around it (see [`Proc::alone_overhead_us`] and
    /// [`Proc::alone_copy_us`]).
    pub(crate) fn single(&self, p: usize, m: u32) -> Cand {
        let pr = &self.setup.procs[p];
        let copy = pr.alone_copy_us(
            m as f64 * self.k as f64,
            m as f64 * self.n as f64,
            self.order(p),
        );
        let mut c = self.finish(
            Shape::Single {
                p,
                padded_to: None,
                online: false,
            },
            &[(p, self.time(p, m, self.n))],
            copy,
        );
        let host = pr.alone_overhead_us();
        if host > 0.0 {
            c.sync = host;
            c.sync_block = pr.alone_overhead_block_us();
            c.total += host;
            c.sync_rule = "alone on a device-timed processor: one launch-to-completion round trip";
        }
        c
    }

    fn rows_copy(&self, m: u32, parts: &[(usize, u32)]) -> f64 {
        parts.iter().map(|&(p, r)| self.part_copy_us(p, m, r)).sum()
    }

    /// Processor `p`'s copies for a part of `rows` input rows and `cols`
    /// output columns, in the operand order it runs ([`Proc::copy_us`]),
    /// and, for a part of fewer than all the columns, the host copy that
    /// scatters its rows into the merged output ([`Setup::scatter_us`]).
    pub(crate) fn part_copy_us(&self, p: usize, rows: u32, cols: u32) -> f64 {
        let out = rows as f64 * cols as f64;
        let scatter = if cols < self.n {
            self.setup.scatter_us(out * HOST_BYTES)
        } else {
            0.0
        };
        self.setup.procs[p].copy_us(rows as f64 * self.k as f64, out, self.order(p)) + scatter
    }

    /// A row split costed from its parts' predicted times; the static part
    /// runs at M = `graph` when given.
    fn rows_cand_t(
        &self,
        m: u32,
        parts: &[(usize, u32)],
        times: &[f64],
        graph: Option<u32>,
    ) -> Cand {
        let procs = &self.setup.procs;
        let mut raw: Small<(usize, f64), 3> = Small::new();
        for (&(p, _), &t) in parts.iter().zip(times) {
            raw.push((p, t));
        }
        let copy = self.rows_copy(m, parts);
        self.finish(
            Shape::Rows {
                parts: RowParts::from_slice(parts),
                graph: graph.or_else(|| {
                    parts
                        .iter()
                        .any(|&(p, _)| procs[p].static_graphs)
                        .then_some(m)
                }),
            },
            &raw,
            copy,
        )
    }

    /// Two-way row cut of `total` rows between `a` (gets multiples of the
    /// alignment) and `b`, next to `fixed` parts. A search for where the
    /// two sides cross (the first cut at which `a` is no faster than `b`),
    /// started at the proportional share, then the neighbouring cut points.
    fn row2(
        &self,
        m: u32,
        a: usize,
        b: usize,
        total: u32,
        fixed: &[(usize, u32)],
        graph: Option<u32>,
    ) -> Option<Cand> {
        let align = self.align();
        let j_max = (total.checked_sub(1)?) / align;
        if j_max == 0 {
            return None;
        }
        let procs = &self.setup.procs;
        let gm = |p: usize| {
            if procs[p].static_graphs {
                graph.unwrap_or(m)
            } else {
                m
            }
        };
        let f = |p: usize| self.contention(p, fixed.iter().map(|&(q, _)| q).chain([a, b]));
        let raw_a = |j: u32| self.time(a, gm(a), j * align);
        let raw_b = |j: u32| self.time(b, gm(b), total - j * align);
        // Smallest j with ta(j) >= tb(j); the cost is least at it or just
        // below it (each side's time grows with its rows).
        let mut seen: Vec<(u32, f64, f64)> = Vec::with_capacity(12);
        let mut eval = |j: u32| -> (f64, f64) {
            if let Some(&(_, x, y)) = seen.iter().find(|e| e.0 == j) {
                return (x, y);
            }
            let (x, y) = (raw_a(j), raw_b(j));
            seen.push((j, x, y));
            (x, y)
        };
        let mut crossed = |j: u32| {
            let (x, y) = eval(j);
            x / f(a) >= y / f(b)
        };
        // The first probe is where the two sides would cross if each
        // scaled linearly with its rows from its whole-operator time (a
        // table lookup): usually two probes in all, against log2(j_max)
        // bisecting from the middle.
        let (ra, rb) = (
            self.time(a, gm(a), self.n) / f(a),
            self.time(b, gm(b), self.n) / f(b),
        );
        let guess = total as f64 * rb / (ra + rb) / align as f64;
        let j0 = if guess.is_finite() {
            guess.round() as u32
        } else {
            j_max.div_ceil(2)
        };
        let lo = first_crossing(j0, j_max, &mut crossed);
        let mut best: Option<Cand> = None;
        for j in lo.saturating_sub(1).max(1)..=lo.min(j_max) {
            let (x, y) = eval(j);
            let mut parts = RowParts::from_slice(fixed);
            parts.push((a, j * align));
            parts.push((b, total - j * align));
            let mut times = Times::new();
            for &(p, r) in fixed {
                times.push(self.time(p, gm(p), r));
            }
            times.push(x);
            times.push(y);
            let c = self.rows_cand_t(m, &parts, &times, graph);
            if best.as_ref().is_none_or(|b| c.total < b.total) {
                best = Some(c);
            }
        }
        best
    }

    /// Three-way row cut: shares proportional to speed, rebalanced on the
    /// measured throughput of each share, then single alignment steps from
    /// the slowest part while its time drops. Parts 0 and 1 hold multiples
    /// of the alignment, part 2 the rest.
    fn row3(&self, m: u32, ps: [usize; 3], graph: Option<u32>) -> Option<Cand> {
        let align = self.align();
        let n = self.n;
        if n < 3 * align {
            return None;
        }
        let procs = &self.setup.procs;
        let gm = |p: usize| {
            if procs[p].static_graphs {
                graph.unwrap_or(m)
            } else {
                m
            }
        };
        let f = |p: usize| self.contention(p, ps);
        let mut cache: Vec<(usize, u32, f64)> = Vec::with_capacity(48);
        let mut raw = |i: usize, r: u32| -> f64 {
            if let Some(&(_, _, t)) = cache.iter().find(|c| c.0 == i && c.1 == r) {
                return t;
            }
            let t = self.time(ps[i], gm(ps[i]), r);
            cache.push((i, r, t));
            t
        };
        let fix = |w: [f64; 3]| -> Option<[u32; 3]> {
            let sum: f64 = w.iter().sum();
            if !(sum.is_finite() && sum > 0.0) {
                return None;
            }
            let share = |x: f64| (n as f64 * x / sum / align as f64).round() as u32 * align;
            let r0 = share(w[0]).clamp(align, n - 2 * align);
            let r1 = share(w[1]).clamp(align, (n - r0 - 1) / align * align);
            Some([r0, r1, n - r0 - r1])
        };
        let full: [f64; 3] = std::array::from_fn(|i| self.time(ps[i], gm(ps[i]), n));
        let mut rows = fix(full.map(|t| 1.0 / t))?;
        for _ in 0..4 {
            let w: [f64; 3] = std::array::from_fn(|i| rows[i] as f64 / raw(i, rows[i]));
            match fix(w) {
                Some(next) if next != rows => rows = next,
                _ => break,
            }
        }
        for _ in 0..16 {
            let t: [f64; 3] = std::array::from_fn(|i| raw(i, rows[i]) / f(ps[i]));
            let slow = (0..3)
                .max_by(|&a, &b| t[a].total_cmp(&t[b]))
                .expect("3 parts");
            let mut best: Option<([u32; 3], f64)> = None;
            for o in (0..3).filter(|&o| o != slow) {
                // One step from `slow` to `o`; part 2 takes the rest.
                let mut r = rows;
                if slow != 2 {
                    if r[slow] < 2 * align {
                        continue;
                    }
                    r[slow] -= align;
                }
                if o != 2 {
                    r[o] += align;
                }
                if r[0] + r[1] >= n {
                    continue;
                }
                r[2] = n - r[0] - r[1];
                let max = (0..3).map(|i| raw(i, r[i]) / f(ps[i])).fold(0.0, f64::max);
                if max < best.map_or(t[slow], |b| b.1) {
                    best = Some((r, max));
                }
            }
            match best {
                Some((r, _)) => rows = r,
                None => break,
            }
        }
        let mut parts = RowParts::new();
        let mut times = Times::new();
        for i in 0..3 {
            parts.push((ps[i], rows[i]));
            times.push(raw(i, rows[i]));
        }
        Some(self.rows_cand_t(m, &parts, &times, graph))
    }

    /// A lower bound on any row split among `ps` (processor, its M): every
    /// part gets at least the smallest share a cut can give, and no part is
    /// faster with more rows.
    fn split_bound(&self, ps: &[(usize, u32)]) -> f64 {
        let rmin = self.rmin();
        ps.iter()
            .map(|&(p, gm)| self.time(p, gm, rmin))
            .fold(0.0, f64::max)
            + self.split_overhead_floor(ps)
    }

    /// The fewest rows a part of a row cut can get.
    fn rmin(&self) -> u32 {
        (self.n - 1) % self.align() + 1
    }

    /// What a row split among `ps` (processor, its M) pays at least beyond
    /// its slowest part: the cheapest of their syncs, and each part's
    /// copies at the cheaper end of the shares it can get (a copy's cost is
    /// linear in the rows).
    fn split_overhead_floor(&self, ps: &[(usize, u32)]) -> f64 {
        let procs = &self.setup.procs;
        let sync = ps
            .iter()
            .map(|&(p, _)| procs[p].sync_us)
            .fold(INF, f64::min);
        let copy: f64 = ps.iter().map(|&(p, m)| self.copy_floor(p, m)).sum();
        sync + copy
    }

    /// The least copy cost of a part on `p` at M = `m`, over its shares.
    fn copy_floor(&self, p: usize, m: u32) -> f64 {
        self.part_copy_us(p, m, self.rmin())
            .min(self.part_copy_us(p, m, self.n))
    }

    /// The best row split with the static processor `s` free to take any
    /// share at M = `g` (a prepared size): two-way with each dynamic
    /// partner, three-way with each pair.
    pub fn best_free_rows(&self, s: usize, g: u32) -> Option<Cand> {
        let limit = if self.prune { self.full(s, g) } else { INF };
        self.free_rows_with(s, g, limit)
            .into_iter()
            .min_by(|a, b| a.total.total_cmp(&b.total))
    }

    /// Row splits of the static processor `s` at M = `g`, skipping those
    /// whose lower bound is at least `limit`.
    fn free_rows_with(&self, s: usize, g: u32, limit: f64) -> Vec<Cand> {
        let dy: Vec<usize> = self.dynamic().filter(|&d| self.splittable(d)).collect();
        let mut out = vec![];
        for &d in &dy {
            if self.split_bound(&[(s, g), (d, g)]) < limit {
                out.extend(self.row2(g, s, d, self.n, &[], Some(g)));
            }
        }
        for (i, &d1) in dy.iter().enumerate() {
            for &d2 in &dy[i + 1..] {
                if self.split_bound(&[(s, g), (d1, g), (d2, g)]) < limit {
                    out.extend(self.row3(g, [s, d1, d2], Some(g)));
                }
            }
        }
        out
    }

    /// Every candidate family at one length, best of each family first.
    pub fn cell(&self, len: u32) -> Cell {
        let (m, instances) = self.rows(len);
        self.cell_at(m, instances)
    }

    /// Rows per instance and instances at a length.
    pub fn rows(&self, len: u32) -> (u32, u32) {
        let (shape, instances) = self
            .op
            .gemms(self.phase, len)
            .expect("operator dimensions are positive");
        (shape.m.get(), instances)
    }

    /// The cell of `instances` GEMMs of M = `m` (lengths with the same rows
    /// share it: the lm_head in prefill, routed experts).
    pub fn cell_at(&self, m: u32, instances: u32) -> Cell {
        let mut cands = if self.setup.offload.is_some() {
            self.offload_cands(m)
        } else {
            self.cands(m)
        };
        cands.retain(|c| c.total.is_finite());
        let mut best: Vec<(FamilyKey, Cand)> = Vec::with_capacity(cands.len());
        for c in cands {
            let key = c.family(m);
            match best.iter_mut().find(|(k, _)| *k == key) {
                Some((_, b)) if b.total <= c.total => {}
                Some((_, b)) => *b = c,
                None => best.push((key, c)),
            }
        }
        let mut cands: Vec<Cand> = best
            .into_iter()
            .map(|(_, c)| c.scale(instances as f64))
            .collect();
        // Ties are broken by family, so the order never depends on hashing.
        let key = |c: &Cand| {
            let (kind, procs, variant) = c.family(m);
            (kind as u8, procs, variant)
        };
        cands.sort_by(|a, b| {
            a.total
                .total_cmp(&b.total)
                .then_with(|| key(a).cmp(&key(b)))
        });
        Cell {
            m,
            instances,
            cands,
        }
    }

    /// Candidates on dynamic processors only: each alone, row cuts between
    /// two, and three-way row cuts.
    pub fn dyn_cands(&self, m: u32) -> Vec<Cand> {
        let mut out = vec![];
        for p in self.dynamic() {
            out.push(self.single(p, m));
        }
        // Splits that can be neither the winner nor the runner-up (their
        // lower bound is no better than a second family's best) are skipped.
        let dy_split: Vec<usize> = self.dynamic().filter(|&d| self.splittable(d)).collect();
        if dy_split.len() < 2 {
            return out;
        }
        // Each processor's time on the smallest share and its least copy
        // cost, once per cell.
        let rmin = self.rmin();
        let (tmin, copy): (Vec<f64>, Vec<f64>) = (0..self.setup.procs.len())
            .map(|p| {
                if self.prune && dy_split.contains(&p) {
                    (self.time(p, m, rmin), self.copy_floor(p, m))
                } else {
                    (0.0, 0.0)
                }
            })
            .unzip();
        let procs = &self.setup.procs;
        let hopeless = |out: &[Cand], ps: &[(usize, u32)]| {
            let slowest = ps.iter().map(|&(p, _)| tmin[p]).fold(0.0, f64::max);
            let sync = ps
                .iter()
                .map(|&(p, _)| procs[p].sync_us)
                .fold(INF, f64::min);
            let copies: f64 = ps.iter().map(|&(p, _)| copy[p]).sum();
            self.prune && slowest + sync + copies >= second_family_best(out, m)
        };
        for (i, &a) in dy_split.iter().enumerate() {
            for &b in &dy_split[i + 1..] {
                if !hopeless(&out, &[(a, m), (b, m)]) {
                    out.extend(self.row2(m, a, b, self.n, &[], None));
                }
            }
        }
        for (i, &a) in dy_split.iter().enumerate() {
            for (j, &b) in dy_split.iter().enumerate().skip(i + 1) {
                for &c in &dy_split[j + 1..] {
                    if !hopeless(&out, &[(a, m), (b, m), (c, m)]) {
                        out.extend(self.row3(m, [a, b, c], None));
                    }
                }
            }
        }
        out
    }

    /// The cheapest use of one prepared size `c` at M = `m` (padding,
    /// one-graph sequence cut, chunks, hybrid), as the graph-set choice
    /// estimates it. INF when `c` cannot serve `m`.
    pub fn static_term(&self, st: &StaticCtx, c: u32, m: u32, hybrid: bool) -> f64 {
        let s = st.p;
        let t_c = self.full(s, c);
        let mut best = INF;
        if c >= m {
            best = best.min(t_c);
            if hybrid
                && self.setup.procs[s].can_split
                && let Some((r, t_r)) = st.row_share.get(c)
            {
                for d in self.dynamic().filter(|&d| self.splittable(d)) {
                    let raw = [(s, t_r), (d, self.time(d, m, self.n - r))];
                    let copy = self.rows_copy(m, &[(s, r), (d, self.n - r)]);
                    let cand = self.finish(
                        Shape::Rows {
                            parts: Small::new(),
                            graph: Some(c),
                        },
                        &raw,
                        copy,
                    );
                    best = best.min(cand.total);
                }
            }
        } else {
            best = best.min(m.div_ceil(c) as f64 * t_c);
            if self.setup.procs[s].can_split {
                let rest = m - c;
                for d in self.dynamic().filter(|&d| self.splittable(d)) {
                    let copy = self.part_copy_us(d, rest, self.n);
                    let cand = self.finish(
                        Shape::Chunked {
                            s,
                            chunk: c,
                            chunks: 1,
                        },
                        &[(s, t_c), (d, self.time(d, rest, self.n))],
                        copy,
                    );
                    best = best.min(cand.total);
                }
            }
        }
        if m == c {
            best = best.min(t_c);
        }
        best
    }

    fn cands(&self, m: u32) -> Vec<Cand> {
        let procs = &self.setup.procs;
        let mut out = self.dyn_cands(m);
        let dy_split: Vec<usize> = self.dynamic().filter(|&d| self.splittable(d)).collect();
        for st in &self.statics {
            let s = st.p;
            let sp = &procs[s];
            if let Some(g) = st.smallest_ge(m) {
                out.push(self.finish(
                    Shape::Single {
                        p: s,
                        padded_to: Some(g),
                        online: false,
                    },
                    &[(s, self.full(s, g))],
                    0.0,
                ));
            }
            for &c in st.sizes.iter().filter(|&&c| c < m) {
                let chunks = m.div_ceil(c);
                out.push(self.finish(
                    Shape::Chunked {
                        s,
                        chunk: c,
                        chunks,
                    },
                    &[(s, chunks as f64 * self.full(s, c))],
                    0.0,
                ));
            }
            // The static processor alone on an exact combination of graphs.
            if (m as usize) < st.exact.len() && st.exact[m as usize].is_finite() {
                let graphs = st.graphs_for(m);
                if graphs.len() > 1 {
                    out.push(self.finish(
                        Shape::Seq {
                            s,
                            graphs,
                            d: None,
                            rest: 0,
                        },
                        &[(s, st.exact[m as usize])],
                        0.0,
                    ));
                }
            }
            if !sp.can_split {
                continue;
            }
            for &d in &dy_split {
                out.extend(self.seq_cut(st, d, m));
            }
            if st.has(m) {
                let limit = if self.prune {
                    second_family_best(&out, m)
                } else {
                    INF
                };
                out.extend(self.free_rows_with(s, m, limit));
            } else if let Some(g) = st.smallest_ge(m)
                && let Some((r, t_r)) = st.row_share.get(g)
            {
                // Hybrid: the prepared row-share graph padded, the rest of
                // the rows on one or two dynamic processors.
                let rest = self.n - r;
                for &d in &dy_split {
                    let t_d = self.time(d, m, rest);
                    out.push(self.rows_cand_t(m, &[(s, r), (d, rest)], &[t_r, t_d], Some(g)));
                }
                for (i, &d1) in dy_split.iter().enumerate() {
                    for &d2 in &dy_split[i + 1..] {
                        out.extend(self.row2(m, d1, d2, rest, &[(s, r)], Some(g)));
                    }
                }
            }
        }
        // Online prepare last: its prepare share is a lower bound, and when
        // two other families already beat it, it can be neither the winner
        // nor the runner-up, so its GEMM need not be predicted.
        for st in &self.statics {
            let s = st.p;
            let sp = &procs[s];
            if st.has(m) {
                continue;
            }
            let Some(prep) = sp.prepare else { continue };
            let bytes = self.k as f64 * self.n as f64 * sp.wbytes();
            let share = prep.at(bytes) / self.op.layers.max(1) as f64;
            if self.prune && share >= second_family_best(&out, m) {
                continue;
            }
            let t = self.full(s, m) + share;
            out.push(self.finish(
                Shape::Single {
                    p: s,
                    padded_to: None,
                    online: true,
                },
                &[(s, t)],
                0.0,
            ));
        }
        out
    }

    /// Sequence cut: prepared graphs on `st` adding up to `t`, the other
    /// `m - t` tokens on `d`. Scans `t` downwards and stops once the dynamic
    /// side alone costs more than the best found.
    fn seq_cut(&self, st: &StaticCtx, d: usize, m: u32) -> Option<Cand> {
        let s = st.p;
        let procs = &self.setup.procs;
        let fd = self.contention(d, [s, d]);
        let dp = &procs[d];
        let fs = self.contention(s, [s, d]);
        // The same total as `finish` for two parts, without allocating.
        let sp = &procs[s];
        let total = |ts: f64, td: f64, copy: f64| {
            let (ts, td) = (ts / fs, td / fd);
            let (dom, other) = if ts > td { (sp, dp) } else { (dp, sp) };
            let submit = if other.queue { other.submit_us } else { 0.0 };
            ts.max(td) + dom.sync_us + submit + copy
        };
        let end = st.reach.partition_point(|&t| t < m);
        let mut best: Option<(f64, u32, f64)> = None;
        for &t in st.reach[..end].iter().rev() {
            let rest = m - t;
            let td = self.time(d, rest, self.n);
            if best.is_some_and(|(b, _, _)| td / fd >= b) {
                break;
            }
            let copy = self.part_copy_us(d, rest, self.n);
            let c = total(st.exact[t as usize], td, copy);
            if best.is_none_or(|(b, _, _)| c < b) {
                best = Some((c, t, copy));
            }
        }
        let (_, t, dp_copy) = best?;
        let rest = m - t;
        Some(self.finish(
            Shape::Seq {
                s,
                graphs: st.graphs_for(t),
                d: Some(d),
                rest,
            },
            &[(s, st.exact[t as usize]), (d, self.time(d, rest, self.n))],
            dp_copy,
        ))
    }
}

/// The smallest `j` in `1..=j_max` with `crossed(j)`, or `j_max + 1` when
/// there is none, for a `crossed` that is false and then true (where it is
/// not, some `j` with `crossed(j)` and not `crossed(j - 1)`, or `j = 1`).
/// The first probe is `j0`; from there steps double away from it until
/// the answer is bracketed, then bisection: near the answer, far fewer
/// probes than bisecting `1..=j_max` from the middle.
pub(crate) fn first_crossing(j0: u32, j_max: u32, mut crossed: impl FnMut(u32) -> bool) -> u32 {
    if j_max == 0 {
        return 1;
    }
    let j0 = j0.clamp(1, j_max);
    // Not crossed below `lo`; crossed at `hi` (or `hi == j_max + 1`).
    let (mut lo, mut hi) = (1u32, j_max + 1);
    let mut step = 1;
    if crossed(j0) {
        hi = j0;
        while let Some(j) = hi.checked_sub(step).filter(|&j| j >= lo) {
            if !crossed(j) {
                lo = j + 1;
                break;
            }
            hi = j;
            step *= 2;
        }
    } else {
        lo = j0 + 1;
        while lo + step - 1 < hi {
            let j = lo + step - 1;
            if crossed(j) {
                hi = j;
                break;
            }
            lo = j + 1;
            step *= 2;
        }
    }
    while lo < hi {
        let mid = (lo + hi) / 2;
        if crossed(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo
}

/// The operator sees one row whatever the length (the lm_head in prefill):
/// its static graph is the M = 1 one, not the prefill sizes.
pub(crate) fn last_token_only(op: &LinearOp, phase: Phase) -> bool {
    phase == Phase::Prefill && op.prefill_m == hetero_plan::MRule::LastToken
}

pub(crate) fn predict(p: &Proc, m: u32, k: u32, n: u32, order: OperandOrder) -> f64 {
    match GemmShape::new(m, k, n) {
        Some(s) => p.model.predict_us(s, order).unwrap_or(INF),
        None => INF,
    }
}

/// The operand order a processor runs an operator in: the faster over a
/// few representative M, counting the copies a discrete processor makes
/// alone, whose output side depends on the order (a GPU transposes an `aw`
/// output before reading it back: on an H100, 18 µs of fixed cost against
/// 7 µs, which the GEMMs of an lm_head, 179 µs in either order, did not
/// outweigh).
///
/// "Faster" is the geometric mean of the times, so that every
/// representative M weighs alike. Their sum let the longest M decide:
/// on the 2-core VM it kept `ffn_down` (K 8960, N 1536) in `aw`, 4.0×
/// slower than `wt_at` at 32 rows and 3.3× at 64, for 8–9 % gained at 512
/// and 1024 rows, which the profile had not measured.
fn choose_order(p: &Proc, k: u32, n: u32, phase: Phase, max_m: u32) -> OperandOrder {
    let ms: Vec<u32> = match phase {
        Phase::Decode => vec![1, max_m.max(1)],
        Phase::Prefill => [1, 32, 128, 512, 2048]
            .into_iter()
            .filter(|&m| m <= max_m.max(1))
            .chain(std::iter::once(max_m.max(1)))
            .collect(),
    };
    // The sum of the logarithms: the geometric mean's order, without the
    // root.
    let sum = |o| {
        ms.iter()
            .map(|&m| {
                let (mf, kf, nf) = (m as f64, k as f64, n as f64);
                (predict(p, m, k, n, o) + p.alone_copy_us(mf * kf, mf * nf, o))
                    .max(f64::MIN_POSITIVE)
                    .ln()
            })
            .sum::<f64>()
    };
    let (aw, wt) = (sum(OperandOrder::Aw), sum(OperandOrder::WtAt));
    // Ties: a static-graph processor (an NPU) is weight-stationary and takes
    // the permuted order, as HeteroLLM does; others the plain one.
    if wt < aw || (wt == aw && p.static_graphs) {
        OperandOrder::WtAt
    } else {
        OperandOrder::Aw
    }
}
