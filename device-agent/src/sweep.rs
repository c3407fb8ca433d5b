//! The sweep runner: measures each case of a [`SweepSpec`] on its processor
//! and hands back one row per case, as soon as it is measured.
//!
//! **Per case**: inputs from [`verify::inputs`]; `prepare` (its time is the
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
//! of them: see [`MICRO_MAX_SAMPLES`]). Graph prepare and the two bandwidth
//! benchmarks are written once here on top of [`Gemm`], so every backend gets
//! them: `bandwidth_alone` times a memory-bound GEMV (`1×K×N`, weights of
//! `bytes`), `bandwidth_concurrent` times the same GEMV while the `peer`
//! processor streams its own GEMV in a loop (a discrete GPU peer of a
//! processor on host memory copies that GEMV's weights from page-locked
//! host memory at every run: its traffic on the memory the timed
//! processor reads).

use std::collections::HashSet;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use hetero_plan::{
    DType, GemmShape, MeasurementRow, MicrobenchKind, MicrobenchRequest, MicrobenchRow,
    OperandOrder, Processor, ProcessorApi, RowStatus, RunParams, Stats, SweepCase, SweepSpec,
    Timing, WeightMode,
};

use crate::protocol::{AgentLine, Done, MicrobenchLine, bench_name};
use crate::{Backend, Error, Gemm, GemmSpec, Registry, conditions, id_matches, verify};

/// Weight bytes streamed by the bandwidth GEMV when a request gives none.
pub const DEFAULT_STREAM_BYTES: u64 = 64 << 20;

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
            message: None,
            conditions: conditions::read(None),
        },
        note: None,
    }
}

/// Measures one case on `backend` (in the worker thread).
pub fn measure(
    backend: &mut dyn Backend,
    case: &SweepCase,
    run: &RunParams,
    cancel: &AtomicBool,
) -> MeasurementRow {
    let proc = backend.processor().clone();
    let mut row = base_row(case, proc.timing(), run);
    let result = measure_into(backend, &proc, case, run, cancel, &mut row);
    if let Err(e) = result {
        row.status = match e {
            Error::Unsupported { .. } => RowStatus::Unsupported,
            Error::Timeout { .. } => RowStatus::Timeout,
            _ => RowStatus::Error,
        };
        row.message = Some(e.to_string());
        row.median_us = None;
        row.min_us = None;
        row.p90_us = None;
        row.cv = None;
        row.mean_us = None;
        row.host_median_us = None;
        row.verified = false;
    }
    row.conditions = backend.conditions();
    row
}

fn measure_into(
    backend: &mut dyn Backend,
    proc: &Processor,
    case: &SweepCase,
    run: &RunParams,
    cancel: &AtomicBool,
    row: &mut MeasurementRow,
) -> Result<(), Error> {
    if !proc.capabilities.dtypes.contains(&case.dtype) {
        let has: Vec<&str> = proc
            .capabilities
            .dtypes
            .iter()
            .map(|d| d.as_str())
            .collect();
        return Err(Error::unsupported(
            &proc.id,
            format!("dtype {} (it runs {})", case.dtype, has.join(", ")),
        ));
    }
    let shape = case.shape;
    let (m, k, n) = shape.mkn();
    let spec = GemmSpec {
        shape,
        dtype: case.dtype,
        order: case.order,
        weights: case.weights,
    };
    let (a, w) = verify::inputs(&shape, 0);
    let mut g = backend.prepare(&spec, &w)?;
    row.prepare_us = g.prepare_us();
    let tolerance = backend.tolerance(case.dtype, k);
    row.tolerance = Some(tolerance);
    let mut c = vec![0f32; m as usize * n as usize];
    g.write_input(&a)?;
    g.execute()?;
    g.read_output(&mut c)?;
    let first = verify::check(&shape, &a, &w, &c);
    row.rel_err = Some(first.rel_err);
    if !first.passes(tolerance) {
        row.status = RowStatus::Failed;
        row.message = Some(wrong(&first, tolerance, "first run"));
        return Ok(());
    }
    // With `rotate_weights`, copies of the case run in turn (the first is
    // the one checked above), unless there would be too many: then evict.
    let mut graphs = vec![g];
    if run.cold_cache && run.rotate_weights {
        let weight_bytes = k as u64 * n as u64 * case.dtype.weight_bits() as u64 / 8;
        let copy_bytes = hetero_plan::predictor::gemm_bytes(shape, case.dtype) as u64;
        let target = crate::evict::rotation_bytes() as u64;
        let copies = rotation_copies(weight_bytes, copy_bytes, target).unwrap_or(1);
        for _ in 1..copies {
            check_cancel(cancel, run)?;
            let mut g = backend.prepare(&spec, &w)?;
            g.write_input(&a)?;
            graphs.push(g);
        }
    }
    let copies = graphs.len();
    let rotate = copies > 1;
    let evict = run.cold_cache && !rotate;
    // Every copy runs before the timed runs, so each timed run finds its
    // copy last run `copies - 1` runs before.
    let warm = RunParams {
        warmups: run.warmups.max(copies as u32),
        ..*run
    };
    let mut next = 0usize;
    warm_up(&warm, proc.simulated, cancel, || {
        let i = next % copies;
        next += 1;
        graphs[i].execute().map(drop)
    })?;
    // The next copy in turn, its input written again (outside the timer)
    // when rotating, as the operator before it leaves its input cached.
    let mut turn = |graphs: &mut [Box<dyn Gemm>]| -> Result<usize, Error> {
        let i = next % copies;
        next += 1;
        if rotate {
            graphs[i].write_input(&a)?;
        }
        Ok(i)
    };
    let mut best = Vec::with_capacity(run.repetitions as usize);
    let mut host = Vec::with_capacity(run.repetitions as usize);
    let mut device_timer = false;
    // With the kernel timer, each timed run is followed by an ordinary one
    // (same caches): the difference of their medians is the launch path
    // the kernel-only times leave out, as the device saw it.
    let mut ordinary = Vec::new();
    let mut last_run = 0;
    for _ in 0..run.repetitions {
        check_cancel(cancel, run)?;
        let i = turn(&mut graphs)?;
        if evict {
            graphs[i].evict_caches()?;
        }
        let kernels = if run.kernel_timer {
            graphs[i].execute_kernel_only()?
        } else {
            None
        };
        last_run = i;
        let t = match kernels {
            Some(k) => {
                let j = if rotate { turn(&mut graphs)? } else { i };
                if evict {
                    graphs[j].evict_caches()?;
                }
                ordinary.push(graphs[j].execute()?.best_us());
                last_run = j;
                k
            }
            None => graphs[i].execute()?,
        };
        device_timer |= t.device_us.is_some();
        best.push(t.best_us());
        host.push(t.host_us);
    }
    let g = &mut graphs[last_run];
    g.read_output(&mut c)?;
    let last = verify::check(&shape, &a, &w, &c);
    row.rel_err = Some(first.rel_err.max(last.rel_err));
    if !last.passes(tolerance) {
        row.status = RowStatus::Failed;
        row.message = Some(wrong(&last, tolerance, "last timed run"));
        return Ok(());
    }
    let stats = Stats::from_samples(&best).ok_or_else(|| Error::BadRequest {
        field: "repetitions".into(),
        message: "must be at least 1".into(),
    })?;
    row.set_stats(&stats);
    if device_timer && !proc.simulated {
        row.host_median_us = Stats::from_samples(&host).map(|s| s.median_us);
    }
    // Only when every timed run left its launch out: a row is kernel-only
    // or ordinary, never both.
    if ordinary.len() == best.len()
        && let Some(o) = Stats::from_samples(&ordinary)
    {
        row.launch_us = Some(o.median_us - stats.median_us);
    }
    row.verified = true;
    row.status = RowStatus::Ok;
    Ok(())
}

/// The most copies [`RunParams::rotate_weights`] prepares of one case.
pub const MAX_ROTATION_COPIES: u64 = 1024;

/// How many copies of a case (`weight_bytes` of weights, `copy_bytes` with
/// its input and output) to run in turn so that between two runs of one
/// copy the others read at least `target` bytes of weights; `None` where
/// that would take more than [`MAX_ROTATION_COPIES`], or more than twice
/// `target` and one copy's weights in all, and the case evicts the caches
/// instead: weights too small to fill the target, or activations that
/// dwarf them (a long prefill, where a GEMM is bound by its arithmetic
/// more than by reading its weights).
pub fn rotation_copies(weight_bytes: u64, copy_bytes: u64, target: u64) -> Option<usize> {
    let copies = (target.div_ceil(weight_bytes.max(1)) + 1).max(2);
    let total = copies.saturating_mul(copy_bytes.max(weight_bytes));
    let most = target.saturating_add(weight_bytes).saturating_mul(2);
    (copies <= MAX_ROTATION_COPIES && total <= most).then_some(copies as usize)
}

fn wrong(c: &verify::Check, tolerance: f64, when: &str) -> String {
    format!(
        "wrong result after the {when}: error {:.3e} > tolerance {:.3e} at C[{},{}] ({} outputs checked)",
        c.rel_err, tolerance, c.worst.0, c.worst.1, c.sampled
    )
}

/// Runs a microbenchmark (in the worker thread). `backends[1]` is the peer
/// of a concurrent-bandwidth run.
fn microbench(
    backends: &mut [Box<dyn Backend>],
    req: &MicrobenchRequest,
    run: &RunParams,
    cancel: &AtomicBool,
) -> MicrobenchLine {
    let proc = backends[0].processor().clone();
    let mut line = base_line(req, proc.timing());
    let result = match req.bench {
        MicrobenchKind::GraphPrepare => graph_prepare(&mut *backends[0], req, run, cancel),
        MicrobenchKind::StageIn | MicrobenchKind::StageOut | MicrobenchKind::StageOutAw => {
            stage(&mut *backends[0], req, run, cancel).map(|(s, note)| {
                line.note = Some(note);
                s
            })
        }
        MicrobenchKind::OpAlone => {
            op_alone(&mut *backends[0], req, run, cancel).map(|(s, note)| {
                line.note = Some(note);
                s
            })
        }
        MicrobenchKind::OpOverhead
        | MicrobenchKind::OpOverheadBlock
        | MicrobenchKind::OpOverheadPoll => op_overhead(&mut *backends[0], req.bench, run, cancel)
            .map(|(s, note)| {
                line.note = Some(note);
                s
            }),
        MicrobenchKind::OpOverheadAfter => {
            op_overhead_after(backends, run, cancel).map(|(s, note)| {
                line.note = Some(note);
                s
            })
        }
        MicrobenchKind::BandwidthAlone | MicrobenchKind::BandwidthConcurrent => {
            stream(backends, req, run, cancel).map(|(s, note)| {
                line.note = note;
                s
            })
        }
        _ => backend_samples(&mut *backends[0], req, run, cancel),
    };
    match result {
        Ok(samples) => match Stats::from_samples(&samples) {
            Some(stats) => {
                line.row.status = RowStatus::Ok;
                let bytes = match req.bench {
                    k if k.is_transfer() => req.bytes,
                    MicrobenchKind::BandwidthAlone | MicrobenchKind::BandwidthConcurrent => {
                        line.row.bytes
                    }
                    _ => None,
                };
                if let Some(b) = bytes {
                    line.row.gbps = Some(b as f64 / (stats.median_us * 1e3));
                }
                line.row.stats = Some(stats);
            }
            None => {
                line.row.message = Some("no samples".into());
            }
        },
        Err(e) => {
            line.row.status = match e {
                Error::Unsupported { .. } => RowStatus::Unsupported,
                Error::Timeout { .. } => RowStatus::Timeout,
                _ => RowStatus::Error,
            };
            line.row.message = Some(e.to_string());
        }
    }
    if line.note.is_none()
        && proc.api == ProcessorApi::Cpu
        && matches!(req.bench, MicrobenchKind::CopyH2d | MicrobenchKind::CopyD2h)
    {
        line.note = Some(
            "cpu: memcpy between two host buffers on the group's cores (a CPU has no device memory)"
                .into(),
        );
    }
    line.row.conditions = backends[0].conditions();
    line
}

fn check_cancel(cancel: &AtomicBool, run: &RunParams) -> Result<(), Error> {
    if cancel.load(Ordering::Relaxed) {
        Err(Error::Timeout { ms: run.timeout_ms })
    } else {
        Ok(())
    }
}

/// The untimed runs before a timed series: `f` at least `run.warmups`
/// times, then again until `run.warmup_ms` has passed since the first call
/// (count only on a simulated processor, whose times do not depend on a
/// clock). Stops with a timeout when the case is cancelled.
fn warm_up(
    run: &RunParams,
    simulated: bool,
    cancel: &AtomicBool,
    mut f: impl FnMut() -> Result<(), Error>,
) -> Result<(), Error> {
    let least = Duration::from_millis(if simulated { 0 } else { run.warmup_ms });
    let start = Instant::now();
    let mut runs = 0u32;
    while runs < run.warmups || start.elapsed() < least {
        check_cancel(cancel, run)?;
        f()?;
        runs += 1;
    }
    Ok(())
}

/// The most samples a short microbenchmark takes. A microbenchmark's
/// samples are enough once there are `repetitions` of them and either this
/// many or [`MICRO_MIN_US`] of timed work (count only on a simulated
/// processor). A fixed cost of 10-20 µs scatters by a cv of 5-13 % per
/// sample on a GPU host (an H100's staged 4 KiB output: 14.6-22.1 µs in 7
/// samples), and the solver charges it to every operator of a plan. A
/// median of 7 can move it by several µs; 64 samples of a 20 µs benchmark
/// cost about 1.3 ms.
pub const MICRO_MAX_SAMPLES: usize = 64;
/// A short microbenchmark takes samples until they add up to this much
/// timed work, µs, or it has [`MICRO_MAX_SAMPLES`].
pub const MICRO_MIN_US: f64 = 20_000.0;

/// The rule of [`MICRO_MAX_SAMPLES`] and [`MICRO_MIN_US`].
fn enough_samples(samples: &[f64], run: &RunParams, simulated: bool) -> bool {
    let want = run.repetitions.max(1) as usize;
    samples.len() >= want
        && (simulated
            || samples.len() >= MICRO_MAX_SAMPLES
            || samples.iter().sum::<f64>() >= MICRO_MIN_US)
}

/// Calls the backend's own microbenchmark until it has enough samples
/// ([`enough_samples`]); a call that returns several keeps them all.
fn backend_samples(
    b: &mut dyn Backend,
    req: &MicrobenchRequest,
    run: &RunParams,
    cancel: &AtomicBool,
) -> Result<Vec<f64>, Error> {
    let simulated = b.processor().simulated;
    warm_up(run, simulated, cancel, || b.microbench(req).map(drop))?;
    let mut samples = Vec::new();
    while !enough_samples(&samples, run, simulated) {
        check_cancel(cancel, run)?;
        let got = b.microbench(req)?;
        if got.is_empty() {
            return Err(Error::backend(
                &req.processor,
                "microbenchmark returned no sample",
            ));
        }
        samples.extend(got);
    }
    Ok(samples)
}

fn preferred_dtype(proc: &Processor, order: &[DType]) -> Result<DType, Error> {
    order
        .iter()
        .copied()
        .find(|d| proc.capabilities.dtypes.contains(d))
        .or_else(|| proc.capabilities.dtypes.first().copied())
        .ok_or_else(|| Error::unsupported(&proc.id, "any dtype"))
}

/// The GEMM a microbenchmark runs on `proc`: static weights, in the type
/// a profile measures it in by default ([`Processor::default_dtype`]: f32
/// on a CPU, the cpu backend or an OpenCL CPU device such as PoCL, else
/// f16 where the processor has it). The staged copies convert to that
/// type, so it must be the one the plan runs.
fn bench_spec(proc: &Processor, shape: GemmShape, order: OperandOrder) -> Result<GemmSpec, Error> {
    Ok(GemmSpec {
        shape,
        dtype: proc
            .default_dtype()
            .ok_or_else(|| Error::unsupported(&proc.id, "any dtype"))?,
        order,
        weights: WeightMode::Static,
    })
}

fn graph_prepare(
    b: &mut dyn Backend,
    req: &MicrobenchRequest,
    run: &RunParams,
    cancel: &AtomicBool,
) -> Result<Vec<f64>, Error> {
    let proc = b.processor().clone();
    if !proc.capabilities.static_graphs {
        return Err(Error::unsupported(
            &proc.id,
            "graph prepare (not a static-graph processor)",
        ));
    }
    let shape = req.shape.ok_or_else(|| Error::BadRequest {
        field: "shape".into(),
        message: "graph_prepare needs `shape`".into(),
    })?;
    let spec = bench_spec(&proc, shape, OperandOrder::WtAt)?;
    let (_, w) = verify::inputs(&shape, 0);
    let mut samples = Vec::new();
    for i in 0..run.warmups + run.repetitions.max(1) {
        check_cancel(cancel, run)?;
        let g = b.prepare(&spec, &w)?;
        let us = g.prepare_us().ok_or_else(|| {
            Error::backend(
                &proc.id,
                "a static-graph processor reported no prepare time",
            )
        })?;
        if i >= run.warmups {
            samples.push(us);
        }
    }
    Ok(samples)
}

/// `stage_in` / `stage_out` / `stage_out_aw`: one prepared GEMM's
/// `write_input` or `read_output` of `bytes` of f32 values, from or into
/// host memory of the kind the runtime's pool uses
/// ([`Backend::alloc_host`], else the heap), timed by the host clock around
/// the call alone. The input side is `R×1024×64` and the output side
/// `R×64×1024`, with `R = bytes/4096` rows (at least one), in `wt_at`
/// order (`aw` for `stage_out_aw`, whose output a backend may transpose on
/// the way out; CUDA's is transposed behind the kernel instead) and in
/// the processor's 16-bit type where it has one, like the GPU sweeps. Each
/// sample comes from one round of the runtime's sequence (`write_input`,
/// `execute`, `read_output`) with only the staged call timed, for as many
/// rounds as [`enough_samples`] asks. The product
/// of the last round is checked against the f64 reference, so a wrong data
/// path is never recorded. Returns the samples and a note saying which
/// memory was used.
fn stage(
    b: &mut dyn Backend,
    req: &MicrobenchRequest,
    run: &RunParams,
    cancel: &AtomicBool,
) -> Result<(Vec<f64>, String), Error> {
    let proc = b.processor().clone();
    let bytes = needs_bytes(req)?;
    const ROW: u32 = 1024;
    const OTHER: u32 = 64;
    let rows = ((bytes / 4 / ROW as u64).max(1)).min(u32::MAX as u64) as u32;
    let input = req.bench == MicrobenchKind::StageIn;
    let shape = if input {
        GemmShape::new(rows, ROW, OTHER)
    } else {
        GemmShape::new(rows, OTHER, ROW)
    }
    .expect("non-zero");
    let order = if req.bench == MicrobenchKind::StageOutAw {
        OperandOrder::Aw
    } else {
        OperandOrder::WtAt
    };
    let spec = bench_spec(&proc, shape, order)?;
    let (a, w) = verify::inputs(&shape, 0);
    let mut g = b.prepare(&spec, &w)?;
    // The staged side lives in the memory the runtime's pool would use; the
    // other side is ordinary memory and untimed.
    let out_len = rows as usize * shape.n.get() as usize;
    let staged_len = if input { a.len() } else { out_len };
    let staged = crate::HostBuf::for_backend(b, staged_len);
    let memory = memory_note(&proc, &staged);
    let note = format!(
        "{} of {staged_len} f32 values ({} bytes) through a {} {} {} GEMM, {memory}",
        if input { "write_input" } else { "read_output" },
        staged_len * 4,
        spec.shape,
        spec.dtype,
        spec.order
    );
    let (mut src, mut dst) = if input {
        (staged, crate::HostBuf::heap(out_len))
    } else {
        (crate::HostBuf::heap(a.len()), staged)
    };
    src.copy_from_slice(&a);
    // Each round is the runtime's sequence, write_input → execute →
    // read_output; only the staged call is timed. Back-to-back copies
    // alone were seen 2-7 % faster than the same copies between GEMMs.
    warm_up(run, proc.simulated, cancel, || {
        g.write_input(&src)?;
        g.execute()?;
        g.read_output(&mut dst)
    })?;
    // With cold caches, each round starts from them, as the sweep's GEMM
    // runs do, on unified memory only: there the copies go through the
    // host caches the eviction empties, and a runtime that runs a layer's
    // other operators in between finds its buffers out of them (a 64-token
    // prefill's copies ran 2-4x the warm rounds' line on a 2-core VM).
    // An eviction takes milliseconds, so cold rounds stop at the run's
    // repetitions.
    let cold = run.cold_cache && proc.capabilities.unified_memory;
    let done = |s: &[f64]| {
        if cold {
            s.len() >= run.repetitions.max(1) as usize
        } else {
            enough_samples(s, run, proc.simulated)
        }
    };
    let mut samples = Vec::new();
    while !done(&samples) {
        check_cancel(cancel, run)?;
        if cold {
            g.evict_caches()?;
        }
        let t = Instant::now();
        g.write_input(&src)?;
        let t_in = t.elapsed();
        g.execute()?;
        let t = Instant::now();
        g.read_output(&mut dst)?;
        let t_out = t.elapsed();
        samples.push(if input { t_in } else { t_out }.as_secs_f64() * 1e6);
    }
    check_product(b, &spec, &a, &w, &dst, "staged")?;
    Ok((samples, note))
}

/// `bytes` of a microbenchmark that needs it.
fn needs_bytes(req: &MicrobenchRequest) -> Result<u64, Error> {
    req.bytes.ok_or_else(|| Error::BadRequest {
        field: "bytes".into(),
        message: format!("{} needs `bytes`", bench_name(req.bench)),
    })
}

/// Which host memory a microbenchmark's buffer is, for its note.
fn memory_note(proc: &Processor, buf: &crate::HostBuf) -> String {
    if buf.is_backend_memory() {
        format!("{}: host memory of the processor (alloc_host)", proc.id)
    } else {
        "heap memory".to_string()
    }
}

/// Checks a microbenchmark GEMM's product `c` against the f64 reference of
/// `a`·`w`, so that a wrong data path is never recorded; `what` names the
/// GEMM in the error.
fn check_product(
    b: &dyn Backend,
    spec: &GemmSpec,
    a: &[f32],
    w: &[f32],
    c: &[f32],
    what: &str,
) -> Result<(), Error> {
    let check = verify::check(&spec.shape, a, w, c);
    let tol = b.tolerance(spec.dtype, spec.shape.k.get());
    if check.passes(tol) {
        return Ok(());
    }
    Err(Error::backend(
        &b.processor().id,
        format!(
            "the {what} GEMM's product is wrong: relative error {:.2e} at {:?} (bound {tol:.1e})",
            check.rel_err, check.worst
        ),
    ))
}

/// `op_alone`: one operator as runtime-min runs it alone on a processor
/// with its own memory: `write_input` from the pool's kind of host memory,
/// `submit`, a blocking `wait`, `read_output` into the same kind of
/// memory, timed by the host clock as one piece. The GEMM is `R×1024×1024`
/// in `wt_at` order (the processor's 16-bit type where it has one), with
/// `R = bytes/8192` rows (at least one), so that input and output together
/// are `bytes` of f32 values. Each sample is one such round less the
/// GEMM's kernel time: the median of
/// [`Gemm::execute_kernel_only`](crate::Gemm::execute_kernel_only) runs
/// interleaved with the rounds where the backend has it, else of the
/// rounds' own device times. A processor without a device timer has no
/// host path apart from its kernel and refuses the benchmark. The product
/// of the last round is checked against the f64 reference.
fn op_alone(
    b: &mut dyn Backend,
    req: &MicrobenchRequest,
    run: &RunParams,
    cancel: &AtomicBool,
) -> Result<(Vec<f64>, String), Error> {
    let proc = b.processor().clone();
    let no_timer = || Error::unsupported(&proc.id, "op_alone (the processor has no device timer)");
    if !proc.capabilities.device_timer {
        return Err(no_timer());
    }
    let bytes = needs_bytes(req)?;
    const SIDE: u32 = 1024;
    let rows = (bytes / (8 * SIDE as u64)).clamp(1, u32::MAX as u64) as u32;
    let shape = GemmShape::new(rows, SIDE, SIDE).expect("non-zero");
    let spec = bench_spec(&proc, shape, OperandOrder::WtAt)?;
    let (a, w) = verify::inputs(&shape, 0);
    let mut g = b.prepare(&spec, &w)?;
    let mut src = crate::HostBuf::for_backend(b, a.len());
    let mut dst = crate::HostBuf::for_backend(b, rows as usize * SIDE as usize);
    src.copy_from_slice(&a);
    let mut round = |g: &mut Box<dyn Gemm>| -> Result<(f64, Option<f64>), Error> {
        let t = Instant::now();
        g.write_input(&src)?;
        g.submit()?;
        let timed = g.wait(crate::SyncMode::Block)?;
        g.read_output(&mut dst)?;
        Ok((t.elapsed().as_secs_f64() * 1e6, timed.device_us))
    };
    warm_up(run, proc.simulated, cancel, || round(&mut g).map(|_| ()))?;
    let (mut totals, mut kernels) = (Vec::new(), Vec::new());
    let mut kernel_only = true;
    while !enough_samples(&totals, run, proc.simulated) {
        check_cancel(cancel, run)?;
        let (total, device) = round(&mut g)?;
        let device = device.ok_or_else(no_timer)?;
        totals.push(total);
        match kernel_only
            .then(|| g.execute_kernel_only())
            .transpose()?
            .flatten()
        {
            Some(k) => kernels.push(k.best_us()),
            None => {
                kernel_only = false;
                kernels.push(device);
            }
        }
    }
    let kernel = Stats::from_samples(&kernels)
        .map(|s| s.median_us)
        .unwrap_or(0.0);
    check_product(b, &spec, &a, &w, &dst, "op_alone")?;
    let memory = memory_note(&proc, &src);
    let note = format!(
        "write_input, submit, blocking wait, read_output of a {} {} {} GEMM ({} f32 bytes in and out), {memory}; kernel {kernel:.2} µs ({}) taken off each round",
        spec.shape,
        spec.dtype,
        spec.order,
        (a.len() + dst.len()) * 4,
        if kernel_only {
            "kernel-only runs"
        } else {
            "the rounds' device timer"
        }
    );
    Ok((totals.iter().map(|t| t - kernel).collect(), note))
}

/// `op_overhead`: what the host adds around the device-timed part of one
/// operator, through the backend's own launch path (a CUDA graph, a queued
/// kernel). A `1×1024×1024` GEMM in `wt_at` order (the processor's 16-bit
/// type where it has one) is written once, then submitted and waited for
/// round after round: by a blocking wait (`op_overhead_block`), by polling
/// the host flag (`op_overhead_poll`, processors with one), or by both
/// alternately (`op_overhead`, what profiles measured before the runtime's
/// two waits were costed apart). Each sample is
/// the host clock from `submit` to the wait's return less that run's
/// device time: the launch before the device timer starts, the notice
/// after it ends and the calls between. This is what runtime-min pays per
/// operator beyond the device time and the staged copies, where
/// `submit_empty` and the sync benchmarks each time a whole round trip of
/// another (directly launched, empty) kernel. The product of the last
/// round is checked against the f64 reference.
fn op_overhead(
    b: &mut dyn Backend,
    kind: MicrobenchKind,
    run: &RunParams,
    cancel: &AtomicBool,
) -> Result<(Vec<f64>, String), Error> {
    let proc = b.processor().clone();
    let name = bench_name(kind);
    let no_timer = || {
        Error::unsupported(
            &proc.id,
            format!("{name} (the processor has no device timer)"),
        )
    };
    if !proc.capabilities.device_timer {
        return Err(no_timer());
    }
    let flag = proc.capabilities.host_flag;
    // Whether round `i` polls: every one, every other one, or none.
    let (polls, waits): (fn(usize) -> bool, &str) = match kind {
        MicrobenchKind::OpOverheadPoll if !flag => {
            return Err(Error::unsupported(
                &proc.id,
                format!("{name} (the processor has no host flag to poll)"),
            ));
        }
        MicrobenchKind::OpOverheadPoll => (|_| true, "a polling"),
        MicrobenchKind::OpOverhead if flag => {
            (|i| i % 2 == 1, "a blocking or a polling (alternately)")
        }
        _ => (|_| false, "a blocking"),
    };
    let shape = GemmShape::new(1, 1024, 1024).expect("non-zero");
    let spec = bench_spec(&proc, shape, OperandOrder::WtAt)?;
    let (a, w) = verify::inputs(&shape, 0);
    let mut g = b.prepare(&spec, &w)?;
    g.write_input(&a)?;
    let mut i = 0usize;
    let mut round = |g: &mut Box<dyn Gemm>| -> Result<f64, Error> {
        let mode = if polls(i) {
            crate::SyncMode::Poll { predicted_us: 0.0 }
        } else {
            crate::SyncMode::Block
        };
        i += 1;
        let t = Instant::now();
        g.submit()?;
        let timed = g.wait(mode)?;
        let host = t.elapsed().as_secs_f64() * 1e6;
        Ok(host - timed.device_us.ok_or_else(no_timer)?)
    };
    warm_up(run, proc.simulated, cancel, || round(&mut g).map(|_| ()))?;
    let mut samples = Vec::new();
    while !enough_samples(&samples, run, proc.simulated) {
        check_cancel(cancel, run)?;
        samples.push(round(&mut g)?);
    }
    let mut c = vec![0f32; shape.n.get() as usize];
    g.read_output(&mut c)?;
    check_product(b, &spec, &a, &w, &c, &name)?;
    let note = format!(
        "submit, then {waits} wait, of a {} {} {} GEMM, less each run's device time",
        spec.shape, spec.dtype, spec.order,
    );
    Ok((samples, note))
}

/// GEMMs in [`op_overhead_after`]'s rotation, each with its own weights:
/// about as many as a decode step launches (a 1.5B model's 28 layers of 7
/// operators). Each launch finds its own state cold, as in the runtime,
/// where an H100 host's GPU-alone operators cost 3–5 µs more with every
/// layer's GEMMs its own than with one layer's shared by all (session 44,
/// call 1); 16 in turn measured 0.9 µs more (call 2).
const AFTER_GEMMS: usize = 128;
/// How many of them run after each run of the peer (a layer's attention
/// operators follow an FFN step's CPU part).
const AFTER_EACH: usize = 4;
/// Weight bytes of the peer's GEMV: about an FFN step's CPU part of a
/// 1.5B model (11–27 MB at decode).
const AFTER_PEER_BYTES: u64 = 16 << 20;

/// `op_overhead_after`: [`op_overhead`] as an offload plan meets it. After
/// each run of the peer's GEMV (copies in turn past the last-level cache,
/// as [`Streamer`] runs them), [`AFTER_EACH`] of [`AFTER_GEMMS`]
/// `1×1024×1024` GEMMs, each with its own weights, are submitted and
/// waited for in turn, blocking and polling alternately. Each sample is the
/// host clock from `submit` to the wait's return less that GEMM's median
/// device time alone and warm (measured first): a launch slowed by cold
/// host state also stretches the device timer, which starts before the
/// work arrives. Every GEMM's product is checked before any run is timed.
fn op_overhead_after(
    backends: &mut [Box<dyn Backend>],
    run: &RunParams,
    cancel: &AtomicBool,
) -> Result<(Vec<f64>, String), Error> {
    let name = bench_name(MicrobenchKind::OpOverheadAfter);
    let [b, peer, ..] = backends else {
        return Err(Error::BadRequest {
            field: "peer".into(),
            message: format!("{name} needs a `peer` processor"),
        });
    };
    let (b, peer) = (&mut **b, &mut **peer);
    let peer_id = peer.processor().id.clone();
    let proc = b.processor().clone();
    if !proc.capabilities.device_timer {
        return Err(Error::unsupported(
            &proc.id,
            format!("{name} (the processor has no device timer)"),
        ));
    }
    let shape = GemmShape::new(1, 1024, 1024).expect("non-zero");
    let spec = bench_spec(&proc, shape, OperandOrder::WtAt)?;
    let mut gemms = Vec::with_capacity(AFTER_GEMMS);
    let mut alone_us = Vec::with_capacity(AFTER_GEMMS);
    let mut c = vec![0f32; shape.n.get() as usize];
    for j in 0..AFTER_GEMMS {
        let (a, w) = verify::inputs(&shape, j as u64);
        let mut g = b.prepare(&spec, &w)?;
        g.write_input(&a)?;
        g.execute()?;
        g.read_output(&mut c)?;
        check_product(b, &spec, &a, &w, &c, &name)?;
        let mut dev = Vec::new();
        for _ in 0..run.warmups.max(1) + 5 {
            dev.push(g.execute()?.device_us.ok_or_else(|| {
                Error::unsupported(&proc.id, format!("{name} (no device time came back)"))
            })?);
        }
        alone_us.push(Stats::from_samples(&dev[dev.len() - 5..]).map_or(0.0, |s| s.median_us));
        gemms.push(g);
    }
    let peer_spec = gemv_spec(peer.processor(), AFTER_PEER_BYTES)?;
    let mut streamer = Streamer::new(peer, &peer_spec)?;
    let flag = proc.capabilities.host_flag;
    let mut i = 0usize;
    let mut round = |samples: &mut Vec<f64>| -> Result<(), Error> {
        streamer.run()?;
        for _ in 0..AFTER_EACH {
            let j = i % AFTER_GEMMS;
            let mode = if flag && i % 2 == 1 {
                crate::SyncMode::Poll { predicted_us: 0.0 }
            } else {
                crate::SyncMode::Block
            };
            i += 1;
            let t = Instant::now();
            gemms[j].submit()?;
            gemms[j].wait(mode)?;
            samples.push(t.elapsed().as_secs_f64() * 1e6 - alone_us[j]);
        }
        Ok(())
    };
    let mut ignored = Vec::new();
    warm_up(run, proc.simulated, cancel, || round(&mut ignored))?;
    let mut samples = Vec::new();
    while !enough_samples(&samples, run, proc.simulated) {
        check_cancel(cancel, run)?;
        round(&mut samples)?;
    }
    let peer_how = streamer.describe(gemv_weight_bytes(&peer_spec));
    let (k, n) = (peer_spec.shape.k.get(), peer_spec.shape.n.get());
    // The last product too, after the timed runs.
    let last = (i + AFTER_GEMMS - 1) % AFTER_GEMMS;
    gemms[last].read_output(&mut c)?;
    let (a, w) = verify::inputs(&shape, last as u64);
    check_product(b, &spec, &a, &w, &c, &name)?;
    let waits = if flag {
        "a blocking or a polling (alternately)"
    } else {
        "a blocking"
    };
    let alone = Stats::from_samples(&alone_us).map_or(0.0, |s| s.median_us);
    Ok((
        samples,
        format!(
            "{AFTER_GEMMS} {} {} {} GEMMs in turn, {AFTER_EACH} after each run of peer `{}`'s GEMV 1x{k}x{n} {} ({peer_how}): submit, then {waits} wait, less the GEMM's device time alone ({alone:.1} µs median)",
            spec.shape, spec.dtype, spec.order, peer_id, peer_spec.dtype,
        ),
    ))
}

/// The memory-bound GEMV of the bandwidth benchmarks: `1×K×N` with weights
/// of about `bytes`, in `wt_at` order, the one decode plans run GEMVs in
/// (each output a dot product over a contiguous row of `Wᵀ`). On an H100
/// host's 15 cores `aw` streamed 49.5 GB/s and the plan's `wt_at` GEMVs
/// about 90: beside the GPU's weight copies, the slower one left memory
/// room that the runtime's did not (`docs/benchmarks.md`, Runtime,
/// "Session 43").
fn gemv_spec(proc: &Processor, bytes: u64) -> Result<GemmSpec, Error> {
    let dtype = preferred_dtype(proc, &[DType::F32, DType::F16])?;
    let elem = (dtype.weight_bits() as u64).div_ceil(8);
    let side = (((bytes / elem) as f64).sqrt() as u32 / 64 * 64).max(64);
    Ok(GemmSpec {
        shape: GemmShape::new(1, side, side).expect("non-zero"),
        dtype,
        order: OperandOrder::WtAt,
        weights: WeightMode::Static,
    })
}

/// What a bandwidth row's note says of a GEMV that copies its weights from
/// page-locked host memory at every run (`hetero fit` reads it).
pub const HOST_WEIGHTS_NOTE: &str =
    "each run copying its weights from page-locked host memory first";

/// The weight bytes one run of the bandwidth GEMV `spec` reads.
fn gemv_weight_bytes(spec: &GemmSpec) -> u64 {
    spec.shape.k.get() as u64
        * spec.shape.n.get() as u64
        * (spec.dtype.weight_bits() as u64).div_ceil(8)
}

/// Whether `p`'s GEMVs read host memory themselves: a CPU, or a processor
/// on unified memory.
fn reads_host_memory(p: &Processor) -> bool {
    p.kind == hetero_plan::ProcessorKind::Cpu || p.capabilities.unified_memory
}

/// A GPU with memory of its own.
fn discrete_gpu(p: &Processor) -> bool {
    p.kind == hetero_plan::ProcessorKind::Gpu && !p.capabilities.unified_memory && !p.simulated
}

/// How many copies of a bandwidth GEMV of `weight_bytes` run in turn:
/// enough for `target` bytes between two runs of one ([`rotation_copies`])
/// where `rotate`, else one, as for weights too small to fill the target
/// in [`MAX_ROTATION_COPIES`] copies.
fn stream_copies(rotate: bool, weight_bytes: u64, target: u64) -> usize {
    if rotate {
        rotation_copies(weight_bytes, weight_bytes, target).unwrap_or(1)
    } else {
        1
    }
}

/// Copies of a bandwidth GEMV, run in turn so that each finds its weights
/// gone from the host's caches, every one checked against the reference
/// once before any run is timed.
struct Streamer {
    copies: Vec<Box<dyn Gemm>>,
    next: usize,
    /// Whether the copies keep their weights in page-locked host memory
    /// and copy them in at every run.
    copies_host_weights: bool,
}

impl Streamer {
    /// The GEMV of `spec` on `b`. A processor on host memory runs copies of
    /// it whose weights add up to [`crate::evict::host_buffer_bytes`], more
    /// than the last-level cache: a server's cache (300 MiB on an H100
    /// host) holds one 64 MiB GEMV's weights whole, and its benchmark then
    /// measured the cache, not memory, and no contention beside a GPU's
    /// weight copies that slowed the runtime's CPU parts by 12–25 %
    /// (`docs/benchmarks.md`, Runtime, "Session 43"). A discrete GPU keeps
    /// the weights in page-locked host memory and copies them in at every
    /// run ([`Gemm::host_weights`]), in as many copies: that copy is the
    /// traffic it puts on, and meets on, the memory that processors on the
    /// host read (offload's CG rows). A GPU without host weights streams
    /// its own memory, one copy.
    fn new(b: &mut dyn Backend, spec: &GemmSpec) -> Result<Self, Error> {
        let proc = b.processor().clone();
        let (a, w) = verify::inputs(&spec.shape, 0);
        let host = discrete_gpu(&proc);
        let rotate = !proc.simulated && (reads_host_memory(&proc) || host);
        let wanted = stream_copies(
            rotate,
            gemv_weight_bytes(spec),
            crate::evict::host_buffer_bytes() as u64,
        );
        let mut out = Streamer {
            copies: Vec::with_capacity(wanted),
            next: 0,
            copies_host_weights: false,
        };
        let tol = b.tolerance(spec.dtype, spec.shape.k.get());
        let mut c = vec![0f32; spec.shape.n.get() as usize];
        for _ in 0..wanted {
            let mut g = b.prepare(spec, &w)?;
            // A GPU that cannot keep them on the host says so on the first
            // copy, and the loop ends below.
            if host {
                match g.host_weights(&w) {
                    Ok(()) => out.copies_host_weights = true,
                    Err(Error::Unsupported { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            g.write_input(&a)?;
            g.execute()?;
            g.read_output(&mut c)?;
            let r = verify::check(&spec.shape, &a, &w, &c);
            if !r.passes(tol) {
                return Err(Error::backend(
                    &proc.id,
                    format!(
                        "the bandwidth GEMV gave a wrong result: {}",
                        wrong(&r, tol, "first run")
                    ),
                ));
            }
            out.copies.push(g);
            // Its own memory: one copy is the stream.
            if host && !out.copies_host_weights {
                break;
            }
        }
        Ok(out)
    }

    /// Runs the next copy.
    fn run(&mut self) -> Result<crate::Timed, Error> {
        let i = self.next % self.copies.len();
        self.next += 1;
        self.copies[i].execute()
    }

    /// How the weights are read, for the row's note.
    fn describe(&self, weight_bytes: u64) -> String {
        let n = self.copies.len() as u64;
        let mut s = if n > 1 {
            format!(
                "{n} copies in turn ({} MiB of weights)",
                (n * weight_bytes) >> 20
            )
        } else {
            "one copy".to_string()
        };
        if self.copies_host_weights {
            s.push_str(", ");
            s.push_str(HOST_WEIGHTS_NOTE);
        }
        s
    }
}

fn stream(
    backends: &mut [Box<dyn Backend>],
    req: &MicrobenchRequest,
    run: &RunParams,
    cancel: &AtomicBool,
) -> Result<(Vec<f64>, Option<String>), Error> {
    let bytes = req.bytes.unwrap_or(DEFAULT_STREAM_BYTES);
    let spec = gemv_spec(backends[0].processor(), bytes)?;
    let mut g = Streamer::new(&mut *backends[0], &spec)?;
    let (k, n) = (spec.shape.k.get(), spec.shape.n.get());
    let streamed = gemv_weight_bytes(&spec);
    let simulated = backends[0].processor().simulated;
    let timed = |g: &mut Streamer| -> Result<Vec<f64>, Error> {
        // Every copy once more, then the timed runs.
        let warm = RunParams {
            warmups: run.warmups.max(g.copies.len() as u32),
            ..*run
        };
        warm_up(&warm, simulated, cancel, || g.run().map(drop))?;
        let mut s = Vec::new();
        for _ in 0..run.repetitions.max(1) {
            check_cancel(cancel, run)?;
            s.push(g.run()?.best_us());
        }
        Ok(s)
    };
    let note_bytes = format!(
        "GEMV 1x{k}x{n} {}: {streamed} weight bytes per run, {}",
        spec.dtype,
        g.describe(streamed)
    );
    if req.bench == MicrobenchKind::BandwidthAlone || backends.len() < 2 {
        let s = timed(&mut g)?;
        return Ok((s, Some(note_bytes)));
    }
    let peer_spec = gemv_spec(backends[1].processor(), bytes)?;
    let mut pg = Streamer::new(&mut *backends[1], &peer_spec)?;
    let peer_how = pg.describe(gemv_weight_bytes(&peer_spec));
    let stop = AtomicBool::new(false);
    let peer_runs = AtomicU64::new(0);
    let peer_err: std::sync::Mutex<Option<Error>> = std::sync::Mutex::new(None);
    let samples = std::thread::scope(|sc| {
        sc.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                if let Err(e) = pg.run() {
                    *peer_err.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                    break;
                }
                peer_runs.fetch_add(1, Ordering::Relaxed);
            }
        });
        // Start timing once the peer is streaming.
        while peer_runs.load(Ordering::Relaxed) == 0
            && peer_err.lock().map(|e| e.is_none()).unwrap_or(false)
        {
            std::thread::yield_now();
        }
        let s = timed(&mut g);
        stop.store(true, Ordering::Relaxed);
        s
    })?;
    if let Some(e) = peer_err.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    let (pk, pn) = (peer_spec.shape.k.get(), peer_spec.shape.n.get());
    Ok((
        samples,
        Some(format!(
            "{note_bytes}; peer `{}` streamed GEMV 1x{pk}x{pn} {} {} times meanwhile, {peer_how}",
            backends[1].processor().id,
            peer_spec.dtype,
            peer_runs.load(Ordering::Relaxed),
        )),
    ))
}

#[cfg(test)]
mod tests;
