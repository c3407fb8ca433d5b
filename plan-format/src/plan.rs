use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::compact::{DenseOpPlan, compact, spans_of};
use crate::nongemm::NonGemmPlan;
use crate::ranges::{DecisionRange, Span, check_coverage, check_follow, check_knots};
use crate::{
    DType, Fingerprint, OperandOrder, Phase, SchemaVersion, Validate, WeightMode, checked, is_zero,
};

fn is_one(v: &u32) -> bool {
    *v == 1
}

fn one() -> u32 {
    1
}

/// A prepared graph that computes only a share of an operator's output rows
/// (the static side of a row cut or hybrid cut at that graph size).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RowGraph {
    /// Canonical operator name.
    pub op: String,
    /// The phase whose decisions use it.
    pub phase: Phase,
    /// The prepared M.
    pub size: u32,
    /// Output rows (N) the graph computes; the rest run elsewhere.
    pub rows: u32,
}

/// The static graphs prepared ahead of time on one static-graph processor.
///
/// For every size, every operator has a graph over all its rows; operators
/// listed in `row_graphs` also have one over a share of their rows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GraphSet {
    /// The static-graph processor (an NPU).
    pub processor: String,
    /// Prefill sequence lengths (M) for which every operator has a prepared graph.
    pub sizes: Vec<u32>,
    /// Decode step sizes (tokens per step) with prepared graphs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub decode_sizes: Vec<u32>,
    /// Graphs over a share of an operator's rows.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub row_graphs: Vec<RowGraph>,
    /// How the graphs hold the weights: baked in, one graph per layer
    /// (`static`, the default), or as an input tensor written before each
    /// run, one graph per operator shared by its layers (`input`).
    #[serde(default, skip_serializing_if = "is_static_weights")]
    pub weights: WeightMode,
    /// Predicted time to prepare all of them, µs.
    #[serde(deserialize_with = "checked::non_negative")]
    pub prepare_us: f64,
    /// Predicted memory the prepared graphs hold, bytes.
    pub bytes: u64,
}

fn is_static_weights(w: &WeightMode) -> bool {
    *w == WeightMode::Static
}

impl GraphSet {
    /// The rows of the row-share graph of `op` at `size`, if there is one.
    pub fn row_graph(&self, op: &str, phase: Phase, size: u32) -> Option<u32> {
        self.row_graphs
            .iter()
            .find(|g| g.op == op && g.phase == phase && g.size == size)
            .map(|g| g.rows)
    }

    /// The prepared sizes of a phase.
    pub fn sizes_for(&self, phase: Phase) -> &[u32] {
        match phase {
            Phase::Prefill => &self.sizes,
            Phase::Decode => &self.decode_sizes,
        }
    }
}

/// A share of an operator's output rows (N) on one processor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RowPart {
    /// Processor id.
    pub processor: String,
    /// Output features this processor computes.
    pub rows: u32,
    /// For a static-graph processor, the prepared M it runs (padding the
    /// sequence up to it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph: Option<u32>,
}

/// A share of an operator's sequence (M) on one processor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SeqPart {
    /// Processor id.
    pub processor: String,
    /// Tokens this processor computes.
    pub tokens: u32,
    /// For a static-graph processor, the prepared graph sizes it runs one
    /// after the other (several: multi-sequence cutting). Empty for a
    /// dynamic processor.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub graphs: Vec<u32>,
}

/// How one operator runs at one length.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// One processor runs it all.
    Single {
        /// Processor id.
        processor: String,
        /// A static-graph processor runs a prepared graph of this M (padding).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        padded_to: Option<u32>,
        /// A static-graph processor prepares a graph for this exact shape at
        /// run time.
        #[serde(default)]
        online_prepare: bool,
    },
    /// Output rows split between processors (HeteroLLM row-cutting; 3-way
    /// when three parts).
    RowCut {
        /// The shares; their rows add up to N.
        parts: Vec<RowPart>,
    },
    /// The sequence split: prepared graph sizes on the static processor, the
    /// remainder on a dynamic one (sequence-length and multi-sequence cutting).
    SeqCut {
        /// The shares; their tokens add up to M.
        parts: Vec<SeqPart>,
    },
    /// Padding to a prepared graph plus a row cut (hybrid cutting).
    Hybrid {
        /// The prepared M the static processor runs.
        padded_to: u32,
        /// The shares; their rows add up to N.
        parts: Vec<RowPart>,
    },
    /// Chunked prefill on one static-graph processor (mllm-NPU): the prompt
    /// runs as fixed-size chunks of one prepared graph, the last one padded.
    Chunked {
        /// Processor id.
        processor: String,
        /// Chunk length (a prepared graph size).
        chunk: u32,
        /// Number of chunks.
        chunks: u32,
    },
    /// ScheInfer offload on a discrete-GPU host: the weight rows are sliced
    /// into CC (stored and run on the CPU), CG (stored on the CPU, copied
    /// over PCIe and run on the GPU) and GG (resident on the GPU).
    Offload {
        /// The CPU processor id; absent where the GPU runs alone, its
        /// weights resident or copied every run (no CC rows).
        #[serde(default, skip_serializing_if = "String::is_empty")]
        cpu: String,
        /// The GPU processor id.
        gpu: String,
        /// Rows stored and computed on the CPU.
        cc_rows: u32,
        /// Rows stored on the CPU, copied to the GPU and computed there.
        cg_rows: u32,
        /// Rows resident on the GPU.
        gg_rows: u32,
        /// Token assignment (prefill): tokens whose CC rows also run on the
        /// GPU, after copying the CC weights; the CPU runs the rest.
        #[serde(default)]
        gpu_tokens: u32,
    },
}

/// The family a strategy belongs to, for summaries and runner-ups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StrategyKind {
    /// One processor.
    Single,
    /// Row cut between two processors.
    RowCut,
    /// Row cut between three processors.
    ThreeWay,
    /// Sequence cut with one graph.
    SeqCut,
    /// Sequence cut with several graphs.
    MultiSeq,
    /// Several prepared graphs back to back on one processor, the last
    /// padded (HeteroLLM's multi-sequence "pipe"): a sequence part whose
    /// graphs add up to more than its tokens.
    Pipe,
    /// Padding plus row cut.
    Hybrid,
    /// Chunked prefill.
    Chunked,
    /// ScheInfer CC/CG/GG offload.
    Offload,
}

impl StrategyKind {
    /// The snake_case name used in files and tables.
    pub fn as_str(self) -> &'static str {
        match self {
            StrategyKind::Single => "single",
            StrategyKind::RowCut => "row_cut",
            StrategyKind::ThreeWay => "three_way",
            StrategyKind::SeqCut => "seq_cut",
            StrategyKind::MultiSeq => "multi_seq",
            StrategyKind::Pipe => "pipe",
            StrategyKind::Hybrid => "hybrid",
            StrategyKind::Chunked => "chunked",
            StrategyKind::Offload => "offload",
        }
    }
}

impl std::fmt::Display for StrategyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Strategy {
    /// The strategy's family.
    pub fn kind(&self) -> StrategyKind {
        match self {
            Strategy::Single { .. } => StrategyKind::Single,
            Strategy::RowCut { parts } if parts.len() > 2 => StrategyKind::ThreeWay,
            Strategy::RowCut { .. } => StrategyKind::RowCut,
            Strategy::SeqCut { parts }
                if parts
                    .iter()
                    .any(|p| p.graphs.iter().map(|&g| g as u64).sum::<u64>() > p.tokens as u64) =>
            {
                StrategyKind::Pipe
            }
            Strategy::SeqCut { parts } if parts.iter().any(|p| p.graphs.len() > 1) => {
                StrategyKind::MultiSeq
            }
            Strategy::SeqCut { .. } => StrategyKind::SeqCut,
            Strategy::Hybrid { .. } => StrategyKind::Hybrid,
            Strategy::Chunked { .. } => StrategyKind::Chunked,
            Strategy::Offload { .. } => StrategyKind::Offload,
        }
    }

    /// The processors the strategy uses, in the order of its cost parts.
    pub fn processors(&self) -> Vec<&str> {
        match self {
            Strategy::Single { processor, .. } | Strategy::Chunked { processor, .. } => {
                vec![processor]
            }
            Strategy::RowCut { parts } | Strategy::Hybrid { parts, .. } => {
                parts.iter().map(|p| p.processor.as_str()).collect()
            }
            Strategy::SeqCut { parts } => parts.iter().map(|p| p.processor.as_str()).collect(),
            Strategy::Offload { cpu, gpu, .. } if cpu.is_empty() => vec![gpu],
            Strategy::Offload { cpu, gpu, .. } => vec![cpu, gpu],
        }
    }
}

/// The predicted cost of a decision, µs: `max(parts) + sync + copy`.
///
/// Costs are for one layer's worth of the operator (every instance: all
/// active experts of a MoE layer).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CostBreakdown {
    /// Compute time of each part, in the order of the strategy's processors
    /// ([`Strategy::processors`]; one entry for a single processor).
    #[serde(deserialize_with = "checked::non_negative_list")]
    pub parts_us: Vec<f64>,
    /// Synchronisation and submission cost, with the wait the solver plans
    /// for: polling a host flag where the processor can, else blocking.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[serde(deserialize_with = "checked::non_negative")]
    pub sync_us: f64,
    /// `sync_us` were the runtime to wait by blocking instead
    /// (`hetero run --sync block`), where that costs something else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "checked::opt_non_negative")]
    pub sync_block_us: Option<f64>,
    /// Data movement not hidden behind compute (zero on unified memory).
    #[serde(default, skip_serializing_if = "is_zero")]
    #[serde(deserialize_with = "checked::non_negative")]
    pub copy_us: f64,
    /// The total the solver minimised.
    #[serde(deserialize_with = "checked::non_negative")]
    pub total_us: f64,
}

impl CostBreakdown {
    /// The predicted total with the runtime's wait: `total_us` when it
    /// polls (or the two waits cost the same), else `total_us` with
    /// `sync_block_us` in place of `sync_us`.
    pub fn total_with(&self, blocking: bool) -> f64 {
        match self.sync_block_us {
            Some(b) if blocking => self.total_us - self.sync_us + b,
            _ => self.total_us,
        }
    }

    /// The synchronisation cost with the runtime's wait (see
    /// [`total_with`](Self::total_with)).
    pub fn sync_with(&self, blocking: bool) -> f64 {
        match self.sync_block_us {
            Some(b) if blocking => b,
            _ => self.sync_us,
        }
    }
}

/// The best losing candidate of another family (another kind, or the same
/// kind on other processors).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunnerUp {
    /// Its family.
    pub kind: StrategyKind,
    /// What it was, in words (`single npu-sim padded to 512`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub label: String,
    /// Its predicted total, µs.
    #[serde(deserialize_with = "checked::non_negative")]
    pub total_us: f64,
    /// How much slower it is than the winner, µs (`total_us` minus the
    /// winner's total).
    #[serde(default, deserialize_with = "checked::finite")]
    pub margin_us: f64,
}

/// The decision for one operator at one length.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Decision {
    /// Sequence length (prefill) or tokens per step (decode).
    pub len: u32,
    /// Rows (M) each instance of the operator sees, when not `len` (the
    /// lm_head's last token in prefill, routed experts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub m: Option<u32>,
    /// Instances run per layer (active experts); the cost covers all of them.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub instances: u32,
    /// What runs where.
    pub strategy: Strategy,
    /// Its predicted cost.
    pub cost: CostBreakdown,
    /// The best losing candidate, if there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner_up: Option<RunnerUp>,
}

impl Decision {
    /// Rows each instance sees.
    pub fn rows_m(&self) -> u32 {
        self.m.unwrap_or(self.len)
    }
}

/// The operand order one processor runs an operator in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProcessorOrder {
    /// Processor id.
    pub processor: String,
    /// The order.
    pub order: OperandOrder,
}

/// Every decision for one operator in one phase, as ranges of lengths
/// ([`DecisionRange`]; see [`crate::ranges`]).
///
/// Files of schema version 1 and 2 list one decision per length
/// (`decisions`); they are compacted as they load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(try_from = "crate::compact::OpPlanFile")]
pub struct OpPlan {
    /// Canonical operator name.
    pub op: String,
    /// The phase.
    pub phase: Phase,
    /// Input features.
    pub k: u32,
    /// Output features.
    pub n: u32,
    /// Layers that run the operator with this table (each follows the
    /// same decision): `first_layer..first_layer + layers`.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub layers: u32,
    /// The first layer of the group this table covers. An operator may
    /// have several tables in a phase, one per group of layers (offload
    /// mode decides per layer); together they cover every layer once.
    #[serde(default, skip_serializing_if = "crate::is_zero")]
    pub first_layer: u32,
    /// Operand order per processor where it is not `aw`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub orders: Vec<ProcessorOrder>,
    /// The lengths the table covers, spans sorted and apart.
    pub spans: Vec<Span>,
    /// The decisions: ranges sorted by length that together cover `spans`
    /// exactly.
    pub ranges: Vec<DecisionRange>,
}

impl OpPlan {
    /// The operand order of a processor for this operator.
    pub fn order(&self, processor: &str) -> OperandOrder {
        self.orders
            .iter()
            .find(|o| o.processor == processor)
            .map(|o| o.order)
            .unwrap_or_default()
    }

    /// The index of the range covering `len`, in O(log ranges).
    pub fn range_index(&self, len: u32) -> Option<usize> {
        let i = self
            .ranges
            .partition_point(|r| r.from <= len)
            .checked_sub(1)?;
        (self.ranges[i].to >= len).then_some(i)
    }

    /// The decision at exactly `len`, materialised, if the plan covers it.
    pub fn at(&self, len: u32) -> Option<Decision> {
        self.ranges[self.range_index(len)?].at(len)
    }

    /// Every decision of the table, materialised, in order of length.
    pub fn decisions(&self) -> impl Iterator<Item = Decision> + '_ {
        self.ranges.iter().flat_map(DecisionRange::expand)
    }

    /// Every length the table covers, in order.
    pub fn lengths(&self) -> impl Iterator<Item = u32> + '_ {
        self.spans.iter().flat_map(|s| s.from..=s.to)
    }

    /// How many lengths the table covers.
    pub fn length_count(&self) -> usize {
        self.spans
            .iter()
            .map(|s| (s.to as usize + 1).saturating_sub(s.from as usize))
            .sum()
    }

    /// The table of `dense` (decisions sorted by strictly increasing
    /// length), compacted.
    pub fn from_dense(dense: DenseOpPlan) -> OpPlan {
        OpPlan {
            spans: spans_of(&dense.decisions),
            ranges: compact(&dense.decisions),
            op: dense.op,
            phase: dense.phase,
            k: dense.k,
            n: dense.n,
            layers: dense.layers,
            first_layer: 0,
            orders: dense.orders,
        }
    }

    /// The layers this table covers: `first_layer..first_layer + layers`.
    pub fn layer_range(&self) -> std::ops::Range<u32> {
        self.first_layer..self.first_layer.saturating_add(self.layers)
    }

    /// Whether this table covers `layer`.
    pub fn covers_layer(&self, layer: u32) -> bool {
        self.layer_range().contains(&layer)
    }

    /// The table with one decision per length.
    pub fn to_dense(&self) -> DenseOpPlan {
        DenseOpPlan {
            op: self.op.clone(),
            phase: self.phase,
            k: self.k,
            n: self.n,
            layers: self.layers,
            orders: self.orders.clone(),
            decisions: self.decisions().collect(),
        }
    }
}

/// The element type one processor runs in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProcessorDType {
    /// Processor id.
    pub processor: String,
    /// The dtype whose latency model the solver used.
    pub dtype: DType,
}

/// How many of an operator's output rows stay resident on the GPU (offload
/// mode), in a group of layers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Resident {
    /// Canonical operator name.
    pub op: String,
    /// Rows (of N) resident, in every layer of the group and every instance.
    pub rows: u32,
    /// The group's first layer.
    #[serde(default, skip_serializing_if = "crate::is_zero")]
    pub first_layer: u32,
    /// The group's layers; absent: every layer from `first_layer` on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layers: Option<u32>,
}

impl Resident {
    /// Whether the group covers `layer`.
    pub fn covers_layer(&self, layer: u32) -> bool {
        layer >= self.first_layer && self.layers.is_none_or(|l| layer - self.first_layer < l)
    }
}

/// The ScheInfer placement: which weights stay on the GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OffloadPlacement {
    /// The CPU processor id (absent where the plan uses the GPU alone).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cpu: String,
    /// The discrete GPU processor id.
    pub gpu: String,
    /// The GPU memory budget for weights, bytes.
    pub gpu_mem_budget: u64,
    /// Bytes of resident weights chosen.
    pub resident_bytes: u64,
    /// The way of running the model the plan takes (`sliced`,
    /// `gpu-stream`, `layer-split`, `cpu`); absent in plans that predate
    /// the choice (`sliced`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<String>,
    /// Resident rows per operator and group of layers (operators and
    /// layers absent: none resident).
    pub resident: Vec<Resident>,
}

impl OffloadPlacement {
    /// The resident rows of an operator in its first layer.
    pub fn rows(&self, op: &str) -> u32 {
        self.rows_at(op, 0)
    }

    /// The resident rows of an operator in `layer`.
    pub fn rows_at(&self, op: &str, layer: u32) -> u32 {
        self.resident
            .iter()
            .find(|r| r.op == op && r.covers_layer(layer))
            .map(|r| r.rows)
            .unwrap_or(0)
    }
}

/// The settings a plan was solved with, enough to re-solve one cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SolverInfo {
    /// Version of the solver that wrote the plan.
    pub version: String,
    /// Row cuts are multiples of this many output rows.
    pub row_align: u32,
    /// The prompt-length distribution the graph set minimises over.
    pub prompt_lengths: String,
    /// Expected prefill latency over that distribution, µs (sum over every
    /// operator and layer of the decision's total).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "checked::opt_non_negative")]
    pub expected_prefill_us: Option<f64>,
    /// Graph prepare-time budget, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "checked::opt_non_negative")]
    pub prepare_budget_us: Option<f64>,
    /// Graph memory budget, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph_mem_budget: Option<u64>,
    /// ScheInfer placement, in offload mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offload: Option<OffloadPlacement>,
    /// The host's speed probe while the plan's processors were profiled,
    /// µs (the median of their predictor entries'
    /// [`Overheads::host_probe_us`](crate::Overheads)). The plan's
    /// host-side costs hold at this host speed; `hetero run` measures its
    /// own probe and reports the two.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "checked::opt_non_negative")]
    pub host_probe_us: Option<f64>,
    /// Per processor, the mean over the median of its profiled GEMM runs
    /// ([`Overheads::mean_over_median`](crate::Overheads)); processors
    /// without one are left out. The decisions' costs are medians; `hetero
    /// run` predicts a pass or step as their sum, each operator's cost
    /// scaled by the largest of its processors' factors, because a total
    /// grows with the mean.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[serde(deserialize_with = "checked::positive_values")]
    pub mean_over_median: BTreeMap<String, f64>,
}

impl SolverInfo {
    /// [`SolverInfo::mean_over_median`] in words: `cpu:0 1.012×, cuda:0 1.003×`.
    pub fn mean_over_median_words(&self) -> String {
        self.mean_over_median
            .iter()
            .map(|(p, f)| format!("{p} {f:.3}×"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A plan: how every GEMM of a model runs on a device at every length.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Plan {
    /// File format version.
    pub schema_version: SchemaVersion,
    /// The model it was solved for.
    pub model: Fingerprint,
    /// The predictor (and through it the device profile) it was solved with.
    pub predictor: Fingerprint,
    /// Processors the plan uses.
    pub processors: Vec<String>,
    /// The dtype each processor runs in.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dtypes: Vec<ProcessorDType>,
    /// How it was solved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub solver: Option<SolverInfo>,
    /// Assumptions the solver had to make (a constant the predictor lacks).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Prepared static graphs, per static-graph processor.
    #[serde(default)]
    pub graph_sets: Vec<GraphSet>,
    /// Per operator and phase, the decision table.
    pub ops: Vec<OpPlan>,
    /// Where each layer runs its non-GEMM operators (attention, norms,
    /// activations), with their predicted costs. Absent in plans written
    /// before the solver placed them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub non_gemm: Option<NonGemmPlan>,
}

/// A plan used with a predictor or model other than the one it was solved for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FingerprintMismatch {
    /// `model` or `predictor`.
    pub what: &'static str,
    /// The fingerprint recorded in the plan.
    pub plan: Fingerprint,
    /// The fingerprint of the file given.
    pub given: Fingerprint,
}

impl std::fmt::Display for FingerprintMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the plan was solved for {} `{}` (sha256 {}), not `{}` (sha256 {}); solve again with this {}",
            self.what,
            self.plan.name,
            short(&self.plan.sha256),
            self.given.name,
            short(&self.given.sha256),
            self.what
        )
    }
}

impl std::error::Error for FingerprintMismatch {}

fn short(sha: &str) -> &str {
    &sha[..sha.len().min(12)]
}

impl Plan {
    /// Plans are written pretty down to this depth and one range of
    /// lengths per line below it ([`crate::to_string_depth`]): a range with
    /// its cost knots reads as one line of a table.
    pub const PRETTY_DEPTH: usize = 4;

    /// The plan as text in `format`, one range per line.
    pub fn to_text(&self, format: crate::Format) -> crate::Result<String> {
        crate::to_string_depth(self, format, Some(Self::PRETTY_DEPTH))
    }

    /// The decision table of an operator in a phase (of its first layer
    /// group, where it has several: [`Plan::op_in_layer`]).
    pub fn op(&self, name: &str, phase: Phase) -> Option<&OpPlan> {
        self.op_in_layer(name, phase, 0)
    }

    /// The decision table of an operator in a phase that covers `layer`.
    pub fn op_in_layer(&self, name: &str, phase: Phase, layer: u32) -> Option<&OpPlan> {
        self.ops
            .iter()
            .find(|o| o.op == name && o.phase == phase && o.covers_layer(layer))
    }

    /// The graph set of a static-graph processor.
    pub fn graph_set(&self, processor: &str) -> Option<&GraphSet> {
        self.graph_sets.iter().find(|g| g.processor == processor)
    }

    /// The dtype a processor runs in.
    pub fn dtype(&self, processor: &str) -> Option<DType> {
        self.dtypes
            .iter()
            .find(|d| d.processor == processor)
            .map(|d| d.dtype)
    }

    /// Refuses a plan solved for another predictor or model. Pass the
    /// fingerprints of the files at hand ([`crate::Predictor::fingerprint`],
    /// [`crate::ModelSpec::fingerprint`]); `None` skips that check.
    pub fn check_inputs(
        &self,
        predictor: Option<&Fingerprint>,
        model: Option<&Fingerprint>,
    ) -> Result<(), FingerprintMismatch> {
        if let Some(p) = predictor.filter(|p| !p.matches(&self.predictor)) {
            return Err(FingerprintMismatch {
                what: "predictor",
                plan: self.predictor.clone(),
                given: p.clone(),
            });
        }
        if let Some(m) = model.filter(|m| !m.matches(&self.model)) {
            return Err(FingerprintMismatch {
                what: "model",
                plan: self.model.clone(),
                given: m.clone(),
            });
        }
        Ok(())
    }
}

impl Validate for Plan {
    fn validate(&self) -> Result<(), (String, String)> {
        if self.ops.is_empty() {
            return Err((
                "ops".into(),
                "the plan has no operators; solve it again for a model".into(),
            ));
        }
        let used = |p: &str| self.processors.iter().any(|q| q == p);
        for (i, g) in self.graph_sets.iter().enumerate() {
            if !used(&g.processor) {
                return Err((
                    format!("graph_sets[{i}].processor"),
                    format!("`{}` is not in the plan's `processors`", g.processor),
                ));
            }
        }
        if let Some(ng) = &self.non_gemm {
            ng.check(&self.processors)?;
        }
        crate::layers::check_layer_groups(&self.ops)?;
        for (i, op) in self.ops.iter().enumerate() {
            if op.ranges.is_empty() {
                return Err((
                    format!("ops[{i}].ranges"),
                    format!("operator `{}` has no decisions in {}", op.op, op.phase),
                ));
            }
            check_coverage(op, &format!("ops[{i}]"))?;
            for (j, r) in op.ranges.iter().enumerate() {
                let at = format!("ops[{i}].ranges[{j}]");
                if r.instances == 0 || r.m == Some(0) {
                    return Err((at, "`m` and `instances` must be at least 1".into()));
                }
                check_follow(r, &at)?;
                check_knots(r, &at)?;
                for len in [r.from, r.to] {
                    check_strategy(&at, &r.strategy_at(len), r.rows_m(len), op.n)?;
                }
                if let Some(p) = r.strategy.processors().into_iter().find(|p| !used(p)) {
                    return Err((
                        format!("{at}.strategy"),
                        format!("processor `{p}` is not in the plan's `processors`"),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The parts of a strategy at rows `m` add up: rows to N, tokens to M, and
/// an offload's GPU tokens are at most M.
fn check_strategy(at: &str, s: &Strategy, m: u32, n: u32) -> Result<(), (String, String)> {
    let rows = |parts: &[RowPart]| parts.iter().map(|p| p.rows as u64).sum::<u64>();
    match s {
        Strategy::RowCut { parts } | Strategy::Hybrid { parts, .. } if rows(parts) != n as u64 => {
            Err((
                format!("{at}.strategy.parts"),
                format!("rows add up to {}, not N = {n}", rows(parts)),
            ))
        }
        Strategy::SeqCut { parts } => {
            let t: u64 = parts.iter().map(|p| p.tokens as u64).sum();
            if t != m as u64 {
                return Err((
                    format!("{at}.strategy.parts"),
                    format!("tokens add up to {t}, not M = {m}"),
                ));
            }
            Ok(())
        }
        Strategy::Offload {
            cc_rows,
            cg_rows,
            gg_rows,
            gpu_tokens,
            cpu,
            ..
        } => {
            if cpu.is_empty() && (*cc_rows > 0 || *gpu_tokens > 0) {
                return Err((
                    format!("{at}.strategy.cpu"),
                    "CC rows run on a CPU: name it, or give cc_rows 0".into(),
                ));
            }
            let r = *cc_rows as u64 + *cg_rows as u64 + *gg_rows as u64;
            if r != n as u64 {
                return Err((
                    format!("{at}.strategy"),
                    format!("cc + cg + gg rows add up to {r}, not N = {n}"),
                ));
            }
            if *gpu_tokens > m {
                return Err((
                    format!("{at}.strategy.gpu_tokens"),
                    format!("{gpu_tokens} is more than M = {m}"),
                ));
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dense(decisions: Vec<Decision>) -> OpPlan {
        OpPlan::from_dense(DenseOpPlan {
            op: "ffn_up".into(),
            phase: Phase::Prefill,
            k: 64,
            n: 512,
            layers: 2,
            orders: vec![],
            decisions,
        })
    }

    fn plan(strategy: Strategy) -> Plan {
        Plan {
            schema_version: SchemaVersion,
            model: Fingerprint::of_bytes("m", b"m"),
            predictor: Fingerprint::of_bytes("p", b"p"),
            processors: vec!["cpu:0".into(), "cuda:0".into()],
            dtypes: vec![],
            solver: None,
            notes: vec![],
            graph_sets: vec![],
            non_gemm: None,
            ops: vec![dense(vec![Decision {
                len: 8,
                m: None,
                instances: 1,
                strategy,
                cost: CostBreakdown {
                    parts_us: vec![1.0, 1.0],
                    sync_us: 0.0,
                    sync_block_us: None,
                    copy_us: 0.0,
                    total_us: 1.0,
                },
                runner_up: None,
            }])],
        }
    }

    fn offload(cc: u32, cg: u32, gg: u32, gpu_tokens: u32) -> Strategy {
        Strategy::Offload {
            cpu: "cpu:0".into(),
            gpu: "cuda:0".into(),
            cc_rows: cc,
            cg_rows: cg,
            gg_rows: gg,
            gpu_tokens,
        }
    }

    #[test]
    fn at_finds_lengths_in_sparse_tables() {
        let mut p = plan(offload(0, 0, 512, 0));
        let d = p.ops[0].at(8).unwrap();
        p.ops[0] = dense(
            [1, 16, 256, 2048]
                .into_iter()
                .map(|len| Decision { len, ..d.clone() })
                .collect(),
        );
        assert!(p.validate().is_ok());
        let op = &p.ops[0];
        assert_eq!(op.ranges.len(), 4);
        assert_eq!(op.at(2048).map(|d| d.len), Some(2048));
        assert_eq!(op.at(16).map(|d| d.len), Some(16));
        assert!(op.at(17).is_none() && op.at(4096).is_none() && op.at(0).is_none());
    }

    #[test]
    fn graphs_adding_up_to_more_than_their_tokens_are_a_pipe() {
        let seq = |tokens: u32, graphs: Vec<u32>| Strategy::SeqCut {
            parts: vec![SeqPart {
                processor: "cpu:0".into(),
                tokens,
                graphs,
            }],
        };
        assert_eq!(seq(8, vec![4, 4]).kind(), StrategyKind::MultiSeq);
        assert_eq!(seq(7, vec![4, 4]).kind(), StrategyKind::Pipe);
        assert_eq!(StrategyKind::Pipe.as_str(), "pipe");
        // Its tokens add up to M, as any sequence cut's.
        plan(seq(7, vec![4, 4])).validate().unwrap_err();
        let mut p = plan(seq(8, vec![4, 4]));
        if let Strategy::SeqCut { parts } = &mut p.ops[0].ranges[0].strategy {
            parts[0].graphs = vec![6, 4];
        }
        p.validate().unwrap();
        let back: Plan = serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
        assert_eq!(back.ops[0].ranges[0].strategy.kind(), StrategyKind::Pipe);
    }

    #[test]
    fn offload_rows_must_add_up_to_n() {
        assert!(plan(offload(128, 128, 256, 4)).validate().is_ok());
        let (field, msg) = plan(offload(128, 128, 255, 0)).validate().unwrap_err();
        assert_eq!(field, "ops[0].ranges[0].strategy");
        assert!(msg.contains("511"), "{msg}");
        let (field, _) = plan(offload(128, 128, 256, 9)).validate().unwrap_err();
        assert_eq!(field, "ops[0].ranges[0].strategy.gpu_tokens");
    }

    #[test]
    fn check_inputs_names_what_differs() {
        let p = plan(offload(0, 0, 512, 0));
        let same_p = Fingerprint::of_bytes("other name", b"p");
        let other_m = Fingerprint::of_bytes("llama", b"x");
        assert!(p.check_inputs(Some(&same_p), None).is_ok());
        let e = p.check_inputs(Some(&same_p), Some(&other_m)).unwrap_err();
        assert_eq!(e.what, "model");
        assert!(e.to_string().contains("`llama`"), "{e}");
        let e = p.check_inputs(Some(&other_m), None).unwrap_err();
        assert_eq!(e.what, "predictor");
    }
}
