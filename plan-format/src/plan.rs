use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{Fingerprint, Phase, SchemaVersion, Validate};

/// The static graphs prepared ahead of time on one static-graph processor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GraphSet {
    /// The static-graph processor (an NPU).
    pub processor: String,
    /// Sequence lengths (M) for which every operator has a prepared graph.
    pub sizes: Vec<u32>,
    /// Predicted time to prepare all of them, µs.
    pub prepare_us: f64,
    /// Predicted memory the prepared graphs hold, bytes.
    pub bytes: u64,
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
    /// runs as fixed-size chunks of one prepared graph.
    Chunked {
        /// Processor id.
        processor: String,
        /// Chunk length (a prepared graph size).
        chunk: u32,
        /// Number of chunks.
        chunks: u32,
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
    /// Padding plus row cut.
    Hybrid,
    /// Chunked prefill.
    Chunked,
}

impl Strategy {
    /// The strategy's family.
    pub fn kind(&self) -> StrategyKind {
        match self {
            Strategy::Single { .. } => StrategyKind::Single,
            Strategy::RowCut { parts } if parts.len() > 2 => StrategyKind::ThreeWay,
            Strategy::RowCut { .. } => StrategyKind::RowCut,
            Strategy::SeqCut { parts } if parts.iter().any(|p| p.graphs.len() > 1) => {
                StrategyKind::MultiSeq
            }
            Strategy::SeqCut { .. } => StrategyKind::SeqCut,
            Strategy::Hybrid { .. } => StrategyKind::Hybrid,
            Strategy::Chunked { .. } => StrategyKind::Chunked,
        }
    }
}

/// The predicted cost of a decision, µs: `max(parts) + sync + copy`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CostBreakdown {
    /// Compute time of each part, in the order of the strategy's parts (one
    /// entry for a single processor).
    pub parts_us: Vec<f64>,
    /// Synchronisation and submission cost.
    pub sync_us: f64,
    /// Data movement cost (zero on unified memory).
    pub copy_us: f64,
    /// The total the solver minimised.
    pub total_us: f64,
}

/// The best candidate that lost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunnerUp {
    /// Its family.
    pub kind: StrategyKind,
    /// Its predicted total, µs.
    pub total_us: f64,
}

/// The decision for one operator at one length.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Decision {
    /// Sequence length (prefill) or tokens per step (decode).
    pub len: u32,
    /// What runs where.
    pub strategy: Strategy,
    /// Its predicted cost.
    pub cost: CostBreakdown,
    /// The best losing candidate, if there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner_up: Option<RunnerUp>,
}

/// Every decision for one operator in one phase, one per length, sorted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OpPlan {
    /// Canonical operator name.
    pub op: String,
    /// The phase.
    pub phase: Phase,
    /// Input features.
    pub k: u32,
    /// Output features.
    pub n: u32,
    /// One decision per length, lengths strictly increasing.
    pub decisions: Vec<Decision>,
}

impl OpPlan {
    /// The decision at exactly `len`, if the plan covers it.
    pub fn at(&self, len: u32) -> Option<&Decision> {
        let first = self.decisions.first()?.len;
        let d = self.decisions.get(len.checked_sub(first)? as usize)?;
        // Dense tables answer in O(1); fall back to a search otherwise.
        if d.len == len {
            Some(d)
        } else {
            self.decisions
                .binary_search_by_key(&len, |d| d.len)
                .ok()
                .map(|i| &self.decisions[i])
        }
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
    /// Prepared static graphs, per static-graph processor.
    #[serde(default)]
    pub graph_sets: Vec<GraphSet>,
    /// Per operator and phase, the decision table.
    pub ops: Vec<OpPlan>,
}

impl Validate for Plan {
    fn validate(&self) -> Result<(), (String, String)> {
        for (i, op) in self.ops.iter().enumerate() {
            let mut prev = 0u32;
            for (j, d) in op.decisions.iter().enumerate() {
                let at = format!("ops[{i}].decisions[{j}]");
                if d.len == 0 || d.len <= prev {
                    return Err((
                        format!("{at}.len"),
                        "lengths must be positive and strictly increasing".into(),
                    ));
                }
                prev = d.len;
                let rows = |parts: &[RowPart]| parts.iter().map(|p| p.rows as u64).sum::<u64>();
                match &d.strategy {
                    Strategy::RowCut { parts } | Strategy::Hybrid { parts, .. }
                        if rows(parts) != op.n as u64 =>
                    {
                        return Err((
                            format!("{at}.strategy.parts"),
                            format!("rows add up to {}, not N = {}", rows(parts), op.n),
                        ));
                    }
                    Strategy::SeqCut { parts } => {
                        let t: u64 = parts.iter().map(|p| p.tokens as u64).sum();
                        if t != d.len as u64 {
                            return Err((
                                format!("{at}.strategy.parts"),
                                format!("tokens add up to {t}, not the length {}", d.len),
                            ));
                        }
                    }
                    _ => {}
                }
                let used = |p: &str| self.processors.iter().any(|q| q == p);
                let named: Vec<&str> = match &d.strategy {
                    Strategy::Single { processor, .. } | Strategy::Chunked { processor, .. } => {
                        vec![processor]
                    }
                    Strategy::RowCut { parts } | Strategy::Hybrid { parts, .. } => {
                        parts.iter().map(|p| p.processor.as_str()).collect()
                    }
                    Strategy::SeqCut { parts } => {
                        parts.iter().map(|p| p.processor.as_str()).collect()
                    }
                };
                if let Some(p) = named.into_iter().find(|p| !used(p)) {
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
