//! The top level: resolve processors, choose residency and graph sets,
//! solve every operator × phase × length in parallel, assemble the plan.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use hetero_plan::{
    CostBreakdown, DType, Decision, Fingerprint, GraphSet, LinearOp, ModelSpec, OffloadPlacement,
    OpPlan, Phase, Plan, ProcessorApi, ProcessorDType, ProcessorKind, ProcessorOrder, Resident,
    RowGraph, RunnerUp, SchemaVersion, SolverInfo, Strategy,
};
use rayon::prelude::*;

use std::sync::Arc;

use crate::engine::{
    Cell, OffloadSetup, OpCtx, Proc, Setup, StaticGraphs, Tables, last_token_only, table_top,
};
use crate::oracle::{GemmModel, LatencyOracle};
use crate::settings::{DEFAULT_PREPARE_BUDGET_US, Distribution, GraphChoice, Settings, fmt_bytes};
use crate::{Error, Result, graphs, offload};

/// Resolves the processors the solver may use: the dtype of each, its
/// overheads, and notes on every constant it has to assume.
pub(crate) fn build_procs<'a, O: LatencyOracle + ?Sized>(
    oracle: &'a O,
    only: &[String],
    dtypes: &[(Option<String>, DType)],
    phases: &[Phase],
    notes: &mut Vec<String>,
) -> Result<Vec<Proc<'a>>> {
    let all = oracle.processors();
    for id in only {
        if !all.iter().any(|p| &p.id == id) {
            return Err(Error::MissingProcessor {
                strategy: "--processors".into(),
                need: format!("processor `{id}`"),
                have: ids(all.iter().map(|p| p.id.as_str())),
            });
        }
    }
    for (id, _) in dtypes {
        if let Some(id) = id
            && !all.iter().any(|p| &p.id == id)
        {
            return Err(Error::MissingProcessor {
                strategy: "--dtype".into(),
                need: format!("processor `{id}`"),
                have: ids(all.iter().map(|p| p.id.as_str())),
            });
        }
    }
    let mut procs = vec![];
    for p in all {
        if !only.is_empty() && !only.contains(&p.id) {
            continue;
        }
        let have = oracle.dtypes(&p.id);
        let asked = dtypes
            .iter()
            .find(|(id, _)| id.as_deref() == Some(p.id.as_str()))
            .or_else(|| dtypes.iter().find(|(id, _)| id.is_none()))
            .map(|d| d.1);
        let dtype = match asked {
            Some(d) if have.contains(&d) => d,
            Some(d) => {
                let explicit = dtypes.iter().any(|(id, _)| id.as_deref() == Some(&p.id))
                    || only.contains(&p.id);
                if explicit {
                    return Err(Error::NoModel {
                        processor: p.id.clone(),
                        dtype: d.to_string(),
                        available: dtype_list(&have),
                    });
                }
                notes.push(format!(
                    "{}: no latency model for {d} (it has {}); left out",
                    p.id,
                    dtype_list(&have)
                ));
                continue;
            }
            None if have.contains(&DType::F16) => DType::F16,
            None => match have.first() {
                Some(d) => *d,
                None => {
                    if only.contains(&p.id) {
                        return Err(Error::NoModel {
                            processor: p.id.clone(),
                            dtype: "any".into(),
                            available: "none".into(),
                        });
                    }
                    notes.push(format!("{}: no latency model; left out", p.id));
                    continue;
                }
            },
        };
        let model = oracle
            .gemm_model(&p.id, dtype)
            .expect("dtype is one the oracle listed");
        // Compiled once per solve: the same predictions, faster.
        let model: Arc<dyn GemmModel + Send + 'a> = match model.compiled() {
            Some(fast) => Arc::from(fast),
            None => Arc::new(Borrowed(model)),
        };
        let ov = oracle.overheads(&p.id);
        let caps = &p.capabilities;
        let queue = p.kind == ProcessorKind::Gpu;
        let sync = if caps.host_flag && ov.sync_poll_us.is_some() {
            ov.sync_poll_us
        } else {
            ov.sync_block_us.or(ov.sync_poll_us)
        };
        if p.simulated || p.emulated {
            notes.push(format!(
                "{}: {} processor; its times are {}, not measurements of the processor",
                p.id,
                if p.simulated { "simulated" } else { "emulated" },
                if p.simulated {
                    "a timing model"
                } else {
                    "an emulator's"
                }
            ));
        }
        if sync.is_none() {
            notes.push(format!(
                "{}: no sync cost measured; splits assume 0 µs",
                p.id
            ));
        }
        if queue && ov.submit_empty_us.is_none() {
            notes.push(format!(
                "{}: no submit cost measured; splits assume 0 µs",
                p.id
            ));
        }
        if phases.contains(&Phase::Decode) && ov.concurrent_factor.is_none() && all.len() > 1 {
            notes.push(format!(
                "{}: no concurrent_factor; decode splits assume 1.0 (no bandwidth contention)",
                p.id
            ));
        }
        if caps.static_graphs && ov.prepare.is_none() {
            notes.push(format!(
                "{}: no graph prepare cost measured; online prepare is not considered and graph sets count 0 µs to prepare",
                p.id
            ));
        }
        let can_split = caps.unified_memory || ov.copy_h2d.is_some() || ov.stage_in.is_some();
        if !can_split {
            notes.push(format!(
                "{}: no host copy cost measured for this discrete processor; it runs only alone",
                p.id
            ));
        }
        procs.push(Proc {
            id: p.id.clone(),
            kind: p.kind,
            on_all_host_cores: p.kind == ProcessorKind::Cpu && p.api != ProcessorApi::Cpu,
            static_graphs: caps.static_graphs,
            unified: caps.unified_memory,
            queue,
            tile: caps.tile.unwrap_or(32).max(1),
            dtype,
            model,
            sync_us: sync.unwrap_or(0.0),
            sync_block_us: ov.sync_block_us.or(sync).unwrap_or(0.0),
            submit_us: ov.submit_empty_us.unwrap_or(0.0),
            op_overhead_us: ov.op_overhead_us.filter(|t| t.is_finite() && *t >= 0.0),
            op_overhead_block_us: ov
                .op_overhead_block_us
                .filter(|t| t.is_finite() && *t >= 0.0),
            op_overhead_after_us: ov
                .op_overhead_after_us
                .filter(|t| t.is_finite() && *t >= 0.0),
            alone_extra_us: 0.0,
            // Above 1 (a run alone caught slow) is noise: no processor
            // streams faster for sharing its memory.
            concurrent: ov
                .concurrent_factor
                .filter(|f| *f > 0.0)
                .map_or(1.0, |f| f.min(1.0)),
            copy_h2d: ov.copy_h2d,
            copy_d2h: ov.copy_d2h,
            stage_in: ov.stage_in,
            stage_out: ov.stage_out,
            stage_out_aw: ov.stage_out_aw,
            stage_small: ov.stage_small,
            prepare: ov.prepare,
            can_split,
            device_timed: caps.device_timer && !p.simulated && !p.emulated,
        });
    }
    if procs.is_empty() {
        return Err(Error::NoProcessors);
    }
    Ok(procs)
}

/// A model the oracle owns, used as it is.
struct Borrowed<'a>(&'a dyn GemmModel);

impl GemmModel for Borrowed<'_> {
    fn predict_us(
        &self,
        shape: hetero_plan::GemmShape,
        order: hetero_plan::OperandOrder,
    ) -> Option<f64> {
        self.0.predict_us(shape, order)
    }
}

fn ids<'x>(it: impl Iterator<Item = &'x str>) -> String {
    let v: Vec<&str> = it.collect();
    if v.is_empty() {
        "no processors".into()
    } else {
        v.join(", ")
    }
}

fn dtype_list(d: &[DType]) -> String {
    if d.is_empty() {
        "none".into()
    } else {
        d.iter().map(|d| d.as_str()).collect::<Vec<_>>().join(", ")
    }
}

/// The operators to solve, in model order.
pub(crate) fn select_ops<'m>(model: &'m ModelSpec, only: &[String]) -> Result<Vec<&'m LinearOp>> {
    for name in only {
        if model.op(name).is_none() {
            return Err(Error::UnknownOp {
                op: name.clone(),
                known: model.ops.iter().map(|o| o.name.clone()).collect(),
            });
        }
    }
    Ok(model
        .ops
        .iter()
        .filter(|o| only.is_empty() || only.contains(&o.name))
        .collect())
}

/// Offload mode pairs the fastest CPU with the fastest discrete GPU, as
/// their models predict a 512×4096×4096 GEMM (`--processors` narrows the
/// choice).
fn offload_setup(procs: &[Proc]) -> Result<OffloadSetup> {
    let have = ids(procs.iter().map(|p| p.id.as_str()));
    let fastest = |ok: &dyn Fn(&Proc) -> bool| {
        procs
            .iter()
            .enumerate()
            .filter(|(_, p)| ok(p))
            .map(|(i, p)| {
                let t = crate::engine::predict(p, 512, 4096, 4096, hetero_plan::OperandOrder::Aw);
                (i, if t.is_nan() { f64::INFINITY } else { t })
            })
            .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)))
            .map(|(i, _)| i)
    };
    let cpu =
        fastest(&|p| p.kind == ProcessorKind::Cpu).ok_or_else(|| Error::MissingProcessor {
            strategy: "offload mode (--gpu-mem-budget)".into(),
            need: "a CPU processor".into(),
            have: have.clone(),
        })?;
    let gpu = fastest(&|p| p.kind == ProcessorKind::Gpu && !p.unified).ok_or_else(|| {
        Error::MissingProcessor {
            strategy: "offload mode (--gpu-mem-budget)".into(),
            need: "a discrete GPU (unified_memory: false)".into(),
            have: have.clone(),
        }
    })?;
    if procs[gpu].copy_h2d.is_none() {
        return Err(Error::MissingProcessor {
            strategy: "offload mode (--gpu-mem-budget)".into(),
            need: format!(
                "the host-to-device copy cost (copy_h2d) of `{}`",
                procs[gpu].id
            ),
            have: "no copy_h2d in its overheads".into(),
        });
    }
    Ok(OffloadSetup {
        cpu,
        gpu,
        resident: HashMap::new(),
    })
}

/// Offload mode's GPU: every token streams weights through host memory
/// (the CPU's rows, the GPU's copied ones), and the CPU's pool polls for
/// work after its parts, so the GPU's operators alone launch in that
/// state. Their launch costs what `op_overhead_after` measured beyond
/// `op_overhead` more, where both were measured.
pub(crate) fn launch_after_host(gpu: &mut Proc, notes: &mut Vec<String>) {
    match gpu.after_host_extra_us() {
        Some(extra) => {
            gpu.alone_extra_us = extra;
            notes.push(format!(
                "{}: operators alone cost {:.2} µs more per launch in offload mode (op_overhead_after {:.2} µs, after the CPU's runs)",
                gpu.id,
                extra,
                gpu.op_overhead_after_us.unwrap_or(0.0)
            ));
        }
        None if gpu.device_timed => notes.push(format!(
            "{}: no op_overhead_after measured; its operators alone are costed as launched with nothing before them",
            gpu.id
        )),
        None => {}
    }
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// The host's speed probe behind the plan: the median over the plan's
/// processors of their profiles' probes (`None` where no profile had one).
fn host_probe_us<O: LatencyOracle + ?Sized>(oracle: &O, procs: &[Proc]) -> Option<f64> {
    let probes: Vec<f64> = procs
        .iter()
        .filter_map(|p| oracle.overheads(&p.id).host_probe_us)
        .collect();
    hetero_plan::Stats::from_samples(&probes).map(|s| round2(s.median_us))
}

/// What a solved operator's decisions depend on besides the device and the
/// settings: two operators with the same key get the same decisions.
type TwinKey = (
    u32,
    u32,
    u32,
    u32,
    u32,
    Phase,
    hetero_plan::MRule,
    Option<u32>,
);

fn twin_key(setup: &Setup, op: &LinearOp, phase: Phase) -> TwinKey {
    let rule = match phase {
        Phase::Prefill => op.prefill_m,
        Phase::Decode => op.decode_m,
    };
    // Offload mode: the rows resident on the GPU, chosen per operator.
    let resident = setup
        .offload
        .as_ref()
        .map(|o| o.resident.get(&op.name).copied().unwrap_or(0));
    (
        op.k, op.n, op.count, op.active, op.layers, phase, rule, resident,
    )
}

/// For each item, the index of the first item with the same key (itself
/// when it is the first).
fn twins<T, K: Eq + std::hash::Hash>(items: &[T], key: impl Fn(&T) -> K) -> Vec<usize> {
    let mut first: HashMap<K, usize> = HashMap::new();
    items
        .iter()
        .enumerate()
        .map(|(i, x)| *first.entry(key(x)).or_insert(i))
        .collect()
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
    settings.check()?;
    let ops = select_ops(model, &settings.ops)?;
    let mut notes = vec![];
    let mut procs = build_procs(
        oracle,
        &settings.processors,
        &settings.dtypes,
        &settings.phases,
        &mut notes,
    )?;
    let has_prefill = settings.phases.contains(&Phase::Prefill);
    let has_decode = settings.phases.contains(&Phase::Decode);

    // Offload mode keeps the CPU and the discrete GPU only.
    let mut offload = None;
    if settings.gpu_mem_budget.is_some() {
        let o = offload_setup(&procs)?;
        let keep = [procs[o.cpu].id.clone(), procs[o.gpu].id.clone()];
        for p in procs.iter().filter(|p| !keep.contains(&p.id)) {
            notes.push(format!("{}: not used in offload mode", p.id));
        }
        procs.retain(|p| keep.contains(&p.id));
        let o = offload_setup(&procs)?;
        launch_after_host(&mut procs[o.gpu], &mut notes);
        offload = Some(o);
    }

    let statics: Vec<usize> = if offload.is_some() {
        vec![]
    } else {
        (0..procs.len())
            .filter(|&p| procs[p].static_graphs)
            .collect()
    };
    if let GraphChoice::Sizes(_) = settings.graphs
        && statics.is_empty()
    {
        return Err(Error::MissingProcessor {
            strategy: "--npu-graphs".into(),
            need: "a static-graph processor (an NPU)".into(),
            have: ids(procs.iter().map(|p| p.id.as_str())),
        });
    }
    if statics.len() > 1 {
        notes.push("several static-graph processors: each is paired with dynamic processors only, never with another static one".into());
    }

    let prefill_max = settings.prefill_lengths.last().copied().unwrap_or(0);
    let dist = if has_prefill {
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
        Some(d)
    } else {
        None
    };

    let mut setup = Setup {
        procs,
        row_align: settings.row_align,
        graphs: statics
            .iter()
            .map(|&p| StaticGraphs {
                p,
                prefill: vec![],
                decode: if has_decode {
                    settings.decode_lengths.clone()
                } else {
                    vec![]
                },
            })
            .collect(),
        offload,
    };

    // ScheInfer: which rows stay on the GPU.
    if let Some(budget) = settings.gpu_mem_budget {
        let m = if has_decode {
            settings.decode_lengths[0]
        } else {
            1
        };
        let resident = offload::choose_resident(&setup, &ops, budget, m);
        setup.offload.as_mut().expect("offload mode").resident = resident;
    }

    // Prefill predictions, shared by the graph-set choice and the solve:
    // every M the lengths reach, and every candidate graph size.
    let max_m_of = |op: &LinearOp, phase: Phase, lens: &[u32]| {
        lens.iter()
            .map(|&l| op.gemms(phase, l).map_or(1, |g| g.0.m.get()))
            .max()
            .unwrap_or(1)
    };
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
    // Operators that differ only by name (attn_q and attn_o, ffn_gate and
    // ffn_up) share their tables and, below, their decisions.
    let prefill_tables: HashMap<String, Arc<Tables>> = if has_prefill {
        let first = twins(&ops, |op| twin_key(&setup, op, Phase::Prefill));
        let unique: Vec<Arc<Tables>> = ops
            .par_iter()
            .enumerate()
            .filter(|&(i, _)| first[i] == i)
            .map(|(_, op)| {
                let max_m = max_m_of(op, Phase::Prefill, &settings.prefill_lengths);
                let mut top = table_top(&setup, Phase::Prefill, max_m);
                if !last_token_only(op, Phase::Prefill) {
                    top = top.max(pool_top);
                }
                // Static processors: the candidate sizes (and any given).
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
                let t = Tables::new(&setup, op, Phase::Prefill, top, max_m, None, Some(&sizes));
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
    } else {
        HashMap::new()
    };
    // Static graph sets.
    let prepare_budget = settings
        .prepare_budget_us
        .unwrap_or(DEFAULT_PREPARE_BUDGET_US);
    // Operators whose rows grow with the prompt use the prefill sizes.
    let growing: Vec<&LinearOp> = ops
        .iter()
        .copied()
        .filter(|o| !last_token_only(o, Phase::Prefill))
        .collect();
    for gi in 0..setup.graphs.len() {
        let s = setup.graphs[gi].p;
        // Decode graphs (and the lm_head's M = 1 graph) come first.
        let (reserved_us, reserved_b) = graphs::reserved(&setup, gi, &ops, has_prefill);
        let mem_budget = settings.graph_mem_budget.or(oracle
            .processors()
            .iter()
            .find(|p| p.id == setup.procs[s].id)
            .and_then(|p| p.capabilities.memory_bytes));
        if settings.graphs == GraphChoice::Auto && has_prefill {
            let dist = dist.as_ref().expect("prefill has a distribution");
            let chosen = graphs::choose(
                &setup,
                gi,
                &growing,
                &prefill_tables,
                &dist.points,
                &settings.prefill_lengths,
                prepare_budget,
                mem_budget,
                reserved_us,
                reserved_b,
            )?;
            setup.graphs[gi].prefill = chosen.sizes;
        } else if let GraphChoice::Sizes(sizes) = &settings.graphs {
            setup.graphs[gi].prefill = sizes.clone();
        } else if has_decode && reserved_us > prepare_budget && settings.prepare_budget_us.is_some()
        {
            return Err(Error::BudgetTooSmall {
                what: "prepare-time",
                processor: setup.procs[s].id.clone(),
                need: crate::settings::fmt_us(reserved_us),
                budget: crate::settings::fmt_us(prepare_budget),
            });
        }
    }

    // Solve every operator × phase × length.
    let mut tasks: Vec<(&LinearOp, Phase, &[u32])> = vec![];
    for phase in [Phase::Prefill, Phase::Decode] {
        if !settings.phases.contains(&phase) {
            continue;
        }
        let lens: &[u32] = match phase {
            Phase::Prefill => &settings.prefill_lengths,
            Phase::Decode => &settings.decode_lengths,
        };
        for op in &ops {
            tasks.push((op, phase, lens));
        }
    }
    // A task whose operator has an earlier twin in the same phase copies
    // its decisions instead of solving them again.
    let twin_of = twins(&tasks, |&(op, phase, _)| twin_key(&setup, op, phase));
    let setup_ref = &setup;
    let reps: Vec<usize> = (0..tasks.len()).filter(|&i| twin_of[i] == i).collect();
    // Per task solved: its context and the (rows, instances) of each length
    // (lengths with the same rows share a cell).
    let contexts: Vec<(OpCtx, Vec<(u32, u32)>)> = reps
        .par_iter()
        .map(|&i| {
            let (op, phase, lens) = tasks[i];
            let cx = match prefill_tables.get(&op.name) {
                Some(t) if phase == Phase::Prefill => {
                    OpCtx::with_tables(setup_ref, op, phase, t.clone())
                }
                _ => OpCtx::new(setup_ref, op, phase, max_m_of(op, phase, lens)),
            };
            let rows = lens.iter().map(|&l| cx.rows(l)).collect();
            (cx, rows)
        })
        .collect();
    // Cells in order of M, then operator: a thread solves one M for several
    // operators in a row, so a compiled model's per-thread memo also serves
    // the shapes that operators with the same K share at that M.
    let mut work: Vec<(u32, u32, usize)> = vec![];
    for (j, (_, rows)) in contexts.iter().enumerate() {
        let mut keys = rows.clone();
        keys.sort_unstable();
        keys.dedup();
        work.extend(keys.into_iter().map(|(m, i)| (m, i, j)));
    }
    work.sort_unstable();
    let solved_cells: Vec<Cell> = work
        .par_iter()
        .map(|&(m, i, j)| contexts[j].0.cell_at(m, i))
        .collect();
    let mut cells: Vec<HashMap<(u32, u32), Cell>> =
        contexts.iter().map(|_| HashMap::new()).collect();
    for (&(m, i, j), cell) in work.iter().zip(solved_cells) {
        cells[j].insert((m, i), cell);
    }
    let solved: Vec<Result<OpPlan>> = reps
        .par_iter()
        .zip(&contexts)
        .zip(&cells)
        .map(|((&t, (cx, rows)), cells)| {
            let (op, phase, lens) = tasks[t];
            let decisions = lens
                .iter()
                .zip(rows)
                .map(|(&len, key)| {
                    decision(&setup_ref.procs, len, &cells[key]).ok_or_else(|| {
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
                layers: op.layers,
                orders: setup_ref
                    .procs
                    .iter()
                    .zip(&cx.tables.orders)
                    .filter(|(_, o)| **o != hetero_plan::OperandOrder::Aw)
                    .map(|(p, o)| ProcessorOrder {
                        processor: p.id.clone(),
                        order: *o,
                    })
                    .collect(),
                decisions,
            })
        })
        .collect();
    let mut by_task: Vec<Option<Result<OpPlan>>> = tasks.iter().map(|_| None).collect();
    for (&t, r) in reps.iter().zip(solved) {
        by_task[t] = Some(r);
    }
    let mut plan_ops: Vec<OpPlan> = Vec::with_capacity(tasks.len());
    for (i, s) in by_task.into_iter().enumerate() {
        let op_plan = match s {
            Some(r) => r?,
            None => {
                let op = tasks[i].0;
                OpPlan {
                    op: op.name.clone(),
                    ..plan_ops[twin_of[i]].clone()
                }
            }
        };
        plan_ops.push(op_plan);
    }

    let graph_sets = setup
        .graphs
        .iter()
        .map(|g| graph_set(&setup, g, &ops, &plan_ops))
        .collect();

    let expected = dist
        .as_ref()
        .map(|d| expected_prefill(&plan_ops, d, &settings.prefill_lengths));
    let offload_info = setup.offload.as_ref().map(|o| {
        let gp = &setup.procs[o.gpu];
        let mut resident: Vec<Resident> = ops
            .iter()
            .filter_map(|op| {
                o.resident.get(&op.name).map(|&rows| Resident {
                    op: op.name.clone(),
                    rows,
                })
            })
            .collect();
        resident.retain(|r| r.rows > 0);
        let resident_bytes = ops
            .iter()
            .map(|op| {
                o.resident.get(&op.name).copied().unwrap_or(0) as f64
                    * op.k as f64
                    * gp.wbytes()
                    * op.count as f64
                    * op.layers as f64
            })
            .sum::<f64>() as u64;
        OffloadPlacement {
            cpu: setup.procs[o.cpu].id.clone(),
            gpu: gp.id.clone(),
            gpu_mem_budget: settings.gpu_mem_budget.unwrap_or(0),
            resident_bytes,
            resident,
        }
    });
    if let Some(o) = &offload_info {
        notes.push(format!(
            "offload: {} of weights resident on {} (budget {})",
            fmt_bytes(o.resident_bytes),
            o.gpu,
            fmt_bytes(o.gpu_mem_budget)
        ));
    } else if setup.procs.iter().any(|p| !p.unified && !p.static_graphs) {
        notes.push("discrete processors are assumed to hold every weight; give --gpu-mem-budget for offload mode".into());
    }
    let mut seen = BTreeSet::new();
    notes.retain(|n| seen.insert(n.clone()));

    Ok(Plan {
        schema_version: SchemaVersion,
        model: model.fingerprint(),
        predictor,
        processors: setup.procs.iter().map(|p| p.id.clone()).collect(),
        dtypes: setup
            .procs
            .iter()
            .map(|p| ProcessorDType {
                processor: p.id.clone(),
                dtype: p.dtype,
            })
            .collect(),
        solver: Some(SolverInfo {
            version: env!("CARGO_PKG_VERSION").into(),
            row_align: settings.row_align,
            prompt_lengths: dist.as_ref().map_or_else(String::new, |d| d.name.clone()),
            expected_prefill_us: expected.map(round2),
            prepare_budget_us: (!setup.graphs.is_empty()).then_some(prepare_budget),
            graph_mem_budget: settings.graph_mem_budget,
            offload: offload_info,
            host_probe_us: host_probe_us(oracle, &setup.procs),
            mean_over_median: setup
                .procs
                .iter()
                .filter_map(|p| {
                    let f = oracle.overheads(&p.id).mean_over_median?;
                    Some((p.id.clone(), (f * 1e4).round() / 1e4))
                })
                .collect(),
        }),
        notes,
        graph_sets,
        ops: plan_ops,
    })
}

/// The graphs a static processor must prepare: a full graph of every
/// operator at every size, plus the row-share graphs decisions use.
fn graph_set(setup: &Setup, g: &StaticGraphs, ops: &[&LinearOp], plan_ops: &[OpPlan]) -> GraphSet {
    let sp = &setup.procs[g.p];
    let mut rows: BTreeMap<(String, Phase, u32), u32> = BTreeMap::new();
    for op in plan_ops {
        for d in &op.decisions {
            if let Strategy::RowCut { parts } | Strategy::Hybrid { parts, .. } = &d.strategy {
                for p in parts.iter().filter(|p| p.processor == sp.id) {
                    if let Some(size) = p.graph {
                        rows.insert((op.op.clone(), op.phase, size), p.rows);
                    }
                }
            }
        }
    }
    let prep = |k: u32, n: u32| {
        sp.prepare
            .map_or(0.0, |c| c.at(k as f64 * n as f64 * sp.wbytes()))
    };
    let buf = |m: u32, o: &LinearOp, n: u32| m as f64 * (o.k + n) as f64 * sp.abytes();
    let mut prepare_us = 0.0;
    let mut bytes = 0.0;
    let prefill_planned = plan_ops.iter().any(|o| o.phase == Phase::Prefill);
    for o in ops {
        let mut sizes: Vec<u32> = g.decode.clone();
        if prefill_planned {
            if last_token_only(o, Phase::Prefill) {
                sizes.push(1);
            } else {
                sizes.extend(&g.prefill);
            }
        }
        sizes.sort_unstable();
        sizes.dedup();
        for m in sizes {
            prepare_us += prep(o.k, o.n);
            bytes += buf(m, o, o.n);
        }
    }
    let row_graphs: Vec<RowGraph> = rows
        .into_iter()
        .map(|((op, phase, size), r)| {
            let o = ops.iter().find(|o| o.name == op).expect("planned op");
            prepare_us += prep(o.k, r);
            bytes += buf(size, o, r);
            RowGraph {
                op,
                phase,
                size,
                rows: r,
            }
        })
        .collect();
    GraphSet {
        processor: sp.id.clone(),
        sizes: g.prefill.clone(),
        decode_sizes: g.decode.clone(),
        row_graphs,
        prepare_us: round2(prepare_us),
        bytes: bytes as u64,
    }
}

/// Expected prefill latency: over the distribution, the sum over every
/// operator and layer of the decision the runtime would use (the next
/// solved length at or above the prompt's).
pub(crate) fn expected_prefill(ops: &[OpPlan], dist: &Distribution, solved: &[u32]) -> f64 {
    let per_len: HashMap<u32, f64> = solved
        .iter()
        .map(|&l| {
            let t: f64 = ops
                .iter()
                .filter(|o| o.phase == Phase::Prefill)
                .filter_map(|o| o.at(l).map(|d| d.cost.total_us * o.layers as f64))
                .sum();
            (l, t)
        })
        .collect();
    dist.points
        .iter()
        .filter_map(|&(l, p)| {
            let i = solved.partition_point(|&s| s < l);
            solved.get(i).map(|s| p * per_len[s])
        })
        .sum()
}
