//! `hetero profile`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use hetero_plan::{DType, RunFlags, RunParams, hf};
use hetero_profiler::agent::AgentSource;
use hetero_profiler::report::parse_duration;
use hetero_profiler::transport::{RetryPolicy, TransportOptions};
use hetero_profiler::{ProfileOptions, Reporter, Target};

use crate::bad;

#[derive(Debug, Args)]
#[command(after_help = "Examples:
  hetero profile --device local --processors cpu:0 --budget 60s --out /tmp/ds
  hetero profile --device adb --models datasets/models/qwen2.5-1.5b.json --budget 15m --out datasets/my-phone
  hetero profile --device adb:R58M12345 --agent target/aarch64-linux-android/release/hetero-agent --out datasets/s24
  hetero profile --device ssh://pi@192.168.1.20:22 --agent-dir builds/ --out datasets/pi5
  hetero profile --device adb --out datasets/my-phone --resume --budget 10m   # continue after a cut

The rows go to OUT/journal.jsonl as they arrive; at the end OUT holds
measurements.parquet, microbench.parquet, device.json and budget.json (the
budget plan printed at the start). A budget too short for the fit rows of
every processor is refused before any case runs (exit 2, with the minimum).
See docs/profiling.md.")]
pub struct ProfileArgs {
    /// Where the agent runs: `local`, `ssh://user@host[:port]`, `adb` or `adb:SERIAL`.
    #[arg(long)]
    device: String,
    /// The dataset folder (new or empty; an earlier run of the same device with --resume).
    #[arg(long)]
    out: PathBuf,
    /// Processors to measure (comma list of ids from the probe; `opencl:*` matches a prefix).
    #[arg(long, value_delimiter = ',')]
    processors: Option<Vec<String>>,
    /// Hugging Face config.json files whose GEMM shapes to measure (comma list).
    #[arg(long, value_delimiter = ',')]
    models: Vec<PathBuf>,
    /// Element types (comma list); default one per processor: f16 on GPU/NPU, else f32.
    #[arg(long, value_delimiter = ',')]
    dtypes: Option<Vec<String>>,
    /// Time budget of this run (e.g. 60s, 15m, 1h30m).
    #[arg(long, default_value = "15m")]
    budget: String,
    /// Continue the dataset in --out: cases already in its journal are skipped.
    /// Its rows' measuring conditions (cache state, timer, CPU groups, cores)
    /// must be this run's, unless --allow-mixed.
    #[arg(long)]
    resume: bool,
    /// With --resume: continue a dataset measured under other conditions
    /// (e.g. --cold-cache on a warm one). Each row keeps its own; `hetero
    /// fit --conditions` fits one set of them.
    #[arg(long, requires = "resume")]
    allow_mixed: bool,
    /// The agent binary to run (any architecture).
    #[arg(long, conflicts_with = "agent_dir")]
    agent: Option<PathBuf>,
    /// A folder of agent builds, searched by the target's `uname -m`
    /// (DIR/ARCH/hetero-agent, DIR/hetero-agent-ARCH, DIR/TRIPLE/release/hetero-agent).
    #[arg(long)]
    agent_dir: Option<PathBuf>,
    /// An extra agent flag, placed before its subcommand (repeat: --agent-arg=--cpu-groups --agent-arg=0-3).
    #[arg(long = "agent-arg", allow_hyphen_values = true)]
    agent_args: Vec<String>,
    /// An ssh config file (ssh -F), for keys, ports and known hosts.
    #[arg(long)]
    ssh_config: Option<PathBuf>,
    /// An extra ssh/scp option KEY=VALUE (ssh -o), repeatable.
    #[arg(long = "ssh-option")]
    ssh_options: Vec<String>,
    /// Where the agent is stored on the target (default: ~/.cache/hetero over
    /// ssh, /data/local/tmp/hetero over adb).
    #[arg(long)]
    remote_dir: Option<String>,
    /// Timed repetitions per case.
    #[arg(long, default_value_t = RunParams::default().repetitions)]
    reps: u32,
    /// Untimed warm-up runs per case.
    #[arg(long, default_value_t = RunParams::default().warmups)]
    warmups: u32,
    /// After the warm-up runs, keep warming up until this many ms have
    /// passed, so that a GPU or a phone's cores leave their idle clock
    /// before the timer starts; 0 counts runs only.
    #[arg(long, default_value_t = RunParams::default().warmup_ms)]
    warmup_ms: u64,
    /// Per-case timeout, ms.
    #[arg(long, default_value_t = RunParams::default().timeout_ms)]
    timeout_ms: u64,
    /// Evict the caches before every timed run (outside the timer): the
    /// host's for CPU (written by the processor's own worker threads, so
    /// they are awake when the run starts), a kernel on an OpenCL device's
    /// queue (PoCL: the host's caches; a GPU: its L2), the L2 for CUDA. As
    /// runtime-min running a layer's other operators in between does;
    /// slower to profile, truer for small GEMMs.
    #[arg(long)]
    cold_cache: bool,
    /// Cold weights by rotation instead of eviction (implies
    /// --cold-cache): each case prepares copies of its weights, enough
    /// that the others read four times the last-level cache (at most 2
    /// GiB; `HETERO_EVICT_MIB` sets it) between two runs of one, and runs
    /// them in turn, its input written again before each run, as a
    /// runtime's layers with weights of their own find them: weights out
    /// of the caches, input and workers warm. A case whose copies would be
    /// too many (small weights, or activations far larger than them) is
    /// evicted instead. Memory: up to twice the rotation, per case.
    #[arg(long)]
    rotate_weights: bool,
    /// Time the kernels alone, without the host's launch path (CUDA: the
    /// stream waits on a host flag until the GEMM is queued), and that path
    /// apart: each timed run is followed by an ordinary one, and `hetero
    /// fit` adds the median difference back to every prediction. Kernel
    /// times reproduce where launch times scatter; other backends time as
    /// usual. The default; --ordinary-timer turns it off.
    #[arg(long, conflicts_with = "ordinary_timer")]
    kernel_timer: bool,
    /// Time each run with the host's launch path inside the device timer,
    /// as before --kernel-timer became the default (and as a dataset
    /// resumed from such a run was timed: a fit refuses a processor whose
    /// rows mix the two).
    #[arg(long)]
    ordinary_timer: bool,
    /// Skip the microbenchmarks (copies, submit, sync, bandwidth, graph prepare).
    #[arg(long)]
    no_microbench: bool,
    /// GEMM cases per processor at most, rows of a resumed dataset included
    /// (the design is in priority order: its tail is left out).
    #[arg(long)]
    max_cases: Option<usize>,
    /// Stop after the initial design: no adaptive refinement.
    #[arg(long)]
    no_refine: bool,
    /// Measure only COUNT random queries of the --models, drawn from SEED
    /// (default 1) as the solver asks for them: an operator at any length,
    /// often a row share. No other design, microbenchmarks or refinement:
    /// a held-out set for `hetero fit DATASET --test THIS` (the ordinary
    /// design draws its own with seed 0).
    #[arg(long, value_name = "COUNT[:SEED]")]
    queries: Option<String>,
    /// Measure only the GEMMs this plan runs at the --at lengths, as
    /// `hetero run` lays them out (each part's share, a static graph's
    /// padded M), on the --processors among the plan's: so that a new fit
    /// answers them with their own medians, then solve again. No other
    /// design, microbenchmarks or refinement; --resume adds them to a
    /// profile.
    #[arg(long, value_name = "PLAN", requires = "at")]
    plan: Option<PathBuf>,
    /// With --plan: the lengths, as PHASE:LEN[,PHASE:LEN...] (e.g.
    /// `decode:1,prefill:16`).
    #[arg(long, value_name = "PHASE:LEN,...", requires = "plan")]
    at: Option<String>,
    /// Measure only GEMMs of at most this many rows: the longest prompt
    /// (tokens) the plans will be solved for. The design otherwise goes to
    /// 4096, whose GEMMs take seconds a run on a CPU. Refinement stays
    /// below it too.
    #[arg(long, value_name = "TOKENS")]
    max_len: Option<u32>,
    /// Tries for a transport command that fails for a reason of the link.
    #[arg(long, default_value_t = 4)]
    retries: u32,
    /// Print one JSON event per line on stdout instead of a summary.
    #[arg(long)]
    json: bool,
}

/// Builds the validated options (files are read here, before connecting).
fn options(a: ProfileArgs) -> anyhow::Result<(ProfileOptions, bool)> {
    let target: Target = a.device.parse()?;
    let mut inputs: Vec<_> = a.models.iter().map(|m| ("--models", m.as_path())).collect();
    let files = [
        ("--plan", &a.plan),
        ("--agent", &a.agent),
        ("--ssh-config", &a.ssh_config),
    ];
    inputs.extend(files.iter().filter_map(|(f, p)| Some((*f, p.as_deref()?))));
    crate::outpath::check(&inputs, &[crate::outpath::Output::dataset("--out", &a.out)])?;
    let budget = parse_duration(&a.budget).map_err(|e| bad(format!("--budget: {e}")))?;
    let dtypes = match &a.dtypes {
        None => None,
        Some(v) => Some(
            v.iter()
                .map(|s| s.parse::<DType>())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| bad(format!("--dtypes: {e}")))?,
        ),
    };
    let mut models = Vec::new();
    for m in &a.models {
        models.push(hf::load_config(m).with_context(|| format!("--models {}", m.display()))?);
    }
    let run = RunParams::from_flags(RunFlags {
        warmups: a.warmups,
        warmup_ms: a.warmup_ms,
        reps: a.reps,
        timeout_ms: a.timeout_ms,
        cold_cache: a.cold_cache,
        rotate_weights: a.rotate_weights,
        kernel_timer: a.kernel_timer || !a.ordinary_timer,
    })
    .map_err(bad)?;
    if a.retries == 0 {
        return Err(bad("--retries: must be at least 1 (the first try)"));
    }
    if let Some(f) = &a.ssh_config
        && !f.is_file()
    {
        return Err(bad(format!("--ssh-config: {} is not a file", f.display())));
    }
    if let Some(o) = a.ssh_options.iter().find(|o| !o.contains('=')) {
        return Err(bad(format!(
            "--ssh-option: `{o}` is not KEY=VALUE (e.g. StrictHostKeyChecking=accept-new)"
        )));
    }
    if matches!(target, Target::Local) && a.remote_dir.is_some() {
        return Err(bad("--remote-dir applies only to ssh and adb devices"));
    }
    if !matches!(target, Target::Ssh { .. })
        && (a.ssh_config.is_some() || !a.ssh_options.is_empty())
    {
        return Err(bad(
            "--ssh-config and --ssh-option apply only to --device ssh://...",
        ));
    }
    let agent = match (a.agent, a.agent_dir) {
        (Some(p), _) => AgentSource::Path(p),
        (None, Some(d)) => {
            if !d.is_dir() {
                return Err(bad(format!("--agent-dir: {} is not a folder", d.display())));
            }
            AgentSource::Dir(d)
        }
        (None, None) => AgentSource::Auto,
    };
    let mut opts = ProfileOptions::new(target, a.out);
    opts.processors = a.processors;
    opts.dtypes = dtypes;
    opts.models = models;
    opts.budget = budget;
    opts.resume = a.resume;
    opts.allow_mixed = a.allow_mixed;
    opts.agent = agent;
    opts.agent_args = a.agent_args;
    opts.transport = TransportOptions {
        retry: RetryPolicy {
            attempts: a.retries,
            ..RetryPolicy::default()
        },
        ssh_config: a.ssh_config,
        ssh_options: a.ssh_options,
        command_timeout: Duration::from_secs(120),
        remote_dir: a.remote_dir,
        observer: None,
    };
    opts.run = run;
    opts.microbench = !a.no_microbench;
    opts.refine = !a.no_refine;
    if a.max_cases == Some(0) {
        return Err(bad("--max-cases: must be at least 1"));
    }
    opts.max_cases = a.max_cases;
    if a.max_len == Some(0) {
        return Err(bad("--max-len: must be at least 1"));
    }
    opts.max_len = a.max_len;
    if let Some(q) = &a.queries {
        let (count, seed) = parse_queries(q).map_err(|e| bad(format!("--queries {q}: {e}")))?;
        if opts.models.is_empty() {
            return Err(bad(
                "--queries draws from the --models operators: give --models",
            ));
        }
        opts.queries = Some((count, seed));
    }
    if let (Some(plan), Some(at)) = (&a.plan, &a.at) {
        if opts.queries.is_some() {
            return Err(bad("--plan and --queries: give one of them"));
        }
        opts.cases = Some(plan_cases(plan, at)?);
    }
    Ok((opts, a.json))
}

/// The GEMM cases `plan` runs at the `PHASE:LEN,...` of `at` (a case that
/// recurs is measured once: the profile plans each id once).
fn plan_cases(path: &std::path::Path, at: &str) -> anyhow::Result<Vec<hetero_plan::SweepCase>> {
    let plan: hetero_plan::Plan = hetero_plan::load(path)?;
    let mut cases = Vec::new();
    for item in at.split(',').map(str::trim).filter(|x| !x.is_empty()) {
        let (phase, len) = parse_at(item).map_err(|e| bad(format!("--at {item}: {e}")))?;
        let gemms = hetero_runtime::plan_gemms(&plan, phase, len)
            .with_context(|| format!("{}: --at {item}", path.display()))?;
        cases.extend(
            gemms
                .into_iter()
                .map(|g| hetero_profiler::design::case(&g.processor, g.shape, g.dtype, g.order)),
        );
    }
    if cases.is_empty() {
        return Err(bad(format!("--at {at}: no lengths given")));
    }
    Ok(cases)
}

/// `PHASE:LEN` of `--at`.
fn parse_at(s: &str) -> Result<(hetero_plan::Phase, u32), String> {
    let (phase, len) = s
        .split_once(':')
        .ok_or_else(|| "expected PHASE:LEN, e.g. decode:1".to_string())?;
    let phase = phase.parse()?;
    let len = len
        .parse::<u32>()
        .ok()
        .filter(|&l| l > 0)
        .ok_or_else(|| format!("`{len}` is not a length (1 or more)"))?;
    Ok((phase, len))
}

/// `COUNT[:SEED]` of `--queries`.
fn parse_queries(s: &str) -> Result<(usize, u64), String> {
    let (count, seed) = s.split_once(':').unwrap_or((s, "1"));
    let count: usize = count
        .parse()
        .map_err(|_| format!("`{count}` is not a count"))?;
    if count == 0 {
        return Err("the count must be at least 1".into());
    }
    let seed = seed
        .parse()
        .map_err(|_| format!("`{seed}` is not a seed (an integer)"))?;
    Ok((count, seed))
}

/// The summary line of a profile: `hetero demo` reads its count of new
/// rows back (`demo_cmd::new_rows`).
pub(crate) fn wrote_line(
    out: &str,
    measurements: usize,
    microbench: usize,
    new_rows: usize,
    seconds: f64,
) -> String {
    format!(
        "wrote {out}: {measurements} measurements, {microbench} microbenchmarks ({new_rows} new) in {seconds:.1} s"
    )
}

pub fn run(args: ProfileArgs) -> anyhow::Result<()> {
    let (opts, json) = options(args)?;
    let rep = Arc::new(Reporter::new(json, false));
    let o = hetero_profiler::profile(opts, rep)?;
    if !json {
        println!(
            "{}",
            wrote_line(
                &o.out.display().to_string(),
                o.measurements,
                o.microbench,
                o.new_rows,
                o.seconds
            )
        );
        match o.stopped {
            "budget" => println!(
                "stopped: the budget ran out with {} planned case(s) left; \
                 continue with --resume and a new --budget",
                o.left_for_budget
            ),
            "converged" | "complete" => println!(
                "stopped: {} (nothing left to measure within the design)",
                o.stopped
            ),
            "max_cases" => {
                println!("stopped: max_cases (every processor has its --max-cases GEMM cases)")
            }
            s => println!("stopped: {s}"),
        }
        if let Some(p) = o.plan.as_ref().filter(|p| !p.skipped_microbench.is_empty()) {
            println!(
                "microbenchmarks: {} repeat(s) skipped for the budget ({} of {} rounds; listed in {}); \
                 --resume with a longer --budget measures them",
                p.skipped_microbench.len(),
                p.microbench_rounds,
                hetero_profiler::design::MICRO_PROCESSES,
                o.out
                    .join(hetero_profiler::profile::budget::BUDGET_FILE)
                    .display()
            );
        }
        if !o.held_out.is_empty() {
            println!();
            println!(
                "{:<16} {:<6} {:<6} {:>7} {:>18} {:>12}",
                "processor", "dtype", "order", "points", "held-out median", "above 10%"
            );
            for ((p, d, ord), h) in &o.held_out {
                println!(
                    "{:<16} {:<6} {:<6} {:>7} {:>17.1}% {:>11.0}%",
                    p,
                    d.as_str(),
                    ord.as_str(),
                    h.points,
                    h.median * 100.0,
                    h.above * 100.0
                );
            }
        }
        println!("fingerprint: {}", o.fingerprint.sha256);
    }
    Ok(())
}
