//! The measurements of the GPU-host evaluation (`scripts/gpu-host-eval.sh`,
//! issue 11), run through the runtime on this machine's processors.
//!
//! ```text
//! gpu_eval regret  --predictor P --model CONFIG --processors a,b --out DIR
//!                  [--cells prefill:1,prefill:128,decode:1] [--ops attn_q,ffn_up] [--reps 5]
//!                  [--cap-us 50000] [--cap-factor 20] [--single-cap-us 1000000] [--dry-run 1]
//! gpu_eval handoff --predictor P --model CONFIG --processors a,b --out DIR
//!                  [--cells decode:1,prefill:128] [--op attn_k] [--passes 15]
//! gpu_eval offload --predictor P --model CONFIG --processors cpu:0,cuda:0 --out DIR
//!                  [--budget 4GiB] [--tokens 2] [--repeat 2] [--variants plan,stream,gpu,cpu]
//! common: [--dtype P=DT]... [--cpu-groups G] [--cache-dir D] [--deadline-s S] [--remap FROM=TO]...
//! ```
//!
//! * `regret`: solves a plan for the cells (the model cut to one layer: a
//!   decision does not depend on the layer count), then for every operator
//!   and cell asks the solver for every candidate family it costed
//!   (`hetero plan explain`'s list), runs each as a one-decision plan (one
//!   checked warm-up, then `--reps` timed runs, median; blocking sync) and
//!   writes one row per candidate (`regret.jsonl`) and per cell
//!   (`cells.jsonl`: regret, and every split against its processors alone
//!   and the perfect-overlap bound). Candidates predicted slower than
//!   `max(cap-us, cap-factor × the best prediction)` are not run (listed as
//!   skipped), except the plan's own decision and, for a split that runs,
//!   its processors alone up to `single-cap-us`.
//! * `handoff`: per processor and cell, the operator alone on that
//!   processor, polling and blocking waits alternated run by run; then the
//!   same with a prediction of zero (`spin`: the poll spins at once instead
//!   of sleeping through the prediction first).
//! * `offload`: solves the whole model's decode in offload mode under a GPU
//!   memory budget (ScheInfer) and runs it, then the same model with every
//!   weight streamed to the GPU each step (`stream`), every weight resident
//!   (`gpu`, over the budget: a reference) and the CPU alone (`cpu`).
//!   Blocking sync for all four.
//!
//! Every output of a warm-up pass is checked against the host's f64
//! reference; a candidate whose check fails is a failed row, never a time.
//! `--remap cuda:0=cpu:1` runs a plan solved for one processor on another
//! (testing the pipeline on a machine without that processor). Rows are
//! written as they are measured, so a run cut short keeps them.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use hetero_agent::{Backend, OpenOptions, Registry};
use hetero_plan::{
    CostBreakdown, DType, ModelSpec, Phase, Plan, Predictor, Strategy, StrategyKind,
};
use hetero_runtime::eval::{self, SplitGain};
use hetero_runtime::report::{median, quantile};
use hetero_runtime::{Report, RunSpec, Runtime, RuntimeOptions, SyncChoice, WeightSource};
use hetero_solver::settings::parse_bytes;
use hetero_solver::{GraphChoice, Settings};
use serde_json::{Value, json};

type Res<T> = Result<T, String>;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match run(&args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("gpu_eval: {e}");
            2
        }
    };
    std::process::exit(code);
}

/// `--key value` pairs after the mode; repeatable keys keep every value.
struct Args {
    mode: String,
    kv: HashMap<String, Vec<String>>,
}

impl Args {
    fn parse(args: &[String]) -> Res<Args> {
        let mode = args
            .first()
            .cloned()
            .ok_or("usage: gpu_eval regret|handoff|offload --key value ...")?;
        let mut kv: HashMap<String, Vec<String>> = HashMap::new();
        let mut it = args[1..].iter();
        while let Some(k) = it.next() {
            let key = k
                .strip_prefix("--")
                .ok_or(format!("expected --key, got `{k}`"))?;
            let v = it.next().ok_or(format!("--{key} needs a value"))?;
            kv.entry(key.to_string()).or_default().push(v.clone());
        }
        Ok(Args { mode, kv })
    }
    fn get(&self, k: &str) -> Option<&str> {
        self.kv.get(k).and_then(|v| v.last()).map(String::as_str)
    }
    fn req(&self, k: &str) -> Res<&str> {
        self.get(k).ok_or(format!("--{k} is required"))
    }
    fn all(&self, k: &str) -> Vec<String> {
        self.kv.get(k).cloned().unwrap_or_default()
    }
    fn list(&self, k: &str, default: &str) -> Vec<String> {
        self.get(k)
            .unwrap_or(default)
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect()
    }
    fn num<T: std::str::FromStr>(&self, k: &str, default: T) -> Res<T> {
        match self.get(k) {
            Some(v) => v.parse().map_err(|_| format!("--{k} {v}: not a number")),
            None => Ok(default),
        }
    }
}

/// Everything the modes share: the predictor, the model, the processors
/// (opened once and handed from runtime to runtime) and the output folder.
struct Bench {
    predictor: Predictor,
    predictor_fp: hetero_plan::Fingerprint,
    model: ModelSpec,
    processors: Vec<String>,
    dtypes: Vec<(Option<String>, DType)>,
    remap: Vec<(String, String)>,
    open: OpenOptions,
    backends: Option<Vec<Box<dyn Backend>>>,
    out: PathBuf,
    start: Instant,
    deadline_s: f64,
    notes: Vec<String>,
}

impl Bench {
    fn new(a: &Args) -> Res<Bench> {
        let ppath = PathBuf::from(a.req("predictor")?);
        let predictor: Predictor =
            hetero_plan::load(&ppath).map_err(|e| format!("{}: {e}", ppath.display()))?;
        let name = ppath
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let predictor_fp = predictor.fingerprint(name);
        let mpath = PathBuf::from(a.req("model")?);
        let model = hetero_plan::hf::load_config(&mpath).map_err(|e| e.to_string())?;
        let dtypes = a
            .all("dtype")
            .iter()
            .map(|d| match d.split_once('=') {
                Some((p, t)) => t
                    .parse::<DType>()
                    .map(|t| (Some(p.to_string()), t))
                    .map_err(|e| format!("--dtype {d}: {e}")),
                None => d
                    .parse::<DType>()
                    .map(|t| (None, t))
                    .map_err(|e| format!("--dtype {d}: {e}")),
            })
            .collect::<Res<Vec<_>>>()?;
        let remap = a
            .all("remap")
            .iter()
            .map(|r| {
                r.split_once('=')
                    .map(|(x, y)| (x.to_string(), y.to_string()))
                    .ok_or(format!("--remap {r}: expected FROM=TO"))
            })
            .collect::<Res<Vec<_>>>()?;
        let out = PathBuf::from(a.req("out")?);
        std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
        Ok(Bench {
            predictor,
            predictor_fp,
            model,
            processors: a.list("processors", ""),
            dtypes,
            remap,
            open: OpenOptions {
                cpu_groups: a.get("cpu-groups").map(String::from),
                cache_dir: a.get("cache-dir").map(PathBuf::from),
                ..Default::default()
            },
            backends: None,
            out,
            start: Instant::now(),
            deadline_s: a.num("deadline-s", 300.0)?,
            notes: vec![],
        })
    }

    fn elapsed(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    fn past_deadline(&self) -> bool {
        self.elapsed() > self.deadline_s
    }

    fn log(&self, msg: &str) {
        eprintln!("[{:6.1}s] {msg}", self.elapsed());
    }

    fn settings(&self, phases: Vec<Phase>, prefill: Vec<u32>, decode: Vec<u32>) -> Settings {
        Settings {
            phases,
            prefill_lengths: prefill,
            decode_lengths: decode,
            graphs: GraphChoice::None,
            prompt_lengths: None,
            prepare_budget_us: None,
            graph_mem_budget: None,
            gpu_mem_budget: None,
            dtypes: self.dtypes.clone(),
            processors: self.processors.clone(),
            ops: vec![],
            row_align: 256,
        }
    }

    fn solve(&self, model: &ModelSpec, s: &Settings, file: &str) -> Res<Plan> {
        let t = Instant::now();
        let plan = hetero_solver::solve(&self.predictor, self.predictor_fp.clone(), model, s)
            .map_err(|e| format!("solve: {e}"))?;
        hetero_plan::save(&self.out.join(file), &plan).map_err(|e| e.to_string())?;
        self.log(&format!(
            "solved {file}: {} tables in {:.2} s",
            plan.ops.len(),
            t.elapsed().as_secs_f64()
        ));
        Ok(plan)
    }

    /// The processor id on this machine.
    fn here(&self, id: &str) -> String {
        self.remap
            .iter()
            .find(|(f, _)| f == id)
            .map_or(id.to_string(), |(_, t)| t.clone())
    }

    /// `plan` with every processor id remapped (`--remap`).
    fn remapped<T: serde::Serialize + serde::de::DeserializeOwned>(&self, x: &T) -> T {
        if self.remap.is_empty() {
            return serde_json::from_value(serde_json::to_value(x).expect("serialisable"))
                .expect("round trip");
        }
        fn walk(v: &mut Value, map: &[(String, String)]) {
            match v {
                Value::String(s) => {
                    if let Some((_, t)) = map.iter().find(|(f, _)| f == s) {
                        *s = t.clone();
                    }
                }
                Value::Array(a) => a.iter_mut().for_each(|x| walk(x, map)),
                Value::Object(o) => o.values_mut().for_each(|x| walk(x, map)),
                _ => {}
            }
        }
        let mut v = serde_json::to_value(x).expect("serialisable");
        walk(&mut v, &self.remap);
        serde_json::from_value(v).expect("the same shape")
    }

    /// Opens the plan's processors (once) in the plan's order, and notes
    /// where they differ from the predictor's description.
    fn open_backends(&mut self, plan: &Plan) -> Res<Vec<Box<dyn Backend>>> {
        if let Some(b) = self.backends.take() {
            let ids: Vec<String> = b.iter().map(|x| x.processor().id.clone()).collect();
            if ids == plan.processors {
                return Ok(b);
            }
        }
        let mut reg = Registry::open(&self.open, Some(&plan.processors));
        let mut out = Vec::new();
        for id in &plan.processors {
            let Some(i) = reg.backends.iter().position(|b| b.processor().id == *id) else {
                let why: Vec<String> = reg
                    .unavailable
                    .iter()
                    .map(|u| format!("{}: {}", u.backend, u.reason))
                    .collect();
                return Err(format!(
                    "processor `{id}` did not open here (opened: {}; unavailable: {})",
                    reg.backends
                        .iter()
                        .map(|b| b.processor().id.clone())
                        .collect::<Vec<_>>()
                        .join(", "),
                    why.join("; ")
                ));
            };
            out.push(reg.backends.remove(i));
        }
        for b in &out {
            let here = b.processor();
            let from = self
                .remap
                .iter()
                .find(|(_, t)| *t == here.id)
                .map_or(here.id.clone(), |(f, _)| f.clone());
            let note = match self.predictor.processor(&from) {
                None => Some(format!("{}: not in the predictor", here.id)),
                Some(p) if p.name != here.name || p.api != here.api || p.kind != here.kind => {
                    Some(format!(
                        "{}: `{}` here, `{}` (as {from}) in the predictor: predictions describe another processor",
                        here.id, here.name, p.name
                    ))
                }
                Some(_) => None,
            };
            if let Some(n) = note
                && !self.notes.contains(&n)
            {
                self.log(&format!("WARNING {n}"));
                self.notes.push(n);
            }
        }
        Ok(out)
    }

    /// Runs `f` on a runtime for `plan` (remapped), handing the processors
    /// on to the next plan afterwards.
    fn with_runtime<T>(
        &mut self,
        plan: &Plan,
        model: &ModelSpec,
        sync: SyncChoice,
        f: impl FnOnce(&mut Runtime) -> Res<T>,
    ) -> Res<T> {
        let plan = self.remapped(plan);
        let backends = self.open_backends(&plan)?;
        let opts = RuntimeOptions {
            open: self.open.clone(),
            sync,
            weights: WeightSource::Synthetic {
                seed: 0x5eed,
                share_layers: false,
            },
            ..Default::default()
        };
        // On an error here the processors are lost; the next call reopens them.
        let mut rt = Runtime::with_backends(
            Path::new("(evaluation)"),
            plan,
            model.clone(),
            backends,
            opts,
        )
        .map_err(|e| format!("{e:#}"))?;
        let r = f(&mut rt);
        self.backends = Some(rt.into_backends());
        r
    }

    fn write_notes(&self) {
        let _ = std::fs::write(self.out.join("notes.txt"), self.notes.join("\n") + "\n");
    }
}

/// Appends JSON lines, flushed at once.
struct Rows(std::fs::File);
impl Rows {
    fn create(path: &Path) -> Res<Rows> {
        std::fs::File::create(path)
            .map(Rows)
            .map_err(|e| format!("{}: {e}", path.display()))
    }
    fn push(&mut self, v: &Value) {
        let _ = writeln!(self.0, "{v}");
        let _ = self.0.flush();
    }
}

fn parse_cells(s: &[String]) -> Res<Vec<(Phase, u32)>> {
    s.iter()
        .map(|c| {
            let (p, l) = c
                .split_once(':')
                .ok_or(format!("cell `{c}`: expected phase:len"))?;
            let phase: Phase = p.parse().map_err(|e| format!("cell `{c}`: {e}"))?;
            let len: u32 = l.parse().map_err(|_| format!("cell `{c}`: bad length"))?;
            Ok((phase, len))
        })
        .collect()
}

fn lengths(cells: &[(Phase, u32)], phase: Phase) -> Vec<u32> {
    let mut v: Vec<u32> = cells.iter().filter(|c| c.0 == phase).map(|c| c.1).collect();
    v.sort();
    v.dedup();
    v
}

fn phases(cells: &[(Phase, u32)]) -> Vec<Phase> {
    [Phase::Prefill, Phase::Decode]
        .into_iter()
        .filter(|p| cells.iter().any(|c| c.0 == *p))
        .collect()
}

/// The model with every operator in one layer.
fn one_layer(model: &ModelSpec) -> ModelSpec {
    let mut m = model.clone();
    for op in &mut m.ops {
        op.layers = 1;
    }
    m.name = format!("{} (one layer)", model.name);
    m
}

fn run(args: &[String]) -> Res<()> {
    let a = Args::parse(args)?;
    let mut b = Bench::new(&a)?;
    let r = match a.mode.as_str() {
        "regret" => regret(&a, &mut b),
        "handoff" => handoff(&a, &mut b),
        "offload" => offload(&a, &mut b),
        m => Err(format!("unknown mode `{m}`: regret, handoff or offload")),
    };
    b.write_notes();
    r
}

/// One candidate of a cell, as measured.
struct Measured {
    label: String,
    kind: StrategyKind,
    processors: Vec<String>,
    chosen: bool,
    measured_us: Option<f64>,
}

fn run_one(rt: &mut Runtime, phase: Phase, len: u32, reps: u32) -> Res<Report> {
    rt.run(&RunSpec {
        phase,
        len,
        steps: 1,
        repeat: reps,
        check: true,
    })
    .map_err(|e| format!("{e:#}"))
}

fn check_json(r: &Report) -> (bool, Value) {
    match &r.check {
        Some(c) => (
            c.passed == c.outputs,
            json!({"passed": c.passed, "outputs": c.outputs, "worst_rel_err": c.worst_rel_err,
                   "bound": c.worst_bound, "failures": c.failures}),
        ),
        None => (false, Value::Null),
    }
}

fn regret(a: &Args, b: &mut Bench) -> Res<()> {
    let cells = parse_cells(&a.list(
        "cells",
        "decode:1,prefill:1,prefill:17,prefill:128,prefill:300,prefill:1000,prefill:4096",
    ))?;
    let ops = a.list("ops", "attn_q,ffn_up,ffn_down,lm_head");
    let reps: u32 = a.num("reps", 5)?;
    let cap_us: f64 = a.num("cap-us", 50_000.0)?;
    let cap_factor: f64 = a.num("cap-factor", 20.0)?;
    let single_cap_us: f64 = a.num("single-cap-us", 1_000_000.0)?;
    let dry_run = a.get("dry-run") == Some("1");
    let mut dry_us = 0.0;
    let model = one_layer(&b.model);
    let mut s = b.settings(
        phases(&cells),
        lengths(&cells, Phase::Prefill),
        lengths(&cells, Phase::Decode),
    );
    s.ops = ops.clone();
    let plan = b.solve(&model, &s, "regret-plan.ron")?;
    let mut rows = Rows::create(&b.out.join("regret.jsonl"))?;
    let mut cell_rows = Rows::create(&b.out.join("cells.jsonl"))?;
    // Cells already measured: (op, M, instances, decision) → the cell's row.
    let mut seen: HashMap<(String, u32, u32, String), Value> = HashMap::new();
    let mut regrets: Vec<(Phase, f64)> = vec![];
    'cells: for &(phase, len) in &cells {
        for op in &ops {
            if b.past_deadline() {
                b.log("deadline reached: remaining cells not measured");
                b.notes
                    .push(format!("regret: deadline reached at {phase}:{len} {op}"));
                break 'cells;
            }
            let e = match hetero_solver::explain(&b.predictor, &model, &plan, op, phase, len) {
                Ok(e) => e,
                Err(err) => {
                    let why = format!("explain {op} {phase}:{len}: {err}");
                    b.log(&why);
                    cell_rows.push(
                        &json!({"cell": format!("{phase}:{len}"), "phase": phase.to_string(),
                        "len": len, "op": op, "status": "error", "reason": why}),
                    );
                    continue;
                }
            };
            // The same GEMMs under the same decision (the lm_head in prefill
            // runs one row at every length; decode 1 is prefill 1) are one
            // measurement: the cell is written once more, pointing to it.
            let key = (
                op.clone(),
                e.m,
                e.instances,
                serde_json::to_string(&e.planned.strategy).expect("serialisable"),
            );
            if let Some(first) = seen.get(&key) {
                let mut row = first.as_object().cloned().expect("an object");
                row.insert("same_as".into(), row["cell"].clone());
                row.insert("cell".into(), json!(format!("{phase}:{len}")));
                row.insert("phase".into(), json!(phase.to_string()));
                row.insert("len".into(), json!(len));
                b.log(&format!(
                    "{op} {phase}:{len}: the same GEMMs and decision as {}",
                    row["same_as"]
                ));
                cell_rows.push(&Value::Object(row));
                continue;
            }
            let planned = &e.planned;
            let mut items: Vec<(
                String,
                StrategyKind,
                Vec<String>,
                Strategy,
                CostBreakdown,
                bool,
            )> = e
                .candidates
                .iter()
                .map(|c| {
                    let cost = CostBreakdown {
                        parts_us: c.parts_us.clone(),
                        sync_us: c.sync_us,
                        sync_block_us: None,
                        copy_us: c.copy_us,
                        total_us: c.total_us,
                    };
                    let chosen = c.strategy == planned.strategy;
                    (
                        c.label.clone(),
                        c.kind,
                        c.processors.clone(),
                        c.strategy.clone(),
                        cost,
                        chosen,
                    )
                })
                .collect();
            if !items.iter().any(|x| x.5) {
                let l = hetero_runtime::label(&planned.strategy, planned.rows_m());
                let procs = planned
                    .strategy
                    .processors()
                    .iter()
                    .map(|p| p.to_string())
                    .collect();
                items.push((
                    l,
                    planned.strategy.kind(),
                    procs,
                    planned.strategy.clone(),
                    planned.cost.clone(),
                    true,
                ));
            }
            items.sort_by(|x, y| x.4.total_us.total_cmp(&y.4.total_us));
            let best_pred = items
                .iter()
                .map(|x| x.4.total_us)
                .fold(f64::INFINITY, f64::min);
            let limit = cap_us.max(cap_factor * best_pred);
            let mut run_it: Vec<bool> =
                items.iter().map(|x| x.5 || x.4.total_us <= limit).collect();
            // Processors alone, for every split that runs (the overlap bound).
            for i in 0..items.len() {
                if items[i].1 != StrategyKind::Single || run_it[i] {
                    continue;
                }
                let p = &items[i].2[0];
                let needed = items
                    .iter()
                    .zip(&run_it)
                    .any(|(x, &r)| r && x.2.len() > 1 && x.2.contains(p));
                if needed && items[i].4.total_us <= single_cap_us {
                    run_it[i] = true;
                }
            }
            b.log(&format!(
                "{op} {phase}:{len} (M = {}): {} candidates, {} to run",
                e.m,
                items.len(),
                run_it.iter().filter(|x| **x).count()
            ));
            let mut measured: Vec<Measured> = vec![];
            for (i, (label, kind, procs, strategy, cost, chosen)) in items.into_iter().enumerate() {
                let predicted = cost.total_us;
                let base = json!({
                    "cell": format!("{phase}:{len}"), "phase": phase.to_string(), "len": len, "op": op,
                    "m": e.m, "k": e.k, "n": e.n, "instances": e.instances,
                    "label": label, "kind": kind.as_str(), "processors": procs,
                    "strategy": serde_json::to_value(&strategy).expect("serialisable"),
                    "predicted_us": predicted, "chosen": chosen,
                });
                let mut row = base.as_object().cloned().expect("an object");
                let mut m_us = None;
                if !run_it[i] {
                    row.insert("status".into(), json!("skipped"));
                    row.insert("reason".into(), json!(format!(
                        "predicted {predicted:.0} µs > {limit:.0} µs (max of {cap_us:.0} µs and {cap_factor} × the best prediction {best_pred:.1} µs)"
                    )));
                } else if b.past_deadline() {
                    row.insert("status".into(), json!("skipped"));
                    row.insert("reason".into(), json!("deadline"));
                } else if dry_run {
                    // What running it would cost: warm-up and timed runs at the prediction.
                    dry_us += (reps + 1) as f64 * predicted;
                    row.insert("status".into(), json!("dry_run"));
                    b.log(&format!(
                        "  {label}: predicted {predicted:.1} µs (would run)"
                    ));
                } else {
                    let t = Instant::now();
                    let d = eval::decision_like(planned, strategy, cost);
                    let one = eval::one_decision_plan(&plan, op, phase, d)
                        .expect("the op is in the plan");
                    // Blocking waits: a poll sleeps through the predicted time, which
                    // would charge a candidate for its own misprediction.
                    let r = b.with_runtime(&one, &model, SyncChoice::Block, |rt| {
                        run_one(rt, phase, len, reps)
                    });
                    row.insert("seconds".into(), json!(t.elapsed().as_secs_f64()));
                    match r {
                        Ok(rep) => {
                            let (ok, check) = check_json(&rep);
                            let o = &rep.per_op[0];
                            row.insert(
                                "status".into(),
                                json!(if ok { "ok" } else { "check_failed" }),
                            );
                            row.insert("check".into(), check);
                            row.insert("measured_us".into(), json!(o.measured_us));
                            row.insert("samples".into(), json!(o.samples));
                            row.insert("timing".into(), json!(o.timing));
                            row.insert(
                                "parts".into(),
                                serde_json::to_value(&o.parts).expect("serialisable"),
                            );
                            if ok && o.timing == "measured" {
                                m_us = Some(o.measured_us);
                            }
                        }
                        Err(err) => {
                            row.insert("status".into(), json!("error"));
                            row.insert("reason".into(), json!(err));
                        }
                    }
                    b.log(&format!(
                        "  {label}: predicted {predicted:.1} µs, measured {} ({})",
                        m_us.map_or("-".into(), |x| format!("{x:.1} µs")),
                        row["status"]
                    ));
                }
                rows.push(&Value::Object(row));
                measured.push(Measured {
                    label,
                    kind,
                    processors: procs,
                    chosen,
                    measured_us: m_us,
                });
            }
            // The cell: regret and splits against the overlap bound.
            let all: Vec<f64> = measured.iter().filter_map(|x| x.measured_us).collect();
            let chosen = measured.iter().find(|x| x.chosen);
            let best = measured
                .iter()
                .filter(|x| x.measured_us.is_some())
                .min_by(|x, y| x.measured_us.unwrap().total_cmp(&y.measured_us.unwrap()));
            let reg = chosen
                .and_then(|c| c.measured_us)
                .and_then(|c| eval::regret(c, &all));
            if let Some(r) = reg {
                regrets.push((phase, r));
            }
            let single = |p: &str| {
                measured
                    .iter()
                    .find(|x| x.kind == StrategyKind::Single && x.processors == [p])
                    .and_then(|x| x.measured_us)
            };
            let splits: Vec<Value> = measured
                .iter()
                .filter(|x| x.processors.len() > 1 && x.measured_us.is_some())
                .map(|x| {
                    let singles: Option<Vec<f64>> =
                        x.processors.iter().map(|p| single(p)).collect();
                    let gain: Option<SplitGain> = singles
                        .as_ref()
                        .and_then(|s| eval::split_gain(x.measured_us.unwrap(), s));
                    json!({"label": x.label, "kind": x.kind.as_str(), "processors": x.processors,
                           "chosen": x.chosen, "singles_us": singles, "gain": gain})
                })
                .collect();
            let row = json!({
                "cell": format!("{phase}:{len}"), "phase": phase.to_string(), "len": len, "op": op, "m": e.m,
                "chosen": chosen.map(|c| c.label.clone()),
                "chosen_us": chosen.and_then(|c| c.measured_us),
                "best": best.map(|c| c.label.clone()),
                "best_us": best.and_then(|c| c.measured_us),
                "regret": reg,
                "candidates": measured.len(),
                "measured": all.len(),
                "splits": splits,
            });
            cell_rows.push(&row);
            seen.insert(key, row);
        }
    }
    let all: Vec<f64> = regrets.iter().map(|x| x.1).collect();
    let summary = json!({
        "all": eval::summarize(&all),
        "prefill": eval::summarize(&regrets.iter().filter(|x| x.0 == Phase::Prefill).map(|x| x.1).collect::<Vec<_>>()),
        "decode": eval::summarize(&regrets.iter().filter(|x| x.0 == Phase::Decode).map(|x| x.1).collect::<Vec<_>>()),
        "seconds": b.elapsed(),
        "dry_run_predicted_s": dry_run.then_some(dry_us / 1e6),
    });
    std::fs::write(b.out.join("regret-summary.json"), format!("{summary:#}\n"))
        .map_err(|e| e.to_string())?;
    b.log(&format!("regret: {summary}"));
    Ok(())
}

fn handoff(a: &Args, b: &mut Bench) -> Res<()> {
    let cells = parse_cells(&a.list("cells", "decode:1,prefill:128"))?;
    let op = a.get("op").unwrap_or("attn_k").to_string();
    let passes: u32 = a.num("passes", 15)?;
    let cap_us: f64 = a.num("cap-us", 200_000.0)?;
    let model = one_layer(&b.model);
    let mut s = b.settings(
        phases(&cells),
        lengths(&cells, Phase::Prefill),
        lengths(&cells, Phase::Decode),
    );
    s.ops = vec![op.clone()];
    let plan = b.solve(&model, &s, "handoff-plan.ron")?;
    let mut rows = Rows::create(&b.out.join("handoff.jsonl"))?;
    for p in b.processors.clone() {
        for &(phase, len) in &cells {
            let base = json!({"processor": b.here(&p), "cell": format!("{phase}:{len}"), "op": op, "passes": passes});
            let mut row = base.as_object().cloned().expect("an object");
            let e = match hetero_solver::explain(&b.predictor, &model, &plan, &op, phase, len) {
                Ok(e) => e,
                Err(err) => {
                    row.insert("status".into(), json!("error"));
                    row.insert("reason".into(), json!(format!("explain: {err}")));
                    rows.push(&Value::Object(row));
                    continue;
                }
            };
            let cand = e
                .candidates
                .iter()
                .find(|c| c.kind == StrategyKind::Single && c.processors == [p.clone()]);
            let Some(c) = cand else {
                row.insert("status".into(), json!("skipped"));
                row.insert("reason".into(), json!("no prediction for it alone"));
                rows.push(&Value::Object(row));
                continue;
            };
            row.insert("predicted_us".into(), json!(c.total_us));
            if c.total_us > cap_us || b.past_deadline() {
                row.insert("status".into(), json!("skipped"));
                row.insert(
                    "reason".into(),
                    json!(if b.past_deadline() {
                        "deadline".to_string()
                    } else {
                        format!("predicted {:.0} µs > {cap_us:.0} µs", c.total_us)
                    }),
                );
                rows.push(&Value::Object(row));
                continue;
            }
            let cost = CostBreakdown {
                parts_us: c.parts_us.clone(),
                sync_us: c.sync_us,
                sync_block_us: None,
                copy_us: c.copy_us,
                total_us: c.total_us,
            };
            // As predicted (a poll sleeps through the prediction, then
            // spins), and with a prediction of zero (a poll spins at once).
            let zero = CostBreakdown {
                parts_us: vec![0.0; cost.parts_us.len().max(1)],
                sync_us: 0.0,
                sync_block_us: None,
                copy_us: 0.0,
                total_us: 0.0,
            };
            let t = Instant::now();
            let mut series: Vec<(&str, Vec<f64>)> = vec![];
            let mut outcome: Res<Value> = Ok(Value::Null);
            for (cost, poll_name, block_name) in
                [(cost, "poll", "block"), (zero, "spin", "block_again")]
            {
                let d = eval::decision_like(&e.planned, c.strategy.clone(), cost);
                let one =
                    eval::one_decision_plan(&plan, &op, phase, d).expect("the op is in the plan");
                let r = b.with_runtime(&one, &model, SyncChoice::Block, |rt| {
                    let (ok, check) = check_json(&run_one(rt, phase, len, 1)?);
                    if !ok {
                        return Err(format!("check failed: {check}"));
                    }
                    alternate(rt, phase, len, passes).map(|x| (check, x))
                });
                match r {
                    Ok((check, (poll, block))) => {
                        outcome = Ok(check);
                        series.push((poll_name, poll));
                        series.push((block_name, block));
                    }
                    Err(err) => {
                        outcome = Err(err);
                        break;
                    }
                }
            }
            row.insert("seconds".into(), json!(t.elapsed().as_secs_f64()));
            match outcome {
                Ok(check) => {
                    row.insert("check".into(), check);
                    row.insert("status".into(), json!("ok"));
                    let mut line = format!("{p} {phase}:{len} {op}:");
                    for (name, v) in &series {
                        row.insert(format!("{name}_median_us"), json!(median(v)));
                        row.insert(format!("{name}_p90_us"), json!(quantile(v, 0.9)));
                        row.insert(format!("{name}_us"), json!(v));
                        line += &format!(" {name} {:.1} µs", median(v));
                    }
                    b.log(&line);
                }
                Err(err) => {
                    b.log(&format!("{p} {phase}:{len} {op}: {err}"));
                    row.insert("status".into(), json!("error"));
                    row.insert("reason".into(), json!(err));
                }
            }
            rows.push(&Value::Object(row));
        }
    }
    Ok(())
}

/// `passes` runs with polling and `passes` with blocking waits, alternated;
/// the operator's time of each.
fn alternate(rt: &mut Runtime, phase: Phase, len: u32, passes: u32) -> Res<(Vec<f64>, Vec<f64>)> {
    let (mut poll, mut block) = (vec![], vec![]);
    for _ in 0..passes {
        for sync in [SyncChoice::Poll, SyncChoice::Block] {
            rt.set_sync(sync);
            let r = rt
                .run(&RunSpec {
                    phase,
                    len,
                    steps: 1,
                    repeat: 1,
                    check: false,
                })
                .map_err(|e| format!("{e:#}"))?;
            match sync {
                SyncChoice::Poll => poll.push(r.per_op[0].measured_us),
                SyncChoice::Block => block.push(r.per_op[0].measured_us),
            }
        }
    }
    Ok((poll, block))
}

fn offload(a: &Args, b: &mut Bench) -> Res<()> {
    let budget =
        parse_bytes(a.get("budget").unwrap_or("4GiB")).map_err(|e| format!("--budget: {e}"))?;
    let tokens: u32 = a.num("tokens", 2)?;
    let repeat: u32 = a.num("repeat", 2)?;
    let variants = a.list("variants", "plan,stream,gpu,cpu");
    let model = b.model.clone();
    let mut s = b.settings(vec![Phase::Decode], vec![], vec![1]);
    s.gpu_mem_budget = Some(budget);
    let plan = b.solve(&model, &s, "offload-plan.ron")?;
    let info = plan
        .solver
        .as_ref()
        .and_then(|i| i.offload.clone())
        .ok_or("the plan has no offload placement")?;
    let weights: u64 = plan
        .ops
        .iter()
        .map(|t| {
            let count = model.op(&t.op).map_or(1, |o| o.count) as u64;
            t.k as u64 * t.n as u64 * t.layers as u64 * count
        })
        .sum();
    let mut rows = Rows::create(&b.out.join("offload.jsonl"))?;
    rows.push(&json!({
        "kind": "placement", "model": model.name, "budget_bytes": budget,
        "resident_bytes": info.resident_bytes, "weights": weights,
        "cpu": info.cpu, "gpu": info.gpu, "resident": info.resident,
        "decisions": plan.ops.iter().map(|t| json!({"op": t.op, "layers": t.layers,
            "label": hetero_runtime::label(&t.decisions[0].strategy, t.decisions[0].rows_m()),
            "predicted_us": t.decisions[0].cost.total_us})).collect::<Vec<_>>(),
    }));
    b.log(&format!(
        "offload placement: {} of {budget} bytes resident on {}",
        info.resident_bytes, info.gpu
    ));
    let zero = CostBreakdown {
        parts_us: vec![0.0],
        sync_us: 0.0,
        sync_block_us: None,
        copy_us: 0.0,
        total_us: 0.0,
    };
    for v in variants {
        if b.past_deadline() {
            b.log(&format!("deadline reached: variant {v} not run"));
            rows.push(&json!({"kind": "variant", "variant": v, "status": "skipped", "reason": "deadline"}));
            continue;
        }
        let (cpu, gpu) = (info.cpu.clone(), info.gpu.clone());
        let forced = |f: &dyn Fn(&hetero_plan::OpPlan) -> Strategy| {
            eval::force_phase(&plan, Phase::Decode, |t, d| {
                Some(eval::decision_like(d, f(t), zero.clone()))
            })
        };
        let (p, what) = match v.as_str() {
            "plan" => (
                plan.clone(),
                "the offload plan (ScheInfer CC/CG/GG under the budget)",
            ),
            "stream" => (
                forced(&|t| Strategy::Offload {
                    cpu: cpu.clone(),
                    gpu: gpu.clone(),
                    cc_rows: 0,
                    cg_rows: t.n,
                    gg_rows: 0,
                    gpu_tokens: 0,
                }),
                "GPU alone, every weight copied to it every step",
            ),
            "gpu" => (
                forced(&|_| Strategy::Single {
                    processor: gpu.clone(),
                    padded_to: None,
                    online_prepare: false,
                }),
                "GPU alone, every weight resident (over the budget: a reference)",
            ),
            "cpu" => (
                forced(&|_| Strategy::Single {
                    processor: cpu.clone(),
                    padded_to: None,
                    online_prepare: false,
                }),
                "CPU alone",
            ),
            other => {
                return Err(format!(
                    "--variants: unknown `{other}` (plan, stream, gpu, cpu)"
                ));
            }
        };
        b.log(&format!("offload variant {v}: {what}"));
        let t = Instant::now();
        let r = b.with_runtime(&p, &model, SyncChoice::Block, |rt| {
            rt.run(&RunSpec {
                phase: Phase::Decode,
                len: 1,
                steps: tokens,
                repeat,
                check: true,
            })
            .map_err(|e| format!("{e:#}"))
        });
        let mut row = json!({"kind": "variant", "variant": v, "what": what, "seconds": t.elapsed().as_secs_f64(),
                             "tokens": tokens, "repeat": repeat, "sync": "block"})
            .as_object()
            .cloned()
            .expect("an object");
        match r {
            Ok(rep) => {
                let (ok, check) = check_json(&rep);
                row.insert(
                    "status".into(),
                    json!(if ok { "ok" } else { "check_failed" }),
                );
                row.insert("check".into(), check);
                row.insert("per_token_us".into(), json!(rep.per_token_us));
                row.insert("tokens_per_s".into(), json!(rep.tokens_per_s));
                row.insert(
                    "predicted_us".into(),
                    json!(if v == "plan" {
                        Some(rep.predicted_us)
                    } else {
                        None
                    }),
                );
                row.insert("timing".into(), json!(rep.timing));
                let _ = std::fs::write(
                    b.out.join(format!("offload-{v}.json")),
                    serde_json::to_string_pretty(&rep).expect("serialisable"),
                );
                b.log(&format!(
                    "  {v}: {:.1} ms per token, {:.2} tokens/s ({})",
                    rep.per_token_us.unwrap_or(f64::NAN) / 1e3,
                    rep.tokens_per_s.unwrap_or(f64::NAN),
                    row["status"]
                ));
            }
            Err(err) => {
                b.log(&format!("  {v}: {err}"));
                row.insert("status".into(), json!("error"));
                row.insert("reason".into(), json!(err));
            }
        }
        rows.push(&Value::Object(row));
    }
    Ok(())
}
