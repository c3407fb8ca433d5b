//! `hetero plan show` and `hetero plan explain`.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use hetero_plan::{Decision, NonGemmOp, OpPlan, Phase, Plan, SolverInfo, Strategy};
use hetero_solver::settings::{fmt_bytes, fmt_us};
use hetero_solver::{Explanation, coverage};
use serde_json::json;

use crate::BadInput;
use crate::solve_cmd::{load_model, load_predictor};

mod nongemm;

#[derive(Debug, Subcommand)]
pub enum PlanCmd {
    /// Summarise a plan: processors, graph sets, strategies per operator.
    #[command(
        after_help = "Examples:\n  hetero plan show plan.ron\n  hetero plan show plan.ron --json"
    )]
    Show(ShowArgs),
    /// Why one decision won, candidate by candidate.
    #[command(after_help = "Examples:
  hetero plan explain plan.ron --op ffn_down --len 300
  hetero plan explain plan.ron --op ffn_down --len 300 --predictor device.ron --model config.json
  hetero plan explain plan.ron --op attn_q --len 1 --phase decode --predictor device.ron --model config.json --json

Without --predictor and --model it prints what the plan stores (the winner, its
cost breakdown, the runner-up and the margin). With both, it re-solves that cell
with the predictor (after checking both fingerprints) and lists every candidate.

--op attention, rope, norm, activation or residual shows where each range of
layers runs that non-GEMM operator, its cost there and on the alternative
placement, and the pass it is part of, from the plan alone; --len is then the
prompt length (prefill) or the context length (decode).")]
    Explain(ExplainArgs),
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The plan file (.ron or .json).
    plan: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The plan file (.ron or .json).
    plan: PathBuf,
    /// Operator name (`hetero plan show` lists them), or a non-GEMM
    /// operator: attention, rope, norm, activation, residual.
    #[arg(long)]
    op: String,
    /// Sequence length (prefill) or tokens per step (decode).
    #[arg(long)]
    len: u32,
    /// Phase; default prefill when the plan has it for the operator.
    #[arg(long)]
    phase: Option<Phase>,
    /// The layer whose decision to explain, where the plan decides per
    /// group of layers (offload mode).
    #[arg(long, default_value_t = 0)]
    layer: u32,
    /// The predictor the plan was solved with: re-solve the cell and list
    /// every candidate (needs --model too).
    #[arg(long, requires = "model")]
    predictor: Option<PathBuf>,
    /// The model config the plan was solved for.
    #[arg(long, requires = "predictor")]
    model: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(cmd: PlanCmd) -> anyhow::Result<()> {
    match cmd {
        PlanCmd::Show(a) => show(a),
        PlanCmd::Explain(a) => explain(a),
    }
}

fn kinds(op: &OpPlan) -> BTreeMap<&'static str, usize> {
    let mut m = BTreeMap::new();
    for r in &op.ranges {
        *m.entry(r.strategy.kind().as_str()).or_insert(0) += (r.to - r.from) as usize + 1;
    }
    m
}

/// Summed over operators and layers: the predicted time of a phase at a length.
pub(crate) fn phase_total(plan: &Plan, phase: Phase, len: u32) -> Option<f64> {
    let ops: Vec<&OpPlan> = plan.ops.iter().filter(|o| o.phase == phase).collect();
    if ops.is_empty() {
        return None;
    }
    ops.iter()
        .map(|o| o.at(len).map(|d| d.cost.total_us * o.layers as f64))
        .sum()
}

fn sample_lengths(plan: &Plan, phase: Phase) -> Vec<u32> {
    let Some(op) = plan.ops.iter().find(|o| o.phase == phase) else {
        return vec![];
    };
    if phase == Phase::Decode || op.length_count() <= 6 {
        return op.lengths().collect();
    }
    let mut v: Vec<u32> = [1, 128, 300, 512, 1024, 2048, 4096, 8192]
        .into_iter()
        .filter(|&l| op.range_index(l).is_some())
        .collect();
    if let Some(last) = op.spans.last().map(|s| s.to)
        && !v.contains(&last)
    {
        v.push(last);
    }
    v
}

fn short(sha: &str) -> &str {
    &sha[..sha.len().min(12)]
}

fn show(args: ShowArgs) -> anyhow::Result<()> {
    let plan: Plan = hetero_plan::load(&args.plan)?;
    let bytes = std::fs::metadata(&args.plan)?.len();
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&show_json(&plan, bytes))?
        );
    } else {
        print!("{}", show_table(&plan, bytes));
    }
    Ok(())
}

/// The plan's decision ranges and the decisions they hold, over every
/// operator.
fn ranges_and_decisions(plan: &Plan) -> (usize, usize) {
    plan.ops.iter().fold((0, 0), |(r, d), o| {
        (r + o.ranges.len(), d + o.length_count())
    })
}

fn show_json(plan: &Plan, bytes: u64) -> serde_json::Value {
    let (ranges, decisions) = ranges_and_decisions(plan);
    let ops: Vec<serde_json::Value> = plan
        .ops
        .iter()
        .map(|o| {
            json!({
                "op": o.op,
                "phase": o.phase,
                "k": o.k,
                "n": o.n,
                "layers": o.layers,
                "first_layer": o.first_layer,
                "lengths": coverage(o),
                "decisions": o.length_count(),
                "ranges": o.ranges.len(),
                "kinds": kinds(o),
                "orders": o.orders,
            })
        })
        .collect();
    let totals = |phase| -> serde_json::Value {
        sample_lengths(plan, phase)
            .into_iter()
            .filter_map(|l| phase_total(plan, phase, l).map(|t| (l.to_string(), json!(t))))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    json!({
        "file_bytes": bytes,
        "ranges": ranges,
        "decisions": decisions,
        "model": plan.model,
        "predictor": plan.predictor,
        "processors": plan.processors,
        "dtypes": plan.dtypes,
        "graph_sets": plan.graph_sets.iter().map(|g| json!({
            "processor": g.processor,
            "sizes": g.sizes,
            "decode_sizes": g.decode_sizes,
            "row_graphs": g.row_graphs.len(),
            "prepare_us": g.prepare_us,
            "bytes": g.bytes,
        })).collect::<Vec<_>>(),
        "solver": plan.solver,
        "notes": plan.notes,
        "prefill_us_at": totals(Phase::Prefill),
        "decode_us_at": totals(Phase::Decode),
        "non_gemm": nongemm::show_json(plan, &sample_lengths(plan, Phase::Prefill)),
        "ops": ops,
    })
}

/// One line per graph set of the plan: its sizes, how its graphs hold the
/// weights, preparation time and memory (`plan show` and `solve`'s
/// summary).
pub(crate) fn write_graph_sets(s: &mut String, plan: &Plan) {
    for g in &plan.graph_sets {
        let _ = writeln!(
            s,
            "graphs on {}: prefill {:?}, decode {:?}, {} row-share graphs, weights {}; prepare {}, buffers {}",
            g.processor,
            g.sizes,
            g.decode_sizes,
            g.row_graphs.len(),
            match g.weights {
                hetero_plan::WeightMode::Static => "baked in (a graph per layer)",
                hetero_plan::WeightMode::Input => "as inputs (a graph shared by the layers)",
            },
            fmt_us(g.prepare_us),
            fmt_bytes(g.bytes)
        );
    }
}

/// The solver's expected prefill latency over the prompt lengths, if it
/// recorded one.
pub(crate) fn write_expected_prefill(s: &mut String, info: &SolverInfo) {
    if let Some(e) = info.expected_prefill_us {
        let _ = writeln!(
            s,
            "expected prefill latency over {}: {}",
            info.prompt_lengths,
            fmt_us(e)
        );
    }
}

fn show_table(plan: &Plan, bytes: u64) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "plan for {} (sha256 {}) with predictor {} (sha256 {})",
        plan.model.name,
        short(&plan.model.sha256),
        plan.predictor.name,
        short(&plan.predictor.sha256)
    );
    let (ranges, decisions) = ranges_and_decisions(plan);
    let _ = writeln!(
        s,
        "file: {} ({bytes} bytes), {ranges} ranges holding {decisions} decisions",
        fmt_bytes(bytes)
    );
    let procs: Vec<String> = plan
        .processors
        .iter()
        .map(|p| match plan.dtype(p) {
            Some(d) => format!("{p} ({d})"),
            None => p.clone(),
        })
        .collect();
    let _ = writeln!(s, "processors: {}", procs.join(", "));
    write_graph_sets(&mut s, plan);
    if let Some(info) = &plan.solver {
        write_expected_prefill(&mut s, info);
        if let Some(p) = info.host_probe_us {
            let _ = writeln!(
                s,
                "host speed probe when profiled: {p:.2} µs (`hetero run` reports its own beside it)"
            );
        }
        if !info.mean_over_median.is_empty() {
            let _ = writeln!(
                s,
                "mean / median of the profiled GEMM runs: {} (`hetero run` scales its predicted totals by it)",
                info.mean_over_median_words()
            );
        }
        if let Some(o) = &info.offload {
            let res: Vec<String> = o
                .resident
                .iter()
                .map(|r| match r.layers {
                    Some(l) => format!(
                        "{} {} in layers {}..{}",
                        r.op,
                        r.rows,
                        r.first_layer,
                        r.first_layer + l
                    ),
                    None => format!("{} {}", r.op, r.rows),
                })
                .collect();
            let _ = writeln!(
                s,
                "offload{}: {} resident on {} of budget {} (rows: {})",
                o.strategy
                    .as_deref()
                    .map_or_else(String::new, |st| format!(" ({st})")),
                fmt_bytes(o.resident_bytes),
                o.gpu,
                fmt_bytes(o.gpu_mem_budget),
                if res.is_empty() {
                    "none".into()
                } else {
                    res.join(", ")
                }
            );
        }
    }
    for phase in [Phase::Prefill, Phase::Decode] {
        let lens = sample_lengths(plan, phase);
        if lens.is_empty() {
            continue;
        }
        let at: Vec<String> = lens
            .iter()
            .filter_map(|&l| phase_total(plan, phase, l).map(|t| format!("{l}: {}", fmt_us(t))))
            .collect();
        let _ = writeln!(
            s,
            "{phase} latency (all operators and layers) at {}",
            at.join(", ")
        );
    }
    nongemm::write_show(&mut s, plan, &sample_lengths(plan, Phase::Prefill));
    for n in &plan.notes {
        let _ = writeln!(s, "note: {n}");
    }
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "{:<16} {:<8} {:>7} {:>7} {:<16} strategies (lengths)",
        "op", "phase", "K", "N", "lengths"
    );
    for o in &plan.ops {
        let k: Vec<String> = kinds(o)
            .into_iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        // An operator decided per group of layers names the group.
        let grouped = o.layers != hetero_plan::layer_count(&plan.ops, &o.op, o.phase);
        let name = if grouped {
            format!("{} L{}..{}", o.op, o.first_layer, o.first_layer + o.layers)
        } else {
            o.op.clone()
        };
        let _ = writeln!(
            s,
            "{:<16} {:<8} {:>7} {:>7} {:<16} {}",
            name,
            o.phase.as_str(),
            o.k,
            o.n,
            coverage(o).trim_start_matches("lengths "),
            k.join(", ")
        );
    }
    s
}

fn explain(args: ExplainArgs) -> anyhow::Result<()> {
    let plan: Plan = hetero_plan::load(&args.plan)?;
    if let Some(op) = NonGemmOp::parse(&args.op) {
        return nongemm::explain(&plan, op, args.phase, args.len, args.json);
    }
    let ops: Vec<&str> = {
        let mut v: Vec<&str> = plan.ops.iter().map(|o| o.op.as_str()).collect();
        v.dedup();
        v
    };
    if !plan.ops.iter().any(|o| o.op == args.op) {
        return Err(BadInput(format!(
            "unknown operator `{}`; the plan has: {} (and the non-GEMM operators attention, rope, norm, activation, residual)",
            args.op,
            ops.join(", ")
        ))
        .into());
    }
    let phase = args.phase.unwrap_or_else(|| {
        if plan.op(&args.op, Phase::Prefill).is_some() {
            Phase::Prefill
        } else {
            Phase::Decode
        }
    });
    let op_plan = plan
        .op_in_layer(&args.op, phase, args.layer)
        .ok_or_else(|| {
            BadInput(format!(
                "the plan has no {phase} table for `{}` in layer {}",
                args.op, args.layer
            ))
        })?;
    let decision = op_plan.at(args.len).ok_or_else(|| {
        BadInput(format!(
            "the plan has no {phase} decision for `{}` at length {}; it covers {}",
            args.op,
            args.len,
            coverage(op_plan)
        ))
    })?;
    let explanation = match (&args.predictor, &args.model) {
        (Some(pp), Some(mp)) => {
            let (predictor, pfp) = load_predictor(pp)?;
            let model = load_model(mp)?;
            plan.check_inputs(Some(&pfp), Some(&model.fingerprint()))
                .map_err(|e| BadInput(e.to_string()))?;
            Some(hetero_solver::explain_layer(
                &predictor, &model, &plan, &args.op, phase, args.layer, args.len,
            )?)
        }
        _ => None,
    };
    if args.json {
        let v = json!({
            "op": args.op,
            "phase": phase,
            "len": args.len,
            "k": op_plan.k,
            "n": op_plan.n,
            "layers": op_plan.layers,
            "decision": decision,
            "candidates": explanation.as_ref().map(|e| e.candidates.iter().map(|c| json!({
                "kind": c.kind,
                "label": c.label,
                "processors": c.processors,
                "strategy": c.strategy,
                "parts_us": c.parts_us,
                "sync_us": c.sync_us,
                "sync_rule": c.sync_rule,
                "copy_us": c.copy_us,
                "total_us": c.total_us,
            })).collect::<Vec<_>>()),
            "resolved_matches_plan": explanation.as_ref().map(|e| e.resolved.as_ref().is_some_and(|r| decision.agrees_with(r))),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", explain_text(op_plan, &decision, explanation.as_ref()));
    }
    Ok(())
}

fn describe(s: &Strategy, m: u32) -> String {
    match s {
        Strategy::Single {
            processor,
            padded_to: Some(g),
            ..
        } if *g > m => format!("{processor} alone, padded to its {g}-token graph"),
        Strategy::Single {
            processor,
            padded_to: Some(g),
            ..
        } => format!("{processor} alone on its {g}-token graph"),
        Strategy::Single {
            processor,
            online_prepare: true,
            ..
        } => format!("{processor} alone, preparing a graph for M={m} online"),
        Strategy::Single { processor, .. } => format!("{processor} alone"),
        Strategy::RowCut { parts } | Strategy::Hybrid { parts, .. } => {
            let p: Vec<String> = parts
                .iter()
                .map(|p| match p.graph {
                    Some(g) => format!("{} {} rows (graph M={g})", p.processor, p.rows),
                    None => format!("{} {} rows", p.processor, p.rows),
                })
                .collect();
            format!("output rows split: {}", p.join(" + "))
        }
        Strategy::SeqCut { parts } => {
            let p: Vec<String> = parts
                .iter()
                .map(|p| {
                    if p.graphs.is_empty() {
                        format!("{} {} tokens", p.processor, p.tokens)
                    } else {
                        let g: Vec<String> = p.graphs.iter().map(u32::to_string).collect();
                        format!(
                            "{} {} tokens as graphs [{}]",
                            p.processor,
                            p.tokens,
                            g.join("+")
                        )
                    }
                })
                .collect();
            format!("tokens split: {}", p.join(" + "))
        }
        Strategy::Chunked {
            processor,
            chunk,
            chunks,
        } => format!("{processor} runs {chunks} chunks of its {chunk}-token graph"),
        Strategy::Offload {
            cpu,
            gpu,
            cc_rows,
            cg_rows,
            gg_rows,
            gpu_tokens,
        } => {
            // The GPU alone streaming its weights names no CPU.
            let on_cpu = if cpu.is_empty() {
                String::new()
            } else {
                format!("{cc_rows} rows on {cpu}, ")
            };
            let mut t = format!(
                "offload: {on_cpu}{cg_rows} rows copied to {gpu}, {gg_rows} rows resident on {gpu}"
            );
            if *gpu_tokens > 0 {
                t += &format!("; {gpu_tokens} tokens of the {cpu} rows run on {gpu}");
            }
            t
        }
    }
}

fn explain_text(op: &OpPlan, d: &Decision, e: Option<&Explanation>) -> String {
    let mut s = String::new();
    let m = d.rows_m();
    let _ = writeln!(
        s,
        "{} ({}) at length {}: M = {m}, K = {}, N = {}{}, {} layers{}",
        op.op,
        op.phase,
        d.len,
        op.k,
        op.n,
        if d.instances > 1 {
            format!(", {} instances", d.instances)
        } else {
            String::new()
        },
        op.layers,
        if op.first_layer > 0 {
            format!(" from layer {}", op.first_layer)
        } else {
            String::new()
        }
    );
    let procs = d.strategy.processors();
    let parts: Vec<String> = procs
        .iter()
        .zip(&d.cost.parts_us)
        .map(|(p, t)| format!("{p} {t:.1} µs"))
        .collect();
    let _ = writeln!(
        s,
        "decision: {} — {}",
        d.strategy.kind(),
        describe(&d.strategy, m)
    );
    let _ = writeln!(
        s,
        "  cost: max({}) + sync {:.1} µs + copy {:.1} µs = {:.1} µs",
        parts.join(", "),
        d.cost.sync_us,
        d.cost.copy_us,
        d.cost.total_us
    );
    if let Some(b) = d.cost.sync_block_us {
        let _ = writeln!(
            s,
            "  with a blocking wait (run --sync block): sync {b:.1} µs, {:.1} µs",
            d.cost.total_with(true)
        );
    }
    match &d.runner_up {
        Some(r) => {
            let _ = writeln!(
                s,
                "runner-up: {} — {}: {:.1} µs, {:.1} µs ({:.1} %) slower",
                r.kind,
                if r.label.is_empty() { "-" } else { &r.label },
                r.total_us,
                r.margin_us,
                100.0 * r.margin_us / d.cost.total_us.max(1e-9)
            );
        }
        None => {
            let _ = writeln!(s, "runner-up: none (no other candidate had a finite cost)");
        }
    }
    match e {
        None => {
            let _ = writeln!(
                s,
                "\nGive --predictor and --model (the files the plan was solved with) to see every candidate."
            );
        }
        Some(e) => {
            if !e.resolved.as_ref().is_some_and(|r| d.agrees_with(r)) {
                let _ = writeln!(
                    s,
                    "\nwarning: re-solving this cell now gives {} — the plan was written by another solver version",
                    e.resolved
                        .as_ref()
                        .map_or("nothing".into(), |r| describe(&r.strategy, m))
                );
            }
            let best = e.candidates.first().map_or(0.0, |c| c.total_us);
            let _ = writeln!(
                s,
                "\ncandidates (the best of each family, cheapest first; times for all {} instance(s) of one layer):",
                e.instances
            );
            let _ = writeln!(
                s,
                "  {:>2}  {:<10} {:>12} {:>10}  {:<34} {:>8} {:>8}  what",
                "#", "kind", "total µs", "vs best", "parts µs", "sync", "copy"
            );
            for (i, c) in e.candidates.iter().enumerate() {
                let parts: Vec<String> = c
                    .processors
                    .iter()
                    .zip(&c.parts_us)
                    .map(|(p, t)| format!("{p} {t:.1}"))
                    .collect();
                let vs = if i == 0 {
                    "best".to_string()
                } else {
                    format!("+{:.1}%", 100.0 * (c.total_us - best) / best.max(1e-9))
                };
                let _ = writeln!(
                    s,
                    "  {:>2}  {:<10} {:>12.1} {:>10}  {:<34} {:>8.1} {:>8.1}  {}",
                    i + 1,
                    c.kind.as_str(),
                    c.total_us,
                    vs,
                    parts.join(", "),
                    c.sync_us,
                    c.copy_us,
                    c.label
                );
            }
            if let Some(w) = e.candidates.first()
                && !w.sync_rule.is_empty()
            {
                let slow = w
                    .processors
                    .iter()
                    .zip(&w.parts_us)
                    .max_by(|a, b| a.1.total_cmp(b.1))
                    .map(|(p, _)| p.as_str())
                    .unwrap_or("-");
                let _ = writeln!(
                    s,
                    "\nsync of the winner: {} (the slower part is {slow}).",
                    w.sync_rule
                );
            }
            let _ = writeln!(
                s,
                "Costs are max(parts) + sync + copy (HeteroLLM §4.3); `plan explain` lists each family's best split, not every split searched."
            );
        }
    }
    s
}
