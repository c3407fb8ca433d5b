//! Mutation fuzzing of hetero's parsers on stable Rust.
//!
//! Each parser ([`targets::TARGETS`]) is fed inputs made by mutating its
//! seed files (the repository's golden files, fixtures and datasets). Input
//! `i` depends only on the seed, the parser and `i` ([`mutate::input`]), so
//! a run is reproduced exactly by its command line, and one input alone by
//! `--exec I`. Every execution runs under `catch_unwind`: a panic is a
//! failure, reported with the seed and the index, its input saved to a
//! file. A watchdog thread catches an execution that runs past the time
//! limit (a hang), saves its input and stops the process.

pub mod mutate;
pub mod targets;

use std::cell::{Cell, RefCell};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use targets::{Outcome, Scratch, Target, VIA_FILE_EVERY};

/// How to run one parser.
#[derive(Debug, Clone)]
pub struct Options {
    /// Inputs to try.
    pub execs: u64,
    /// The seed every input derives from.
    pub seed: u64,
    /// Worker threads (the inputs do not depend on it).
    pub jobs: usize,
    /// Longest time one execution may take before it counts as a hang.
    pub timeout: Duration,
    /// Where the inputs of failures are written.
    pub out: PathBuf,
}

/// An input that made a parser panic or take too long.
#[derive(Debug, Clone)]
pub struct Failure {
    /// Its index in the run.
    pub exec: u64,
    /// The panic message, or how long it took.
    pub message: String,
    /// The file holding the input.
    pub file: PathBuf,
}

/// What one parser made of a run.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Inputs tried.
    pub execs: u64,
    /// Inputs parsed and valid.
    pub accepted: u64,
    /// Inputs refused with an error.
    pub refused: u64,
    /// Panics and slow executions.
    pub failures: Vec<Failure>,
    /// Wall-clock time of the run.
    pub seconds: f64,
    /// The slowest execution.
    pub slowest: Duration,
}

impl Report {
    fn merge(&mut self, other: Report) {
        self.execs += other.execs;
        self.accepted += other.accepted;
        self.refused += other.refused;
        self.failures.extend(other.failures);
        self.slowest = self.slowest.max(other.slowest);
    }
}

thread_local! {
    /// Set while a parser runs on this thread: its panics are recorded,
    /// not printed.
    static IN_TARGET: Cell<bool> = const { Cell::new(false) };
    static PANIC_MESSAGE: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Installs (once) a panic hook that keeps the message of a parser's panic
/// for the report and leaves every other panic to the default hook.
fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if IN_TARGET.with(Cell::get) {
                let at = info
                    .location()
                    .map(|l| format!(" at {l}"))
                    .unwrap_or_default();
                let msg = info
                    .payload()
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| info.payload().downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "(no message)".into());
                PANIC_MESSAGE.with(|m| *m.borrow_mut() = Some(format!("{msg}{at}")));
            } else {
                default(info);
            }
        }));
    });
}

/// What a worker is doing, for the watchdog: the index of the execution
/// under way and when it began (nanoseconds since the run began, plus one;
/// 0 while between executions).
#[derive(Default)]
struct Slot {
    exec: AtomicU64,
    since: AtomicU64,
}

/// Runs `target` on `opts.execs` inputs.
pub fn run(target: &Target, opts: &Options) -> Report {
    install_panic_hook();
    let seeds = Arc::new((target.seeds)());
    let start = Instant::now();
    let jobs = opts.jobs.max(1);
    let slots: Arc<Vec<Slot>> = Arc::new((0..jobs).map(|_| Slot::default()).collect());
    let done = Arc::new(AtomicU64::new(0));
    let watchdog = spawn_watchdog(target, opts, &seeds, &slots, &done, start);
    let workers: Vec<_> = (0..jobs)
        .map(|job| {
            let (seeds, slots, opts) = (seeds.clone(), slots.clone(), opts.clone());
            let name = target.name;
            let run = target.run;
            std::thread::Builder::new()
                .name(format!("fuzz-{name}-{job}"))
                // The command-line tool parses on its main thread.
                .stack_size(8 << 20)
                .spawn(move || worker(name, run, &seeds, &opts, job, &slots[job], start))
                .expect("a worker thread starts")
        })
        .collect();
    let mut report = Report::default();
    for w in workers {
        report.merge(w.join().expect("a worker does not panic outside a parser"));
    }
    done.store(1, Ordering::SeqCst);
    watchdog.join().expect("the watchdog ends");
    report.failures.sort_by_key(|f| f.exec);
    report.seconds = start.elapsed().as_secs_f64();
    report
}

type RunFn = fn(&Scratch, &[u8], bool) -> Outcome;

fn worker(
    name: &str,
    run: RunFn,
    seeds: &[Vec<u8>],
    opts: &Options,
    job: usize,
    slot: &Slot,
    start: Instant,
) -> Report {
    let scratch = Scratch::new().expect("a scratch folder can be made");
    let mut report = Report::default();
    let mut exec = job as u64;
    while exec < opts.execs {
        let input = mutate::input(seeds, opts.seed, name, exec);
        slot.exec.store(exec, Ordering::SeqCst);
        slot.since
            .store(start.elapsed().as_nanos() as u64 + 1, Ordering::SeqCst);
        let t0 = Instant::now();
        IN_TARGET.with(|f| f.set(true));
        let result = catch_unwind(AssertUnwindSafe(|| {
            run(&scratch, &input, exec % VIA_FILE_EVERY == 0)
        }));
        IN_TARGET.with(|f| f.set(false));
        let took = t0.elapsed();
        slot.since.store(0, Ordering::SeqCst);
        report.execs += 1;
        report.slowest = report.slowest.max(took);
        match result {
            Ok(Outcome::Accepted) => report.accepted += 1,
            Ok(Outcome::Refused) => report.refused += 1,
            Err(_) => {
                let message = PANIC_MESSAGE
                    .with(|m| m.borrow_mut().take())
                    .unwrap_or_else(|| "(no message)".into());
                let f = failure(name, opts, exec, &input, format!("panic: {message}"));
                report.failures.push(f);
            }
        }
        if took > opts.timeout {
            let message = format!("slow: {took:?} > {:?}", opts.timeout);
            report
                .failures
                .push(failure(name, opts, exec, &input, message));
        }
        exec += opts.jobs.max(1) as u64;
    }
    report
}

/// Saves a failing input and prints the seed, the index, the message and
/// the input.
fn failure(name: &str, opts: &Options, exec: u64, input: &[u8], message: String) -> Failure {
    let file = save_input(&opts.out, name, opts.seed, exec, input);
    let shown: String = format!("{:?}", String::from_utf8_lossy(input))
        .chars()
        .take(4000)
        .collect();
    eprintln!(
        "FAIL {name} seed {} exec {exec}: {message}\n  input saved to {}\n  input: {shown}",
        opts.seed,
        file.display()
    );
    Failure {
        exec,
        message,
        file,
    }
}

/// Writes a failing input to `OUT/PARSER-seedS-execI.bin`.
pub fn save_input(out: &Path, parser: &str, seed: u64, exec: u64, input: &[u8]) -> PathBuf {
    let file = out.join(format!("{parser}-seed{seed}-exec{exec}.bin"));
    if let Err(e) = std::fs::create_dir_all(out).and_then(|()| std::fs::write(&file, input)) {
        eprintln!("could not save the input to {}: {e}", file.display());
    }
    file
}

/// A thread that stops the process when an execution runs past twice the
/// time limit (a parser that never returns cannot be unwound), after
/// saving its input.
fn spawn_watchdog(
    target: &Target,
    opts: &Options,
    seeds: &Arc<Vec<Vec<u8>>>,
    slots: &Arc<Vec<Slot>>,
    done: &Arc<AtomicU64>,
    start: Instant,
) -> std::thread::JoinHandle<()> {
    let (seeds, slots, done, opts) = (seeds.clone(), slots.clone(), done.clone(), opts.clone());
    let name = target.name;
    let limit = opts.timeout * 2;
    std::thread::spawn(move || {
        while done.load(Ordering::SeqCst) == 0 {
            std::thread::sleep(Duration::from_millis(50).min(limit));
            let now = start.elapsed().as_nanos() as u64 + 1;
            for slot in slots.iter() {
                let since = slot.since.load(Ordering::SeqCst);
                if since != 0 && now.saturating_sub(since) > limit.as_nanos() as u64 {
                    let exec = slot.exec.load(Ordering::SeqCst);
                    let input = mutate::input(&seeds, opts.seed, name, exec);
                    failure(
                        name,
                        &opts,
                        exec,
                        &input,
                        format!("hang: still running after {limit:?}"),
                    );
                    std::process::exit(3);
                }
            }
        }
    })
}

/// Runs input `exec` of a run alone (to reproduce a failure), after saving
/// it; the panic, if any, is not caught.
pub fn replay(target: &Target, opts: &Options, exec: u64) -> Outcome {
    let input = mutate::input(&(target.seeds)(), opts.seed, target.name, exec);
    let file = save_input(&opts.out, target.name, opts.seed, exec, &input);
    eprintln!(
        "input {exec} of {} (seed {}) saved to {}",
        target.name,
        opts.seed,
        file.display()
    );
    let scratch = Scratch::new().expect("a scratch folder can be made");
    (target.run)(&scratch, &input, exec % VIA_FILE_EVERY == 0)
}
