//! `hetero demo`: the whole pipeline on this machine, in a few minutes.
//!
//! Every step is the `hetero` command a user would type, run as a child
//! process of this one, with its output kept in `OUT/logs/`. The demo adds
//! nothing the commands do not do; it chooses their arguments (which
//! processors, the plans to compare with: `demo::choice`, `demo::compare`)
//! and reads their reports back to print one screen at the end
//! (`demo::screen`).

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
use crate::demo::choice::{self, Choice};
use crate::demo::compare::{self, Compared};
use crate::demo::screen::{self, Generated, Ran, Screen};
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
    /// Profile time budget; the demo as a whole takes about this plus two
    /// to three minutes.
    #[arg(long, default_value = "150s")]
    budget: String,
    /// Processors to profile and plan for, comma-separated (default: every
    /// processor whose times are real, less those that share another's
    /// hardware: OpenCL on the CPU's cores beside cpu:0, OpenCL on a GPU
    /// that CUDA drives; the demo prints why it leaves each out).
    #[arg(long)]
    processors: Option<String>,
    /// Also use simulated (npu-sim) and emulated (QNN HTP on x86) processors.
    /// Their times are not this machine's and every row says so.
    #[arg(long, conflicts_with = "processors")]
    include_simulated: bool,
    /// Prompt length of the generation (random token ids from a fixed seed).
    #[arg(long, default_value_t = 64)]
    pub(crate) len: u32,
    /// Tokens the generation makes: the prefill's, then one per decode step.
    #[arg(long, default_value_t = 8)]
    pub(crate) tokens: u32,
    /// Longest prefill length solved (the plan covers 1..=this).
    #[arg(long, default_value_t = 1024)]
    pub(crate) max_len: u32,
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

/// The files the demo writes, as the arguments of its commands.
pub(crate) struct Files {
    pub(crate) model: String,
    pub(crate) dataset: String,
    pub(crate) predictor: String,
    pub(crate) fit_report: String,
    pub(crate) plan: String,
    pub(crate) charts: String,
    /// The plan's `hetero generate --json` report.
    pub(crate) generate: String,
}

/// What the steps share: the arguments, the files, and what earlier steps
/// found.
pub(crate) struct Demo {
    pub(crate) args: DemoArgs,
    exe: PathBuf,
    agent: PathBuf,
    /// The folder the steps write (OUT.partial).
    pub(crate) out: PathBuf,
    /// Where it goes when every step has succeeded (--out).
    shown_out: PathBuf,
    logs: PathBuf,
    pub(crate) files: Files,
    started: Instant,
    step: usize,
    /// The probe's processors, those the demo uses and why it leaves the
    /// others out.
    pub(crate) choice: Choice,
    /// The plans the plan is compared with.
    pub(crate) compared: Compared,
    /// The runs, the plan's first.
    ran: Vec<Ran>,
    /// The plan's per-operator tables of its runs.
    tables: String,
    /// False when the charts were skipped for want of a font.
    charts_drawn: bool,
}

/// One step of the demo: its title, made from what earlier steps found,
/// and its work.
struct Step {
    title: fn(&Demo) -> String,
    run: fn(&mut Demo) -> Result<()>,
}

/// The demo's steps, in order.
const STEPS: [Step; 9] = [
    Step {
        title: |_| "probe the processors and choose those that matter for the plan".into(),
        run: probe_step,
    },
    Step {
        title: |d| {
            let a = &d.args;
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
        title: |d| {
            format!(
                "solve every operator at lengths 1..{} and decode",
                d.args.max_len
            )
        },
        run: solve_step,
    },
    Step {
        title: |d| {
            format!(
                "measure the GEMMs the plan runs at prefill {} and in decode, then fit and solve again",
                d.args.len
            )
        },
        run: refine_step,
    },
    Step {
        title: compare::title,
        run: compare::step,
    },
    Step {
        title: |_| "draw the charts".into(),
        run: chart_step,
    },
    Step {
        title: |d| {
            format!(
                "generate with {}: a prompt of {} random token ids, {} new tokens, every GEMM output checked",
                compare::runs_title(d),
                d.args.len,
                d.args.tokens
            )
        },
        run: run_step,
    },
    Step {
        title: |_| "what the plan does, predicted against measured".into(),
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
    pub(crate) fn shown(&self, path: &str) -> String {
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
    pub(crate) fn hetero<S: AsRef<str>>(&self, name: &str, args: &[S]) -> Result<String> {
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
        let procs = self.choice.chosen.join(",");
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

/// Runs the agent's probe: the processors it found, each as the probe
/// describes it.
fn probe(agent_path: &Path, log: &Path) -> Result<Vec<hetero_plan::Processor>> {
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
    let found = serde_json::from_value(v["processors"].clone()).with_context(|| {
        format!(
            "the agent's probe listed processors hetero cannot read; see {}",
            log.display()
        )
    })?;
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
    Staging::check(&a.out, &inputs)?;
    if let Some(model) = &a.model {
        generates(model)?;
    }
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

/// Refuses, before anything runs, a model that `hetero generate` (the
/// demo's last run) cannot run.
fn generates(model: &Path) -> Result<()> {
    let spec = hetero_plan::hf::load_config(model)?;
    hetero_runtime::model::DecoderConfig::load(model, &spec).map_err(|e| {
        BadInput(format!(
            "--model {}: the demo generates with the plan and the decoder cannot run it: {e}",
            model.display()
        ))
    })?;
    Ok(())
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
        "hetero demo: profile this machine, fit, solve {model}, compare, chart, run; everything goes to {} \
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
        generate: path("generate.json"),
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
        choice: Choice::default(),
        compared: Compared::default(),
        ran: Vec::new(),
        tables: String::new(),
        charts_drawn: false,
    };
    for step in &STEPS {
        let title = (step.title)(&d);
        d.begin(&title);
        (step.run)(&mut d)?;
        staging.checkpoint()?;
    }
    Ok(())
}

/// Probes the processors and chooses those to use.
fn probe_step(d: &mut Demo) -> Result<()> {
    let log = d.log("probe");
    let found = probe(&d.agent, &log)?;
    d.choice = choice::choose(
        &found,
        d.args.processors.as_deref(),
        d.args.include_simulated,
    );
    if d.choice.chosen.is_empty() {
        return Err(anyhow!(
            "the probe found no processor to profile; see {}",
            log.display()
        ));
    }
    for l in d.choice.lines() {
        println!("{l}");
    }
    let how = if d.choice.by_hand {
        " (--processors)"
    } else {
        ""
    };
    println!("  using: {}{how}", d.choice.chosen.join(", "));
    if d.choice.one_real() {
        println!(
            "  this machine has one real processor for the plan; step 6 shows how the plan \
             changes with a second one, from a reference profile built into hetero"
        );
    } else if let Some(gpu) = d.choice.discrete_gpu() {
        println!(
            "  {} is a discrete GPU: step 6 also solves the offload setting, its memory \
             too small for the model's weights",
            gpu.id
        );
    }
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
    // The budget plan, what was written and why it stopped: everything
    // before the per-processor table that follows a blank line.
    for l in text.lines().take_while(|l| !l.trim().is_empty()) {
        println!("  {l}");
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

/// The demo's prompt: `len` token ids below the model's vocabulary, from a
/// fixed seed, as `hetero generate --prompt-tokens` takes them.
fn prompt_tokens(model: &str, len: u32) -> Result<String> {
    let vocab = hetero_plan::hf::load_config(Path::new(model))?.vocab.max(1) as usize;
    let mut g = hetero_agent::verify::SplitMix64::new(0x5eed);
    let ids: Vec<String> = (0..len).map(|_| g.below(vocab).to_string()).collect();
    Ok(ids.join(","))
}

/// `hetero generate` of `plan` on the model's shapes with synthetic weights
/// (one layer's worth in memory, run by every layer: the GEMMs and their
/// shapes are the model's, without generating gigabytes of weights), every
/// GEMM output checked; writes its JSON report to `out` and returns it.
fn run_plan(d: &Demo, tag: &str, plan: &str, out: &str) -> Result<Value> {
    let f = &d.files;
    let prompt = prompt_tokens(&f.model, d.args.len)?;
    let tokens = d.args.tokens.to_string();
    let args = [
        "generate",
        plan,
        "--model",
        &f.model,
        "--synthetic-weights",
        "--share-weights",
        "--prompt-tokens",
        &prompt,
        "--max-new",
        &tokens,
        "--ignore-eos",
        "--check",
        "--predictor",
        &f.predictor,
        "--json",
    ];
    let text = d.hetero(&format!("generate{tag}"), &args)?;
    let r: Value = serde_json::from_str(&text).context("parsing hetero generate --json")?;
    hetero_plan::write_atomic(Path::new(out), text.as_bytes())?;
    Ok(r)
}

/// Generates with the plan and the plans it is compared with, each on the
/// same prompt; prints the plan's per-operator table.
fn run_step(d: &mut Demo) -> Result<()> {
    let (plan, out) = (d.files.plan.clone(), d.files.generate.clone());
    let r = run_plan(d, "", &plan, &out)?;
    let mut tables = String::new();
    screen::generate_table(&r, &mut tables);
    print!("{tables}");
    d.tables = tables;
    d.ran = vec![Ran {
        label: format!("the plan ({})", d.choice.chosen.join(" + ")),
        times: Generated::of(&r),
        mix: None,
    }];
    for e in d.compared.extra.clone() {
        let at = d.out.join(format!("generate-{}.json", e.tag));
        let r = run_plan(
            d,
            &format!("-{}", e.tag),
            &e.plan,
            &at.display().to_string(),
        )?;
        let ran = Ran {
            label: e.label.clone(),
            times: Generated::of(&r),
            mix: e.mix.clone(),
        };
        println!(
            "  {}, predicted → measured: time to first token {}, per output token {}",
            ran.label,
            ran.times.ttft.cell(),
            ran.times.tpot.cell()
        );
        d.ran.push(ran);
    }
    Ok(())
}

/// "cpu:0/f32 58 %" for each processor of the fit report.
fn fit_shares(path: &str) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let Ok(v) = serde_json::from_str::<Value>(&text) else {
        return Vec::new();
    };
    (v["entries"].as_array().into_iter().flatten())
        .filter_map(|e| {
            Some(format!(
                "{}/{} {:.0} %",
                e["processor"].as_str()?,
                e["dtype"].as_str()?,
                100.0 * e["within_10pct"].as_f64()?
            ))
        })
        .collect()
}

/// The one screen the demo ends with, from what the steps found.
fn screen_of(d: &Demo) -> Result<Screen> {
    let plan: hetero_plan::Plan = hetero_plan::load(Path::new(&d.files.plan))?;
    let left_out = (d.choice.considered.iter())
        .filter_map(|c| Some(format!("{}: {}", c.processor.id, c.left_out.as_deref()?)))
        .collect();
    Ok(Screen {
        model: Path::new(&d.files.model).file_stem().map_or_else(
            || d.files.model.clone(),
            |s| s.to_string_lossy().into_owned(),
        ),
        len: d.args.len,
        tokens: d.args.tokens,
        max_len: d.args.max_len,
        processors: d.choice.chosen.join(", "),
        left_out,
        fit: fit_shares(&d.files.fit_report),
        mix: screen::mix(&plan),
        runs: d.ran.clone(),
        single_note: d.compared.single_note.clone(),
        reference: d.compared.reference.clone(),
        elapsed_s: d.started.elapsed().as_secs_f64(),
        out: d.shown_out.display().to_string(),
        plan: d.shown(&d.files.plan),
    })
}

/// Where everything went, one line each.
fn file_list(d: &Demo) -> String {
    let f = &d.files;
    let charts = if d.charts_drawn {
        d.shown(&f.charts)
    } else {
        "not drawn: no TrueType font (step 7)".to_string()
    };
    let mut rows = vec![
        ("dataset (measurements)", d.shown(&f.dataset)),
        ("predictor", d.shown(&f.predictor)),
        ("fit report", d.shown(&f.fit_report)),
        ("plan", d.shown(&f.plan)),
        (
            "plan summary",
            d.shown_out.join("plan-summary.txt").display().to_string(),
        ),
        ("charts (plan/, dataset/, fit/; each has index.md)", charts),
        ("generation report (hetero generate)", d.shown(&f.generate)),
    ];
    for e in &d.compared.extra {
        rows.push(("plan compared with", d.shown(&e.plan)));
    }
    if d.compared.reference.is_some() {
        let r = d.out.join("reference").display().to_string();
        rows.push(("reference profile, its fit and plans", d.shown(&r)));
    }
    rows.push((
        "logs of every step",
        d.shown_out.join("logs").display().to_string(),
    ));
    let mut s = String::new();
    for (what, p) in rows {
        let _ = writeln!(s, "  {what:<36} {p}");
    }
    s
}

/// Prints the one screen the demo ends with, and keeps it in DEMO.md with
/// the processor choice, the plan's per-operator tables and where
/// everything went.
fn report_step(d: &mut Demo) -> Result<()> {
    let mut notes = String::new();
    let timings: Vec<String> = (d.choice.chosen.iter())
        .filter_map(|id| d.choice.processor(id))
        .filter(|p| p.timing() != hetero_plan::Timing::Real)
        .map(|p| format!("{:?}", p.timing()).to_lowercase())
        .collect();
    if !timings.is_empty() {
        let _ = writeln!(
            notes,
            "Note: {} processor times are not this machine's real latency.\n",
            timings.join(" and ")
        );
    }
    let _ = writeln!(
        notes,
        "The generations' GEMMs poll (HeteroLLM's fast sync): each wait sleeps through most of \
         its part's prediction first, so a ratio near 1 can hide a part that ended sooner. The \
         same commands with --sync block (they are in the logs) show whether the plan \
         over-predicts.\n\nThe generations run on synthetic weights (one layer's worth, run by \
         every layer): their tokens are not a model's output; their times and checks are real: \
         each command checks a first generation and times a second, unchecked one."
    );
    let screen = screen_of(d)?.render();
    println!("\n{screen}");
    let summary = format!(
        "# hetero demo\n\nWritten by `hetero demo`; a later demo with the same --out replaces this \
         folder while nothing in it changes ({}).\n\n```\n{}\n```\n\n## Processors\n\n```\n{}\n```\n\n\
         ## The plan's generation, per operator\n\n```\n{}\n```\n\n{notes}\n## Where everything went\n\n```\n{}```\n",
        crate::demo_folder::MANIFEST,
        screen.trim_end(),
        d.choice.lines().join("\n"),
        d.tables.trim(),
        file_list(d),
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
