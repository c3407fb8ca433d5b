//! Laying a decision out: per part, its processor and the GEMMs (steps) it
//! runs, with the token rows, the output columns and the prepared M of
//! each. The runtime prepares exactly these; [`plan_gemms`] lists them for
//! `hetero profile --plan`.

use std::ops::Range;

use hetero_agent::GemmSpec;
use hetero_plan::{
    DType, Decision, GemmShape, OpPlan, OperandOrder, Phase, Plan, RowPart, SeqPart, Strategy,
    WeightMode,
};

use super::Runtime;
use crate::decider::Decider;
use crate::{Error, Result};

/// A step before its GEMM is prepared.
#[derive(Debug, Clone)]
pub(super) struct StepLayout {
    pub rows: Range<usize>,
    pub pad_to: usize,
    pub cols: Range<usize>,
    pub upload: bool,
}

/// A part before its GEMMs are prepared.
#[derive(Debug, Clone)]
pub(super) struct PartLayout {
    pub proc: usize,
    pub predicted_us: f64,
    pub steps: Vec<StepLayout>,
}

impl PartLayout {
    /// The part's share in words, for reports.
    pub fn describe(&self) -> String {
        let s: Vec<String> = self
            .steps
            .iter()
            .map(|s| {
                let pad = if s.pad_to != s.rows.len() {
                    format!(" padded to {}", s.pad_to)
                } else {
                    String::new()
                };
                format!(
                    "tokens {}..{}{pad}, columns {}..{}{}",
                    s.rows.start,
                    s.rows.end,
                    s.cols.start,
                    s.cols.end,
                    if s.upload {
                        " (weights copied each run)"
                    } else {
                        ""
                    }
                )
            })
            .collect();
        s.join("; ")
    }
}

impl Runtime {
    /// How this runtime lays out a decision of `plan.ops[oi]` over an output
    /// of `n` columns.
    pub(super) fn layout(&self, oi: usize, d: &Decision, n: u32) -> Result<Vec<PartLayout>> {
        let is_static = |p: usize| self.backends[p].processor().capabilities.static_graphs;
        layout(&self.plan, oi, d, n, &is_static)
    }
}

/// How the runtime lays out one decision of `plan.ops[oi]` over an output
/// of `n` columns: per part, its processor and the GEMMs it runs.
/// `is_static(p)`: whether `plan.processors[p]` runs static graphs (padded
/// to a prepared M).
fn layout(
    plan: &Plan,
    oi: usize,
    d: &Decision,
    n: u32,
    is_static: &dyn Fn(usize) -> bool,
) -> Result<Vec<PartLayout>> {
    let l = Layout {
        plan,
        op: &plan.ops[oi],
        d,
        m: d.rows_m() as usize,
        n: n as usize,
    };
    let parts = match &d.strategy {
        Strategy::Single {
            processor,
            padded_to,
            ..
        } => {
            let pad = padded_to.map(|g| g as usize).unwrap_or(l.m);
            vec![l.part(l.proc(processor), 0, vec![l.whole(pad)])]
        }
        Strategy::RowCut { parts } => l.row_cut(parts, None, is_static),
        Strategy::Hybrid { parts, padded_to } => {
            l.row_cut(parts, Some(*padded_to as usize), is_static)
        }
        Strategy::SeqCut { parts } => l.seq_cut(parts),
        Strategy::Chunked {
            processor,
            chunk,
            chunks,
        } => l.chunked(processor, *chunk as usize, *chunks as usize)?,
        Strategy::Offload {
            cpu,
            gpu,
            cc_rows,
            cg_rows,
            gg_rows,
            gpu_tokens,
        } => l.offload(
            (cpu, gpu),
            (*cc_rows as usize, *cg_rows as usize, *gg_rows as usize),
            *gpu_tokens as usize,
        ),
    };
    l.check_bounds(&parts)?;
    Ok(parts)
}

/// One decision being laid out over `M × N`.
struct Layout<'a> {
    plan: &'a Plan,
    op: &'a OpPlan,
    d: &'a Decision,
    m: usize,
    n: usize,
}

impl Layout<'_> {
    fn proc(&self, id: &str) -> usize {
        self.plan
            .processors
            .iter()
            .position(|q| q == id)
            .expect("the plan validates its processors")
    }

    /// A part on `proc` with the plan's prediction for its part `i` (the
    /// whole cost where the decision has no per-part costs).
    fn part(&self, proc: usize, i: usize, steps: Vec<StepLayout>) -> PartLayout {
        PartLayout {
            proc,
            predicted_us: self
                .d
                .cost
                .parts_us
                .get(i)
                .copied()
                .unwrap_or(self.d.cost.total_us),
            steps,
        }
    }

    /// Token rows `rows` and output columns `cols`, in a GEMM of M = `pad_to`.
    fn step(rows: Range<usize>, pad_to: usize, cols: Range<usize>) -> StepLayout {
        StepLayout {
            rows,
            pad_to,
            cols,
            upload: false,
        }
    }

    /// The whole operator in one GEMM of M = `pad_to`.
    fn whole(&self, pad_to: usize) -> StepLayout {
        Self::step(0..self.m, pad_to, 0..self.n)
    }

    /// Output columns cut between processors (a hybrid cut pads the static
    /// processors' rows to `hybrid`).
    fn row_cut(
        &self,
        parts: &[RowPart],
        hybrid: Option<usize>,
        is_static: &dyn Fn(usize) -> bool,
    ) -> Vec<PartLayout> {
        let mut out = Vec::new();
        let mut c = 0usize;
        for (i, part) in parts.iter().enumerate() {
            let p = self.proc(&part.processor);
            let r = part.rows as usize;
            let pad = match part.graph {
                Some(g) => g as usize,
                None if is_static(p) => hybrid.unwrap_or(self.m),
                None => self.m,
            };
            if r > 0 {
                out.push(self.part(p, i, vec![Self::step(0..self.m, pad, c..c + r)]));
            }
            c += r;
        }
        out
    }

    /// Token rows cut between processors; a part with graphs runs one step
    /// per graph, one after the other.
    fn seq_cut(&self, parts: &[SeqPart]) -> Vec<PartLayout> {
        let mut out = Vec::new();
        let mut t = 0usize;
        for (i, part) in parts.iter().enumerate() {
            let tokens = part.tokens as usize;
            let mut steps = Vec::new();
            if part.graphs.is_empty() {
                if tokens > 0 {
                    steps.push(Self::step(t..t + tokens, tokens, 0..self.n));
                }
            } else {
                let mut s = t;
                for &g in &part.graphs {
                    let g = g as usize;
                    let e = (s + g).min(t + tokens);
                    steps.push(Self::step(s..e, g, 0..self.n));
                    s = e;
                }
            }
            if !steps.is_empty() {
                out.push(self.part(self.proc(&part.processor), i, steps));
            }
            t += tokens;
        }
        out
    }

    /// `chunks` graphs of M = `chunk`, one after the other on one processor.
    fn chunked(&self, processor: &str, chunk: usize, chunks: usize) -> Result<Vec<PartLayout>> {
        let m = self.m;
        if chunk * chunks < m {
            return Err(self.bad(format!("{chunks} chunks of {chunk} do not cover M = {m}")));
        }
        let steps = (0..chunks)
            .map(|i| {
                Self::step(
                    (i * chunk).min(m)..((i + 1) * chunk).min(m),
                    chunk,
                    0..self.n,
                )
            })
            .filter(|s| !s.rows.is_empty())
            .collect();
        Ok(vec![self.part(self.proc(processor), 0, steps)])
    }

    /// Weight offload, columns in the order CC | CG | GG: the CPU runs its
    /// CC columns for the tokens past `gpu_tokens`; the GPU runs its
    /// resident GG columns, the CG columns with weights copied every run,
    /// and the CC columns of its first `gpu_tokens` tokens, copied too.
    fn offload(
        &self,
        (cpu, gpu): (&str, &str),
        (cc, cg, gg): (usize, usize, usize),
        gpu_tokens: usize,
    ) -> Vec<PartLayout> {
        let (m, gt) = (self.m, gpu_tokens);
        let mut out = Vec::new();
        if cc > 0 && m > gt {
            out.push(self.part(self.proc(cpu), 0, vec![Self::step(gt..m, m - gt, 0..cc)]));
        }
        let copied = |rows, pad, cols| StepLayout {
            upload: true,
            ..Self::step(rows, pad, cols)
        };
        let mut steps = Vec::new();
        if gg > 0 {
            steps.push(Self::step(0..m, m, cc + cg..cc + cg + gg));
        }
        if cg > 0 {
            steps.push(copied(0..m, m, cc..cc + cg));
        }
        if gt > 0 && cc > 0 {
            steps.push(copied(0..gt, gt, 0..cc));
        }
        if !steps.is_empty() {
            out.push(self.part(self.proc(gpu), 1, steps));
        }
        out
    }

    /// Refuses a step outside `M × N` or with more rows than its graph.
    fn check_bounds(&self, parts: &[PartLayout]) -> Result<()> {
        let (m, n) = (self.m, self.n);
        for p in parts {
            for s in &p.steps {
                if s.pad_to < s.rows.len() || s.cols.end > n || s.rows.end > m {
                    return Err(self.bad(format!(
                        "a part on `{}` covers rows {:?} and columns {:?} with a graph of M = {}, outside M = {m}, N = {n}",
                        self.plan.processors[p.proc], s.rows, s.cols, s.pad_to
                    )));
                }
            }
        }
        Ok(())
    }

    /// A plan decision the runtime cannot lay out.
    fn bad(&self, message: String) -> Error {
        Error::PlanModel {
            op: self.op.op.clone(),
            phase: self.op.phase,
            message: format!("at length {}: {message}", self.d.len),
        }
    }
}

/// One GEMM a plan runs: [`plan_gemms`].
#[derive(Debug, Clone, PartialEq)]
pub struct PlanGemm {
    /// The model operator.
    pub op: String,
    /// The processor that runs it.
    pub processor: String,
    /// M (padded to a prepared graph where the processor runs static
    /// graphs) × K × the columns of its share.
    pub shape: GemmShape,
    /// The processor's dtype in the plan (f32 where the plan names none).
    pub dtype: DType,
    /// The processor's operand order for the operator.
    pub order: OperandOrder,
}

/// One static graph a plan runs on a graph-set processor, before weights:
/// [`plan_static_graphs`].
#[derive(Debug, Clone, PartialEq)]
pub struct StaticGraph {
    /// The graph-set processor.
    pub processor: String,
    /// The model operator.
    pub op: String,
    /// First output column (of N) of the share it computes.
    pub first_col: u32,
    /// Shape (M is the prepared size), dtype, operand order, weight mode
    /// (the graph set's).
    pub spec: GemmSpec,
    /// The most instances (experts) a decision runs it for: one graph each
    /// (1 where the graph takes the weights as an input).
    pub instances: u32,
    /// Layers of the operator: one graph each, their weights differ (1
    /// where the graph takes the weights as an input).
    pub layers: u32,
}

/// Every static graph `plan` runs on its graph-set processors at any length
/// its tables cover, once each, laid out as [`Runtime`] lays them out (it
/// shares one graph between lengths and phases that need the same shape
/// and columns). What `hetero compile` builds ahead of time.
pub fn plan_static_graphs(plan: &Plan) -> Result<Vec<StaticGraph>> {
    let decider = Decider::new(plan);
    let is_static = |p: usize| plan.graph_set(&plan.processors[p]).is_some();
    let mut out: Vec<StaticGraph> = Vec::new();
    let mut seen: std::collections::HashMap<_, usize> = std::collections::HashMap::new();
    for (oi, op) in plan.ops.iter().enumerate() {
        for len in op.ranges.iter().flat_map(|r| r.from..=r.to) {
            let d = decider.decision(plan, oi, len)?;
            for part in layout(plan, oi, &d, op.n, &is_static)? {
                if !is_static(part.proc) {
                    continue;
                }
                let processor = &plan.processors[part.proc];
                for step in &part.steps {
                    let shape = GemmShape::new(step.pad_to as u32, op.k, step.cols.len() as u32)
                        .ok_or_else(|| Error::PlanModel {
                            op: op.op.clone(),
                            phase: op.phase,
                            message: format!("at length {len}: an empty part on `{processor}`"),
                        })?;
                    // Weights as inputs: one graph serves every layer and
                    // instance.
                    let input =
                        (plan.graph_set(processor)).is_some_and(|g| g.weights == WeightMode::Input);
                    let g = StaticGraph {
                        processor: processor.clone(),
                        op: op.op.clone(),
                        first_col: step.cols.start as u32,
                        spec: GemmSpec {
                            shape,
                            dtype: plan.dtype(processor).unwrap_or(DType::F32),
                            order: op.order(processor),
                            weights: if input {
                                WeightMode::Input
                            } else {
                                WeightMode::Static
                            },
                        },
                        instances: if input { 1 } else { d.instances },
                        layers: if input { 1 } else { op.layers },
                    };
                    let key = (part.proc, op.op.clone(), g.first_col, g.spec);
                    match seen.get(&key) {
                        Some(&i) => out[i].instances = out[i].instances.max(g.instances),
                        None => {
                            seen.insert(key, out.len());
                            out.push(g);
                        }
                    }
                }
            }
        }
    }
    Ok(out)
}

/// The GEMMs `plan` runs for every operator of `phase` at length `len`, as
/// [`Runtime`] lays them out: each part's steps, one GEMM each (an offload
/// decision's GPU part runs its resident and its copied rows apart). What
/// `hetero profile --plan` measures. A processor runs static graphs where
/// the plan prepares graphs for it.
pub fn plan_gemms(plan: &Plan, phase: Phase, len: u32) -> Result<Vec<PlanGemm>> {
    let decider = Decider::new(plan);
    let is_static = |p: usize| {
        plan.graph_sets
            .iter()
            .any(|g| g.processor == plan.processors[p])
    };
    let mut out = Vec::new();
    for (oi, op) in plan.ops.iter().enumerate() {
        if op.phase != phase {
            continue;
        }
        let d = decider.decision(plan, oi, len)?;
        for part in layout(plan, oi, &d, op.n, &is_static)? {
            let processor = plan.processors[part.proc].clone();
            let dtype = plan.dtype(&processor).unwrap_or(DType::F32);
            let order = op.order(&processor);
            for step in &part.steps {
                let shape = GemmShape::new(step.pad_to as u32, op.k, step.cols.len() as u32)
                    .ok_or_else(|| Error::PlanModel {
                        op: op.op.clone(),
                        phase,
                        message: format!(
                            "at length {len}: a part of {}x{}x{}",
                            step.pad_to,
                            op.k,
                            step.cols.len()
                        ),
                    })?;
                out.push(PlanGemm {
                    op: op.op.clone(),
                    processor: processor.clone(),
                    shape,
                    dtype,
                    order,
                });
            }
        }
    }
    Ok(out)
}

/// A decision in words.
pub fn label(s: &Strategy, m: u32) -> String {
    let rows = |parts: &[RowPart]| {
        parts
            .iter()
            .map(|p| format!("{} {}", p.processor, p.rows))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    match s {
        Strategy::Single {
            processor,
            padded_to: Some(g),
            ..
        } if *g > m => format!("{processor} padded to {g}"),
        Strategy::Single {
            processor,
            online_prepare: true,
            ..
        } => format!("{processor} (online prepare)"),
        Strategy::Single { processor, .. } => format!("{processor} alone"),
        Strategy::RowCut { parts } => format!("rows {}", rows(parts)),
        Strategy::Hybrid { padded_to, parts } => {
            format!("rows {} (padded to {padded_to})", rows(parts))
        }
        Strategy::SeqCut { parts } => format!(
            "tokens {}",
            parts
                .iter()
                .map(|p| if p.graphs.is_empty() {
                    format!("{} {}", p.processor, p.tokens)
                } else {
                    format!(
                        "{} [{}]",
                        p.processor,
                        p.graphs
                            .iter()
                            .map(u32::to_string)
                            .collect::<Vec<_>>()
                            .join("+")
                    )
                })
                .collect::<Vec<_>>()
                .join(" + ")
        ),
        Strategy::Chunked {
            processor,
            chunk,
            chunks,
        } => format!("{processor} {chunks} chunks of {chunk}"),
        Strategy::Offload {
            cc_rows,
            cg_rows,
            gg_rows,
            gpu_tokens,
            ..
        } => format!("offload cc {cc_rows} / cg {cg_rows} / gg {gg_rows}, {gpu_tokens} gpu tokens"),
    }
}
