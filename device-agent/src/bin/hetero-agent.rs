//! `hetero-agent`: probes processors and runs sweeps on the device.
//!
//! Exit codes: 0 success, 1 failure of the agent or the machine, 2 bad input
//! (a malformed spec, an unknown processor, a bad flag). See
//! `docs/agent-protocol.md`.

use std::collections::HashSet;
use std::io::{BufRead, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use hetero_agent::protocol::{self, AgentLine};
use hetero_agent::sweep::{SweepOptions, Sweeper};
use hetero_agent::{Error as AgentError, OpenOptions, Registry};
use hetero_plan::{
    DType, Format, GemmShape, MicrobenchKind, MicrobenchRequest, OperandOrder, Processor, RunFlags,
    RunParams, SchemaVersion, SweepCase, SweepSpec, WeightMode,
};

#[derive(Parser)]
#[command(
    name = "hetero-agent",
    version,
    about = "Probe this device's processors and measure GEMMs on them (JSON Lines out).",
    after_help = "Examples:\n  hetero-agent probe --json\n  hetero-agent sweep --processor cpu:0 --shapes 64x256x256,1x4096x4096 --dtype f32\n  hetero-agent sweep --spec spec.json > rows.jsonl\n  hetero-agent microbench --processors cpu:0"
)]
struct Cli {
    #[command(flatten)]
    open: OpenArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Args)]
struct OpenArgs {
    /// Keep only these processors (comma list; `opencl:*` matches a prefix).
    #[arg(long, global = true, value_delimiter = ',')]
    processors: Option<Vec<String>>,
    /// CPU core groups, one processor each, e.g. "0-3;4-7" (default: clusters from sysfs).
    #[arg(long, global = true)]
    cpu_groups: Option<String>,
    /// RON file with npu-sim parameters (default: illustrative built-in values).
    #[arg(long, global = true)]
    sim_params: Option<PathBuf>,
    /// Folder holding libQnnHtp.so and its companions.
    #[arg(long, global = true)]
    qnn_lib_dir: Option<PathBuf>,
    /// QNN HTP SoC model (57 = SM8650, 69 = SM8750, 87 = SM8850); else HETERO_QNN_SOC.
    #[arg(long, global = true)]
    qnn_soc: Option<u32>,
    /// QNN HTP performance vote, default or burst; else HETERO_QNN_PERF.
    #[arg(long, global = true)]
    qnn_perf: Option<String>,
    /// Where backends cache autotuning results.
    #[arg(long, global = true)]
    cache_dir: Option<PathBuf>,
    /// How long a CPU group's workers poll for work after a run before they
    /// sleep, µs (0: at once); else HETERO_CPU_POLL_US, else 2000.
    #[arg(long, global = true)]
    cpu_poll_us: Option<u64>,
}

#[derive(Subcommand)]
enum Command {
    /// Print the handshake: agent version and protocol version.
    ///
    /// Example: hetero-agent version --json
    Version {
        /// One JSON line (a `hello` line) instead of text.
        #[arg(long)]
        json: bool,
    },
    /// List the processors found here, and the backends that did not open.
    ///
    /// Example: hetero-agent probe --json
    Probe {
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Measure GEMMs: one JSON line per case, written as soon as it is measured.
    ///
    /// Example: hetero-agent sweep --processor cpu:0 --shapes 64x256x256,1x4096x4096 --dtype f32
    Sweep(SweepArgs),
    /// Run the microbenchmarks (copy, staged GEMM input/output, submit, sync, bandwidth, graph prepare).
    ///
    /// Example: hetero-agent microbench --processors cpu:0,npu-sim
    Microbench(MicrobenchArgs),
    /// Benchmark: cpu f32 GEMM through the backend vs the gemm crate alone (use --release).
    ///
    /// Example: cargo run --release -p hetero-agent -- bench-gemm --size 2048
    BenchGemm(BenchArgs),
    /// Benchmark: the cpu backend's decode GEMV against a plain streaming
    /// read of the same weight bytes with the same threads (use --release).
    ///
    /// Example: hetero-agent bench-gemv --shapes 1x4096x14336 --dtype f16,bf16
    BenchGemv(BenchGemvArgs),
    /// Compile MatMul graphs ahead of time into QNN context binaries for a SoC.
    ///
    /// Example: hetero-agent compile --soc 57 --graphs 128x4096x4096,1x4096x4096:w8a16 --out graphs/
    #[cfg(feature = "qnn")]
    Compile(hetero_agent::qnn::CompileArgs),
}

#[derive(Args)]
struct SweepArgs {
    /// Sweep spec (JSON or RON by extension; `-` reads JSON from stdin).
    #[arg(long, conflicts_with_all = ["processor", "shapes"])]
    spec: Option<String>,
    /// Shorthand: the processor to measure.
    #[arg(long, requires = "shapes")]
    processor: Option<String>,
    /// Shorthand: comma list of MxKxN.
    #[arg(long, value_delimiter = ',', requires = "processor")]
    shapes: Option<Vec<String>>,
    /// Shorthand: element type.
    #[arg(long, default_value = "f32")]
    dtype: String,
    /// Shorthand: operand order, aw or transposed.
    #[arg(long, default_value = "aw")]
    order: String,
    /// Shorthand: timed repetitions.
    #[arg(long)]
    reps: Option<u32>,
    /// Shorthand: untimed warm-up runs.
    #[arg(long)]
    warmups: Option<u32>,
    /// Shorthand: keep warming up until this many ms have passed (a GPU or
    /// a phone leaves its idle clock); 0 counts runs only.
    #[arg(long, default_value_t = hetero_plan::DEFAULT_WARMUP_MS)]
    warmup_ms: u64,
    /// Shorthand: per-case timeout, ms.
    #[arg(long)]
    timeout_ms: Option<u64>,
    /// Shorthand: evict the caches before every timed run (the host's; a
    /// CUDA GPU's L2), as a runtime running other operators in between would.
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
    /// Shorthand: time the kernels alone, without the host's launch path
    /// (CUDA: the stream waits on a host flag until the GEMM is queued),
    /// each timed run followed by an ordinary one; rows get `launch_us`.
    #[arg(long)]
    kernel_timer: bool,
    /// A previous output (JSON Lines); cases with a row there are skipped.
    #[arg(long)]
    resume: Option<PathBuf>,
    /// Print the spec the shorthand builds instead of running it.
    #[arg(long)]
    print_spec: bool,
}

#[derive(Args)]
struct MicrobenchArgs {
    /// Benchmarks to run (default: all); e.g. copy_h2d,sync_block,sync_poll.
    #[arg(long, value_delimiter = ',')]
    bench: Option<Vec<String>>,
    /// Largest copy, bytes (copies go from 4 KiB up by 4x).
    #[arg(long, default_value_t = 256 << 20)]
    max_copy_bytes: u64,
    /// Weight bytes of the bandwidth GEMV.
    #[arg(long, default_value_t = 64 << 20)]
    stream_bytes: u64,
    /// Timed repetitions per benchmark.
    #[arg(long, default_value_t = 9)]
    reps: u32,
    /// Untimed warm-up runs.
    #[arg(long, default_value_t = 2)]
    warmups: u32,
    /// Keep warming up until this many ms have passed (a GPU or a phone
    /// leaves its idle clock); 0 counts runs only.
    #[arg(long, default_value_t = hetero_plan::DEFAULT_WARMUP_MS)]
    warmup_ms: u64,
    /// Timeout per benchmark, ms.
    #[arg(long, default_value_t = 60_000)]
    timeout_ms: u64,
    /// Print the spec instead of running it.
    #[arg(long)]
    print_spec: bool,
}

#[derive(Args)]
struct BenchArgs {
    /// M = K = N.
    #[arg(long, default_value_t = 2048)]
    size: u32,
    /// Timed runs of each side (interleaved).
    #[arg(long, default_value_t = 7)]
    reps: u32,
    /// The cpu processor to use.
    #[arg(long, default_value = "cpu:0")]
    processor: String,
}

#[derive(Args)]
struct BenchGemvArgs {
    /// Comma list of MxKxN, M at most 8.
    #[arg(long, value_delimiter = ',', default_value = "1x4096x14336")]
    shapes: Vec<String>,
    /// Comma list of weight types: f16, bf16, f32.
    #[arg(long, value_delimiter = ',', default_value = "f16,bf16")]
    dtype: Vec<String>,
    /// Operand order: transposed (the one decode plans run) or aw.
    #[arg(long, default_value = "transposed")]
    order: String,
    /// Timed runs of each side (alternated).
    #[arg(long, default_value_t = 21)]
    reps: u32,
    /// The cpu processor to use (`--cpu-groups` makes the groups).
    #[arg(long, default_value = "cpu:0")]
    processor: String,
    /// Time the `gemm` crate's product of the same shape too (f32, f16).
    #[arg(long)]
    gemm_crate: bool,
}

/// An error that is the user's input: exit code 2.
#[derive(Debug)]
struct BadInput(String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

fn bad(msg: impl Into<String>) -> anyhow::Error {
    BadInput(msg.into()).into()
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hetero-agent: {e:#}");
            if e.downcast_ref::<BadInput>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Version { json } => {
            let h = protocol::hello();
            if json {
                println!("{}", AgentLine::Hello(h).to_json());
            } else {
                println!(
                    "hetero-agent {} (protocol {}, {}-{}, backends: {})",
                    h.version,
                    h.protocol,
                    h.arch,
                    h.os,
                    h.features.join(", ")
                );
            }
            Ok(())
        }
        Command::Probe { json } => probe(&cli.open, json),
        Command::Sweep(args) => sweep(&cli.open, args),
        Command::Microbench(args) => microbench(&cli.open, args),
        Command::BenchGemm(args) => bench_gemm(&cli.open, args),
        Command::BenchGemv(args) => bench_gemv(&cli.open, args),
        #[cfg(feature = "qnn")]
        Command::Compile(args) => compile(&cli.open, args),
    }
}

/// Checks the options that touch files or the machine, then opens the registry.
fn open_registry(o: &OpenArgs, filter: bool) -> Result<Registry> {
    let opts = open_options(o)?;
    let f = if filter {
        o.processors.as_deref()
    } else {
        None
    };
    Ok(Registry::open(&opts, f))
}

/// The options backends open with, checked.
fn open_options(o: &OpenArgs) -> Result<OpenOptions> {
    #[cfg(feature = "cpu")]
    if let Some(g) = &o.cpu_groups {
        hetero_agent::cpu::parse_groups(g, &hetero_agent::cpu::topology::process_cores())
            .map_err(|e| bad(format!("--cpu-groups: {e}")))?;
    }
    #[cfg(feature = "cpu")]
    hetero_agent::cpu::poll_hold(o.cpu_poll_us).map_err(|e| bad(e.to_string()))?;
    #[cfg(feature = "sim")]
    if let Some(p) = &o.sim_params {
        hetero_agent::sim::SimParams::load(p).map_err(|e| bad(format!("--sim-params: {e}")))?;
    }
    check_qnn_lib_dir(o)?;
    let opts = OpenOptions {
        cpu_groups: o.cpu_groups.clone(),
        qnn_lib_dir: o.qnn_lib_dir.clone(),
        qnn_soc: o.qnn_soc,
        qnn_perf: o.qnn_perf.clone(),
        sim_params: o.sim_params.clone(),
        cache_dir: o.cache_dir.clone(),
        cpu_poll_us: o.cpu_poll_us,
    };
    Ok(opts)
}

/// `--qnn-lib-dir`, when given, must name a folder.
fn check_qnn_lib_dir(o: &OpenArgs) -> Result<()> {
    match &o.qnn_lib_dir {
        Some(d) if !d.is_dir() => Err(bad(format!(
            "--qnn-lib-dir: {} is not a folder",
            d.display()
        ))),
        _ => Ok(()),
    }
}

/// `compile`: QNN context binaries for a SoC (bad graph lists exit 2).
#[cfg(feature = "qnn")]
fn compile(o: &OpenArgs, args: hetero_agent::qnn::CompileArgs) -> Result<()> {
    check_qnn_lib_dir(o)?;
    let opts = OpenOptions {
        qnn_lib_dir: o.qnn_lib_dir.clone(),
        qnn_perf: o.qnn_perf.clone(),
        ..Default::default()
    };
    match hetero_agent::qnn::compile_cli(&args, &opts) {
        Ok(_) => Ok(()),
        Err(e @ AgentError::BadRequest { .. }) => Err(bad(e.to_string())),
        Err(e) => Err(e.into()),
    }
}

fn probe(o: &OpenArgs, json: bool) -> Result<()> {
    let reg = open_registry(o, true)?;
    let report = protocol::probe_report(&reg);
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!(
        "{:<12} {:<5} {:<7} {:<18} name",
        "id", "kind", "api", "dtypes"
    );
    for p in &report.processors {
        let dtypes: Vec<&str> = p.capabilities.dtypes.iter().map(|d| d.as_str()).collect();
        let kind = serde_json::to_value(p.kind)?;
        let api = serde_json::to_value(p.api)?;
        println!(
            "{:<12} {:<5} {:<7} {:<18} {}{}",
            p.id,
            kind.as_str().unwrap_or("?"),
            api.as_str().unwrap_or("?"),
            dtypes.join(","),
            p.name,
            if p.simulated { "  [simulated]" } else { "" }
        );
    }
    for u in &report.unavailable {
        println!("unavailable: {}", u.reason);
    }
    Ok(())
}

fn parse_flag<T: std::str::FromStr<Err = String>>(flag: &str, v: &str) -> Result<T> {
    v.parse::<T>().map_err(|e| bad(format!("{flag}: {e}")))
}

fn load_spec(arg: &str) -> Result<SweepSpec> {
    let loaded = if arg == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading the spec from stdin")?;
        hetero_plan::load_str::<SweepSpec>(Path::new("<stdin>"), &text, Format::Json)
    } else {
        hetero_plan::load::<SweepSpec>(Path::new(arg))
    };
    loaded.map_err(|e| {
        if e.is_bad_input() {
            bad(e.to_string())
        } else {
            anyhow::Error::new(e)
        }
    })
}

fn shorthand_spec(a: &SweepArgs) -> Result<SweepSpec> {
    let processor = a.processor.clone().expect("clap requires it");
    let dtype: DType = parse_flag("--dtype", &a.dtype)?;
    let order: OperandOrder = parse_flag("--order", &a.order)?;
    let defaults = RunParams::default();
    let run = RunParams::from_flags(RunFlags {
        warmups: a.warmups.unwrap_or(defaults.warmups),
        warmup_ms: a.warmup_ms,
        reps: a.reps.unwrap_or(defaults.repetitions),
        timeout_ms: a.timeout_ms.unwrap_or(defaults.timeout_ms),
        cold_cache: a.cold_cache,
        rotate_weights: a.rotate_weights,
        kernel_timer: a.kernel_timer,
    })
    .map_err(bad)?;
    let mut cases = Vec::new();
    for s in a.shapes.as_deref().unwrap_or_default() {
        let shape: GemmShape = parse_flag("--shapes", s)?;
        let id = format!("{processor}/{shape}/{dtype}/{order}");
        if cases.iter().any(|c: &SweepCase| c.id == id) {
            continue;
        }
        cases.push(SweepCase {
            id,
            processor: processor.clone(),
            shape,
            dtype,
            order,
            weights: WeightMode::Static,
            run: None,
        });
    }
    Ok(SweepSpec {
        schema_version: SchemaVersion,
        run,
        cases,
        microbench: Vec::new(),
    })
}

/// Case ids that already have a row in a previous output.
fn done_ids(path: &Path) -> Result<HashSet<String>> {
    let f =
        std::fs::File::open(path).map_err(|e| bad(format!("--resume: {}: {e}", path.display())))?;
    let mut ids = HashSet::new();
    for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line.with_context(|| format!("reading {}", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        // A sweep cut off mid-line leaves a partial last line: skip it.
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
            eprintln!("{}:{}: not a JSON line, ignored", path.display(), i + 1);
            continue;
        };
        if let Some(id) = v.get("case_id").and_then(|x| x.as_str()) {
            ids.insert(id.to_string());
        }
    }
    Ok(ids)
}

fn run_spec(o: &OpenArgs, spec: &SweepSpec, skip: HashSet<String>) -> Result<()> {
    let reg = open_registry(o, false)?;
    let unavailable: Vec<String> = reg
        .unavailable
        .iter()
        .map(|u| u.reason.to_string())
        .collect();
    let mut sweeper = Sweeper::from_registry(reg);
    sweeper.check_spec(spec).map_err(|e| match e {
        AgentError::BadRequest { field, message } => {
            let mut msg = format!("spec: field `{field}`: {message}");
            if !unavailable.is_empty() {
                msg.push_str(&format!("; not opened here: {}", unavailable.join("; ")));
            }
            bad(msg)
        }
        other => anyhow::Error::new(other),
    })?;
    let opts = SweepOptions {
        filter: o.processors.clone(),
        skip,
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    // A progress line for people, on stderr and only when it is a terminal:
    // stdout is the protocol.
    let progress = std::io::stderr().is_terminal();
    let total = spec.cases.len() + spec.microbench.len();
    let mut seen = 0usize;
    let mut emit = |line: &AgentLine| -> std::io::Result<()> {
        writeln!(out, "{}", line.to_json())?;
        out.flush()?;
        if progress {
            let what = match line {
                AgentLine::Measurement(r) => Some((&r.case_id, r.status)),
                AgentLine::Microbench(m) => Some((&m.row.case_id, m.row.status)),
                _ => None,
            };
            if let Some((id, status)) = what {
                seen += 1;
                eprint!("\r\x1b[K[{seen}/{total}] {id}: {status:?}");
            }
            if matches!(line, AgentLine::Done(_)) && seen > 0 {
                eprintln!();
            }
        }
        Ok(())
    };
    emit(&AgentLine::Hello(protocol::hello())).context("writing to stdout")?;
    let done = sweeper
        .run(spec, &opts, &mut emit)
        .context("writing to stdout")?;
    emit(&AgentLine::Done(done)).context("writing to stdout")?;
    Ok(())
}

fn sweep(o: &OpenArgs, a: SweepArgs) -> Result<()> {
    let spec = match &a.spec {
        Some(path) => load_spec(path)?,
        None if a.processor.is_some() => shorthand_spec(&a)?,
        None => {
            return Err(bad(
                "sweep needs --spec FILE (or -) or --processor ID --shapes MxKxN,...",
            ));
        }
    };
    if a.print_spec {
        print!("{}", hetero_plan::to_string(&spec, Format::Json)?);
        return Ok(());
    }
    let skip = match &a.resume {
        Some(p) => done_ids(p)?,
        None => HashSet::new(),
    };
    run_spec(o, &spec, skip)
}

/// The benchmarks `microbench` runs when `--bench` names none.
const DEFAULT_BENCHES: [MicrobenchKind; 15] = [
    MicrobenchKind::CopyH2d,
    MicrobenchKind::CopyD2h,
    MicrobenchKind::SubmitEmpty,
    MicrobenchKind::SubmitBusy,
    MicrobenchKind::SyncBlock,
    MicrobenchKind::SyncPoll,
    MicrobenchKind::BandwidthAlone,
    MicrobenchKind::BandwidthConcurrent,
    MicrobenchKind::GraphPrepare,
    MicrobenchKind::StageIn,
    MicrobenchKind::StageOut,
    MicrobenchKind::StageOutAw,
    MicrobenchKind::OpOverheadBlock,
    MicrobenchKind::OpOverheadPoll,
    MicrobenchKind::LaunchOverheadAfterCpu,
];

/// Asked for by name only: both waits in one row, as older profiles had.
const NAMED_ONLY: [MicrobenchKind; 1] = [MicrobenchKind::OpOverhead];

fn microbench(o: &OpenArgs, a: MicrobenchArgs) -> Result<()> {
    let kinds = bench_kinds(a.bench.as_deref())?;
    let reg = open_registry(o, true)?;
    let procs = reg.processors();
    drop(reg);
    let mut reqs = Requests::default();
    for p in &procs {
        for &k in &kinds {
            reqs.add(p, k, &procs, &a);
        }
    }
    let spec = SweepSpec {
        schema_version: SchemaVersion,
        run: RunParams {
            warmups: a.warmups,
            warmup_ms: a.warmup_ms,
            repetitions: a.reps.max(1),
            timeout_ms: a.timeout_ms.max(1),
            cold_cache: false,
            rotate_weights: false,
            kernel_timer: false,
        },
        cases: Vec::new(),
        microbench: reqs.0,
    };
    if a.print_spec {
        print!("{}", hetero_plan::to_string(&spec, Format::Json)?);
        return Ok(());
    }
    run_spec(o, &spec, HashSet::new())
}

/// The benchmarks `--bench` names (every default one when `None`); an
/// unknown name is bad input that lists the known ones.
fn bench_kinds(names: Option<&[String]>) -> Result<Vec<MicrobenchKind>> {
    let Some(names) = names else {
        return Ok(DEFAULT_BENCHES.to_vec());
    };
    names
        .iter()
        .map(|n| {
            serde_json::from_value(serde_json::Value::String(n.clone())).map_err(|_| {
                let known: Vec<String> = DEFAULT_BENCHES
                    .iter()
                    .chain(&NAMED_ONLY)
                    .map(|&k| protocol::bench_name(k))
                    .collect();
                bad(format!(
                    "--bench: unknown benchmark `{n}`; expected {}",
                    known.join(", ")
                ))
            })
        })
        .collect()
}

/// The microbenchmark requests of a `microbench` run.
#[derive(Default)]
struct Requests(Vec<MicrobenchRequest>);

impl Requests {
    /// One request; its id names the processor, the benchmark and its
    /// arguments (`cpu:0/copy_h2d/4096`).
    fn push(
        &mut self,
        p: &str,
        bench: MicrobenchKind,
        bytes: Option<u64>,
        peer: Option<String>,
        shape: Option<GemmShape>,
    ) {
        let mut id = format!(
            "{p}/{}",
            serde_json::to_value(bench)
                .unwrap_or_default()
                .as_str()
                .unwrap_or("?")
        );
        if let Some(b) = bytes {
            id.push_str(&format!("/{b}"));
        }
        if let Some(q) = &peer {
            id.push_str(&format!("/{q}"));
        }
        if let Some(s) = shape {
            id.push_str(&format!("/{s}"));
        }
        self.0.push(MicrobenchRequest {
            id,
            processor: p.to_string(),
            bench,
            bytes,
            peer,
            shape,
        });
    }

    /// The requests of benchmark `k` on processor `p`, among `procs`.
    fn add(&mut self, p: &Processor, k: MicrobenchKind, procs: &[Processor], a: &MicrobenchArgs) {
        // The simulator models GEMMs (so a stream) and graph prepare only.
        let modelled = matches!(
            k,
            MicrobenchKind::BandwidthAlone | MicrobenchKind::GraphPrepare
        );
        if p.simulated && !modelled {
            return;
        }
        match k {
            k if k.is_transfer() => self.transfers(p, k, a),
            MicrobenchKind::BandwidthAlone => self.push(&p.id, k, Some(a.stream_bytes), None, None),
            MicrobenchKind::BandwidthConcurrent => {
                let peers: Vec<&str> = procs
                    .iter()
                    .filter(|q| q.id != p.id && !q.simulated)
                    .map(|q| q.id.as_str())
                    .collect();
                if p.simulated {
                    return;
                }
                if peers.is_empty() {
                    // Emits an `unsupported` row that says why.
                    self.push(&p.id, k, Some(a.stream_bytes), Some(p.id.clone()), None);
                }
                for q in peers {
                    self.push(&p.id, k, Some(a.stream_bytes), Some(q.to_string()), None);
                }
            }
            MicrobenchKind::LaunchOverheadAfterCpu => {
                // A device-timed processor after each processor on host
                // memory (`hetero profile` asks the same).
                if !p.capabilities.device_timer || p.simulated {
                    return;
                }
                for q in procs.iter().filter(|q| {
                    q.id != p.id
                        && !q.simulated
                        && (q.kind == hetero_plan::ProcessorKind::Cpu
                            || q.capabilities.unified_memory)
                }) {
                    self.push(&p.id, k, None, Some(q.id.clone()), None);
                }
            }
            MicrobenchKind::GraphPrepare => {
                if p.capabilities.static_graphs {
                    for s in ["32x4096x4096", "128x4096x4096", "512x4096x4096"] {
                        self.push(&p.id, k, None, None, Some(s.parse().expect("valid")));
                    }
                }
            }
            _ => self.push(&p.id, k, None, None, None),
        }
    }

    /// A copy or staged transfer at every size from 4 KiB up by 4x.
    fn transfers(&mut self, p: &Processor, k: MicrobenchKind, a: &MicrobenchArgs) {
        // The staged data path prepares a GEMM per size: by default only
        // where copies cross to separate memory (as `hetero profile` asks),
        // and at most 64 MiB.
        let staged = !matches!(k, MicrobenchKind::CopyH2d | MicrobenchKind::CopyD2h);
        if staged && p.capabilities.unified_memory && a.bench.is_none() {
            return;
        }
        let max = if staged {
            a.max_copy_bytes.min(64 << 20)
        } else {
            a.max_copy_bytes
        };
        let mut b = 4096u64;
        while b <= max {
            self.push(&p.id, k, Some(b), None, None);
            b *= 4;
        }
    }
}

#[cfg(feature = "cpu")]
fn bench_gemm(o: &OpenArgs, a: BenchArgs) -> Result<()> {
    use std::time::Instant;

    use hetero_agent::{GemmSpec, verify};

    if cfg!(debug_assertions) {
        eprintln!("warning: a debug build; benchmark figures need --release");
    }
    let mut reg = open_registry(o, false)?;
    let Some(backend) = reg.get_mut(&a.processor) else {
        return Err(bad(format!("no processor `{}` here", a.processor)));
    };
    let threads = backend.processor().capabilities.compute_units.unwrap_or(1) as usize;
    let n = a.size as usize;
    let shape =
        GemmShape::new(a.size, a.size, a.size).ok_or_else(|| bad("--size: must be at least 1"))?;
    let spec = GemmSpec {
        shape,
        dtype: DType::F32,
        order: OperandOrder::Aw,
        weights: WeightMode::Static,
    };
    let (lhs, rhs) = verify::inputs(&shape, 0);
    let mut g = backend.prepare(&spec, &rhs)?;
    g.write_input(&lhs)?;
    // The gemm crate alone, in rayon's global pool with the same thread count.
    let mut dst = vec![0f32; n * n];
    let mut alone = || {
        let t = Instant::now();
        hetero_agent::cpu::gemm_crate(&lhs, &rhs, &mut dst, (n, n, n), threads);
        t.elapsed().as_secs_f64() * 1e6
    };
    let flops = shape.flops();
    let (mut via, mut direct) = (Vec::new(), Vec::new());
    // One untimed run of each, then interleaved timed runs.
    g.execute()?;
    alone();
    for _ in 0..a.reps.max(1) {
        via.push(g.execute()?.host_us);
        direct.push(alone());
    }
    let mut c = vec![0f32; n * n];
    g.read_output(&mut c)?;
    let check = verify::check(&shape, &lhs, &rhs, &c);
    if !check.passes(hetero_agent::default_tolerance(DType::F32, a.size)) {
        anyhow::bail!("the backend's result is wrong: {check:?}");
    }
    let sv = hetero_plan::Stats::from_samples(&via).expect("non-empty");
    let sd = hetero_plan::Stats::from_samples(&direct).expect("non-empty");
    let gf = |us: f64| flops / us / 1e3;
    let result = serde_json::json!({
        "bench": "bench_gemm",
        "size": a.size,
        "threads": threads,
        "reps": a.reps,
        "processor": a.processor,
        "backend_median_us": sv.median_us,
        "gemm_alone_median_us": sd.median_us,
        "backend_gflops": gf(sv.median_us),
        "gemm_alone_gflops": gf(sd.median_us),
        "ratio": sd.median_us / sv.median_us,
        "backend_cv": sv.cv,
        "gemm_alone_cv": sd.cv,
        "verified_rel_err": check.rel_err,
    });
    println!("{result}");
    eprintln!(
        "{}^3 f32, {threads} threads, median of {}: backend {:.1} GFLOP/s, gemm alone {:.1} GFLOP/s, ratio {:.1}%",
        a.size,
        a.reps,
        gf(sv.median_us),
        gf(sd.median_us),
        100.0 * sd.median_us / sv.median_us
    );
    Ok(())
}

#[cfg(not(feature = "cpu"))]
fn bench_gemm(_: &OpenArgs, _: BenchArgs) -> Result<()> {
    Err(bad("bench-gemm needs the `cpu` feature"))
}

#[cfg(feature = "cpu")]
fn bench_gemv(o: &OpenArgs, a: BenchGemvArgs) -> Result<()> {
    use hetero_agent::cpu::{gemv, open_groups};

    if cfg!(debug_assertions) {
        eprintln!("warning: a debug build; benchmark figures need --release");
    }
    let order: OperandOrder = parse_flag("--order", &a.order)?;
    let mut specs = Vec::new();
    for s in &a.shapes {
        let shape: GemmShape = parse_flag("--shapes", s)?;
        for d in &a.dtype {
            let dtype: DType = parse_flag("--dtype", d)?;
            let spec = hetero_agent::GemmSpec {
                shape,
                dtype,
                order,
                weights: WeightMode::Static,
            };
            if !gemv::handles(&spec) {
                return Err(bad(format!(
                    "--shapes {shape} --dtype {dtype}: bench-gemv takes at most {} rows, in f32, f16 or bf16",
                    gemv::MAX_M
                )));
            }
            specs.push(spec);
        }
    }
    let backends = open_groups(&open_options(o)?)?;
    let backend = a
        .processor
        .strip_prefix("cpu:")
        .and_then(|i| backends.get(i.parse::<usize>().ok()?))
        .ok_or_else(|| bad(format!("--processor: no processor `{}` here", a.processor)))?;
    for spec in &specs {
        let r = gemv::bench::run(backend, spec, a.reps, a.gemm_crate)?;
        println!("{}", r.json(backend, spec));
        eprintln!("{}", r.summary(spec));
    }
    Ok(())
}

#[cfg(not(feature = "cpu"))]
fn bench_gemv(_: &OpenArgs, _: BenchGemvArgs) -> Result<()> {
    Err(bad("bench-gemv needs the `cpu` feature"))
}
