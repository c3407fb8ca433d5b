//! Why a decision won: re-solve one cell of a plan with its predictor and
//! list every candidate family with its cost breakdown.

use std::collections::HashMap;

use hetero_plan::{
    Decision, ModelSpec, OffloadPlacement, OpPlan, OperandOrder, Phase, Plan, Strategy,
    StrategyKind,
};

use crate::engine::{LayerGroup, OffloadSetup, OpCtx, Setup, StaticGraphs, Tables, table_top};
use crate::oracle::LatencyOracle;
use crate::solve::{build_procs, decision, launch_after_host, select_ops};
use crate::{Error, OffloadStrategy, Result};

/// One candidate family at a cell, with its best member.
#[derive(Debug, Clone, PartialEq)]
pub struct ExplainedCandidate {
    /// Its family.
    pub kind: StrategyKind,
    /// The candidate in words.
    pub label: String,
    /// The processors in part order.
    pub processors: Vec<String>,
    /// The strategy as the plan would write it.
    pub strategy: Strategy,
    /// Compute time per part, µs.
    pub parts_us: Vec<f64>,
    /// Sync and submission, µs.
    pub sync_us: f64,
    /// Which sync rule applied.
    pub sync_rule: String,
    /// Copy time not hidden by compute, µs.
    pub copy_us: f64,
    /// The total, µs.
    pub total_us: f64,
}

/// Every candidate at one cell, cheapest first, and the plan's decision.
#[derive(Debug, Clone, PartialEq)]
pub struct Explanation {
    /// Operator.
    pub op: String,
    /// Phase.
    pub phase: Phase,
    /// The length asked about.
    pub len: u32,
    /// Rows per instance.
    pub m: u32,
    /// Instances per layer (costs cover all of them).
    pub instances: u32,
    /// Input and output features.
    pub k: u32,
    /// Output features.
    pub n: u32,
    /// Candidate families, cheapest first.
    pub candidates: Vec<ExplainedCandidate>,
    /// The decision stored in the plan.
    pub planned: Decision,
    /// The decision the re-solve makes; equal to `planned` unless the
    /// solver changed since the plan was written.
    pub resolved: Option<Decision>,
}

/// Rebuilds the solver state a plan was made with.
pub(crate) fn setup_from_plan<'a, O: LatencyOracle + ?Sized>(
    oracle: &'a O,
    plan: &Plan,
) -> Result<Setup<'a>> {
    let dtypes: Vec<(Option<String>, hetero_plan::DType)> = plan
        .dtypes
        .iter()
        .map(|d| (Some(d.processor.clone()), d.dtype))
        .collect();
    let mut notes = vec![];
    let mut procs = build_procs(oracle, &plan.processors, &dtypes, &mut notes)?;
    let info = plan.solver.as_ref();
    let idx = |id: &str| procs.iter().position(|p| p.id == id);
    let (graphs, weights): (Vec<StaticGraphs>, Vec<_>) = plan
        .graph_sets
        .iter()
        .filter_map(|g| {
            let graphs = StaticGraphs {
                p: idx(&g.processor)?,
                prefill: g.sizes.clone(),
                decode: g.decode_sizes.clone(),
            };
            Some((graphs, g.weights))
        })
        .unzip();
    let offload = match info.and_then(|i| i.offload.as_ref()) {
        Some(o) => Some(OffloadSetup {
            cpu: match o.cpu.as_str() {
                "" => None,
                cpu => Some(idx(cpu).ok_or_else(|| missing(cpu))?),
            },
            gpu: idx(&o.gpu).ok_or_else(|| missing(&o.gpu))?,
            strategy: o
                .strategy
                .as_deref()
                .and_then(OffloadStrategy::from_name)
                .unwrap_or(OffloadStrategy::Sliced),
            resident: resident_groups(plan, o),
        }),
        None => None,
    };
    if let Some(o) = &offload {
        launch_after_host(&mut procs[o.gpu], &mut notes);
    }
    for (g, w) in graphs.iter().zip(weights) {
        procs[g.p].graph_weights = w;
    }
    Ok(Setup {
        procs,
        row_align: info.map_or(256, |i| i.row_align),
        graphs,
        offload,
        // One cell is explained: its tables are predicted on demand.
        exhaustive: false,
    })
}

/// The groups of layers of every operator as the plan's tables have them,
/// with the rows the placement keeps resident in each.
fn resident_groups(plan: &Plan, o: &OffloadPlacement) -> HashMap<String, Vec<LayerGroup>> {
    let mut out: HashMap<String, Vec<LayerGroup>> = HashMap::new();
    for t in &plan.ops {
        let groups = out.entry(t.op.clone()).or_default();
        if !groups.iter().any(|g| g.first == t.first_layer) {
            groups.push(LayerGroup {
                first: t.first_layer,
                layers: t.layers,
                rows: o.rows_at(&t.op, t.first_layer),
            });
        }
    }
    for groups in out.values_mut() {
        groups.sort_by_key(|g| g.first);
    }
    out
}

fn missing(id: &str) -> Error {
    Error::MissingProcessor {
        strategy: "the plan's offload placement".into(),
        need: format!("processor `{id}`"),
        have: "not in the plan's processors".into(),
    }
}

/// Explains the decision for `op` in `phase` at `len`: re-solves that cell
/// with `oracle` (the predictor the plan was solved with; check the
/// fingerprints first) and lists every candidate family. Where the plan
/// decides per group of layers, this is the group of the first layer
/// ([`explain_layer`]).
pub fn explain<O: LatencyOracle + ?Sized>(
    oracle: &O,
    model: &ModelSpec,
    plan: &Plan,
    op: &str,
    phase: Phase,
    len: u32,
) -> Result<Explanation> {
    explain_layer(oracle, model, plan, op, phase, 0, len)
}

/// [`explain`] for the group of layers that covers `layer`.
pub fn explain_layer<O: LatencyOracle + ?Sized>(
    oracle: &O,
    model: &ModelSpec,
    plan: &Plan,
    op: &str,
    phase: Phase,
    layer: u32,
    len: u32,
) -> Result<Explanation> {
    let lop = select_ops(model, &[op.to_string()])?[0];
    let op_plan = plan
        .op_in_layer(op, phase, layer)
        .ok_or_else(|| Error::NotInPlan {
            op: op.into(),
            phase: phase.to_string(),
            len,
            covered: format!("no {phase} lengths"),
        })?;
    let planned = op_plan.at(len).ok_or_else(|| Error::NotInPlan {
        op: op.into(),
        phase: phase.to_string(),
        len,
        covered: coverage(op_plan),
    })?;
    let setup = setup_from_plan(oracle, plan)?;
    let orders: Vec<OperandOrder> = setup.procs.iter().map(|p| op_plan.order(&p.id)).collect();
    let m = lop.gemms(phase, len).map_or(len, |g| g.0.m.get());
    let top = table_top(&setup, phase, m);
    let tables = Tables::new(&setup, lop, phase, top, m, Some(orders), None);
    let mut cx = OpCtx::with_tables(&setup, lop, phase, std::sync::Arc::new(tables));
    cx.prune = false;
    if let Some(o) = &setup.offload {
        cx.resident = Some(
            o.groups(lop)
                .iter()
                .find(|g| (g.first..g.first + g.layers).contains(&op_plan.first_layer))
                .map_or(0, |g| g.rows),
        );
    }
    let cell = cx.cell(len);
    let procs = &setup.procs;
    let candidates = cell
        .cands
        .iter()
        .map(|c| ExplainedCandidate {
            kind: c.kind(cell.m),
            label: c.label(procs, cell.m),
            processors: c.procs().iter().map(|&p| procs[p].id.clone()).collect(),
            strategy: c.strategy(procs, cell.m),
            parts_us: c.parts.to_vec(),
            sync_us: c.sync,
            sync_rule: c.sync_rule.into(),
            copy_us: c.copy,
            total_us: c.total,
        })
        .collect();
    Ok(Explanation {
        op: op.into(),
        phase,
        len,
        m: cell.m,
        instances: cell.instances,
        k: lop.k,
        n: lop.n,
        candidates,
        resolved: decision(procs, len, &cell),
        planned,
    })
}

/// The lengths a decision table covers, in words.
pub fn coverage(op: &OpPlan) -> String {
    match op.spans.as_slice() {
        [] => "no lengths".into(),
        [s] => format!("lengths {}..={}", s.from, s.to),
        _ => {
            let v: Vec<String> = op.lengths().take(12).map(|l| l.to_string()).collect();
            format!(
                "lengths {}{}",
                v.join(","),
                if op.length_count() > 12 { ",..." } else { "" }
            )
        }
    }
}
