//! The tables step: the prefill predictions of every operator, shared by
//! the graph-set choice and the solve, and the twins that share them.

use std::collections::HashMap;
use std::sync::Arc;

use hetero_plan::{LinearOp, MRule, Phase};
use rayon::prelude::*;

use crate::engine::{Setup, Tables, last_token_only, table_top};
use crate::graphs;
use crate::settings::{GraphChoice, Settings};

/// What a solved operator's decisions depend on besides the device and the
/// settings: two operators with the same key get the same decisions.
type TwinKey = (u32, u32, u32, u32, u32, Phase, MRule, Option<u32>);

pub(super) fn twin_key(op: &LinearOp, phase: Phase, resident: Option<u32>) -> TwinKey {
    let rule = match phase {
        Phase::Prefill => op.prefill_m,
        Phase::Decode => op.decode_m,
    };
    // Offload mode: the rows resident on the GPU in the layers solved.
    (
        op.k, op.n, op.count, op.active, op.layers, phase, rule, resident,
    )
}

/// For each item, the index of the first item with the same key (itself
/// when it is the first).
pub(super) fn twins<T, K: Eq + std::hash::Hash>(items: &[T], key: impl Fn(&T) -> K) -> Vec<usize> {
    let mut first: HashMap<K, usize> = HashMap::new();
    items
        .iter()
        .enumerate()
        .map(|(i, x)| *first.entry(key(x)).or_insert(i))
        .collect()
}

/// The most rows per instance `op` sees over `lens`.
pub(super) fn max_m_of(op: &LinearOp, phase: Phase, lens: &[u32]) -> u32 {
    lens.iter()
        .map(|&l| op.gemms(phase, l).map_or(1, |g| g.0.m.get()))
        .max()
        .unwrap_or(1)
}

/// The prefill tables of every operator, by name (empty without prefill):
/// every M the lengths reach, and every candidate graph size. Operators
/// that differ only by name (attn_q and attn_o, ffn_gate and ffn_up) share
/// their tables and, later, their decisions.
pub(super) fn prefill_tables(
    setup: &Setup,
    ops: &[&LinearOp],
    settings: &Settings,
) -> HashMap<String, Arc<Tables>> {
    if !settings.phases.contains(&Phase::Prefill) {
        return HashMap::new();
    }
    let prefill_max = settings.prefill_lengths.last().copied().unwrap_or(0);
    let pool_top = setup
        .graphs
        .iter()
        .map(|g| {
            graphs::pool(prefill_max, setup.procs[g.p].tile)
                .last()
                .copied()
                .unwrap_or(0)
        })
        .max()
        .unwrap_or(0);
    // Tables do not depend on the rows resident.
    let first = twins(ops, |op| twin_key(op, Phase::Prefill, None));
    let unique: Vec<Arc<Tables>> = ops
        .par_iter()
        .enumerate()
        .filter(|&(i, _)| first[i] == i)
        .map(|(_, op)| {
            let max_m = max_m_of(op, Phase::Prefill, &settings.prefill_lengths);
            let mut top = table_top(setup, Phase::Prefill, max_m);
            if !last_token_only(op, Phase::Prefill) {
                top = top.max(pool_top);
            }
            let sizes = static_sizes(setup, settings, prefill_max);
            let t = Tables::new(setup, op, Phase::Prefill, top, max_m, None, Some(&sizes));
            Arc::new(t)
        })
        .collect();
    let mut by_first: HashMap<usize, Arc<Tables>> = HashMap::new();
    let mut it = unique.into_iter();
    for (i, &f) in first.iter().enumerate() {
        if f == i {
            by_first.insert(i, it.next().expect("one table per distinct operator"));
        }
    }
    ops.iter()
        .zip(&first)
        .map(|(op, f)| (op.name.clone(), by_first[f].clone()))
        .collect()
}

/// The M a static processor's table is predicted at: the graph sizes given,
/// or every candidate size when they are chosen, and M = 1.
fn static_sizes(setup: &Setup, settings: &Settings, prefill_max: u32) -> Vec<u32> {
    let mut sizes: Vec<u32> = match &settings.graphs {
        GraphChoice::Sizes(v) => v.clone(),
        _ => vec![],
    };
    if settings.graphs == GraphChoice::Auto {
        for g in &setup.graphs {
            sizes.extend(graphs::pool(prefill_max, setup.procs[g.p].tile));
        }
    }
    sizes.push(1);
    sizes
}
