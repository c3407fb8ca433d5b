//! The cells step: every operator × phase × length solved in parallel,
//! each distinct (rows, instances) once, and the decisions written per
//! operator.

use std::collections::HashMap;
use std::sync::Arc;

use hetero_plan::{
    CostBreakdown, Decision, DenseOpPlan as OpPlan, LinearOp, OperandOrder, Phase, ProcessorOrder,
    RunnerUp,
};
use rayon::prelude::*;

use super::tables::{max_m_of, twin_key, twins};
use super::{SolveStats, round2, sampled};
use crate::engine::{Cell, LayerGroup, OpCtx, Proc, Setup, Tables};
use crate::settings::Settings;
use crate::{Error, Result};

/// An operator in a phase, with the lengths it is solved at and the group
/// of its layers solved (all of them outside offload mode).
type Task<'o, 's> = (&'o LinearOp, Phase, &'s [u32], LayerGroup);

/// A solved task's context and the (rows, instances) of each length
/// (lengths with the same rows share a cell).
type Context<'s, 'a> = (OpCtx<'s, 'a>, Vec<(u32, u32)>);

/// A context's cells by (rows, instances).
type Cells = HashMap<(u32, u32), Cell>;

/// Every operator's tables, solved: per table, its first layer (of the
/// group of layers it covers) and its decisions.
pub(super) type SolvedOps = Vec<(u32, OpPlan)>;

/// Solves every operator in every phase at every length, in plan order
/// (phase, then operator, then group of layers).
pub(super) fn solve_ops(
    setup: &Setup,
    ops: &[&LinearOp],
    prefill_tables: &HashMap<String, Arc<Tables>>,
    settings: &Settings,
) -> Result<(SolvedOps, SolveStats)> {
    let tasks = tasks(setup, ops, settings);
    // A task whose operator has an earlier twin in the same phase copies
    // its decisions instead of solving them again.
    let offload = setup.offload.is_some();
    let twin_of = twins(&tasks, |&(op, phase, _, g)| {
        twin_key(op, phase, offload.then_some(g.rows))
    });
    let reps: Vec<usize> = (0..tasks.len()).filter(|&i| twin_of[i] == i).collect();
    let contexts = contexts(setup, &tasks, &reps, prefill_tables);
    let (cells, stats) = solve_cells(setup, &contexts);
    let solved: Vec<Result<OpPlan>> = reps
        .par_iter()
        .zip(&contexts)
        .zip(&cells)
        .map(|((&t, (cx, rows)), cells)| op_plan(&setup.procs, tasks[t], cx, rows, cells))
        .collect();
    let mut by_task: Vec<Option<Result<OpPlan>>> = tasks.iter().map(|_| None).collect();
    for (&t, r) in reps.iter().zip(solved) {
        by_task[t] = Some(r);
    }
    let mut plan_ops: SolvedOps = Vec::with_capacity(tasks.len());
    for (i, s) in by_task.into_iter().enumerate() {
        let (op, _, _, g) = tasks[i];
        let op_plan = match s {
            Some(r) => r?,
            None => OpPlan {
                op: op.name.clone(),
                layers: g.layers,
                ..plan_ops[twin_of[i]].1.clone()
            },
        };
        plan_ops.push((g.first, op_plan));
    }
    Ok((plan_ops, stats))
}

/// Every operator in every phase asked for, phase first, in offload mode
/// once per group of its layers.
fn tasks<'o, 's>(setup: &Setup, ops: &[&'o LinearOp], settings: &'s Settings) -> Vec<Task<'o, 's>> {
    let mut tasks = vec![];
    for phase in [Phase::Prefill, Phase::Decode] {
        if !settings.phases.contains(&phase) {
            continue;
        }
        let lens: &[u32] = match phase {
            Phase::Prefill => &settings.prefill_lengths,
            Phase::Decode => &settings.decode_lengths,
        };
        for op in ops {
            let groups = setup.offload.as_ref().map_or_else(
                || {
                    vec![LayerGroup {
                        first: 0,
                        layers: op.layers,
                        rows: 0,
                    }]
                },
                |o| o.groups(op),
            );
            tasks.extend(groups.into_iter().map(|g| (*op, phase, lens, g)));
        }
    }
    tasks
}

/// The context of each task solved (`reps`): on the prefill tables made
/// earlier, else on tables of its own.
fn contexts<'s, 'a>(
    setup: &'s Setup<'a>,
    tasks: &[Task<'s, '_>],
    reps: &[usize],
    prefill_tables: &HashMap<String, Arc<Tables>>,
) -> Vec<Context<'s, 'a>> {
    reps.par_iter()
        .map(|&i| {
            let (op, phase, lens, g) = tasks[i];
            let mut cx = match prefill_tables.get(&op.name) {
                Some(t) if phase == Phase::Prefill => {
                    OpCtx::with_tables(setup, op, phase, t.clone())
                }
                _ => OpCtx::new(setup, op, phase, max_m_of(op, phase, lens)),
            };
            if setup.offload.is_some() {
                cx.resident = Some(g.rows);
            }
            let rows = lens.iter().map(|&l| cx.rows(l)).collect();
            (cx, rows)
        })
        .collect()
}

/// The cell of every distinct (rows, instances) of every context, each
/// with its winner and runner-up only: every one costed in full when the
/// solve is exhaustive, else solved in blocks ([`sampled`]).
fn solve_cells(setup: &Setup, contexts: &[Context]) -> (Vec<Cells>, SolveStats) {
    let solved: Vec<(usize, Vec<Cell>, usize)> = if setup.exhaustive {
        every_cell(contexts)
    } else {
        sampled_cells(contexts)
    };
    let mut cells: Vec<Cells> = contexts.iter().map(|_| HashMap::new()).collect();
    let mut stats = SolveStats::default();
    for (j, list, costed) in solved {
        stats.cells += list.len();
        stats.costed += costed;
        for cell in list {
            cells[j].insert((cell.m, cell.instances), cell);
        }
    }
    (cells, stats)
}

/// Every cell costed in full. Cells are solved in order of M, then
/// operator: a thread solves one M for several operators in a row, so a
/// compiled model's per-thread memo also serves the shapes that operators
/// with the same K share at that M.
fn every_cell(contexts: &[Context]) -> Vec<(usize, Vec<Cell>, usize)> {
    let mut work: Vec<(u32, u32, usize)> = vec![];
    for (j, (_, rows)) in contexts.iter().enumerate() {
        work.extend(distinct(rows).into_iter().map(|(m, i)| (m, i, j)));
    }
    work.sort_unstable();
    work.par_iter()
        .map(|&(m, i, j)| {
            let mut cell = contexts[j].0.cell_at(m, i);
            cell.cands.truncate(2);
            (j, vec![cell], 1)
        })
        .collect()
}

/// The cells of every context solved in blocks, the blocks in parallel.
fn sampled_cells(contexts: &[Context]) -> Vec<(usize, Vec<Cell>, usize)> {
    let keys: Vec<Vec<(u32, u32)>> = contexts
        .iter()
        .map(|(_, rows)| {
            let mut k = distinct(rows);
            k.sort_unstable_by_key(|&(m, i)| (i, m));
            k
        })
        .collect();
    let work: Vec<(usize, std::ops::Range<usize>)> = contexts
        .iter()
        .enumerate()
        .flat_map(|(j, (cx, _))| {
            sampled::blocks(cx, &keys[j])
                .into_iter()
                .map(move |b| (j, b))
        })
        .collect();
    work.into_par_iter()
        .map(|(j, b)| {
            let (cells, costed) = sampled::solve_block(&contexts[j].0, &keys[j][b]);
            (j, cells, costed)
        })
        .collect()
}

/// The distinct (rows, instances) of a context, sorted.
fn distinct(rows: &[(u32, u32)]) -> Vec<(u32, u32)> {
    let mut keys = rows.to_vec();
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// A task's plan: its decision at every length, and the operand order of
/// every processor that does not run it in `aw`.
fn op_plan(
    procs: &[Proc],
    (op, phase, lens, group): Task,
    cx: &OpCtx,
    rows: &[(u32, u32)],
    cells: &HashMap<(u32, u32), Cell>,
) -> Result<OpPlan> {
    let decisions = lens
        .iter()
        .zip(rows)
        .map(|(&len, key)| {
            decision(procs, len, &cells[key]).ok_or_else(|| {
                Error::arg(
                    "predictor",
                    format!(
                        "no processor predicts a finite time for `{}` ({phase}) at length {len}",
                        op.name
                    ),
                )
            })
        })
        .collect::<Result<_>>()?;
    Ok(OpPlan {
        op: op.name.clone(),
        phase,
        k: op.k,
        n: op.n,
        layers: group.layers,
        orders: procs
            .iter()
            .zip(&cx.tables.orders)
            .filter(|(_, o)| **o != OperandOrder::Aw)
            .map(|(p, o)| ProcessorOrder {
                processor: p.id.clone(),
                order: *o,
            })
            .collect(),
        decisions,
    })
}

/// Builds the decision of a cell: the cheapest candidate, and the cheapest
/// of another family as the runner-up.
pub(crate) fn decision(procs: &[Proc], len: u32, cell: &Cell) -> Option<Decision> {
    let w = cell.cands.first()?;
    let m = cell.m;
    Some(Decision {
        len,
        m: (m != len).then_some(m),
        instances: cell.instances,
        strategy: w.strategy(procs, m),
        cost: CostBreakdown {
            parts_us: w.parts.iter().map(|&x| round2(x)).collect(),
            sync_us: round2(w.sync),
            sync_block_us: (round2(w.sync_block) != round2(w.sync)).then(|| round2(w.sync_block)),
            copy_us: round2(w.copy),
            total_us: round2(w.total),
        },
        runner_up: cell.cands.get(1).map(|r| RunnerUp {
            kind: r.kind(m),
            label: r.label(procs, m),
            total_us: round2(r.total),
            margin_us: round2(r.total - w.total),
        }),
    })
}
