//! The sweep runner: measures each case of a [`SweepSpec`] on its processor
//! and hands back one row per case, as soon as it is measured.
//!
//! **Per case**: inputs from [`verify::inputs`](crate::verify::inputs); `prepare` (its time is the
//! row's `prepare_us` on static-graph processors); one untimed run whose
//! output is checked against the CPU f64 reference; `warmups` untimed runs,
//! and more until `warmup_ms` has passed (a GPU or a phone leaves its idle
//! clock); `repetitions` timed runs (the statistics); the output of the last
//! timed run is checked again. A result outside the tolerance at either
//! check gives a `failed` row without statistics: a wrong result is never timed as valid.
//!
//! **Timeouts**: each case runs in a worker thread that owns the processor's
//! backend for the duration. If the case outlives its `timeout_ms`, the runner
//! writes a `timeout` row, asks the worker to stop at its next run boundary,
//! and moves on; the processor is unusable until the worker hands the backend
//! back, and a later case on it first waits (up to its own timeout) for that.
//!
//! **Microbenchmarks**: copies, submit and sync are the backend's own
//! ([`Backend::microbench`], one or more samples per call, called until
//! there are `repetitions` samples and, for short ones, up to 64 or 20 ms
//! of them: see [`MICRO_MAX_SAMPLES`]). The others are written once here
//! on top of [`Gemm`](crate::Gemm), so every backend gets them, one module
//! each: `graph_prepare`, `stage` (the staged copies), `op_overhead`
//! and `launch_overhead_after_cpu` (the host's cost around one operator), and
//! `bandwidth`: `bandwidth_alone` times a memory-bound GEMV (`1×K×N`,
//! weights of `bytes`), `bandwidth_concurrent` times the same GEMV while
//! the `peer` processor streams its own GEMV in a loop (a
//! `BackgroundStream`; a discrete GPU peer of a processor on host memory
//! copies that GEMV's weights from page-locked host memory at every run:
//! its traffic on the memory the timed processor reads).
//!
//! The runner (this module) owns the processors and the worker threads;
//! `case` measures one GEMM case and `micro` dispatches a
//! microbenchmark and holds the sampling rules they share.

mod background_stream;
mod bandwidth;
mod case;
mod graph_prepare;
mod launch_overhead_after_cpu;
mod micro;
mod op_overhead;
mod stage;

use std::collections::HashSet;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use hetero_plan::{
    MeasurementRow, MicrobenchKind, MicrobenchRequest, MicrobenchRow, Processor, RowStatus,
    RunParams, SweepCase, SweepSpec, Timing,
};

use crate::protocol::{AgentLine, Done, MicrobenchLine, bench_name};
use crate::{Backend, Error, Registry, conditions, id_matches};

pub use background_stream::HOST_WEIGHTS_NOTE;
pub use bandwidth::DEFAULT_STREAM_BYTES;
pub use case::{MAX_ROTATION_COPIES, measure, rotation_copies};
pub use micro::{MICRO_MAX_SAMPLES, MICRO_MIN_US};

use micro::microbench;
#[cfg(test)]
use {background_stream::stream_copies, micro::enough_samples};

/// What a worker hands back: the backends it borrowed, by slot, and its result.
type Returned = (Vec<(usize, Box<dyn Backend>)>, Outcome);

enum Outcome {
    Measurement(MeasurementRow),
    Microbench(MicrobenchLine),
    /// The job panicked; the message.
    Panicked(String),
}

enum State {
    Idle(Box<dyn Backend>),
    /// Still owned by the worker of a timed-out case (its id).
    Away(Rc<Receiver<Returned>>, String),
    /// Its worker died; the reason.
    Lost(String),
}

struct Slot {
    processor: Processor,
    state: State,
}

/// How a job could not run.
enum Refused {
    Timeout,
    Busy(String),
    Lost(String),
}

/// Which cases to run.
#[derive(Debug, Clone, Default)]
pub struct SweepOptions {
    /// Keep only processors matching one of these (`cpu:0`, `opencl:*`).
    pub filter: Option<Vec<String>>,
    /// Case ids already measured (a resumed sweep).
    pub skip: HashSet<String>,
}

/// Runs sweeps over a set of processors.
pub struct Sweeper {
    slots: Vec<Slot>,
}

impl Sweeper {
    /// A runner over these backends.
    pub fn new(backends: Vec<Box<dyn Backend>>) -> Sweeper {
        Sweeper {
            slots: backends
                .into_iter()
                .map(|b| Slot {
                    processor: b.processor().clone(),
                    state: State::Idle(b),
                })
                .collect(),
        }
    }

    /// A runner over every processor a registry opened.
    pub fn from_registry(reg: Registry) -> Sweeper {
        Sweeper::new(reg.backends)
    }

    /// The processors, in order.
    pub fn processors(&self) -> Vec<Processor> {
        self.slots.iter().map(|s| s.processor.clone()).collect()
    }

    fn index(&self, id: &str) -> Option<usize> {
        self.slots.iter().position(|s| s.processor.id == id)
    }

    /// Checks that every processor a spec names is here and that each
    /// microbenchmark has the fields it needs. The error names the field
    /// (`cases[2].processor`).
    pub fn check_spec(&self, spec: &SweepSpec) -> Result<(), Error> {
        let known: Vec<String> = self.slots.iter().map(|s| s.processor.id.clone()).collect();
        let missing = |field: String, id: &str| Error::BadRequest {
            field,
            message: format!(
                "no processor `{id}` here; `probe` lists: {}",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            ),
        };
        for (i, c) in spec.cases.iter().enumerate() {
            if self.index(&c.processor).is_none() {
                return Err(missing(format!("cases[{i}].processor"), &c.processor));
            }
        }
        for (i, b) in spec.microbench.iter().enumerate() {
            let field = |f: &str| format!("microbench[{i}].{f}");
            if self.index(&b.processor).is_none() {
                return Err(missing(field("processor"), &b.processor));
            }
            let need = |what: &str| Error::BadRequest {
                field: field(what),
                message: format!("`{}` needs `{what}`", bench_name(b.bench)),
            };
            match b.bench {
                k if k.is_transfer() && b.bytes.is_none() => {
                    return Err(need("bytes"));
                }
                k if k.needs_peer() => match &b.peer {
                    None => return Err(need("peer")),
                    Some(p) if self.index(p).is_none() => return Err(missing(field("peer"), p)),
                    _ => {}
                },
                MicrobenchKind::GraphPrepare if b.shape.is_none() => {
                    return Err(need("shape"));
                }
                _ => {}
            }
            if b.bytes == Some(0) {
                return Err(Error::BadRequest {
                    field: field("bytes"),
                    message: "must be at least 1".into(),
                });
            }
        }
        Ok(())
    }

    /// Runs every case and microbenchmark of `spec` in order, calling `emit`
    /// with each row as soon as it is measured. Returns the tally.
    pub fn run(
        &mut self,
        spec: &SweepSpec,
        opts: &SweepOptions,
        emit: &mut dyn FnMut(&AgentLine) -> std::io::Result<()>,
    ) -> std::io::Result<Done> {
        let started = Instant::now();
        let mut done = Done::default();
        let keep = |id: &str, processor: &str| {
            !opts.skip.contains(id)
                && opts
                    .filter
                    .as_ref()
                    .is_none_or(|f| f.iter().any(|p| id_matches(p, processor)))
        };
        for case in &spec.cases {
            if !keep(&case.id, &case.processor) {
                done.skipped += 1;
                continue;
            }
            let run = case.run.unwrap_or(spec.run);
            let row = self.run_case(case, &run);
            tally(&mut done, row.status);
            emit(&AgentLine::Measurement(row))?;
        }
        for req in &spec.microbench {
            if !keep(&req.id, &req.processor) {
                done.skipped += 1;
                continue;
            }
            let line = self.run_microbench(req, &spec.run);
            tally(&mut done, line.row.status);
            emit(&AgentLine::Microbench(line))?;
        }
        done.seconds = started.elapsed().as_secs_f64();
        Ok(done)
    }

    /// Measures one GEMM case, with its timeout.
    pub fn run_case(&mut self, case: &SweepCase, run: &RunParams) -> MeasurementRow {
        let Some(idx) = self.index(&case.processor) else {
            let mut row = base_row(case, Timing::Real, run);
            row.message = Some(format!("no processor `{}` here", case.processor));
            return row;
        };
        let timing = self.slots[idx].processor.timing();
        let (c, r) = (case.clone(), *run);
        let job = move |b: &mut [Box<dyn Backend>], cancel: &AtomicBool| {
            Outcome::Measurement(measure(&mut *b[0], &c, &r, cancel))
        };
        let timeout = Duration::from_millis(run.timeout_ms);
        let mut row = base_row(case, timing, run);
        match self.run_job(&[idx], timeout, &case.id, job) {
            Ok(Outcome::Measurement(measured)) => return measured,
            Ok(Outcome::Microbench(_)) => unreachable!("a case job returns a measurement"),
            Ok(Outcome::Panicked(msg)) => {
                row.message = Some(format!("the backend panicked: {msg}"));
            }
            Err(refused) => {
                (row.status, row.message) = refusal(refused, run.timeout_ms, &case.processor);
            }
        }
        row
    }

    /// Runs one microbenchmark, with the timeout of `run`.
    pub fn run_microbench(&mut self, req: &MicrobenchRequest, run: &RunParams) -> MicrobenchLine {
        let Some(idx) = self.index(&req.processor) else {
            let mut line = base_line(req, Timing::Real);
            line.row.message = Some(format!("no processor `{}` here", req.processor));
            return line;
        };
        let proc = &self.slots[idx].processor;
        let timing = proc.timing();
        let mut idxs = vec![idx];
        if req.bench.needs_peer() {
            let unsupported = |msg: String| {
                let mut line = base_line(req, timing);
                line.row.status = RowStatus::Unsupported;
                line.row.message = Some(msg);
                line
            };
            let Some(peer) = req.peer.as_deref() else {
                return unsupported(format!(
                    "{} needs a `peer` processor",
                    bench_name(req.bench)
                ));
            };
            if peer == req.processor {
                return unsupported(format!(
                    "needs two different processors, got `{peer}` twice; on a machine with one CPU group, split it with --cpu-groups (e.g. \"0;1\")"
                ));
            }
            let Some(pidx) = self.index(peer) else {
                return unsupported(format!("no peer processor `{peer}` here"));
            };
            if proc.simulated || self.slots[pidx].processor.simulated {
                return unsupported(
                    "a simulated processor has no memory traffic to share; pair two real processors"
                        .into(),
                );
            }
            idxs.push(pidx);
        }
        let (q, r) = (req.clone(), *run);
        let job = move |b: &mut [Box<dyn Backend>], cancel: &AtomicBool| {
            Outcome::Microbench(microbench(b, &q, &r, cancel))
        };
        let timeout = Duration::from_millis(run.timeout_ms);
        let mut line = base_line(req, timing);
        match self.run_job(&idxs, timeout, &req.id, job) {
            Ok(Outcome::Microbench(measured)) => return measured,
            Ok(Outcome::Measurement(_)) => unreachable!("a microbench job returns a microbench"),
            Ok(Outcome::Panicked(msg)) => {
                line.row.message = Some(format!("the backend panicked: {msg}"));
            }
            Err(refused) => {
                (line.row.status, line.row.message) =
                    refusal(refused, run.timeout_ms, &req.processor);
            }
        }
        line
    }

    /// Makes sure a slot's backend is home, waiting (up to `timeout`) for
    /// the worker of a timed-out case to hand it back.
    fn reclaim(&mut self, idx: usize, timeout: Duration) -> Result<(), Refused> {
        let (rx, case) = match &self.slots[idx].state {
            State::Idle(_) => return Ok(()),
            State::Lost(why) => return Err(Refused::Lost(why.clone())),
            State::Away(rx, case) => (rx.clone(), case.clone()),
        };
        let got = rx.recv_timeout(timeout);
        match got {
            Ok((backends, _stale)) => {
                for (i, b) in backends {
                    self.slots[i].state = State::Idle(b);
                }
                Ok(())
            }
            Err(RecvTimeoutError::Timeout) => Err(Refused::Busy(case)),
            Err(RecvTimeoutError::Disconnected) => {
                let why = format!("its worker died during {case}");
                for s in &mut self.slots {
                    if matches!(&s.state, State::Away(r, _) if Rc::ptr_eq(r, &rx)) {
                        s.state = State::Lost(why.clone());
                    }
                }
                Err(Refused::Lost(why))
            }
        }
    }

    /// Runs `job` in a worker thread that owns the backends of `idxs`.
    fn run_job(
        &mut self,
        idxs: &[usize],
        timeout: Duration,
        label: &str,
        job: impl FnOnce(&mut [Box<dyn Backend>], &AtomicBool) -> Outcome + Send + 'static,
    ) -> Result<Outcome, Refused> {
        for &i in idxs {
            self.reclaim(i, timeout)?;
        }
        let mut borrowed: Vec<(usize, Box<dyn Backend>)> = Vec::new();
        for &i in idxs {
            let state = std::mem::replace(&mut self.slots[i].state, State::Lost(String::new()));
            let State::Idle(b) = state else {
                unreachable!("reclaimed above")
            };
            borrowed.push((i, b));
        }
        let cancel = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel::<Returned>();
        let c = cancel.clone();
        let spawned = std::thread::Builder::new()
            .name("hetero-case".into())
            .spawn(move || {
                let (slots, mut backends): (Vec<usize>, Vec<Box<dyn Backend>>) =
                    borrowed.into_iter().unzip();
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    job(&mut backends, &c)
                }));
                let outcome = outcome.unwrap_or_else(|p| {
                    let msg = p
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_else(|| "unknown panic".into());
                    Outcome::Panicked(msg)
                });
                let _ = tx.send((slots.into_iter().zip(backends).collect(), outcome));
            });
        if let Err(e) = spawned {
            let why = format!("could not start a worker thread: {e}");
            for &i in idxs {
                self.slots[i].state = State::Lost(why.clone());
            }
            return Err(Refused::Lost(why));
        }
        match rx.recv_timeout(timeout) {
            Ok((backends, outcome)) => {
                for (i, b) in backends {
                    self.slots[i].state = State::Idle(b);
                }
                Ok(outcome)
            }
            Err(RecvTimeoutError::Timeout) => {
                cancel.store(true, Ordering::Relaxed);
                let rx = Rc::new(rx);
                for &i in idxs {
                    self.slots[i].state =
                        State::Away(rx.clone(), format!("timed-out case `{label}`"));
                }
                Err(Refused::Timeout)
            }
            Err(RecvTimeoutError::Disconnected) => {
                let why = "its worker thread died".to_string();
                for &i in idxs {
                    self.slots[i].state = State::Lost(why.clone());
                }
                Err(Refused::Lost(why))
            }
        }
    }
}

fn tally(done: &mut Done, status: RowStatus) {
    done.rows += 1;
    match status {
        RowStatus::Ok => done.ok += 1,
        RowStatus::Failed => done.failed += 1,
        RowStatus::Unsupported => done.unsupported += 1,
        RowStatus::Timeout => done.timeout += 1,
        RowStatus::Error => done.error += 1,
    }
}

fn refusal(r: Refused, timeout_ms: u64, processor: &str) -> (RowStatus, Option<String>) {
    match r {
        Refused::Timeout => (
            RowStatus::Timeout,
            Some(format!(
                "abandoned after {timeout_ms} ms; `{processor}` is unusable until that run returns"
            )),
        ),
        Refused::Busy(case) => (
            RowStatus::Timeout,
            Some(format!(
                "`{processor}` was still busy with {case} after {timeout_ms} ms"
            )),
        ),
        Refused::Lost(why) => (
            RowStatus::Error,
            Some(format!("`{processor}` is unusable: {why}")),
        ),
    }
}

/// A row for `case` with status `error` and nothing measured yet.
fn base_row(case: &SweepCase, timing: Timing, run: &RunParams) -> MeasurementRow {
    let (m, k, n) = case.shape.mkn();
    MeasurementRow {
        case_id: case.id.clone(),
        processor: case.processor.clone(),
        m,
        k,
        n,
        dtype: case.dtype,
        order: case.order,
        weights: case.weights,
        status: RowStatus::Error,
        timing,
        warmups: run.warmups,
        repetitions: run.repetitions,
        median_us: None,
        min_us: None,
        p90_us: None,
        cv: None,
        mean_us: None,
        host_median_us: None,
        launch_us: None,
        prepare_us: None,
        verified: false,
        rel_err: None,
        tolerance: None,
        message: None,
        conditions: conditions::read(None),
    }
}

fn base_line(req: &MicrobenchRequest, timing: Timing) -> MicrobenchLine {
    MicrobenchLine {
        row: MicrobenchRow {
            case_id: req.id.clone(),
            processor: req.processor.clone(),
            bench: req.bench,
            bytes: req.bytes,
            peer: req.peer.clone(),
            shape: req.shape,
            status: RowStatus::Error,
            timing,
            stats: None,
            gbps: None,
            stream: None,
            peer_stream: None,
            message: None,
            conditions: conditions::read(None),
        },
        note: None,
    }
}

#[cfg(test)]
mod tests;
