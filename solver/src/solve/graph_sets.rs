//! The graph-set step: the prompt-length distribution prefill is solved
//! for, and the prefill sizes each static-graph processor prepares.

use std::collections::HashMap;
use std::sync::Arc;

use hetero_plan::{LinearOp, Phase, WeightMode};

use crate::engine::{Setup, Tables, last_token_only};
use crate::oracle::LatencyOracle;
use crate::settings::{
    DEFAULT_PREPARE_BUDGET_US, Distribution, GraphChoice, Settings, fmt_bytes, fmt_us,
};
use crate::{Error, Result, graphs};

/// The prompt-length distribution of prefill (`None` without prefill):
/// the one given, else uniform up to the longest solved length (at most
/// 2048). Refuses one with prompts beyond the longest solved length.
pub(super) fn prompt_distribution(settings: &Settings) -> Result<Option<Distribution>> {
    if !settings.phases.contains(&Phase::Prefill) {
        return Ok(None);
    }
    let prefill_max = settings.prefill_lengths.last().copied().unwrap_or(0);
    let d = match &settings.prompt_lengths {
        Some(d) => d.clone(),
        None => Distribution::uniform(1, prefill_max.min(2048)),
    };
    if d.max_len() > prefill_max {
        return Err(Error::arg(
            "--prompt-lengths",
            format!(
                "{} has prompts of {} tokens, beyond the longest solved length {prefill_max}; widen --lengths",
                d.name,
                d.max_len()
            ),
        ));
    }
    Ok(Some(d))
}

/// The prepare-time budget of graph sets.
pub(super) fn prepare_budget(settings: &Settings) -> f64 {
    settings
        .prepare_budget_us
        .unwrap_or(DEFAULT_PREPARE_BUDGET_US)
}

/// Sets the prefill sizes of every static-graph processor and how its
/// graphs hold the weights: chosen over the distribution within the
/// budgets (after the decode graphs every plan needs), or the sizes given.
/// Each way of holding the weights is tried ([`pick_weights`]). Refuses
/// budgets that neither way fits.
pub(super) fn choose_graph_sets<O: LatencyOracle + ?Sized>(
    oracle: &O,
    setup: &mut Setup,
    ops: &[&LinearOp],
    prefill_tables: &HashMap<String, Arc<Tables>>,
    dist: Option<&Distribution>,
    settings: &Settings,
) -> Result<()> {
    for gi in 0..setup.graphs.len() {
        let s = setup.graphs[gi].p;
        let mem_budget = settings.graph_mem_budget.or(oracle
            .processors()
            .iter()
            .find(|p| p.id == setup.procs[s].id)
            .and_then(|p| p.capabilities.memory_bytes));
        let (weights, sizes) =
            pick_weights(setup, gi, ops, prefill_tables, dist, settings, mem_budget)?;
        setup.procs[s].graph_weights = weights;
        if let Some(sizes) = sizes {
            setup.graphs[gi].prefill = sizes;
        }
    }
    Ok(())
}

/// How static processor `gi`'s graphs hold the weights, and its prefill
/// sizes where it chooses them. Static weights (one graph per layer and
/// weight matrix, nothing paid per run) and weights as inputs (one graph
/// per operator, the weights written before each run) are each given the
/// budgets: where both fit, the lower expected prefill latency wins, static
/// weights on a tie; where one fits, that one. The graphs of decode and of
/// the last-token operators are reserved first in either.
#[allow(clippy::too_many_arguments)]
fn pick_weights(
    setup: &mut Setup,
    gi: usize,
    ops: &[&LinearOp],
    prefill_tables: &HashMap<String, Arc<Tables>>,
    dist: Option<&Distribution>,
    settings: &Settings,
    mem_budget: Option<u64>,
) -> Result<(WeightMode, Option<Vec<u32>>)> {
    let has_prefill = settings.phases.contains(&Phase::Prefill);
    let prepare_budget = prepare_budget(settings);
    let s = setup.graphs[gi].p;
    // Operators whose rows grow with the prompt use the prefill sizes.
    let growing: Vec<&LinearOp> = ops
        .iter()
        .copied()
        .filter(|o| !last_token_only(o, Phase::Prefill))
        .collect();
    let sizes_given = match &settings.graphs {
        GraphChoice::Sizes(sizes) => Some(sizes.clone()),
        _ => None,
    };
    // Sizes given count with the decode graphs.
    if let Some(sizes) = &sizes_given {
        setup.graphs[gi].prefill = sizes.clone();
    }
    let mut best: Option<(f64, WeightMode, Option<Vec<u32>>)> = None;
    let mut refused = None;
    for mode in [WeightMode::Static, WeightMode::Input] {
        setup.procs[s].graph_weights = mode;
        let (reserved_us, reserved_b) = graphs::reserved(setup, gi, ops, has_prefill);
        let fits_reserved =
            reserved_us <= prepare_budget && mem_budget.is_none_or(|b| reserved_b <= b as f64);
        let choice = if settings.graphs == GraphChoice::Auto && has_prefill {
            let dist = dist.expect("prefill has a distribution");
            graphs::choose(
                setup,
                gi,
                &growing,
                prefill_tables,
                &dist.points,
                &settings.prefill_lengths,
                prepare_budget,
                mem_budget,
                reserved_us,
                reserved_b,
            )
            .map(|(sizes, expected)| (expected, Some(sizes)))
        } else if fits_reserved {
            // Sizes given, or decode only: what is prepared is fixed, so
            // static weights, which pay nothing per run, where all of it
            // fits.
            Ok((0.0, None))
        } else {
            Err(Error::BudgetTooSmall {
                what: if reserved_us > prepare_budget {
                    "prepare-time"
                } else {
                    "memory"
                },
                processor: setup.procs[s].id.clone(),
                need: if reserved_us > prepare_budget {
                    fmt_us(reserved_us)
                } else {
                    fmt_bytes(reserved_b as u64)
                },
                budget: if reserved_us > prepare_budget {
                    fmt_us(prepare_budget)
                } else {
                    fmt_bytes(mem_budget.unwrap_or(0))
                },
            })
        };
        match choice {
            Ok((expected, sizes)) => {
                if best.as_ref().is_none_or(|b| expected < b.0) {
                    best = Some((expected, mode, sizes));
                }
            }
            Err(e) => refused = Some(e),
        }
    }
    match best {
        Some((_, mode, sizes)) => Ok((mode, sizes.or(sizes_given))),
        // Sizes given are prepared whatever the budgets; the default
        // budget does not refuse the decode graphs.
        None if (settings.graphs != GraphChoice::Auto || !has_prefill)
            && (sizes_given.is_some() || settings.prepare_budget_us.is_none()) =>
        {
            Ok((WeightMode::Input, sizes_given))
        }
        None => Err(refused.expect("a way was refused")),
    }
}
