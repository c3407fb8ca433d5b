//! `hetero profile`: measure a device within a time budget and keep the
//! rows as a dataset.
//!
//! A run is a list of steps, one module each: connect to the device and
//! install the agent (`connect`), check its handshake (`handshake`), probe
//! its processors (`probe`), design the sweep (`queue`) and plan the budget
//! over it (`budget`: a budget too short for a fit is refused here, before
//! any case runs), run batches of it
//! within the budget (`batches`, one agent process each in `agent_run`),
//! refine where the throughput guide is inaccurate (`refine`), and finish
//! by writing the dataset (`finish`).

mod agent_run;
mod batches;
pub mod budget;
mod connect;
mod cost;
mod finish;
mod handshake;
mod probe;
mod queue;
mod refine;
mod setup;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hetero_plan::{DType, DeviceProfile, ModelSpec, Processor, RunParams, Setup};

pub use budget::{BudgetPlan, ProcessorBudget, StageBudget};
pub use probe::same_device;

use crate::agent::AgentSource;
use crate::design::Group;
use crate::guide::HeldOut;
use crate::journal::{Journal, Rows};
use crate::report::{Event, Reporter};
use crate::transport::TransportOptions;
use crate::{Error, Result, Target};
use connect::Link;
use cost::CostModel;
use queue::Queue;
use refine::Refiner;

/// Everything `hetero profile` needs, validated.
#[derive(Debug, Clone)]
pub struct ProfileOptions {
    /// Where the agent runs.
    pub target: Target,
    /// The dataset folder.
    pub out: PathBuf,
    /// Processor ids to measure (a trailing `*` matches a prefix); `None`: all.
    pub processors: Option<Vec<String>>,
    /// Element types; `None`: one per processor (see [`crate::design::dtypes_for`]).
    pub dtypes: Option<Vec<DType>>,
    /// Models whose shapes to measure.
    pub models: Vec<ModelSpec>,
    /// Time budget of this run.
    pub budget: Duration,
    /// Continue the dataset in `out`.
    pub resume: bool,
    /// On resume, keep going when the dataset's rows were measured under
    /// other conditions ([`hetero_plan::Setup`]) than this run's: each row
    /// keeps its own. Without it such a resume is refused.
    pub allow_mixed: bool,
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
    /// Refine where the throughput guide is inaccurate once the initial design is done.
    pub refine: bool,
    /// Consecutive agent failures without a new row before giving up.
    pub max_agent_failures: u32,
    /// Refinement rounds at most.
    pub refine_rounds: u32,
    /// GEMM cases per processor at most, rows already in the dataset
    /// included (the design is in priority order, so its tail is dropped).
    pub max_cases: Option<usize>,
    /// Measure only this many random solver-style queries of the models,
    /// from this seed ([`crate::design::query_shapes`]), instead of the design: a
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
            allow_mixed: false,
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
    /// Held-out error of the throughput guide per (processor, dtype, order).
    pub held_out: Vec<(Group, HeldOut)>,
    /// How the run planned its budget; `None` for a chosen set (`--plan`,
    /// `--queries`), which is measured as given.
    pub plan: Option<BudgetPlan>,
}

/// Runs `hetero profile`.
pub fn profile(opts: ProfileOptions, rep: Arc<Reporter>) -> Result<Outcome> {
    let t0 = Instant::now();
    let old_profile = connect::check_out_folder(&opts.out, opts.resume)?;
    rep.emit(&Event::Start {
        target: opts.target.to_string(),
        out: opts.out.display().to_string(),
        budget_s: opts.budget.as_secs_f64(),
        resume: opts.resume,
    });
    for dir in crate::scratch::clean_dead_runs(&std::env::temp_dir()) {
        rep.emit(&Event::Warning {
            message: format!(
                "removed {}, the scratch folder of a run that was killed",
                dir.display()
            ),
        });
    }
    let mut link = connect::connect(&opts, &rep)?;
    let hello = handshake::handshake(&mut link, &opts.agent_args, &rep)?;
    let probed = probe::probe(&mut link, &opts, &rep)?;
    let profile = probe::device_profile(&link, &hello, &probed, &opts, old_profile.as_ref())?;
    // Opens the journal and designs the sweep.
    let mut run = Run::start(opts, rep, link, probed, profile, old_profile, t0)?;
    // Runs batches, refining once the design is measured.
    let stopped = run.run_batches()?;
    run.finish(stopped)
}

/// A run between its probe and its end.
struct Run {
    opts: ProfileOptions,
    rep: Arc<Reporter>,
    link: Link,
    /// The processors measured.
    selected: Vec<Processor>,
    /// The conditions this run's rows are measured under.
    setup: Setup,
    /// What `device.json` will say.
    profile: DeviceProfile,
    /// Seconds earlier runs of the dataset took.
    old_seconds: f64,
    journal: Journal,
    rows: Rows,
    /// Rows in the journal when the run started.
    rows_before: usize,
    queue: Queue,
    /// The budget plan (see [`Outcome::plan`]).
    plan: Option<BudgetPlan>,
    refiner: Refiner,
    cost: CostModel,
    /// Rows this run, per processor.
    done_this_run: BTreeMap<String, u64>,
    t0: Instant,
    deadline: Instant,
    /// How long past the deadline a case in progress may run, at most (and
    /// at most one case's timeout): the agent is stopped at its first line
    /// after the deadline, and killed at the deadline plus this.
    grace: Duration,
}

impl Run {
    /// Opens the journal and designs the sweep. `device.json` is written
    /// with the first batch: a run that fails before measuring anything
    /// leaves no dataset behind.
    fn start(
        opts: ProfileOptions,
        rep: Arc<Reporter>,
        link: Link,
        probed: probe::Probed,
        profile: DeviceProfile,
        old_profile: Option<DeviceProfile>,
        t0: Instant,
    ) -> Result<Run> {
        let out = &opts.out;
        std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
        let (journal, rows, cut) = Journal::open(&out.join(Journal::FILE))?;
        warn_skipped(&out.join(Journal::FILE), &rows, &rep);
        let setup = setup::of_run(&opts, &probed.processors);
        setup::check_resume(
            out,
            &rows,
            old_profile.as_ref(),
            &setup,
            opts.allow_mixed,
            &rep,
        )?;
        let selected = probed.selected;
        if opts.resume {
            rep.emit(&Event::Resumed {
                rows: rows.len(),
                cut_bytes: cut,
            });
        }
        let mut queue = Queue::design(&opts, &selected, Some(&profile), &rows, &rep);
        let refiner = Refiner::new(opts.refine && !queue::chosen(&opts), opts.refine_rounds);
        let mut cost = CostModel::new(opts.run, &selected);
        cost.rebuild(&rows);
        let plan = plan_budget(&opts, &selected, &mut queue, &rows, &cost)?;
        if let Some(p) = &plan {
            rep.emit(&Event::Plan(p.clone()));
        }
        let grace = Duration::from_secs_f64((opts.budget.as_secs_f64() * 0.1).clamp(5.0, 120.0));
        Ok(Run {
            deadline: t0 + opts.budget,
            grace,
            rows_before: rows.len(),
            old_seconds: old_profile.map_or(0.0, |p| p.seconds),
            opts,
            rep,
            link,
            selected,
            setup,
            profile,
            journal,
            rows,
            queue,
            plan,
            refiner,
            cost,
            done_this_run: BTreeMap::new(),
            t0,
        })
    }
}

/// Orders the queue by the budget plan and refuses a budget shorter than
/// its minimum; `None` for a chosen set, measured as given.
fn plan_budget(
    opts: &ProfileOptions,
    selected: &[Processor],
    queue: &mut Queue,
    rows: &Rows,
    cost: &CostModel,
) -> Result<Option<BudgetPlan>> {
    if queue::chosen(opts) {
        return Ok(None);
    }
    let plan = queue.schedule(&budget::Inputs {
        budget_s: opts.budget.as_secs_f64(),
        selected,
        dtypes: opts.dtypes.as_deref(),
        rows,
        cost,
        design: &[],
        max_cases: opts.max_cases,
    });
    if opts.budget.as_secs_f64() < plan.minimum_s {
        return Err(Error::BudgetTooShort {
            budget: budget::fmt_secs(opts.budget.as_secs_f64()),
            processors: selected
                .iter()
                .map(|p| p.id.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            minimum: budget::fmt_secs(plan.minimum_s),
        });
    }
    Ok(Some(plan))
}

/// The budget plan a profile of `processors` with `opts` would make on a
/// new dataset, from the cost model's estimates before any row, whether
/// or not `opts.budget` reaches its [`BudgetPlan::minimum`] (the shortest
/// `--budget` that `hetero profile` accepts for them): for `hetero demo`
/// to choose a budget or processors before it profiles. `None` for a
/// chosen set (`--plan`, `--queries`), which needs no fit rows.
pub fn budget_plan(opts: &ProfileOptions, processors: &[Processor]) -> Option<BudgetPlan> {
    if queue::chosen(opts) {
        return None;
    }
    let rows = Rows::default();
    let mut queue = Queue::design(opts, processors, None, &rows, &Reporter::silent());
    let cost = CostModel::new(opts.run, processors);
    Some(queue.schedule(&budget::Inputs {
        budget_s: opts.budget.as_secs_f64(),
        selected: processors,
        dtypes: opts.dtypes.as_deref(),
        rows: &rows,
        cost: &cost,
        design: &[],
        max_cases: opts.max_cases,
    }))
}

/// Warns of each journal line that was skipped: one that is not a row (a
/// line torn in the middle of the file), or a row that contradicts itself.
/// A partial last line, which a killed run leaves, is cut quietly by
/// [`Journal::open`] and counted in the `resumed` event.
fn warn_skipped(path: &std::path::Path, rows: &Rows, rep: &Reporter) {
    for (line, why) in rows.skipped_lines.iter().chain(&rows.invalid) {
        rep.emit(&Event::Warning {
            message: format!(
                "{}:{line}: skipped a line that is not a usable row: {why}",
                path.display()
            ),
        });
    }
}
