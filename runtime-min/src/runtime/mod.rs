//! The runtime: a plan, a model, the processors, and everything prepared to
//! run the plan's decisions.
//!
//! Its stages, one module each:
//! - [`open`]: load the plan, refuse one solved for another model,
//!   predictor or machine, and open the plan's processors;
//! - [`layout`] and [`prepare`]: turn a decision into parts and steps, then
//!   prepare one GEMM per step (shared between lengths and layers where
//!   they match) and the activation pool;
//! - [`memory`]: before anything is prepared, the bytes it will take
//!   against what the host and each processor can hold;
//! - [`execute`]: run an operator, a layer or a whole phase, prefetching
//!   the weights that offload copies every run ([`prefetch`]);
//! - [`report`]: predicted against measured, per operator and in total.

mod execute;
mod layout;
mod memory;
mod open;
pub(crate) mod prefetch;
mod prepare;
mod report;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hetero_agent::{Backend, Gemm, HostBuf, OpenOptions};
use hetero_plan::{Decision, ModelSpec, OpRole, Phase, Plan};

use crate::decider::Decider;
use crate::exec::{Fault, Stage, SyncChoice};
use crate::graphs::GraphSource;
use crate::weights::{WeightSource, Weights};
use crate::{Error, Result};

pub use layout::{PlanGemm, StaticGraph, label, plan_gemms, plan_static_graphs};
pub(crate) use memory::bytes;
use prepare::{GemmKey, PrepStat, Prepared};

/// How to open a runtime.
#[derive(Debug, Clone, Default)]
pub struct RuntimeOptions {
    /// What the backends read when they open (CPU groups, simulator parameters).
    pub open: OpenOptions,
    /// How the host waits for submitted parts.
    pub sync: SyncChoice,
    /// Synthetic or real weights.
    pub weights: WeightSource,
    /// The predictor file the plan was solved with: when given, its
    /// fingerprint and its processors must match.
    pub predictor: Option<PathBuf>,
    /// A folder of graphs compiled ahead of time for this plan (`hetero
    /// compile`): the QNN processor loads its graphs from it, checked
    /// against the plan and the weights ([`crate::compiled::Compiled`]),
    /// and prepares only what it lacks. Its SoC is used when
    /// `open.qnn_soc` is unset.
    pub graphs: Option<PathBuf>,
    /// Testing only: the given processor fails at its n-th execution.
    #[doc(hidden)]
    pub fail_after: Option<(String, u32)>,
}

/// What [`Runtime::run`] runs.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// The phase.
    pub phase: Phase,
    /// Sequence length (prefill) or tokens per step (decode).
    pub len: u32,
    /// Decode steps per pass (ignored in prefill).
    pub steps: u32,
    /// Timed passes, after one untimed warm-up pass.
    pub repeat: u32,
    /// Compare every output of the warm-up pass with the reference.
    pub check: bool,
}

/// The time of one [`Runtime::linear`] call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinearTiming {
    /// The operator's time, µs (see
    /// [`OpReport::measured_us`](crate::report::OpReport::measured_us)).
    pub measured_us: f64,
    /// Host wall clock, µs.
    pub wall_us: f64,
    /// Runtime overhead (decider, bookkeeping, submit calls), µs.
    pub dispatch_us: f64,
    /// The plan's prediction, µs.
    pub predicted_us: f64,
}

/// A plan ready to run on this machine's processors.
pub struct Runtime {
    plan_path: PathBuf,
    plan: Plan,
    model: ModelSpec,
    decider: Decider,
    backends: Vec<Box<dyn Backend>>,
    weights: Weights,
    sources: Vec<Box<dyn GraphSource>>,
    gemms: Vec<Box<dyn Gemm>>,
    shared: HashMap<GemmKey, usize>,
    /// GEMMs that copy their host-kept weights every run themselves
    /// ([`Gemm::host_weights`]); other upload steps write them each run.
    host_staged: HashSet<usize>,
    /// Which of those runs after which, to prefetch its weights.
    prefetch: prefetch::Prefetch,
    prepared: HashMap<(usize, u32), Prepared>,
    inputs: HashMap<(usize, u32), HostBuf>,
    output: HostBuf,
    stage: Stage,
    grown: usize,
    /// The backend whose direct-copy host memory the pool's buffers are
    /// ([`Backend::alloc_host`]); the heap when none offers it.
    host_mem: Option<usize>,
    sync: SyncChoice,
    fault: Option<Arc<Fault>>,
    prep: Vec<PrepStat>,
    seed: u64,
    notes: Vec<String>,
}

impl Runtime {
    /// The plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The model.
    pub fn model(&self) -> &ModelSpec {
        &self.model
    }

    /// The decider.
    pub fn decider(&self) -> &Decider {
        &self.decider
    }

    /// Distils a decision tree from every operator table of a phase and
    /// states its agreement with the table (`max_depth: None`: grown fully).
    #[cfg(feature = "tree")]
    pub fn tree_agreement(
        &self,
        phase: Phase,
        max_depth: Option<usize>,
    ) -> Vec<crate::report::TreeReport> {
        self.phase_ops(phase)
            .into_iter()
            .map(|oi| {
                let op = &self.plan.ops[oi];
                let t = crate::decider::tree::DistilledTree::fit(op, max_depth);
                crate::report::TreeReport {
                    op: op.op.clone(),
                    lengths: op.length_count(),
                    classes: t.classes.len(),
                    leaves: t.leaves,
                    depth: t.depth,
                    agreement: t.agreement,
                }
            })
            .collect()
    }

    /// True when the GEMMs' weights come from a checkpoint (not synthetic).
    pub(crate) fn has_checkpoint(&self) -> bool {
        matches!(self.weights, Weights::File { .. })
    }

    /// Changes how the host waits for submitted parts.
    pub fn set_sync(&mut self, sync: SyncChoice) {
        self.sync = sync;
    }

    /// Where one processor's prepared GEMMs come from (default:
    /// [`Prepare`](crate::graphs::Prepare)). Set it before anything is
    /// prepared.
    pub fn set_graph_source(
        &mut self,
        processor: &str,
        source: Box<dyn GraphSource>,
    ) -> Result<()> {
        let i = self.proc_index(processor)?;
        self.sources[i] = source;
        Ok(())
    }

    /// The GEMM dimensions of an operator at a length: rows per instance
    /// (M), input features (K), output features (N), instances per layer.
    pub fn op_dims(&self, op: &str, phase: Phase, len: u32) -> Result<(u32, u32, u32, u32)> {
        let (d, mi) = self.lookup_table(self.op_of(op, phase, len)?, len)?;
        let o = &self.model.ops[mi];
        Ok((d.rows_m(), o.k, o.n, d.instances))
    }

    fn proc_index(&self, id: &str) -> Result<usize> {
        self.plan
            .processors
            .iter()
            .position(|p| p == id)
            .ok_or_else(|| Error::arg("processor", format!("`{id}` is not in the plan")))
    }

    /// The decision of the plan's table `oi` at `len` (materialised) and
    /// the model operator.
    fn lookup_table(&self, oi: usize, len: u32) -> Result<(Decision, usize)> {
        let d = self.decider.decision(&self.plan, oi, len)?;
        let op = &self.plan.ops[oi].op;
        let mi = self
            .model
            .ops
            .iter()
            .position(|o| &o.name == op)
            .expect("checked when the runtime was built");
        Ok((d, mi))
    }

    /// The plan operator index of `op` in `phase` (`len` for the error):
    /// the table of its first layer.
    fn op_of(&self, op: &str, phase: Phase, len: u32) -> Result<usize> {
        self.op_of_layer(op, phase, 0, len)
    }

    /// The plan operator index of the table that decides `op` in `phase`
    /// in `layer` (`len` for the error).
    fn op_of_layer(&self, op: &str, phase: Phase, layer: u32, len: u32) -> Result<usize> {
        self.decider
            .op_index_at(op, phase, layer)
            .ok_or_else(|| Error::NoDecision {
                op: op.to_string(),
                phase,
                len,
                covered: format!(
                    "no {phase} table for it; operators with one: {}",
                    self.plan
                        .ops
                        .iter()
                        .filter(|o| o.phase == phase)
                        .map(|o| o.op.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            })
    }

    /// The operators of a phase, in execution order: the decoder layer's in
    /// model order, the lm_head last.
    fn phase_ops(&self, phase: Phase) -> Vec<usize> {
        let mut ops: Vec<(bool, usize, usize)> = self
            .plan
            .ops
            .iter()
            .enumerate()
            .filter(|(_, o)| o.phase == phase)
            .map(|(i, o)| {
                let mi = self
                    .model
                    .ops
                    .iter()
                    .position(|m| m.name == o.op)
                    .unwrap_or(0);
                (self.model.ops[mi].role == OpRole::LmHead, mi, i)
            })
            .collect();
        ops.sort();
        ops.into_iter().map(|(_, _, i)| i).collect()
    }
}

/// Opens a file-system path for a plan's model config: a Hugging Face
/// `config.json`, or a model spec written by `hetero model show --json`.
pub fn load_model(path: &Path) -> Result<ModelSpec> {
    Ok(hetero_plan::hf::load_config(path)?)
}

#[cfg(test)]
mod tests;
