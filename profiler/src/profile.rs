//! `hetero profile`: connect, hand-shake, probe, sweep in batches within a
//! time budget, refine, write the dataset.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use hetero_plan::{
    AgentInfo, DType, DeviceProfile, GemmShape, HostInfo, MicrobenchKind, ModelSpec, Processor,
    ProcessorKind, RunParams, SchemaVersion, SweepSpec,
};

use crate::agent::{self, AgentSource};
use crate::dataset::{self, DEVICE_FILE, Dataset, MEASUREMENTS_FILE, MICROBENCH_FILE};
use crate::design::{self, Group, Item, Planned, REFINE_THRESHOLD};
use crate::journal::{Journal, Rows};
use crate::quick::{HeldOut, Point, Quick};
use crate::report::{Event, Reporter};
use crate::transport::{self, RetryPolicy, Transport, TransportOptions, spawn_piped, tail};
use crate::{Error, Result, Target};
use hetero_plan::protocol::{AgentLine, Hello, ProbeReport};

/// Everything `hetero profile` needs, validated.
#[derive(Debug, Clone)]
pub struct ProfileOptions {
    /// Where the agent runs.
    pub target: Target,
    /// The dataset folder.
    pub out: PathBuf,
    /// Processor ids to measure (a trailing `*` matches a prefix); `None`: all.
    pub processors: Option<Vec<String>>,
    /// Element types; `None`: one per processor (see [`design::dtypes_for`]).
    pub dtypes: Option<Vec<DType>>,
    /// Models whose shapes to measure.
    pub models: Vec<ModelSpec>,
    /// Time budget of this run.
    pub budget: Duration,
    /// Continue the dataset in `out`.
    pub resume: bool,
    /// Where the agent binary comes from.
    pub agent: AgentSource,
    /// Extra agent flags placed before the subcommand (`--cpu-groups 0-3`).
    pub agent_args: Vec<String>,
    /// ssh, retries, timeouts.
    pub transport: TransportOptions,
    /// Warm-ups, repetitions and timeout of each case.
    pub run: RunParams,
    /// Run the microbenchmarks too.
    pub microbench: bool,
    /// Refine where the quick predictor is inaccurate once the initial design is done.
    pub refine: bool,
    /// Consecutive agent failures without a new row before giving up.
    pub max_agent_failures: u32,
    /// Refinement rounds at most.
    pub refine_rounds: u32,
    /// GEMM cases per processor at most, rows already in the dataset
    /// included (the design is in priority order, so its tail is dropped).
    pub max_cases: Option<usize>,
    /// Measure only this many random solver-style queries of the models,
    /// from this seed ([`design::query_shapes`]), instead of the design: a
    /// held-out set, so no microbenchmarks and no refinement either,
    /// whatever `microbench` and `refine` say.
    pub queries: Option<(usize, u64)>,
    /// Measure only these GEMM cases (those of the selected processors),
    /// instead of the design: the GEMMs a plan runs (`hetero profile
    /// --plan`), so that a fit answers them with their own medians. No
    /// microbenchmarks and no refinement either, as with `queries`.
    pub cases: Option<Vec<hetero_plan::SweepCase>>,
    /// Measure only GEMMs of at most this many rows (M): the longest
    /// prompt the plans will be solved for. `None`: the design's lengths up
    /// to 4096.
    pub max_len: Option<u32>,
}

impl ProfileOptions {
    /// Options with the defaults of the command line.
    pub fn new(target: Target, out: PathBuf) -> ProfileOptions {
        ProfileOptions {
            target,
            out,
            processors: None,
            dtypes: None,
            models: Vec::new(),
            budget: Duration::from_secs(15 * 60),
            resume: false,
            agent: AgentSource::Auto,
            agent_args: Vec::new(),
            transport: TransportOptions::default(),
            // Kernel times and the launch path apart, as `hetero profile`
            // does by default (`RunParams::kernel_timer`).
            run: RunParams {
                kernel_timer: true,
                ..RunParams::default()
            },
            microbench: true,
            refine: true,
            max_agent_failures: 3,
            refine_rounds: 10,
            max_cases: None,
            queries: None,
            cases: None,
            max_len: None,
        }
    }
}

/// What a run did.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The dataset folder.
    pub out: PathBuf,
    /// GEMM rows in the dataset.
    pub measurements: usize,
    /// Microbenchmark rows in the dataset.
    pub microbench: usize,
    /// Rows measured by this run.
    pub new_rows: usize,
    /// Seconds this run took.
    pub seconds: f64,
    /// `complete` (everything planned is measured), `converged` (refinement
    /// found nothing more to add), `max_cases` (the case limit per
    /// processor is reached) or `budget`.
    pub stopped: &'static str,
    /// Planned cases left out for lack of budget.
    pub left_for_budget: usize,
    /// The dataset's fingerprint.
    pub fingerprint: hetero_plan::Fingerprint,
    /// Held-out error of the quick predictor per (processor, dtype, order).
    pub held_out: Vec<(Group, HeldOut)>,
}

/// What the output folder holds before the run.
fn check_out_folder(out: &Path, resume: bool) -> Result<Option<DeviceProfile>> {
    if !out.exists() {
        return Ok(None);
    }
    if !out.is_dir() {
        return Err(Error::FolderInUse {
            path: out.to_path_buf(),
            message: "exists and is not a folder".into(),
            fix: "choose another --out".into(),
        });
    }
    let device = out.join(DEVICE_FILE);
    let journal = out.join(Journal::FILE);
    let has_data = device.exists()
        || out.join(MEASUREMENTS_FILE).exists()
        || out.join(MICROBENCH_FILE).exists()
        || std::fs::metadata(&journal).is_ok_and(|m| m.len() > 0);
    // An empty journal (a run that stopped before its first row) is no data.
    let empty = std::fs::read_dir(out)
        .map_err(|e| Error::io(out, e))?
        .filter_map(|e| e.ok())
        .all(|e| e.file_name() == Journal::FILE && e.metadata().is_ok_and(|m| m.len() == 0));
    if !has_data {
        if empty {
            return Ok(None);
        }
        return Err(Error::FolderInUse {
            path: out.to_path_buf(),
            message: "is not empty and holds no dataset".into(),
            fix: "choose a new or empty folder for --out".into(),
        });
    }
    let profile = if device.exists() {
        Some(hetero_plan::load::<DeviceProfile>(&device)?)
    } else {
        None
    };
    if !resume {
        let what = match &profile {
            Some(p) => format!(
                "already holds a dataset of {} ({})",
                p.host.name, p.host.transport
            ),
            None => "already holds rows of an earlier run".into(),
        };
        return Err(Error::FolderInUse {
            path: out.to_path_buf(),
            message: what,
            fix: "pass --resume to continue it on the same device, or choose another --out".into(),
        });
    }
    Ok(profile)
}

/// Why two profiles are not of the same device, if they are not.
pub fn same_device(old: &DeviceProfile, new: &DeviceProfile) -> std::result::Result<(), String> {
    if old.host.name != new.host.name || old.host.arch != new.host.arch {
        return Err(format!(
            "it holds data of `{}` ({}), this device is `{}` ({})",
            old.host.name, old.host.arch, new.host.name, new.host.arch
        ));
    }
    for p in &new.processors {
        if let Some(q) = old.processors.iter().find(|q| q.id == p.id)
            && (q.name != p.name || q.kind != p.kind || q.api != p.api)
        {
            return Err(format!(
                "processor {} was `{}`, it is now `{}`",
                p.id, q.name, p.name
            ));
        }
    }
    Ok(())
}

fn id_matches(pattern: &str, id: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => id.starts_with(prefix),
        None => pattern == id,
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Seconds a case or benchmark is expected to take, learnt as rows arrive.
struct CostModel {
    run: RunParams,
    kinds: HashMap<String, ProcessorKind>,
    quick: HashMap<Group, Quick>,
    per_proc: HashMap<String, Quick>,
    /// Observed wall time / estimate, per processor.
    factor: HashMap<String, f64>,
    /// Seconds from spawning the agent to its hello line.
    startup: f64,
}

impl CostModel {
    fn new(run: RunParams, processors: &[Processor]) -> CostModel {
        CostModel {
            run,
            kinds: processors.iter().map(|p| (p.id.clone(), p.kind)).collect(),
            quick: HashMap::new(),
            per_proc: HashMap::new(),
            factor: HashMap::new(),
            startup: 1.0,
        }
    }

    fn rebuild(&mut self, rows: &Rows) {
        let mut groups: HashMap<Group, Vec<Point>> = HashMap::new();
        let mut procs: HashMap<String, Vec<Point>> = HashMap::new();
        for r in rows.measurements.iter().filter(|r| r.is_usable()) {
            let (Some(shape), Some(us)) = (r.shape(), r.median_us) else {
                continue;
            };
            let p = Point { shape, us };
            groups
                .entry((r.processor.clone(), r.dtype, r.order))
                .or_default()
                .push(p);
            procs.entry(r.processor.clone()).or_default().push(p);
        }
        self.quick = groups
            .into_iter()
            .map(|(g, v)| (g, Quick::new(v)))
            .collect();
        self.per_proc = procs.into_iter().map(|(g, v)| (g, Quick::new(v))).collect();
    }

    /// The uncalibrated estimate, seconds.
    fn raw(&self, item: &Item) -> f64 {
        match item {
            Item::Case(c) => {
                let group = (c.processor.clone(), c.dtype, c.order);
                let per_run_us = self
                    .quick
                    .get(&group)
                    .and_then(|q| q.predict(&c.shape))
                    .or_else(|| self.per_proc.get(&c.processor)?.predict(&c.shape))
                    .unwrap_or_else(|| {
                        let prior = match self.kinds.get(&c.processor) {
                            Some(ProcessorKind::Gpu) => 2e11,
                            Some(ProcessorKind::Npu) => 5e11,
                            _ => 1e10,
                        };
                        20.0 + c.shape.flops() / prior * 1e6
                    });
                let run = c.run.unwrap_or(self.run);
                let runs = (run.warmups + run.repetitions + 2) as f64;
                runs * per_run_us * 1e-6 + setup_seconds(&c.shape)
            }
            Item::Bench(b) => {
                let runs = (self.run.warmups + self.run.repetitions) as f64;
                let bytes = b.bytes.unwrap_or(match b.bench {
                    MicrobenchKind::BandwidthAlone | MicrobenchKind::BandwidthConcurrent => {
                        64 << 20
                    }
                    _ => 0,
                }) as f64;
                let graph = b.shape.map_or(0.0, |s| setup_seconds(&s) * 5.0);
                0.02 + runs * bytes / 2e9 + graph
            }
        }
    }

    fn estimate(&self, item: &Item) -> f64 {
        self.raw(item) * self.factor.get(item.processor()).copied().unwrap_or(1.0)
    }

    fn observe(&mut self, item: &Item, wall: f64) {
        let raw = self.raw(item);
        if raw <= 0.0 || !wall.is_finite() {
            return;
        }
        // The factor corrects the estimates as a whole; it never goes below
        // 0.5 so that small cases, whose overheads dominate, cannot make a
        // large one look cheap enough to start near the end of the budget.
        let ratio = (wall / raw).clamp(0.5, 20.0);
        let f = self
            .factor
            .entry(item.processor().to_string())
            .or_insert(ratio);
        *f = 0.7 * *f + 0.3 * ratio;
    }
}

/// Input generation, the CPU reference check and buffer setup, seconds.
fn setup_seconds(s: &GemmShape) -> f64 {
    let (m, k, n) = s.mkn();
    let (m, k, n) = (m as f64, k as f64, n as f64);
    let elems = m * k + k * n + m * n;
    let checked = (m * n).min(4096.0 + 260.0);
    2e-4 + elems * 2e-9 + 2.0 * checked * k * 2e-9
}

/// How one agent run ended.
struct BatchEnd {
    new_rows: usize,
    done_line: bool,
    status: Option<std::process::ExitStatus>,
    killed_for_budget: bool,
    stalled: bool,
    stderr: String,
    command: String,
}

/// Runs `hetero profile`.
pub fn profile(opts: ProfileOptions, rep: Arc<Reporter>) -> Result<Outcome> {
    let t0 = Instant::now();
    let deadline = t0 + opts.budget;
    let out = opts.out.clone();
    let old_profile = check_out_folder(&out, opts.resume)?;
    rep.emit(&Event::Start {
        target: opts.target.to_string(),
        out: out.display().to_string(),
        budget_s: opts.budget.as_secs_f64(),
        resume: opts.resume,
    });

    let mut topts = opts.transport.clone();
    if topts.observer.is_none() {
        let r = rep.clone();
        topts.observer = Some(Arc::new(move |n: &transport::RetryNote| {
            r.emit(&Event::Retry {
                command: n.command.clone(),
                attempt: n.attempt,
                attempts: n.attempts,
                wait_ms: n.wait.as_millis() as u64,
                detail: n.detail.clone(),
            })
        }));
    }
    let retry = topts.retry;
    let mut tr = Transport::open(&opts.target, topts)?;
    let facts = tr.facts()?;
    let agent_path = agent::select(&opts.agent, tr.target(), &facts.arch)?;
    tr.install_agent(&agent_path)?;

    // Handshake.
    let mut args = opts.agent_args.clone();
    args.extend(["version".to_string(), "--json".to_string()]);
    let o = tr.run_agent(&args)?;
    let hello = o
        .stdout_text()
        .lines()
        .filter_map(|l| match AgentLine::parse(l) {
            Ok(Some(AgentLine::Hello(h))) => Some(h),
            _ => None,
        })
        .next_back();
    let hello: Hello = match hello {
        Some(h) if o.success() => h,
        _ => {
            return Err(Error::Handshake {
                command: o.command.clone(),
                message: format!(
                    "expected a hello line; got {}: stdout: {} stderr: {}",
                    o.detail(),
                    tail(&o.stdout_text(), 3),
                    tail(&String::from_utf8_lossy(&o.stderr), 3)
                ),
            });
        }
    };
    hello.check().map_err(|message| Error::Handshake {
        command: o.command.clone(),
        message,
    })?;
    rep.emit(&Event::Connected {
        host: facts.name.clone(),
        arch: facts.arch.clone(),
        os: facts.os.clone(),
        agent: hello.version.clone(),
        protocol: hello.protocol,
        agent_path: agent_path.display().to_string(),
    });

    // Probe (every processor: device.json lists them all).
    let mut args = opts.agent_args.clone();
    args.extend(["probe".to_string(), "--json".to_string()]);
    let o = tr.run_agent(&args)?;
    if !o.success() {
        let err = Error::AgentRefused {
            command: o.command.clone(),
            detail: o.detail(),
        };
        return Err(if o.code() == Some(2) {
            err
        } else {
            Error::Transport {
                command: o.command.clone(),
                attempts: 1,
                detail: o.detail(),
            }
        });
    }
    let probe: ProbeReport = serde_json::from_slice(&o.stdout).map_err(|e| Error::Handshake {
        command: o.command.clone(),
        message: format!("probe --json printed no probe report: {e}"),
    })?;
    let found: Vec<String> = probe.processors.iter().map(|p| p.id.clone()).collect();
    let selected: Vec<Processor> = match &opts.processors {
        None => probe.processors.clone(),
        Some(want) => {
            let missing: Vec<&str> = want
                .iter()
                .filter(|w| !found.iter().any(|f| id_matches(w, f)))
                .map(String::as_str)
                .collect();
            if !missing.is_empty() {
                return Err(Error::UnknownProcessor {
                    missing: missing.join(", "),
                    available: found.join(", "),
                });
            }
            probe
                .processors
                .iter()
                .filter(|p| want.iter().any(|w| id_matches(w, &p.id)))
                .cloned()
                .collect()
        }
    };
    if selected.is_empty() {
        return Err(Error::UnknownProcessor {
            missing: "any processor".into(),
            available: if found.is_empty() {
                "none".into()
            } else {
                found.join(", ")
            },
        });
    }
    let unavailable: Vec<String> = probe
        .unavailable
        .iter()
        .map(|u| {
            if u.reason.is_empty() {
                u.backend.clone()
            } else {
                u.reason.clone()
            }
        })
        .collect();
    rep.emit(&Event::Processors {
        selected: selected.iter().map(|p| p.id.clone()).collect(),
        found: found.clone(),
        unavailable: unavailable.clone(),
    });
    for p in &selected {
        if p.simulated || p.emulated {
            rep.emit(&Event::Warning {
                message: format!(
                    "{}: its times are {} (not a processor's latency); its rows say so",
                    p.id,
                    if p.simulated { "simulated" } else { "emulated" }
                ),
            });
        }
    }

    // The device profile; on resume, the folder must hold this device.
    let mut profile = DeviceProfile {
        schema_version: SchemaVersion,
        host: HostInfo {
            name: facts.name.clone(),
            os: facts.os.clone(),
            arch: facts.arch.clone(),
            transport: tr.target().to_string(),
        },
        agent: AgentInfo {
            version: hello.version.clone(),
            protocol: hello.protocol,
            arch: hello.arch.clone(),
        },
        processors: probe.processors.clone(),
        unavailable,
        sweep: Some(SweepSpec {
            schema_version: SchemaVersion,
            run: opts.run,
            cases: Vec::new(),
            microbench: Vec::new(),
        }),
        started_ms: now_ms(),
        seconds: 0.0,
    };
    if let Some(old) = &old_profile {
        same_device(old, &profile).map_err(|why| Error::FolderInUse {
            path: out.clone(),
            message: format!(
                "holds another device's data: {why} (device fingerprint {} vs {})",
                short(&dataset::device_fingerprint(old).sha256),
                short(&dataset::device_fingerprint(&profile).sha256)
            ),
            fix: "choose another --out for this device".into(),
        })?;
        profile.started_ms = old.started_ms;
        profile.seconds = old.seconds;
        for p in &old.processors {
            if !profile.processors.iter().any(|q| q.id == p.id) {
                profile.processors.push(p.clone());
            }
        }
        if let Some(s) = &old.sweep {
            profile.sweep = Some(SweepSpec {
                run: opts.run,
                ..s.clone()
            });
        }
    }
    // device.json is written with the first batch: a run that fails before
    // measuring anything leaves no dataset behind.
    std::fs::create_dir_all(&out).map_err(|e| Error::io(&out, e))?;

    // The journal.
    let (mut journal, mut rows, cut) = Journal::open(&out.join(Journal::FILE))?;
    if opts.resume {
        rep.emit(&Event::Resumed {
            rows: rows.len(),
            cut_bytes: cut,
        });
    }
    let rows_before = rows.len();

    // The plan: the initial design, plus cases sent earlier and not measured.
    let selected_ids: HashSet<&str> = selected.iter().map(|p| p.id.as_str()).collect();
    let mut pending: Vec<Planned> = Vec::new();
    let mut planned_ids: HashSet<String> = HashSet::new();
    // A held-out set stays as drawn: refinement would add shapes of its own.
    let chosen = opts.queries.is_some() || opts.cases.is_some();
    let refine = opts.refine && !chosen;
    let design = match (opts.cases.as_deref(), opts.queries) {
        (Some(cases), _) => design::given(cases),
        (None, Some((count, seed))) => design::queries(
            &selected,
            &opts.models,
            opts.dtypes.as_deref(),
            count,
            seed,
            opts.max_len,
        ),
        (None, None) => design::initial(
            &selected,
            &opts.models,
            opts.dtypes.as_deref(),
            opts.microbench,
            opts.max_len,
        ),
    };
    if let Some(dt) = &opts.dtypes {
        for p in &selected {
            if design::dtypes_for(p, Some(dt)).is_empty() {
                rep.emit(&Event::Warning {
                    message: format!(
                        "{} supports none of the --dtypes asked for (it has {})",
                        p.id,
                        p.capabilities
                            .dtypes
                            .iter()
                            .map(|d| d.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                });
            }
        }
    }
    let earlier: Vec<Planned> = profile
        .sweep
        .iter()
        .flat_map(|s| {
            s.cases
                .iter()
                .map(|c| Planned {
                    item: Item::Case(c.clone()),
                    stratum: design::Stratum::Refine,
                })
                .chain(s.microbench.iter().map(|b| Planned {
                    item: Item::Bench(b.clone()),
                    stratum: design::Stratum::Microbench,
                }))
        })
        .collect();
    // A given design stands alone: a resumed profile's unmeasured cases
    // wait for a resume without one.
    let earlier = if opts.cases.is_some() {
        Vec::new()
    } else {
        earlier
    };
    if let Some(cases) = opts.cases.as_deref()
        && !cases
            .iter()
            .any(|c| selected_ids.contains(c.processor.as_str()))
    {
        let mut asked: Vec<&str> = cases.iter().map(|c| c.processor.as_str()).collect();
        asked.sort_unstable();
        asked.dedup();
        rep.emit(&Event::Warning {
            message: format!(
                "none of the given cases' processors ({}) is among those selected here ({})",
                asked.join(", "),
                selected
                    .iter()
                    .map(|p| p.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        });
    }
    for p in design.into_iter().chain(earlier) {
        if selected_ids.contains(p.item.processor())
            && !rows.has(p.item.id())
            && planned_ids.insert(p.item.id().to_string())
        {
            pending.push(p);
        }
    }

    // The host-path microbenchmarks again, one round in each of the next
    // batches (agent processes): see `design::MICRO_PROCESSES`.
    let mut repeats: VecDeque<Vec<Planned>> = if opts.microbench && !chosen {
        design::microbench_repeats(&selected)
            .into_iter()
            .map(|round| {
                round
                    .into_iter()
                    .filter(|b| !rows.has(&b.id) && planned_ids.insert(b.id.clone()))
                    .map(|b| Planned {
                        item: Item::Bench(b),
                        stratum: design::Stratum::Microbench,
                    })
                    .collect::<Vec<_>>()
            })
            .filter(|round| !round.is_empty())
            .collect()
    } else {
        VecDeque::new()
    };

    // Whether --max-cases left planned cases out.
    let mut capped = opts
        .max_cases
        .is_some_and(|cap| cap_cases(&mut pending, &rows, cap) > 0);

    let mut cost = CostModel::new(opts.run, &selected);
    cost.rebuild(&rows);
    let mut done_this_run: BTreeMap<String, u64> = BTreeMap::new();
    let mut batch_no = 0u32;
    let mut failures = 0u32;
    let mut refined_out = false;
    let mut rounds = 0u32;
    let stopped: &'static str;
    let grace = Duration::from_secs_f64((opts.budget.as_secs_f64() * 0.1).clamp(5.0, 120.0));

    loop {
        let now = Instant::now();
        if now >= deadline {
            stopped = "budget";
            break;
        }
        let remaining = (deadline - now).as_secs_f64();

        // Fill a batch: short at first (to calibrate), then up to 30 s. Items
        // whose estimate exceeds what is left stay pending: the estimate
        // improves as rows arrive.
        let target = if batch_no == 0 { 5.0f64 } else { 30.0 }.min(remaining);
        let mut batch: Vec<Planned> = Vec::new();
        let mut est_total = cost.startup;
        if batch_no > 0
            && let Some(round) = repeats.pop_front()
        {
            for p in round {
                let est = cost.estimate(&p.item);
                if est_total + est <= remaining {
                    est_total += est;
                    batch.push(p);
                }
            }
        }
        let mut keep = Vec::new();
        for p in pending.drain(..) {
            let est = cost.estimate(&p.item);
            if est <= remaining && (batch.is_empty() || est_total + est <= target) {
                est_total += est;
                batch.push(p);
            } else {
                keep.push(p);
            }
        }
        pending = keep;
        update_bars(
            &rep,
            &selected,
            &pending,
            &batch,
            &done_this_run,
            &cost,
            remaining,
        );
        if batch.is_empty() {
            // The design is done (or nothing left fits): refine.
            if refine && !refined_out && rounds < opts.refine_rounds {
                rounds += 1;
                let added = refine_round(&cost, &planned_ids, &rep);
                if added.is_empty() {
                    refined_out = true;
                }
                for c in added {
                    planned_ids.insert(c.id.clone());
                    pending.push(Planned {
                        item: Item::Case(c),
                        stratum: design::Stratum::Refine,
                    });
                }
                if let Some(cap) = opts.max_cases
                    && cap_cases(&mut pending, &rows, cap) > 0
                {
                    capped = true;
                    if pending.is_empty() {
                        refined_out = true;
                    }
                }
                continue;
            }
            stopped = if !pending.is_empty() {
                "budget"
            } else if capped {
                "max_cases"
            } else if refined_out {
                "converged"
            } else {
                "complete"
            };
            break;
        }
        batch_no += 1;

        let spec = SweepSpec {
            schema_version: SchemaVersion,
            run: opts.run,
            cases: batch
                .iter()
                .filter_map(|p| match &p.item {
                    Item::Case(c) => Some(c.clone()),
                    _ => None,
                })
                .collect(),
            microbench: batch
                .iter()
                .filter_map(|p| match &p.item {
                    Item::Bench(b) => Some(b.clone()),
                    _ => None,
                })
                .collect(),
        };
        // Record what is sent before sending it.
        if let Some(s) = &mut profile.sweep {
            let have: HashSet<String> = s
                .cases
                .iter()
                .map(|c| c.id.clone())
                .chain(s.microbench.iter().map(|b| b.id.clone()))
                .collect();
            s.cases
                .extend(spec.cases.iter().filter(|c| !have.contains(&c.id)).cloned());
            s.microbench.extend(
                spec.microbench
                    .iter()
                    .filter(|b| !have.contains(&b.id))
                    .cloned(),
            );
        }
        hetero_plan::save(&out.join(DEVICE_FILE), &profile)?;
        rep.emit(&Event::Batch {
            batch: batch_no,
            cases: spec.cases.len(),
            microbench: spec.microbench.len(),
            estimated_s: est_total,
            remaining_s: remaining,
        });

        let spec_text = serde_json::to_vec(&spec).expect("a spec serialises");
        let spec_path = tr.put_file("spec.json", &spec_text)?;
        let mut args = opts.agent_args.clone();
        args.push("--processors".into());
        args.push(
            selected
                .iter()
                .map(|p| p.id.as_str())
                .collect::<Vec<_>>()
                .join(","),
        );
        args.extend(["sweep".to_string(), "--spec".to_string(), spec_path]);
        let items: HashMap<String, Item> = batch
            .iter()
            .map(|p| (p.item.id().to_string(), p.item.clone()))
            .collect();
        let stall_limit = Duration::from_secs_f64(
            (opts.run.timeout_ms as f64 / 1e3) * 2.0
                + batch
                    .iter()
                    .map(|p| cost.estimate(&p.item))
                    .fold(0.0, f64::max)
                    * 3.0
                + 30.0,
        );
        let end = run_batch(
            &mut tr,
            &args,
            &items,
            &mut journal,
            &mut rows,
            &mut cost,
            &rep,
            &mut done_this_run,
            deadline + grace,
            stall_limit,
        )?;
        journal.sync()?;
        cost.rebuild(&rows);
        profile.seconds =
            old_profile.as_ref().map_or(0.0, |p| p.seconds) + t0.elapsed().as_secs_f64();
        hetero_plan::save(&out.join(DEVICE_FILE), &profile)?;

        // Unmeasured items of the batch go back to the front.
        let mut back: Vec<Planned> = batch
            .into_iter()
            .filter(|p| !rows.has(p.item.id()))
            .collect();
        back.append(&mut pending);
        pending = back;

        if end.killed_for_budget {
            stopped = "budget";
            break;
        }
        let ok = end.done_line && end.status.is_none_or(|s| s.success());
        if ok {
            failures = 0;
            continue;
        }
        if end.new_rows == 0 && end.status.and_then(|s| s.code()) == Some(2) && !end.stalled {
            let mut detail = tail(&end.stderr, 6);
            if tr.agent_stderr_is_file()
                && let Ok(log) = tr.fetch_file("agent.log")
            {
                detail = tail(&String::from_utf8_lossy(&log), 6);
            }
            return Err(Error::AgentRefused {
                command: end.command,
                detail,
            });
        }
        if end.new_rows > 0 {
            failures = 0;
        }
        failures += 1;
        let mut detail = match end.status {
            _ if end.stalled => "no output for too long; killed".to_string(),
            Some(s) => match s.code() {
                Some(c) => format!("exit code {c}"),
                None => format!("{s}"),
            },
            None => "killed".into(),
        };
        if !end.done_line {
            detail.push_str(", no done line");
        }
        let mut err_tail = tail(&end.stderr, 4);
        if tr.agent_stderr_is_file()
            && let Ok(log) = tr.fetch_file("agent.log")
        {
            err_tail = tail(&String::from_utf8_lossy(&log), 4);
        }
        if !err_tail.is_empty() {
            detail.push_str(": ");
            detail.push_str(&err_tail);
        }
        if failures > opts.max_agent_failures {
            return Err(Error::AgentStopped {
                command: end.command,
                failures: failures - 1,
                detail,
                journal: journal.path().to_path_buf(),
            });
        }
        let wait = restart_delay(&retry, failures);
        rep.emit(&Event::AgentStopped {
            command: end.command,
            detail,
            rows: end.new_rows,
            restart_in_ms: wait.as_millis() as u64,
        });
        std::thread::sleep(wait);
    }

    journal.sync()?;
    drop(journal);
    drop(tr);

    // The final files, each written atomically.
    let all = Rows::read(&out.join(Journal::FILE))?;
    let notes = dataset::read_notes(
        &std::fs::read_to_string(out.join(Journal::FILE))
            .map_err(|e| Error::io(out.join(Journal::FILE), e))?,
    );
    profile.seconds = old_profile.as_ref().map_or(0.0, |p| p.seconds) + t0.elapsed().as_secs_f64();
    let ds = Dataset {
        profile: Some(profile),
        measurements: all.measurements,
        microbench: all.microbench,
        notes,
    };
    ds.save(&out)?;
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| out.display().to_string());
    let fingerprint = ds.fingerprint(name);
    let held_out = held_out_summary(&cost);
    let outcome = Outcome {
        out: out.clone(),
        measurements: ds.measurements.len(),
        microbench: ds.microbench.len(),
        new_rows: ds.measurements.len() + ds.microbench.len() - rows_before,
        seconds: t0.elapsed().as_secs_f64(),
        stopped,
        left_for_budget: pending.len(),
        fingerprint,
        held_out,
    };
    update_bars(&rep, &selected, &[], &[], &done_this_run, &cost, 0.0);
    rep.finish();
    rep.emit(&Event::Done {
        out: out.display().to_string(),
        measurements: outcome.measurements,
        microbench: outcome.microbench,
        new_rows: outcome.new_rows,
        seconds: outcome.seconds,
        stopped: outcome.stopped.to_string(),
        left_for_budget: outcome.left_for_budget,
        fingerprint: outcome.fingerprint.sha256.clone(),
    });
    Ok(outcome)
}

/// Keeps, per processor, only as many pending GEMM cases as `cap` leaves
/// after the cases already measured; the first ones (highest priority) stay.
/// Returns how many were dropped.
fn cap_cases(pending: &mut Vec<Planned>, rows: &Rows, cap: usize) -> usize {
    let before = pending.len();
    let mut used: HashMap<String, usize> = HashMap::new();
    for r in &rows.measurements {
        *used.entry(r.processor.clone()).or_default() += 1;
    }
    pending.retain(|p| match &p.item {
        Item::Case(c) => {
            let n = used.entry(c.processor.clone()).or_default();
            *n += 1;
            *n <= cap
        }
        Item::Bench(_) => true,
    });
    before - pending.len()
}

fn short(sha: &str) -> &str {
    &sha[..sha.len().min(12)]
}

fn restart_delay(p: &RetryPolicy, failures: u32) -> Duration {
    p.delay(failures + 1)
}

fn held_out_summary(cost: &CostModel) -> Vec<(Group, HeldOut)> {
    let mut v: Vec<(Group, HeldOut)> = cost
        .quick
        .iter()
        .map(|(g, q)| {
            let e: Vec<f64> = q.held_out().into_iter().map(|(_, e)| e).collect();
            (g.clone(), HeldOut::of(&e, REFINE_THRESHOLD))
        })
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// One refinement round over every group; returns the new cases.
fn refine_round(
    cost: &CostModel,
    known: &HashSet<String>,
    rep: &Reporter,
) -> Vec<hetero_plan::SweepCase> {
    let mut groups: Vec<(&Group, &Quick)> = cost.quick.iter().collect();
    groups.sort_by(|a, b| a.0.cmp(b.0));
    let mut out = Vec::new();
    for (g, q) in groups {
        if q.len() < 4 {
            continue;
        }
        let errs: Vec<f64> = q.held_out().into_iter().map(|(_, e)| e).collect();
        let h = HeldOut::of(&errs, REFINE_THRESHOLD);
        let new = design::refine(g, q, REFINE_THRESHOLD, known, 16);
        rep.emit(&Event::Refine {
            processor: g.0.clone(),
            dtype: g.1.to_string(),
            order: g.2.to_string(),
            points: h.points,
            held_out_median: h.median,
            above_threshold: h.above,
            new_cases: new.len(),
        });
        out.extend(new);
    }
    out
}

fn update_bars(
    rep: &Reporter,
    processors: &[Processor],
    pending: &[Planned],
    batch: &[Planned],
    done: &BTreeMap<String, u64>,
    cost: &CostModel,
    remaining: f64,
) {
    for p in processors {
        let mine = pending
            .iter()
            .chain(batch)
            .filter(|x| x.item.processor() == p.id);
        let (n, secs) = mine.fold((0u64, 0.0), |(n, s), x| (n + 1, s + cost.estimate(&x.item)));
        let d = done.get(&p.id).copied().unwrap_or(0);
        rep.progress(
            &p.id,
            d,
            d + n,
            Duration::from_secs_f64(secs.min(remaining).max(0.0)),
        );
    }
}

/// Sends one batch to the agent and journals its rows as they arrive.
#[allow(clippy::too_many_arguments)]
fn run_batch(
    tr: &mut Transport,
    args: &[String],
    items: &HashMap<String, Item>,
    journal: &mut Journal,
    rows: &mut Rows,
    cost: &mut CostModel,
    rep: &Reporter,
    done: &mut BTreeMap<String, u64>,
    hard_deadline: Instant,
    stall_limit: Duration,
) -> Result<BatchEnd> {
    let cmd = tr.agent_command(args, "agent.log");
    let command = transport::display_command(&cmd);
    let mut child = spawn_piped(cmd)?;
    let started = Instant::now();
    let stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let (tx, rx) = mpsc::channel::<std::io::Result<String>>();
    let reader = std::thread::spawn(move || {
        let mut r = BufReader::new(stdout);
        loop {
            let mut buf = Vec::new();
            match r.read_until(b'\n', &mut buf) {
                Ok(0) => break,
                Ok(_) => {
                    let complete = buf.last() == Some(&b'\n');
                    let line = String::from_utf8_lossy(&buf).into_owned();
                    if tx.send(Ok(line)).is_err() || !complete {
                        break;
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                    break;
                }
            }
        }
    });
    let err_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = stderr.read_to_end(&mut v);
        let s = String::from_utf8_lossy(&v).into_owned();
        // Keep the tail only.
        let mut cut = s.len().saturating_sub(16 << 10);
        while !s.is_char_boundary(cut) {
            cut += 1;
        }
        s[cut..].to_string()
    });

    let mut end = BatchEnd {
        new_rows: 0,
        done_line: false,
        status: None,
        killed_for_budget: false,
        stalled: false,
        stderr: String::new(),
        command: command.clone(),
    };
    let mut last_line = Instant::now();
    let mut last_row_at: Option<Instant> = None;
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(Ok(text)) => {
                last_line = Instant::now();
                if !text.ends_with('\n') {
                    // A line cut off by the end of the stream.
                    if !text.trim().is_empty() {
                        rep.emit(&Event::Warning {
                            message: format!(
                                "ignored a cut-off last line from the agent ({} bytes)",
                                text.len()
                            ),
                        });
                    }
                    continue;
                }
                match AgentLine::parse(&text) {
                    Ok(Some(AgentLine::Hello(h))) => {
                        cost.startup = 0.5 * cost.startup + 0.5 * started.elapsed().as_secs_f64();
                        last_row_at = Some(Instant::now());
                        if let Err(m) = h.check() {
                            let _ = child.kill();
                            let _ = child.wait();
                            return Err(Error::Handshake {
                                command,
                                message: m,
                            });
                        }
                    }
                    Ok(Some(AgentLine::Done(_))) => end.done_line = true,
                    Ok(None) => {}
                    Ok(Some(line)) => {
                        let id = line.case_id().expect("a row").to_string();
                        let Some(item) = items.get(&id) else {
                            rep.emit(&Event::Warning {
                                message: format!("the agent sent a row for `{id}`, which was not asked for; ignored"),
                            });
                            continue;
                        };
                        if rows.has(&id) {
                            continue;
                        }
                        journal.append(&text)?;
                        let (processor, status, median) = match &line {
                            AgentLine::Measurement(r) => {
                                (r.processor.clone(), r.status, r.median_us)
                            }
                            AgentLine::Microbench(l) => (
                                l.row.processor.clone(),
                                l.row.status,
                                l.row.stats.map(|s| s.median_us),
                            ),
                            _ => unreachable!("rows only"),
                        };
                        rows.push(line);
                        end.new_rows += 1;
                        let now = Instant::now();
                        if let Some(prev) = last_row_at {
                            cost.observe(item, (now - prev).as_secs_f64());
                        }
                        last_row_at = Some(now);
                        *done.entry(processor.clone()).or_default() += 1;
                        rep.emit(&Event::Row {
                            case_id: id,
                            processor: processor.clone(),
                            status: dataset::enum_str(&status),
                            median_us: median,
                        });
                    }
                    Err(why) => rep.emit(&Event::Warning {
                        message: format!("ignored a line from the agent: {why}"),
                    }),
                }
            }
            Ok(Err(e)) => {
                rep.emit(&Event::Warning {
                    message: format!("reading the agent's output: {e}"),
                });
                break;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let now = Instant::now();
                if now >= hard_deadline {
                    end.killed_for_budget = true;
                    let _ = child.kill();
                } else if now - last_line >= stall_limit {
                    end.stalled = true;
                    let _ = child.kill();
                }
            }
        }
    }
    // The stream has ended; wait for the process (kill it if it lingers).
    let wait_until = Instant::now() + Duration::from_secs(10);
    end.status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() >= wait_until => {
                let _ = child.kill();
                break child.wait().ok();
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(_) => break None,
        }
    };
    let _ = reader.join();
    end.stderr = err_reader.join().unwrap_or_default();
    Ok(end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_cases_keeps_the_first_cases_per_processor() {
        let shape = |m| GemmShape::new(m, 64, 64).unwrap();
        let planned = |p: &str, m| Planned {
            item: Item::Case(design::case(
                p,
                shape(m),
                DType::F32,
                hetero_plan::OperandOrder::Aw,
            )),
            stratum: design::Stratum::Model,
        };
        let mut pending: Vec<Planned> = (1..=5)
            .flat_map(|m| [planned("cpu:0", m), planned("npu-sim", m)])
            .collect();
        pending.push(Planned {
            item: Item::Bench(hetero_plan::MicrobenchRequest {
                id: "mb/cpu:0/submit_empty".into(),
                processor: "cpu:0".into(),
                bench: MicrobenchKind::SubmitEmpty,
                bytes: None,
                peer: None,
                shape: None,
            }),
            stratum: design::Stratum::Microbench,
        });
        // cpu:0 has two rows measured already: one more case fits a cap of 3.
        let mut rows = Rows::default();
        for id in ["a", "b"] {
            rows.push_measurement(dataset::tests::mrow(id, "cpu:0", 7, Some(1.0)));
        }
        let dropped = cap_cases(&mut pending, &rows, 3);
        let ids: Vec<&str> = pending.iter().map(|p| p.item.id()).collect();
        assert_eq!(dropped, 2 + 4, "{ids:?}");
        assert_eq!(
            ids,
            [
                "cpu:0/1x64x64/f32/aw",
                "npu-sim/1x64x64/f32/aw",
                "npu-sim/2x64x64/f32/aw",
                "npu-sim/3x64x64/f32/aw",
                "mb/cpu:0/submit_empty",
            ]
        );
    }

    #[test]
    fn patterns_match_prefixes() {
        assert!(id_matches("opencl:*", "opencl:0:0"));
        assert!(id_matches("cpu:0", "cpu:0"));
        assert!(!id_matches("cpu:0", "cpu:01"));
    }

    #[test]
    fn folder_checks() {
        let d = std::env::temp_dir().join(format!("hetero-out-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        assert!(check_out_folder(&d, false).unwrap().is_none());
        std::fs::create_dir_all(&d).unwrap();
        assert!(check_out_folder(&d, false).unwrap().is_none());
        std::fs::write(d.join("notes.txt"), "mine").unwrap();
        let e = check_out_folder(&d, true).unwrap_err();
        assert!(
            e.is_bad_input() && e.to_string().contains("holds no dataset"),
            "{e}"
        );
        std::fs::write(d.join(Journal::FILE), "{}\n").unwrap();
        let e = check_out_folder(&d, false).unwrap_err();
        assert!(e.to_string().contains("--resume"), "{e}");
        assert!(check_out_folder(&d, true).unwrap().is_none());
        let _ = std::fs::remove_dir_all(&d);
    }
}
