//! `hetero demo`: the whole pipeline on this machine, in a few minutes.
//!
//! Every step is the `hetero` command a user would type, run as a child
//! process of this one, with its output kept in `OUT/logs/`. The demo adds
//! nothing the commands do not do; it chooses their arguments and reads
//! their reports back to print one table at the end.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, anyhow};
use clap::Args;
use hetero_profiler::Target;
use hetero_profiler::agent::{self, AgentSource};
use serde_json::Value;

use crate::BadInput;
use crate::demo_folder::Staging;
use crate::outpath::Input;

/// The model solved when `--model` is not given (Qwen2.5-1.5B, the
/// smallest bundled config), built in so the demo runs from any folder.
const BUNDLED_MODEL: &str = include_str!("../datasets/models/qwen2.5-1.5b.json");
const BUNDLED_MODEL_NAME: &str = "qwen2.5-1.5b";

/// The summary of the demo's results, in its folder.
const SUMMARY: &str = "DEMO.md";

const EXAMPLES: &str = "\
Examples:
  hetero demo                                  # everything, into ./hetero-demo
  hetero demo --out /tmp/demo --budget 60s     # a shorter profile
  hetero demo --processors cpu:0 --len 300     # one processor, a longer prompt";

/// Arguments of `hetero demo`.
#[derive(Debug, Args)]
#[command(after_help = EXAMPLES)]
pub struct DemoArgs {
    /// Folder for everything the demo writes. It is written beside, as
    /// OUT.partial, and renamed to OUT once every step has succeeded; an
    /// earlier demo's folder is then replaced if nothing in it changed (its
    /// demo-manifest.json says what it wrote); any other non-empty folder is
    /// refused.
    #[arg(long, default_value = "hetero-demo")]
    out: PathBuf,
    /// Hugging Face config.json to solve (default: the bundled Qwen2.5-1.5B).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Profile time budget; the demo as a whole takes about this plus a minute.
    #[arg(long, default_value = "150s")]
    budget: String,
    /// Processors to profile and plan for, comma-separated (default: every
    /// processor whose times are real; see the probe).
    #[arg(long)]
    processors: Option<String>,
    /// Also use simulated (npu-sim) and emulated (QNN HTP on x86) processors.
    /// Their times are not this machine's and every row says so.
    #[arg(long, conflicts_with = "processors")]
    include_simulated: bool,
    /// Prompt length of the prefill run.
    #[arg(long, default_value_t = 64)]
    len: u32,
    /// Decode tokens of the decode run.
    #[arg(long, default_value_t = 8)]
    tokens: u32,
    /// Longest prefill length solved (the plan covers 1..=this).
    #[arg(long, default_value_t = 1024)]
    max_len: u32,
    /// Agent binary (default: found next to this executable).
    #[arg(long)]
    agent: Option<PathBuf>,
    /// Profile with warm caches, as `hetero profile` does by default. The
    /// demo otherwise profiles with `--cold-cache`, because its replay runs
    /// a layer's operators in turn and each finds its weights evicted.
    #[arg(long)]
    warm_cache: bool,
    /// Do not measure the GEMMs the plan runs at --len and in decode before
    /// running it (`hetero profile --plan`); the runs are then predicted
    /// from the fitted model alone.
    #[arg(long)]
    no_refine: bool,
}

/// One processor the probe found.
struct Found {
    id: String,
    name: String,
    timing: &'static str,
}

/// The files the demo writes, as the arguments of its commands.
struct Files {
    model: String,
    dataset: String,
    predictor: String,
    fit_report: String,
    plan: String,
    charts: String,
    prefill: String,
    decode: String,
}

/// What the steps share: the arguments, the files, and what earlier steps
/// found.
struct Demo {
    args: DemoArgs,
    exe: PathBuf,
    agent: PathBuf,
    /// The folder the steps write (OUT.partial).
    out: PathBuf,
    /// Where it goes when every step has succeeded (--out).
    shown_out: PathBuf,
    logs: PathBuf,
    files: Files,
    started: Instant,
    step: usize,
    /// The probe's processors, and those the demo uses.
    found: Vec<Found>,
    chosen: Vec<String>,
    /// False when the charts were skipped for want of a font.
    charts_drawn: bool,
}

/// One step of the demo: its title, made from the arguments, and its work.
struct Step {
    title: fn(&DemoArgs) -> String,
    run: fn(&mut Demo) -> Result<()>,
}

/// The demo's steps, in order.
const STEPS: [Step; 8] = [
    Step {
        title: |_| "probe the processors".into(),
        run: probe_step,
    },
    Step {
        title: |a| {
            format!(
                "profile: GEMMs of the model (up to {} rows) and stage probes, {} budget, {} caches",
                a.max_len,
                a.budget,
                if a.warm_cache { "warm" } else { "cold" }
            )
        },
        run: profile_step,
    },
    Step {
        title: |_| "fit latency models per processor".into(),
        run: fit_step,
    },
    Step {
        title: |a| {
            format!(
                "solve every operator at lengths 1..{} and decode",
                a.max_len
            )
        },
        run: solve_step,
    },
    Step {
        title: |a| {
            format!(
                "measure the GEMMs the plan runs at prefill {} and in decode, then fit and solve again",
                a.len
            )
        },
        run: refine_step,
    },
    Step {
        title: |_| "draw the charts".into(),
        run: chart_step,
    },
    Step {
        title: |a| {
            format!(
                "run the plan: prefill of {} tokens and {} decode steps, every output checked",
                a.len, a.tokens
            )
        },
        run: run_step,
    },
    Step {
        title: |_| "predicted against measured".into(),
        run: report_step,
    },
];

/// Rounds of measuring the plan's GEMMs at the demo's lengths: a new fit
/// can change a decision, whose GEMMs the next round measures; a round
/// that finds nothing new ends them.
const REFINE_ROUNDS: u32 = 3;

impl Demo {
    fn begin(&mut self, what: &str) {
        self.step += 1;
        println!(
            "\n[{}/{}] {what}  (+{:.0} s)",
            self.step,
            STEPS.len(),
            self.started.elapsed().as_secs_f64()
        );
    }

    /// Where `path`, written under the staging folder, is once the demo
    /// has finished.
    fn shown(&self, path: &str) -> String {
        match Path::new(path).strip_prefix(&self.out) {
            Ok(rest) => self.shown_out.join(rest).display().to_string(),
            Err(_) => path.to_string(),
        }
    }

    /// The current step's log named `name`.
    fn log(&self, name: &str) -> PathBuf {
        self.logs.join(format!("{}-{name}.log", self.step))
    }

    /// Runs `hetero ARGS`, its stdout and stderr into `logs/N-NAME.log`.
    /// Returns stdout. A failure shows the log's tail and keeps the exit
    /// code's meaning (2: bad input).
    fn hetero<S: AsRef<str>>(&self, name: &str, args: &[S]) -> Result<String> {
        let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
        let log = self.log(name);
        let shown = format!("hetero {}", args.join(" "));
        println!("  $ {shown}");
        let t = Instant::now();
        let o = Command::new(&self.exe)
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("starting {}", self.exe.display()))?;
        let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
        let text = format!("$ {shown}\n{stdout}\n--- stderr ---\n{stderr}");
        hetero_plan::write_atomic(&log, text.as_bytes())?;
        if !o.status.success() {
            let tail: Vec<&str> = stderr.lines().rev().take(8).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            let msg = format!(
                "step {} ({name}) failed ({}); its log is {}:\n{}",
                self.step,
                o.status,
                log.display(),
                tail.join("\n")
            );
            return Err(if o.status.code() == Some(2) {
                BadInput(msg).into()
            } else {
                anyhow!(msg)
            });
        }
        println!(
            "  done in {:.1} s, log {}",
            t.elapsed().as_secs_f64(),
            log.display()
        );
        Ok(stdout)
    }

    /// `hetero profile` of the chosen processors into the dataset, with the
    /// demo's caches, then `rest`.
    fn profile_args(&self, rest: &[&str]) -> Vec<String> {
        let agent = self.agent.display().to_string();
        let procs = self.chosen.join(",");
        let mut args: Vec<String> = [
            "profile",
            "--device",
            "local",
            "--agent",
            &agent,
            "--processors",
            &procs,
            "--out",
            &self.files.dataset,
        ]
        .iter()
        .chain(rest)
        .map(|s| s.to_string())
        .collect();
        if !self.args.warm_cache {
            args.push("--cold-cache".into());
        }
        args
    }

    /// `hetero fit` of the dataset into the predictor and fit report.
    fn fit_args(&self) -> [&str; 6] {
        let f = &self.files;
        [
            "fit",
            &f.dataset,
            "--out",
            &f.predictor,
            "--report",
            &f.fit_report,
        ]
    }

    /// `hetero solve` of the model with the predictor into the plan.
    fn solve_args(&self) -> Vec<String> {
        let f = &self.files;
        [
            "solve",
            "--predictor",
            &f.predictor,
            "--model",
            &f.model,
            "--out",
            &f.plan,
            "--lengths",
            &format!("1..{}", self.args.max_len),
        ]
        .map(String::from)
        .to_vec()
    }
}

/// Runs the agent's probe and lists what it found.
fn probe(agent_path: &Path, log: &Path) -> Result<Vec<Found>> {
    println!("  $ {} probe --json", agent_path.display());
    let o = Command::new(agent_path)
        .args(["probe", "--json"])
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("starting {}", agent_path.display()))?;
    let stdout = String::from_utf8_lossy(&o.stdout);
    let text = format!(
        "{stdout}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    hetero_plan::write_atomic(log, text.as_bytes())?;
    if !o.status.success() {
        return Err(anyhow!(
            "the agent's probe failed ({}); see {}",
            o.status,
            log.display()
        ));
    }
    let v: Value = serde_json::from_str(&stdout)
        .with_context(|| format!("the agent's probe printed no JSON; see {}", log.display()))?;
    let mut found = Vec::new();
    for p in v["processors"].as_array().into_iter().flatten() {
        let timing = if p["simulated"].as_bool() == Some(true) {
            "simulated"
        } else if p["emulated"].as_bool() == Some(true) {
            "emulated"
        } else {
            "real"
        };
        found.push(Found {
            id: p["id"].as_str().unwrap_or("?").to_string(),
            name: p["name"].as_str().unwrap_or("").to_string(),
            timing,
        });
    }
    for f in &found {
        println!("  {:<14} {:<10} {}", f.id, f.timing, f.name);
    }
    for u in v["unavailable"].as_array().into_iter().flatten() {
        println!(
            "  (not opened: {}: {})",
            u["backend"].as_str().unwrap_or("?"),
            u["reason"].as_str().unwrap_or("?")
        );
    }
    Ok(found)
}

/// The new rows a `hetero profile` summary reports, K in its line "wrote
/// DIR: N measurements, M microbenchmarks (K new) in S s"
/// (`profile_cmd::wrote_line`).
fn new_rows(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("wrote "))?;
    let (_, rest) = line.rsplit_once(" (")?;
    rest.split_once(" new)")?.0.trim().parse().ok()
}

fn us(v: &Value) -> String {
    match v.as_f64() {
        Some(x) if x >= 10_000.0 => format!("{:.1} ms", x / 1000.0),
        Some(x) => format!("{x:.0} µs"),
        None => "-".into(),
    }
}

/// The table of one run report: per operator and the total.
fn run_table(label: &str, r: &Value, out: &mut String) {
    let _ = writeln!(
        out,
        "\n{label}: {} (timing {}, sync {})",
        r["phase"].as_str().unwrap_or("?"),
        r["timing"].as_str().unwrap_or("?"),
        r["sync"].as_str().unwrap_or("?")
    );
    let _ = writeln!(
        out,
        "  {:<12} {:<28} {:>11} {:>11} {:>7}",
        "operator", "strategy", "predicted", "measured", "ratio"
    );
    for op in r["per_op"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "  {:<12} {:<28} {:>11} {:>11} {:>7.2}",
            op["op"].as_str().unwrap_or("?"),
            truncate(op["label"].as_str().unwrap_or("?"), 28),
            us(&op["predicted_us"]),
            us(&op["measured_us"]),
            op["ratio"].as_f64().unwrap_or(f64::NAN)
        );
    }
    let _ = writeln!(
        out,
        "  {:<12} {:<28} {:>11} {:>11} {:>7.2}",
        "total",
        "",
        us(&r["predicted_us"]),
        us(&r["measured_us"]),
        r["ratio"].as_f64().unwrap_or(f64::NAN)
    );
    if let Some(c) = r.get("check").filter(|c| !c.is_null()) {
        let _ = writeln!(
            out,
            "  check: {}/{} outputs within bound (worst error {:.2e}, bound {:.2e}, against {})",
            c["passed"],
            c["outputs"],
            c["worst_rel_err"].as_f64().unwrap_or(f64::NAN),
            c["worst_bound"].as_f64().unwrap_or(f64::NAN),
            c["reference"].as_str().unwrap_or("?")
        );
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}

/// Runs the demo.
pub fn run(a: DemoArgs) -> Result<()> {
    hetero_profiler::report::parse_duration(&a.budget)
        .map_err(|e| BadInput(format!("--budget {}: {e}", a.budget)))?;
    if a.len == 0 || a.len > a.max_len {
        return Err(BadInput(format!(
            "--len {} must be between 1 and --max-len {}",
            a.len, a.max_len
        ))
        .into());
    }
    if a.tokens == 0 {
        return Err(BadInput("--tokens must be at least 1".into()).into());
    }
    let mut inputs: Vec<Input<'_>> = Vec::new();
    inputs.extend(a.model.as_deref().map(|p| ("--model", p)));
    inputs.extend(a.agent.as_deref().map(|p| ("--agent", p)));
    let staging = Staging::prepare(&a.out, &inputs)?;
    match run_steps(a, &staging) {
        Ok(()) => staging.finish(),
        Err(e) => {
            staging.fail();
            Err(e.context(format!(
                "the demo stopped (what it wrote is kept in {}, which the next demo \
                 replaces; {} is as it was)",
                staging.work.display(),
                staging.out.display()
            )))
        }
    }
}

/// Runs the steps into the staging folder, listing what they wrote after
/// each one.
fn run_steps(a: DemoArgs, staging: &Staging) -> Result<()> {
    let source = match &a.agent {
        Some(p) => AgentSource::Path(p.clone()),
        None => AgentSource::Auto,
    };
    let agent = agent::select(&source, &Target::Local, std::env::consts::ARCH).map_err(|e| {
        anyhow!("{e}\nbuild it next to hetero: cargo build --release -p hetero -p hetero-agent")
    })?;
    let out = staging.work.clone();
    let model = match &a.model {
        Some(p) => p.display().to_string(),
        None => {
            let p = out.join(format!("{BUNDLED_MODEL_NAME}.json"));
            hetero_plan::write_atomic(&p, BUNDLED_MODEL.as_bytes())?;
            p.display().to_string()
        }
    };
    println!(
        "hetero demo: profile this machine, fit, solve {model}, chart, run; everything goes to {} \
         (written in {} and moved there when every step has succeeded)",
        staging.out.display(),
        out.display()
    );
    let path = |name: &str| out.join(name).display().to_string();
    let files = Files {
        model,
        dataset: path("dataset"),
        predictor: path("predictor.ron"),
        fit_report: path("fit-report.json"),
        plan: path("plan.ron"),
        charts: path("charts"),
        prefill: path("run-prefill.json"),
        decode: path("run-decode.json"),
    };
    let mut d = Demo {
        args: a,
        exe: std::env::current_exe().context("finding the hetero executable")?,
        agent,
        logs: out.join("logs"),
        out,
        shown_out: staging.out.clone(),
        files,
        started: Instant::now(),
        step: 0,
        found: Vec::new(),
        chosen: Vec::new(),
        charts_drawn: false,
    };
    for step in &STEPS {
        d.begin(&(step.title)(&d.args));
        (step.run)(&mut d)?;
        staging.checkpoint()?;
    }
    Ok(())
}

/// Probes the processors and chooses those to use.
fn probe_step(d: &mut Demo) -> Result<()> {
    let log = d.log("probe");
    d.found = probe(&d.agent, &log)?;
    d.chosen = match &d.args.processors {
        Some(list) => list.split(',').map(|s| s.trim().to_string()).collect(),
        None => d
            .found
            .iter()
            .filter(|f| d.args.include_simulated || f.timing == "real")
            .map(|f| f.id.clone())
            .collect(),
    };
    if d.chosen.is_empty() {
        return Err(anyhow!(
            "the probe found no processor to profile; see {}",
            log.display()
        ));
    }
    let labelled: Vec<String> = d
        .chosen
        .iter()
        .map(|id| match d.found.iter().find(|f| &f.id == id) {
            Some(f) if f.timing != "real" => format!("{id} ({})", f.timing),
            _ => id.clone(),
        })
        .collect();
    println!("  using: {}", labelled.join(", "));
    Ok(())
}

/// Profiles the model's GEMMs and the stage probes within the budget.
fn profile_step(d: &mut Demo) -> Result<()> {
    let max_len = d.args.max_len.to_string();
    let args = d.profile_args(&[
        "--models",
        &d.files.model,
        "--budget",
        &d.args.budget,
        "--max-len",
        &max_len,
    ]);
    let text = d.hetero("profile", &args)?;
    for l in text
        .lines()
        .filter(|l| l.contains("stopped") || l.contains("rows"))
    {
        println!("  {}", l.trim());
    }
    Ok(())
}

/// Fits the latency models.
fn fit_step(d: &mut Demo) -> Result<()> {
    let text = d.hetero("fit", &d.fit_args())?;
    for l in text.lines().take(12) {
        println!("  {l}");
    }
    Ok(())
}

/// Solves the model at every length.
fn solve_step(d: &mut Demo) -> Result<()> {
    let text = d.hetero("solve", &d.solve_args())?;
    for l in text.lines().take(6) {
        println!("  {l}");
    }
    Ok(())
}

/// Measures the GEMMs the plan runs at the demo's lengths, fits and solves
/// again until a round finds nothing new; then keeps the plan's summary.
fn refine_step(d: &mut Demo) -> Result<()> {
    if d.args.no_refine {
        println!("  skipped (--no-refine): the runs are predicted from the profile's model alone");
    } else {
        let at = format!("prefill:{},decode:1", d.args.len);
        for round in 1..=REFINE_ROUNDS {
            let args = d.profile_args(&[
                "--plan",
                &d.files.plan,
                "--at",
                &at,
                "--budget",
                "60s",
                "--resume",
            ]);
            let text = d.hetero(&format!("measure-plan-{round}"), &args)?;
            let new = new_rows(&text);
            println!(
                "  round {round}: {} GEMM(s) of the plan measured",
                new.map_or_else(|| "?".to_string(), |n| n.to_string())
            );
            if new == Some(0) {
                break;
            }
            d.hetero(&format!("fit-{round}"), &d.fit_args())?;
            d.hetero(&format!("solve-{round}"), &d.solve_args())?;
        }
    }
    let summary = d.hetero("plan-show", &["plan", "show", &d.files.plan])?;
    hetero_plan::write_atomic(&d.out.join("plan-summary.txt"), summary.as_bytes()).ok();
    Ok(())
}

/// Draws the plan's, the dataset's and the fit's charts.
fn chart_step(d: &mut Demo) -> Result<()> {
    // A machine without a font (a bare server or container) still runs the
    // plan: the charts are skipped with the reason and the way to draw them.
    if let Err(e) = crate::chart::ensure_font() {
        println!("  skipped: {e}");
        println!(
            "  the demo goes on; once a font is there, draw them with `hetero chart` (docs/charts.md)"
        );
        return Ok(());
    }
    let f = &d.files;
    let into = |name: &str| format!("{}/{name}", f.charts);
    let (plan_charts, dataset_charts, fit_charts) = (into("plan"), into("dataset"), into("fit"));
    let plan_args = [
        "chart",
        &f.plan,
        "--predictor",
        &f.predictor,
        "--model",
        &f.model,
        "--out",
        &plan_charts,
    ];
    let dataset_args = [
        "chart",
        &f.dataset,
        "--predictor",
        &f.predictor,
        "--out",
        &dataset_charts,
    ];
    d.hetero("chart-plan", &plan_args)?;
    d.hetero("chart-dataset", &dataset_args)?;
    d.hetero("chart-fit", &["chart", &f.fit_report, "--out", &fit_charts])?;
    d.charts_drawn = true;
    Ok(())
}

/// Runs the plan's prefill and decode, every output checked.
fn run_step(d: &mut Demo) -> Result<()> {
    let f = &d.files;
    let len = d.args.len.to_string();
    let tokens = d.args.tokens.to_string();
    // One layer's weights in memory, run by every layer: the GEMMs and their
    // shapes are the model's, without generating gigabytes of weights.
    let common = [
        "--model",
        &f.model,
        "--predictor",
        &f.predictor,
        "--check",
        // Three timed passes: a median of two is their mean, and one slow
        // pass moved the H100 host's prefill lm_head (run once a pass) from
        // 193 to 308 µs.
        "--repeat",
        "3",
        "--share-weights",
    ];
    let prefill = [
        "run", &f.plan, "--phase", "prefill", "--len", &len, "--out", &f.prefill,
    ];
    d.hetero("run-prefill", &[&prefill[..], &common[..]].concat())?;
    let decode = [
        "run", &f.plan, "--phase", "decode", "--len", "1", "--tokens", &tokens, "--out", &f.decode,
    ];
    d.hetero("run-decode", &[&decode[..], &common[..]].concat())?;
    Ok(())
}

/// Prints the runs' predicted and measured times and where everything
/// went, and keeps them in the marker file.
fn report_step(d: &mut Demo) -> Result<()> {
    let f = &d.files;
    let mut table = String::new();
    for (label, path) in [("prefill", &f.prefill), ("decode", &f.decode)] {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
        let r: Value = serde_json::from_str(&text).with_context(|| format!("parsing {path}"))?;
        run_table(label, &r, &mut table);
    }
    let timings: Vec<&str> = d
        .chosen
        .iter()
        .filter_map(|id| d.found.iter().find(|f| &f.id == id))
        .filter(|f| f.timing != "real")
        .map(|f| f.timing)
        .collect();
    if !timings.is_empty() {
        let _ = writeln!(
            table,
            "\nNote: {} processor times are not this machine's real latency.",
            timings.join(" and ")
        );
    }
    let _ = writeln!(
        table,
        "\nThe runs poll (HeteroLLM's fast sync): each wait sleeps through most of its part's \
         prediction first, so a ratio near 1 can hide a part that ended sooner. The same \
         runs with --sync block (the commands are in the logs) show whether the plan \
         over-predicts."
    );
    let _ = writeln!(
        table,
        "\nWhere everything went ({:.0} s in all):",
        d.started.elapsed().as_secs_f64()
    );
    let charts = if d.charts_drawn {
        d.shown(&f.charts)
    } else {
        "not drawn: no TrueType font (step 6)".to_string()
    };
    for (what, p) in [
        ("dataset (measurements)", d.shown(&f.dataset)),
        ("predictor", d.shown(&f.predictor)),
        ("fit report", d.shown(&f.fit_report)),
        ("plan", d.shown(&f.plan)),
        (
            "plan summary",
            d.shown_out.join("plan-summary.txt").display().to_string(),
        ),
        ("charts (plan/, dataset/, fit/; each has index.md)", charts),
        (
            "run reports",
            format!("{}, {}", d.shown(&f.prefill), d.shown(&f.decode)),
        ),
        (
            "logs of every step",
            d.shown_out.join("logs").display().to_string(),
        ),
    ] {
        let _ = writeln!(table, "  {what:<30} {p}");
    }
    let _ = writeln!(
        table,
        "\nNext: hetero plan explain {} --op ffn_down --len {}",
        d.shown(&f.plan),
        d.args.len
    );
    print!("{table}");
    let summary = format!(
        "# hetero demo\n\nWritten by `hetero demo`; a later demo with the same --out replaces this \
         folder while nothing in it changes ({}).\n\n```\n{}\n```\n",
        crate::demo_folder::MANIFEST,
        table.trim()
    );
    hetero_plan::write_atomic(&d.out.join(SUMMARY), summary.as_bytes())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::new_rows;
    use crate::profile_cmd::wrote_line;

    #[test]
    fn new_rows_reads_the_profile_summary() {
        // The line `hetero profile` prints, among the others.
        let text = format!(
            "processor ...\n{}\nstopped: complete",
            wrote_line("d/dataset", 248, 267, 4, 1.5)
        );
        assert_eq!(new_rows(&text), Some(4));
        // A folder name with " (" in it.
        assert_eq!(new_rows(&wrote_line("a (b)", 1, 0, 0, 0.1)), Some(0));
        assert_eq!(new_rows("no summary here"), None);
    }
}
