//! The top level, as a list of steps: resolve the processors, set up the
//! device (offload residency, static-graph processors), build the prefill
//! tables, choose the graph sets, solve every operator × phase × length in
//! parallel, and assemble the plan.

mod assemble;
mod cells;
mod graph_sets;
mod procs;
mod sampled;
mod tables;

use hetero_plan::{DenseOpPlan, Fingerprint, ModelSpec, Plan};

use crate::oracle::LatencyOracle;
use crate::settings::Settings;
use crate::{Result, nongemm};

pub(crate) use cells::decision;
pub(crate) use procs::{build_procs, launch_after_host, select_ops};

/// Solves a model on a device: every operator in every phase at every length.
///
/// `predictor` is the fingerprint recorded in the plan (use
/// [`hetero_plan::Predictor::fingerprint`] for a predictor file).
pub fn solve<O: LatencyOracle + ?Sized>(
    oracle: &O,
    predictor: Fingerprint,
    model: &ModelSpec,
    settings: &Settings,
) -> Result<Plan> {
    solve_with_stats(oracle, predictor, model, settings).map(|(plan, _)| plan)
}

/// How much of a solve was costed in full.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SolveStats {
    /// Distinct cells (an operator's rows and instances in a phase) solved;
    /// operators with a twin share theirs.
    pub cells: usize,
    /// Of those, the cells whose every candidate was costed (all of them
    /// with [`Settings::exhaustive`]).
    pub costed: usize,
}

/// [`solve`], and how many cells it costed in full.
pub fn solve_with_stats<O: LatencyOracle + ?Sized>(
    oracle: &O,
    predictor: Fingerprint,
    model: &ModelSpec,
    settings: &Settings,
) -> Result<(Plan, SolveStats)> {
    solve_inner(oracle, predictor, model, settings, false).map(|(plan, _, stats)| (plan, stats))
}

/// [`solve_with_stats`], with the decision tables as solved, one decision
/// per length, before the plan compacts them into ranges: for comparing
/// solves, or a plan with its solve, length by length.
pub fn solve_with_tables<O: LatencyOracle + ?Sized>(
    oracle: &O,
    predictor: Fingerprint,
    model: &ModelSpec,
    settings: &Settings,
) -> Result<(Plan, Vec<DenseOpPlan>, SolveStats)> {
    solve_inner(oracle, predictor, model, settings, true)
        .map(|(plan, tables, stats)| (plan, tables.unwrap_or_default(), stats))
}

fn solve_inner<O: LatencyOracle + ?Sized>(
    oracle: &O,
    predictor: Fingerprint,
    model: &ModelSpec,
    settings: &Settings,
    keep_tables: bool,
) -> Result<(Plan, Option<Vec<DenseOpPlan>>, SolveStats)> {
    settings.check()?;
    let ops = select_ops(model, &settings.ops)?;
    let mut notes = vec![];
    let procs = build_procs(oracle, &settings.processors, &settings.dtypes, &mut notes)?;
    let (procs, offload) = procs::offload_mode(procs, settings, &mut notes)?;
    let mut setup = procs::device_setup(procs, offload, &ops, settings, &mut notes)?;
    let dist = graph_sets::prompt_distribution(settings)?;
    let prefill_tables = tables::prefill_tables(&setup, &ops, settings);
    graph_sets::choose_graph_sets(
        oracle,
        &mut setup,
        &ops,
        &prefill_tables,
        dist.as_ref(),
        settings,
    )?;
    let (plan_ops, stats) = cells::solve_ops(&setup, &ops, &prefill_tables, settings)?;
    let tables = keep_tables.then(|| plan_ops.iter().map(|(_, d)| d.clone()).collect());
    let solved = assemble::Solved {
        setup: &setup,
        ops: &ops,
        plan_ops,
        dist,
        notes,
    };
    let mut plan = assemble::plan(oracle, predictor, model, settings, solved);
    let mut notes = vec![];
    plan.non_gemm = Some(nongemm::place(
        oracle, &setup, model, settings, &plan, &mut notes,
    ));
    for n in notes {
        if !plan.notes.contains(&n) {
            plan.notes.push(n);
        }
    }
    Ok((plan, tables, stats))
}

/// Rounds to hundredths, as the plan writes times.
pub(crate) fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}
