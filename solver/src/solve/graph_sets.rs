//! The graph-set step: the prompt-length distribution prefill is solved
//! for, and the prefill sizes each static-graph processor prepares.

use std::collections::HashMap;
use std::sync::Arc;

use hetero_plan::{LinearOp, Phase};

use crate::engine::{Setup, Tables, last_token_only};
use crate::oracle::LatencyOracle;
use crate::settings::{DEFAULT_PREPARE_BUDGET_US, Distribution, GraphChoice, Settings, fmt_us};
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

/// Sets the prefill sizes of every static-graph processor: chosen over the
/// distribution within the budgets (after the decode graphs every plan
/// needs), or the sizes given. Without prefill, refuses a prepare-time
/// budget the decode graphs alone exceed.
pub(super) fn choose_graph_sets<O: LatencyOracle + ?Sized>(
    oracle: &O,
    setup: &mut Setup,
    ops: &[&LinearOp],
    prefill_tables: &HashMap<String, Arc<Tables>>,
    dist: Option<&Distribution>,
    settings: &Settings,
) -> Result<()> {
    let has_prefill = settings.phases.contains(&Phase::Prefill);
    let has_decode = settings.phases.contains(&Phase::Decode);
    let prepare_budget = prepare_budget(settings);
    // Operators whose rows grow with the prompt use the prefill sizes.
    let growing: Vec<&LinearOp> = ops
        .iter()
        .copied()
        .filter(|o| !last_token_only(o, Phase::Prefill))
        .collect();
    for gi in 0..setup.graphs.len() {
        let s = setup.graphs[gi].p;
        // Decode graphs (and the lm_head's M = 1 graph) come first.
        let (reserved_us, reserved_b) = graphs::reserved(setup, gi, ops, has_prefill);
        let mem_budget = settings.graph_mem_budget.or(oracle
            .processors()
            .iter()
            .find(|p| p.id == setup.procs[s].id)
            .and_then(|p| p.capabilities.memory_bytes));
        if settings.graphs == GraphChoice::Auto && has_prefill {
            let dist = dist.expect("prefill has a distribution");
            setup.graphs[gi].prefill = graphs::choose(
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
            )?;
        } else if let GraphChoice::Sizes(sizes) = &settings.graphs {
            setup.graphs[gi].prefill = sizes.clone();
        } else if has_decode && reserved_us > prepare_budget && settings.prepare_budget_us.is_some()
        {
            return Err(Error::BudgetTooSmall {
                what: "prepare-time",
                processor: setup.procs[s].id.clone(),
                need: fmt_us(reserved_us),
                budget: fmt_us(prepare_budget),
            });
        }
    }
    Ok(())
}
