//! Executing one operator instance as its decision says: the parts start
//! at once on their processors, the host waits for each, and the results
//! are merged into one output.
//!
//! A decision becomes [`Part`]s (one per processor) made of [`Step`]s (one
//! prepared GEMM run each: a multi-sequence cut or chunked prefill runs
//! several graphs one after the other on the same processor). A step reads
//! token rows `rows` of the input, pads them to its graph's M, and writes
//! output columns `cols` of those rows.
//!
//! Order of events for one instance:
//! 1. every real part with asynchronous submit gets its first input and is
//!    submitted;
//! 2. real parts without it run on the host thread meanwhile;
//! 3. the submitted parts are waited for (`SyncMode::Block`, or
//!    `SyncMode::Poll`: sleep for the step's predicted time, then spin on
//!    the completion flag), multi-step parts first, each next step
//!    submitted as soon as the previous one is seen done;
//!
//! A step whose GEMM keeps its weights on the host ([`Step::staged`])
//! prefetches the next such GEMM of its processor right after its own
//! submit ([`Prefetch`]), so that the next weight copy overlaps this one's
//! run.
//!
//! 4. simulated and emulated parts run last, on the host: their product is
//!    computed by the host CPU, which would otherwise steal the real
//!    processors' cores. Their time is the one the backend reports (the
//!    simulator's model), overlapped with the real parts as the plan
//!    intends — and the operator is then labelled simulated.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use hetero_agent::{Error as AgentError, Gemm, GemmSpec, HostBuf, SyncMode, Timed};
use hetero_plan::Timing;

use crate::runtime::prefetch::Prefetch;

/// How the host waits for a submitted part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncChoice {
    /// Sleep through the predicted time, then spin on the completion flag.
    #[default]
    Poll,
    /// The backend's blocking wait.
    Block,
}

impl SyncChoice {
    /// `poll` or `block`.
    pub fn as_str(self) -> &'static str {
        match self {
            SyncChoice::Poll => "poll",
            SyncChoice::Block => "block",
        }
    }

    fn mode(self, predicted_us: f64) -> SyncMode {
        match self {
            SyncChoice::Poll => SyncMode::Poll { predicted_us },
            SyncChoice::Block => SyncMode::Block,
        }
    }
}

impl std::str::FromStr for SyncChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "poll" => Ok(SyncChoice::Poll),
            "block" => Ok(SyncChoice::Block),
            _ => Err(format!("unknown sync mode `{s}`; expected poll or block")),
        }
    }
}

/// One prepared GEMM run.
#[derive(Debug, Clone)]
pub(crate) struct Step {
    /// Index into the runtime's GEMM arena.
    pub gemm: usize,
    /// Input and output token rows.
    pub rows: Range<usize>,
    /// M of the prepared GEMM (≥ the rows; the rest is zero padding).
    pub pad_to: usize,
    /// Output columns.
    pub cols: Range<usize>,
    /// Weights `W[K, cols]` written before every run (offload: rows stored
    /// on the CPU and copied to the GPU each time).
    pub upload: Option<Arc<Vec<f32>>>,
    /// Its GEMM keeps its weights on the host and copies them itself every
    /// run ([`Gemm::host_weights`]): it takes part in prefetching.
    pub staged: bool,
}

/// One processor's share of an instance.
#[derive(Debug, Clone)]
pub(crate) struct Part {
    /// Index of the processor in the plan's `processors`.
    pub proc: usize,
    /// Where its times come from.
    pub timing: Timing,
    /// The plan's predicted time of the part, µs.
    pub predicted_us: f64,
    /// Its runs, in order.
    pub steps: Vec<Step>,
    /// Learned on first use: does the backend submit asynchronously?
    pub asynchronous: Option<bool>,
}

impl Part {
    fn real(&self) -> bool {
        self.timing == Timing::Real
    }
}

/// Staging buffers from the runtime's pool, reused by every operator.
#[derive(Debug, Default)]
pub(crate) struct Stage {
    /// A padded or gathered input.
    pub input: HostBuf,
    /// A part's output before it is scattered into the merged output.
    pub output: HostBuf,
}

/// The timings of one instance run.
#[derive(Debug, Clone, Default)]
pub(crate) struct Sample {
    /// Host clock from the first action to the merged output.
    pub wall_us: f64,
    /// The operator's time: the wall clock, or for simulated/emulated parts
    /// the real overheads plus the overlapped part times.
    pub measured_us: f64,
    /// Time the runtime spent in its own code (lookups, bookkeeping),
    /// outside every backend call.
    pub dispatch_us: f64,
    /// Time inside the backends' submit calls.
    pub submit_us: f64,
    /// Time copying inputs, outputs and uploads.
    pub copy_us: f64,
    /// Per part, the backend's time (device timer, model, or host clock).
    pub parts_us: Vec<f64>,
    /// Some part is simulated.
    pub simulated: bool,
    /// Some part is emulated.
    pub emulated: bool,
}

impl Sample {
    /// Adds another instance's timings (an operator runs several per layer).
    pub fn add(&mut self, s: &Sample) {
        self.wall_us += s.wall_us;
        self.measured_us += s.measured_us;
        self.dispatch_us += s.dispatch_us;
        self.submit_us += s.submit_us;
        self.copy_us += s.copy_us;
        self.simulated |= s.simulated;
        self.emulated |= s.emulated;
        if self.parts_us.len() < s.parts_us.len() {
            self.parts_us.resize(s.parts_us.len(), 0.0);
        }
        for (a, b) in self.parts_us.iter_mut().zip(&s.parts_us) {
            *a += b;
        }
    }
}

/// Counts executions on one processor and fails the `after`-th (tests of
/// the "processor failing mid-run" path).
#[derive(Debug)]
pub(crate) struct Fault {
    pub processor: String,
    pub after: u32,
    pub count: AtomicU32,
}

/// A GEMM that fails when its processor's fault counter runs out.
pub(crate) struct FaultyGemm {
    pub inner: Box<dyn Gemm>,
    pub fault: Arc<Fault>,
}

impl FaultyGemm {
    fn tick(&self) -> Result<(), AgentError> {
        let n = self.fault.count.fetch_add(1, Ordering::Relaxed) + 1;
        if n >= self.fault.after {
            Err(AgentError::backend(
                &self.fault.processor,
                format!("injected fault at execution {n}"),
            ))
        } else {
            Ok(())
        }
    }
}

impl Gemm for FaultyGemm {
    fn spec(&self) -> &GemmSpec {
        self.inner.spec()
    }
    fn prepare_us(&self) -> Option<f64> {
        self.inner.prepare_us()
    }
    fn write_input(&mut self, a: &[f32]) -> Result<(), AgentError> {
        self.inner.write_input(a)
    }
    fn execute(&mut self) -> Result<Timed, AgentError> {
        self.tick()?;
        self.inner.execute()
    }
    fn read_output(&mut self, c: &mut [f32]) -> Result<(), AgentError> {
        self.inner.read_output(c)
    }
    fn submit(&mut self) -> Result<(), AgentError> {
        self.tick()?;
        self.inner.submit()
    }
    fn wait(&mut self, mode: SyncMode) -> Result<Timed, AgentError> {
        self.inner.wait(mode)
    }
    fn write_weights(&mut self, w: &[f32]) -> Result<(), AgentError> {
        self.inner.write_weights(w)
    }
    fn host_weights(&mut self, w: &[f32]) -> Result<(), AgentError> {
        self.inner.host_weights(w)
    }
    fn prefetch(&mut self) -> Result<(), AgentError> {
        self.inner.prefetch()
    }
    fn backend_id(&self) -> String {
        self.inner.backend_id()
    }
}

fn us(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e6
}

/// Writes a step's input (and weights to upload) into its GEMM.
fn feed(
    g: &mut dyn Gemm,
    step: &Step,
    input: &[f32],
    k: usize,
    stage: &mut Stage,
) -> Result<(), AgentError> {
    if let Some(w) = &step.upload {
        g.write_weights(w)?;
    }
    let (r0, r1) = (step.rows.start, step.rows.end);
    if r1 - r0 == step.pad_to {
        return g.write_input(&input[r0 * k..r1 * k]);
    }
    let len = step.pad_to * k;
    let buf = &mut stage.input[..len];
    let real = (r1 - r0) * k;
    buf[..real].copy_from_slice(&input[r0 * k..r1 * k]);
    buf[real..].fill(0.0);
    g.write_input(buf)
}

/// Reads a step's output and scatters it into the merged `output[M, N]`.
fn drain(
    g: &mut dyn Gemm,
    step: &Step,
    output: &mut [f32],
    n: usize,
    stage: &mut Stage,
) -> Result<(), AgentError> {
    let (r0, r1) = (step.rows.start, step.rows.end);
    let (c0, c1) = (step.cols.start, step.cols.end);
    let w = c1 - c0;
    if w == n && r1 - r0 == step.pad_to {
        return g.read_output(&mut output[r0 * n..r1 * n]);
    }
    let buf = &mut stage.output[..step.pad_to * w];
    g.read_output(buf)?;
    for r in 0..r1 - r0 {
        output[(r0 + r) * n + c0..(r0 + r) * n + c1].copy_from_slice(&buf[r * w..(r + 1) * w]);
    }
    Ok(())
}

/// A failure: the part's processor index and the backend's error.
pub(crate) type Failure = (usize, AgentError);

/// Runs one instance: `input[M, K]` → `output[M, N]`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_instance(
    gemms: &mut [Box<dyn Gemm>],
    parts: &mut [Part],
    input: &[f32],
    k: usize,
    output: &mut [f32],
    n: usize,
    stage: &mut Stage,
    sync: SyncChoice,
    prefetch: &mut Prefetch,
) -> Result<Sample, Failure> {
    let mut run = Instance {
        t0: Instant::now(),
        gemms,
        prefetch,
        input,
        k,
        output,
        n,
        stage,
        sync,
        copy: 0.0,
        submit: 0.0,
        blocked: 0.0,
        host_nonreal: 0.0,
        parts_us: vec![0.0; parts.len()],
        inflight: Vec::with_capacity(parts.len()),
        submitted: vec![None; parts.len()],
        fed: vec![false; parts.len()],
    };
    let result = run
        .submit_first(parts)
        .and_then(|()| run.run_inline(parts))
        .and_then(|()| run.wait_submitted(parts))
        .and_then(|()| run.run_nonreal(parts));
    if let Err(e) = result {
        run.abandon(parts);
        return Err(e);
    }
    Ok(run.sample(parts))
}

/// One instance being run, and what it has cost so far.
struct Instance<'a> {
    t0: Instant,
    gemms: &'a mut [Box<dyn Gemm>],
    /// The successors of GEMMs with host weights.
    prefetch: &'a mut Prefetch,
    input: &'a [f32],
    k: usize,
    output: &'a mut [f32],
    n: usize,
    stage: &'a mut Stage,
    sync: SyncChoice,
    /// Time copying inputs, outputs and uploads, µs.
    copy: f64,
    /// Time inside submit calls, µs.
    submit: f64,
    /// Waits and inline executions of real parts, µs.
    blocked: f64,
    /// The host computing simulated and emulated products, µs.
    host_nonreal: f64,
    /// Per part, the backend's time, µs.
    parts_us: Vec<f64>,
    /// Submitted parts: (part index, next step to wait for).
    inflight: Vec<(usize, usize)>,
    /// Per part: when its first step and its current step were submitted.
    submitted: Vec<Option<(Instant, Instant)>>,
    /// Parts whose first input was written before a refused submit.
    fed: Vec<bool>,
}

impl Instance<'_> {
    /// Writes a step's input (and weights to upload) into its GEMM.
    fn feed(&mut self, proc: usize, step: &Step) -> Result<(), Failure> {
        let t = Instant::now();
        let g = self.gemms[step.gemm].as_mut();
        feed(g, step, self.input, self.k, self.stage).map_err(|e| (proc, e))?;
        self.copy += us(t);
        Ok(())
    }

    /// Reads a step's output into the merged output.
    fn drain(&mut self, proc: usize, step: &Step) -> Result<(), Failure> {
        let t = Instant::now();
        let g = self.gemms[step.gemm].as_mut();
        drain(g, step, self.output, self.n, self.stage).map_err(|e| (proc, e))?;
        self.copy += us(t);
        Ok(())
    }

    /// Submits a fed step; `Ok(false)` where the backend cannot submit
    /// asynchronously. The prefetch that follows counts as submit time.
    fn submit(&mut self, proc: usize, step: &Step) -> Result<(bool, Instant), Failure> {
        let t = Instant::now();
        let result = self.gemms[step.gemm].submit();
        let result = match result {
            Ok(()) => self.prefetch_next(proc, step).map(|()| true),
            Err(AgentError::Unsupported { .. }) => Ok(false),
            Err(e) => Err((proc, e)),
        };
        self.submit += us(t);
        result.map(|submitted| (submitted, t))
    }

    /// After `step` was submitted (or run inline): where its GEMM keeps its
    /// weights on the host, records it and prefetches the next such GEMM
    /// of the processor ([`Prefetch`]).
    fn prefetch_next(&mut self, proc: usize, step: &Step) -> Result<(), Failure> {
        if !step.staged {
            return Ok(());
        }
        match self.prefetch.submitted(proc, step.gemm) {
            Some(next) => self.gemms[next].prefetch().map_err(|e| (proc, e)),
            None => Ok(()),
        }
    }

    /// Runs a fed step on the host thread and drains it; the host time.
    fn execute(&mut self, pi: usize, proc: usize, step: &Step) -> Result<f64, Failure> {
        let t = Instant::now();
        let timed = self.gemms[step.gemm].execute().map_err(|e| (proc, e))?;
        let host = us(t);
        self.prefetch_next(proc, step)?;
        self.parts_us[pi] += timed.best_us();
        self.drain(proc, step)?;
        Ok(host)
    }

    /// (1) Submits every real asynchronous part's first step.
    fn submit_first(&mut self, parts: &mut [Part]) -> Result<(), Failure> {
        for (pi, part) in parts.iter_mut().enumerate() {
            if !part.real() || part.asynchronous == Some(false) {
                continue;
            }
            let step = &part.steps[0];
            self.feed(part.proc, step)?;
            let (submitted, t) = self.submit(part.proc, step)?;
            part.asynchronous = Some(submitted);
            if submitted {
                self.inflight.push((pi, 0));
                self.submitted[pi] = Some((t, t));
            } else {
                self.fed[pi] = true;
            }
        }
        Ok(())
    }

    /// (2) Real parts without asynchronous submit run here meanwhile.
    fn run_inline(&mut self, parts: &[Part]) -> Result<(), Failure> {
        for (pi, part) in parts.iter().enumerate() {
            if !part.real() || part.asynchronous != Some(false) {
                continue;
            }
            for (si, step) in part.steps.iter().enumerate() {
                if si > 0 || !self.fed[pi] {
                    self.feed(part.proc, step)?;
                }
                self.blocked += self.execute(pi, part.proc, step)?;
            }
        }
        Ok(())
    }

    /// (3) Waits for the submitted parts, chains of steps first; each next
    /// step is submitted as soon as the previous one is seen done.
    fn wait_submitted(&mut self, parts: &[Part]) -> Result<(), Failure> {
        self.inflight
            .sort_by_key(|&(pi, _)| std::cmp::Reverse(parts[pi].steps.len()));
        while let Some(&(pi, si)) = self.inflight.first() {
            let part = &parts[pi];
            let step = &part.steps[si];
            let (first, this) = self.submitted[pi].expect("set when submitted");
            // A polled wait sleeps through its prediction from the step's
            // submit. The steps of a chain cost unlike amounts (an offload
            // part's resident rows read the GPU's memory, the others wait
            // for their weights to cross PCIe), and the plan predicts the
            // part only, so the host spins on every step but the last, and
            // the last sleeps until the part's predicted end.
            let predicted = if si + 1 < part.steps.len() {
                0.0
            } else {
                (part.predicted_us - (this - first).as_secs_f64() * 1e6).max(0.0)
            };
            let t = Instant::now();
            let timed = self.gemms[step.gemm]
                .wait(self.sync.mode(predicted))
                .map_err(|e| (part.proc, e))?;
            self.blocked += us(t);
            self.parts_us[pi] += timed.best_us();
            self.drain(part.proc, step)?;
            if let Some(next) = part.steps.get(si + 1) {
                self.feed(part.proc, next)?;
                let t = Instant::now();
                self.gemms[next.gemm].submit().map_err(|e| (part.proc, e))?;
                self.prefetch_next(part.proc, next)?;
                self.submit += us(t);
                self.inflight[0].1 = si + 1;
                self.submitted[pi] = Some((first, t));
            } else {
                self.inflight.remove(0);
            }
        }
        Ok(())
    }

    /// (4) Simulated and emulated parts, on the host, after the real ones.
    fn run_nonreal(&mut self, parts: &[Part]) -> Result<(), Failure> {
        for (pi, part) in parts.iter().enumerate() {
            if part.real() {
                continue;
            }
            for step in &part.steps {
                self.feed(part.proc, step)?;
                self.host_nonreal += self.execute(pi, part.proc, step)?;
            }
        }
        Ok(())
    }

    /// Leaves no GEMM with a run in flight, so the runtime stays usable
    /// after a failure.
    fn abandon(&mut self, parts: &[Part]) {
        for &(pi, si) in &self.inflight {
            let _ = self.gemms[parts[pi].steps[si].gemm].wait(SyncMode::Block);
        }
    }

    /// The instance's timings: a simulated or emulated part counts as
    /// overlapped with the real ones.
    fn sample(self, parts: &[Part]) -> Sample {
        let wall = us(self.t0);
        let wall_real = wall - self.host_nonreal;
        let max_of = |real: bool| {
            parts
                .iter()
                .zip(&self.parts_us)
                .filter(|(p, _)| p.real() == real)
                .map(|(_, t)| *t)
                .fold(0.0, f64::max)
        };
        let (max_real, max_nonreal) = (max_of(true), max_of(false));
        Sample {
            wall_us: wall,
            measured_us: wall_real + (max_nonreal - max_real).max(0.0),
            dispatch_us: (wall_real - self.copy - self.blocked - self.submit).max(0.0),
            submit_us: self.submit,
            copy_us: self.copy,
            simulated: parts.iter().any(|p| p.timing == Timing::Simulated),
            emulated: parts.iter().any(|p| p.timing == Timing::Emulated),
            parts_us: self.parts_us,
        }
    }
}
