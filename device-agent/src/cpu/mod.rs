//! The cpu backend: the `gemm` crate (f32 and f16) on host threads, one
//! processor per core cluster; products of up to 8 rows (decode steps) run
//! a memory-bound loop of their own ([`gemv`]).
//!
//! Each processor owns a small rayon pool whose workers are pinned (with
//! `sched_setaffinity`) to the cores of its group, and every GEMM runs inside
//! that pool with `Parallelism::Rayon(group size)`. Two groups therefore run
//! side by side without stealing each other's cores, which is what the
//! concurrent-bandwidth microbenchmark and the runtime need.
//!
//! Groups come from each core's `cpufreq/cpuinfo_max_freq` (cores with the
//! same maximum frequency form a cluster); when sysfs does not show it (many
//! virtual machines), all cores form one group. `OpenOptions::cpu_groups`
//! (`--cpu-groups 0-3;4-7`) overrides the detection.

pub mod gemv;
mod keep_warm;
pub mod topology;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use gemm::Parallelism;
use hetero_plan::{
    Capabilities, DType, GemmShape, MicrobenchKind, MicrobenchRequest, OperandOrder, Processor,
    ProcessorApi, ProcessorKind, WeightMode,
};

use crate::completion::Completion;
use crate::dense::Dense;
use crate::{Backend, Error, Gemm, GemmSpec, OpenOptions, Result, SyncMode, Timed};
use gemv::Gemv;
use keep_warm::KeepWarm;
pub use keep_warm::{DEFAULT_POLL_US, poll_hold};
pub use topology::{CoreGroup, parse_groups};

/// Opens one processor per core group.
pub fn open(opts: &OpenOptions) -> Result<Vec<Box<dyn Backend>>> {
    let groups = open_groups(opts)?.into_iter();
    Ok(groups.map(|b| Box::new(b) as Box<dyn Backend>).collect())
}

/// [`open`], each processor as its own type (`cpu:N` is the N-th).
pub fn open_groups(opts: &OpenOptions) -> Result<Vec<CpuBackend>> {
    let allowed = topology::process_cores();
    let sys = Path::new("/sys/devices/system/cpu");
    let groups = match &opts.cpu_groups {
        Some(text) => {
            let mut groups = parse_groups(text, &allowed)?;
            for g in &mut groups {
                g.max_khz = topology::detect_groups(sys, &g.cores)
                    .iter()
                    .filter_map(|d| d.max_khz)
                    .max();
            }
            groups
        }
        None => topology::detect_groups(sys, &allowed),
    };
    let hold = poll_hold(opts.cpu_poll_us)?;
    groups
        .into_iter()
        .enumerate()
        .map(|(i, g)| CpuBackend::with_poll(i, g, hold))
        .collect()
}

/// One CPU core group as a processor.
pub struct CpuBackend {
    processor: Processor,
    group: CoreGroup,
    pool: Arc<rayon::ThreadPool>,
    keep_warm: Arc<KeepWarm>,
    /// Source and destination of the copy microbenchmark, kept between calls.
    copy_bufs: Option<(Vec<u8>, Vec<u8>)>,
    /// Whether f32 and f16 products of up to 8 rows run [`gemv`]'s loop
    /// rather than the `gemm` crate ([`SMALL_ROWS_OWN_LOOP`]).
    small_rows: bool,
}

/// Whether f32 and f16 products of up to 8 rows run the backend's own loop
/// ([`gemv`]): in optimised builds. Unoptimised, the loop runs 20–26×
/// slower than the `gemm` crate, which dev builds optimise
/// (`[profile.dev.package.gemm*]`), so a debug build's agent, the one the
/// tests drive, keeps these on the crate and times real speeds; the
/// loop's own tests call it directly. bf16 runs only in `bench-gemv`: the
/// processor does not list it, the crate having none for more rows.
pub const SMALL_ROWS_OWN_LOOP: bool = !cfg!(debug_assertions);

impl CpuBackend {
    /// Builds the group's pool, pins its workers and checks the pinning;
    /// the workers poll for [`DEFAULT_POLL_US`] after a run.
    pub fn new(index: usize, group: CoreGroup) -> Result<CpuBackend> {
        Self::with_poll(index, group, Duration::from_micros(DEFAULT_POLL_US))
    }

    /// [`CpuBackend::new`] with workers that poll for work for `hold` after
    /// each run before they sleep (`cpu::keep_warm`).
    pub fn with_poll(index: usize, group: CoreGroup, hold: Duration) -> Result<CpuBackend> {
        let id = format!("cpu:{index}");
        let cores = group.cores.clone();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(cores.len())
            .thread_name(move |t| format!("hetero-cpu{index}-{t}"))
            .start_handler(move |_| {
                // Checked below, from inside each worker.
                let _ = topology::pin_current_thread(&cores);
            })
            .build()
            .map_err(|e| Error::backend(&id, format!("building the thread pool: {e}")))?;
        let want = group.cores.clone();
        let pinned = pool
            .broadcast(|_| topology::allowed_cores() == want)
            .into_iter()
            .all(|ok| ok);
        let driver = format!(
            "gemm 0.19, {} rayon threads {}, polling {} µs after a run",
            group.cores.len(),
            if pinned {
                "pinned to the group"
            } else {
                "NOT pinned (sched_setaffinity refused)"
            },
            hold.as_micros()
        );
        let processor = Processor {
            id,
            kind: ProcessorKind::Cpu,
            api: ProcessorApi::Cpu,
            name: group.describe(),
            driver,
            capabilities: Capabilities {
                dtypes: vec![DType::F32, DType::F16],
                static_graphs: false,
                unified_memory: true,
                device_timer: false,
                host_flag: true,
                order_free: false,
                non_gemm: false,
                tile: None,
                compute_units: Some(group.cores.len() as u32),
                memory_bytes: None,
                launch_copy_max_bytes: None,
                extensions: Vec::new(),
            },
            simulated: false,
            emulated: false,
        };
        Ok(CpuBackend {
            processor,
            group,
            pool: Arc::new(pool),
            keep_warm: KeepWarm::new(hold),
            copy_bufs: None,
            small_rows: SMALL_ROWS_OWN_LOOP,
        })
    }

    /// The cores of this processor.
    pub fn cores(&self) -> &[usize] {
        &self.group.cores
    }

    /// Runs `f` on one of this group's workers and returns what it returns.
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        self.pool.install(f)
    }

    fn copy_sample(&mut self, bytes: u64) -> Result<f64> {
        let n = usize::try_from(bytes)
            .map_err(|_| Error::unsupported(&self.processor.id, "copies this large"))?;
        if self.copy_bufs.as_ref().map(|b| b.0.len()) != Some(n) {
            // First touch outside the timed copy.
            let src: Vec<u8> = (0..n).map(|i| i as u8).collect();
            self.copy_bufs = Some((src, vec![1u8; n]));
        }
        let (src, dst) = self.copy_bufs.as_mut().expect("just set");
        Ok(self.pool.install(|| {
            let t = Instant::now();
            dst.copy_from_slice(src);
            let us = t.elapsed().as_secs_f64() * 1e6;
            std::hint::black_box(&dst);
            us
        }))
    }

    fn submit_empty_sample(&self) -> f64 {
        let flag = Arc::new(AtomicU32::new(0));
        let f = flag.clone();
        let t = Instant::now();
        self.pool.spawn(move || f.store(1, Ordering::Release));
        while flag.load(Ordering::Acquire) == 0 {
            std::hint::spin_loop();
        }
        t.elapsed().as_secs_f64() * 1e6
    }

    fn submit_busy_sample(&self) -> f64 {
        // Every worker spins for 2 ms; the tiny task is queued behind them.
        let busy = Duration::from_millis(2);
        let started = Arc::new(AtomicU32::new(0));
        let s = started.clone();
        self.pool.spawn_broadcast(move |_| {
            s.fetch_add(1, Ordering::AcqRel);
            let t = Instant::now();
            while t.elapsed() < busy {
                std::hint::spin_loop();
            }
        });
        let workers = self.group.cores.len() as u32;
        while started.load(Ordering::Acquire) < workers {
            std::hint::spin_loop();
        }
        let done = Arc::new(AtomicU32::new(0));
        let d = done.clone();
        let t = Instant::now();
        self.pool.spawn(move || d.store(1, Ordering::Release));
        let us = t.elapsed().as_secs_f64() * 1e6;
        while done.load(Ordering::Acquire) == 0 {
            std::thread::yield_now();
        }
        us
    }

    fn sync_sample(&mut self, mode: SyncMode) -> Result<f64> {
        let shape = GemmShape::new(1, 64, 64).expect("non-zero");
        let spec = GemmSpec {
            shape,
            dtype: DType::F32,
            order: OperandOrder::Aw,
            weights: WeightMode::Static,
        };
        let (a, w) = crate::verify::inputs(&shape, 0);
        let mut g = self.prepare(&spec, &w)?;
        g.write_input(&a)?;
        g.submit()?;
        Ok(g.wait(mode)?.host_us)
    }
}

impl Backend for CpuBackend {
    fn processor(&self) -> &Processor {
        &self.processor
    }

    fn prepare(&mut self, spec: &GemmSpec, weights: &[f32]) -> Result<Box<dyn Gemm>> {
        let (id, threads) = (&self.processor.id, self.group.cores.len());
        // Not bf16, which the processor does not list (`SMALL_ROWS_OWN_LOOP`).
        let own_loop = self.small_rows && spec.dtype != DType::Bf16;
        let work = if own_loop && gemv::handles(spec) {
            Work::Gemv(Gemv::new(id, spec, weights, threads)?)
        } else {
            Work::Dense(Dense::new(id, spec, weights)?)
        };
        Ok(Box::new(CpuGemm {
            id: self.processor.id.clone(),
            pool: self.pool.clone(),
            keep_warm: self.keep_warm.clone(),
            threads,
            work: Some(work),
            spec: *spec,
            inflight: None,
        }))
    }

    fn microbench(&mut self, req: &MicrobenchRequest) -> Result<Vec<f64>> {
        let id = &self.processor.id;
        match req.bench {
            MicrobenchKind::CopyH2d | MicrobenchKind::CopyD2h => {
                let bytes = req.bytes.ok_or_else(|| Error::BadRequest {
                    field: "bytes".into(),
                    message: format!("{:?} needs `bytes`", req.bench),
                })?;
                Ok(vec![self.copy_sample(bytes)?])
            }
            MicrobenchKind::SubmitEmpty => Ok(vec![self.submit_empty_sample()]),
            MicrobenchKind::SubmitBusy => Ok(vec![self.submit_busy_sample()]),
            MicrobenchKind::SyncBlock => Ok(vec![self.sync_sample(SyncMode::Block)?]),
            MicrobenchKind::SyncPoll => Ok(vec![
                self.sync_sample(SyncMode::Poll { predicted_us: 0.0 })?,
            ]),
            other => Err(Error::unsupported(
                id,
                format!("microbenchmark {}", crate::protocol::bench_name(other)),
            )),
        }
    }

    fn conditions(&self) -> hetero_plan::Conditions {
        crate::conditions::read_probed(Some(&self.group.cores))
    }
}

struct Inflight {
    shared: Arc<Completion<Work>>,
}

/// What a CPU GEMM runs: the `gemm` crate, or the small-row path.
enum Work {
    Dense(Dense),
    Gemv(Gemv),
}

impl Work {
    fn write_input(&mut self, id: &str, a: &[f32]) -> Result<()> {
        match self {
            Work::Dense(d) => d.write_input(id, a),
            Work::Gemv(g) => g.write_input(id, a),
        }
    }

    fn write_weights(&mut self, id: &str, w: &[f32]) -> Result<()> {
        match self {
            Work::Dense(d) => d.write_weights(id, w),
            Work::Gemv(g) => g.write_weights(id, w),
        }
    }

    fn read_output(&mut self, id: &str, c: &mut [f32]) -> Result<()> {
        match self {
            Work::Dense(d) => d.read_output(id, c),
            Work::Gemv(g) => g.read_output(id, c),
        }
    }

    /// Runs the product; call it inside the pool that should run it.
    fn run(&mut self, par: Parallelism) {
        match self {
            Work::Dense(d) => d.run(par),
            Work::Gemv(g) => g.run(),
        }
    }
}

/// A GEMM prepared on a CPU group.
struct CpuGemm {
    id: String,
    spec: GemmSpec,
    pool: Arc<rayon::ThreadPool>,
    keep_warm: Arc<KeepWarm>,
    threads: usize,
    /// `None` while an asynchronous run owns the buffers.
    work: Option<Work>,
    inflight: Option<Inflight>,
}

impl CpuGemm {
    fn parallelism(threads: usize) -> Parallelism {
        if threads > 1 {
            Parallelism::Rayon(threads)
        } else {
            Parallelism::None
        }
    }

    fn work(&mut self) -> Result<&mut Work> {
        self.work
            .as_mut()
            .ok_or_else(|| Error::backend(&self.id, "a submitted run has not been waited for"))
    }
}

impl Gemm for CpuGemm {
    fn spec(&self) -> &GemmSpec {
        &self.spec
    }

    fn write_input(&mut self, a: &[f32]) -> Result<()> {
        let id = self.id.clone();
        self.work()?.write_input(&id, a)
    }

    fn write_weights(&mut self, w: &[f32]) -> Result<()> {
        let id = self.id.clone();
        self.work()?.write_weights(&id, w)
    }

    fn execute(&mut self) -> Result<Timed> {
        let par = Self::parallelism(self.threads);
        let pool = self.pool.clone();
        let keep_warm = self.keep_warm.clone();
        let work = self.work()?;
        let t = Instant::now();
        keep_warm.wake_all(&pool);
        pool.install(|| {
            work.run(par);
            keep_warm.extend();
        });
        Ok(Timed {
            device_us: None,
            host_us: t.elapsed().as_secs_f64() * 1e6,
            ran_us: None,
        })
    }

    fn read_output(&mut self, c: &mut [f32]) -> Result<()> {
        let id = self.id.clone();
        self.work()?.read_output(&id, c)
    }

    fn submit(&mut self) -> Result<()> {
        let par = Self::parallelism(self.threads);
        let mut work = self
            .work
            .take()
            .ok_or_else(|| Error::backend(&self.id, "already submitted"))?;
        let shared = Completion::new();
        let s = shared.clone();
        let keep_warm = self.keep_warm.clone();
        keep_warm.wake_all(&self.pool);
        self.pool.spawn(move || {
            work.run(par);
            keep_warm.extend();
            s.finish(work);
        });
        self.inflight = Some(Inflight { shared });
        Ok(())
    }

    fn wait(&mut self, mode: SyncMode) -> Result<Timed> {
        let Inflight { shared } = self
            .inflight
            .take()
            .ok_or_else(|| Error::backend(&self.id, "wait without submit"))?;
        let (work, ran_us) = shared.wait(mode);
        let host_us = shared.started().elapsed().as_secs_f64() * 1e6;
        self.work = Some(work);
        Ok(Timed {
            device_us: None,
            host_us,
            ran_us: Some(ran_us),
        })
    }

    fn backend_id(&self) -> String {
        self.id.clone()
    }

    /// Evicts with this group's own workers, so that the timed run finds
    /// them awake, as an operator of runtime-min finds the workers the one
    /// before it ran on (`crate::evict`).
    fn evict_caches(&mut self) -> Result<()> {
        crate::evict::evict_on(&self.pool);
        Ok(())
    }
}

/// `C = A·W` on row-major `A[M,K]`, `W[K,N]` and `C[M,N]`: one plain
/// call of the `gemm` crate on `threads` threads of rayon's global pool,
/// the reference a backend's product is benchmarked against.
pub fn gemm_crate(
    a: &[f32],
    w: &[f32],
    c: &mut [f32],
    (m, k, n): (usize, usize, usize),
    threads: usize,
) {
    assert!(a.len() == m * k && w.len() == k * n && c.len() == m * n);
    // SAFETY: row-major A, W and C with the lengths asserted above and
    // matching strides.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.as_ptr(),
            1,
            k as isize,
            w.as_ptr(),
            1,
            n as isize,
            0.0,
            1.0,
            false,
            false,
            false,
            Parallelism::Rayon(threads),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backend() -> CpuBackend {
        let cores = topology::allowed_cores();
        CpuBackend::new(
            0,
            CoreGroup {
                cores,
                max_khz: None,
            },
        )
        .unwrap()
    }

    #[test]
    fn workers_run_on_their_group_only() {
        let allowed = topology::allowed_cores();
        let last = *allowed.last().unwrap();
        let b = CpuBackend::new(
            1,
            CoreGroup {
                cores: vec![last],
                max_khz: None,
            },
        )
        .unwrap();
        assert!(b.processor().driver.contains("pinned to the group"));
        assert_eq!(b.install(topology::allowed_cores), vec![last]);
        assert_eq!(b.processor().id, "cpu:1");
        // The caller's own affinity is untouched.
        assert_eq!(topology::allowed_cores(), allowed);
    }

    #[test]
    fn open_honours_cpu_groups() {
        let allowed = topology::allowed_cores();
        let text = topology::format_list(&allowed);
        let opts = OpenOptions {
            cpu_groups: Some(text.clone()),
            ..Default::default()
        };
        let list = open(&opts).unwrap();
        assert_eq!(list.len(), 1);
        assert_eq!(
            list[0].processor().capabilities.compute_units,
            Some(allowed.len() as u32)
        );
        let bad = OpenOptions {
            cpu_groups: Some("0-4096".into()),
            ..Default::default()
        };
        assert!(matches!(open(&bad), Err(Error::BadRequest { .. })));
    }

    #[test]
    fn submit_and_both_waits_give_the_product() {
        // Many rows (the `gemm` crate), and few in the backend's own loop
        // in both listed types, whatever the build.
        let mut b = backend();
        b.small_rows = true;
        for (m, dtype) in [
            (33, DType::F32),
            (3, DType::F32),
            (1, DType::F16),
            (8, DType::F16),
        ] {
            submit_and_wait(&mut b, GemmShape::new(m, 65, 17).unwrap(), dtype);
        }
    }

    fn submit_and_wait(b: &mut CpuBackend, shape: GemmShape, dtype: DType) {
        let (a, w) = crate::verify::inputs(&shape, 0);
        let tol = crate::default_tolerance(dtype, shape.k.get());
        for order in [OperandOrder::Aw, OperandOrder::Transposed] {
            let spec = GemmSpec {
                shape,
                dtype,
                order,
                weights: WeightMode::Static,
            };
            let mut g = b.prepare(&spec, &w).unwrap();
            g.write_input(&a).unwrap();
            for mode in [SyncMode::Block, SyncMode::Poll { predicted_us: 50.0 }] {
                g.submit().unwrap();
                assert!(g.submit().is_err(), "double submit must fail");
                let t = g.wait(mode).unwrap();
                assert!(t.host_us > 0.0);
                let mut c = vec![0f32; (shape.m.get() * 17) as usize];
                g.read_output(&mut c).unwrap();
                let r = crate::verify::check(&shape, &a, &w, &c);
                assert!(r.passes(tol), "{shape} {dtype} {order} {mode:?}: {r:?}");
            }
            assert!(g.wait(SyncMode::Block).is_err(), "wait without submit");
        }
    }

    /// An f32 `transposed` GEMM of `shape` prepared on `b` with the inputs of
    /// `verify::inputs(shape, salt)`, its input written.
    fn transposed_gemm(b: &mut CpuBackend, shape: GemmShape, salt: u64) -> Box<dyn Gemm> {
        let (a, w) = crate::verify::inputs(&shape, salt);
        let spec = GemmSpec {
            shape,
            dtype: DType::F32,
            order: OperandOrder::Transposed,
            weights: WeightMode::Static,
        };
        let mut g = b.prepare(&spec, &w).unwrap();
        g.write_input(&a).unwrap();
        g
    }

    #[test]
    fn a_late_wait_reports_the_runs_own_time() {
        // The runtime waits for a GPU's steps before a CPU part: the CPU
        // part's time is its run's, not the moment the host looked.
        let mut b = backend();
        let mut g = transposed_gemm(&mut b, GemmShape::new(1, 64, 64).unwrap(), 0);
        g.submit().unwrap();
        std::thread::sleep(Duration::from_millis(60));
        let t = g.wait(SyncMode::Block).unwrap();
        let ran = t.ran_us.expect("the worker's end");
        assert!(t.host_us >= 60_000.0, "{t:?}");
        assert!(ran > 0.0 && ran < t.host_us, "{t:?}");
        assert_eq!(t.best_us(), ran);
        // Run synchronously, the host's clock is the run's.
        let t = g.execute().unwrap();
        assert_eq!(t.ran_us, None);
    }

    #[test]
    fn workers_poll_after_a_run_for_the_hold_only() {
        let group = || CoreGroup {
            cores: topology::allowed_cores(),
            max_khz: None,
        };
        let spec = GemmSpec {
            shape: GemmShape::new(1, 64, 64).unwrap(),
            dtype: DType::F32,
            order: OperandOrder::Aw,
            weights: WeightMode::Static,
        };
        let (a, w) = crate::verify::inputs(&spec.shape, 0);
        let product = |g: &mut Box<dyn Gemm>| {
            let mut c = vec![0f32; 64];
            g.read_output(&mut c).unwrap();
            let r = crate::verify::check(&spec.shape, &a, &w, &c);
            assert!(r.passes(1e-5), "{r:?}");
        };
        let mut b = CpuBackend::with_poll(0, group(), Duration::from_millis(500)).unwrap();
        assert!(b.processor().driver.contains("polling 500000 µs"));
        let mut g = b.prepare(&spec, &w).unwrap();
        g.write_input(&a).unwrap();
        g.submit().unwrap();
        g.wait(SyncMode::Block).unwrap();
        // Every worker polls after the run (the hold is far longer than
        // the run), and a run among the pollers gives the product.
        assert_eq!(b.keep_warm.live(), b.cores().len());
        product(&mut g);
        g.execute().unwrap();
        product(&mut g);
        // Then they stop.
        let t = Instant::now();
        while b.keep_warm.live() > 0 {
            assert!(t.elapsed() < Duration::from_secs(10), "pollers never ended");
            std::thread::sleep(Duration::from_millis(1));
        }
        // No hold: no pollers, the product all the same.
        let mut b = CpuBackend::with_poll(0, group(), Duration::ZERO).unwrap();
        let mut g = b.prepare(&spec, &w).unwrap();
        g.write_input(&a).unwrap();
        g.execute().unwrap();
        assert_eq!(b.keep_warm.live(), 0);
        product(&mut g);
    }

    #[test]
    fn evicting_between_runs_keeps_the_product() {
        // The eviction runs on the group's own workers (`evict_on`): the
        // GEMM after it still runs, on the same pool, to the right result.
        let mut b = backend();
        let shape = GemmShape::new(9, 300, 40).unwrap();
        let (a, w) = crate::verify::inputs(&shape, 1);
        let mut g = transposed_gemm(&mut b, shape, 1);
        for _ in 0..2 {
            g.evict_caches().unwrap();
            g.execute().unwrap();
            let mut c = vec![0f32; 9 * 40];
            g.read_output(&mut c).unwrap();
            let r = crate::verify::check(&shape, &a, &w, &c);
            assert!(r.passes(1e-5), "{r:?}");
        }
    }

    #[test]
    fn microbenchmarks_return_positive_samples() {
        let mut b = backend();
        for bench in [
            MicrobenchKind::CopyH2d,
            MicrobenchKind::SubmitEmpty,
            MicrobenchKind::SubmitBusy,
            MicrobenchKind::SyncBlock,
            MicrobenchKind::SyncPoll,
        ] {
            let req = MicrobenchRequest {
                id: "x".into(),
                processor: "cpu:0".into(),
                bench,
                bytes: Some(4096),
                peer: None,
                shape: None,
            };
            let s = b.microbench(&req).unwrap();
            assert!(
                s.len() == 1 && s[0] > 0.0 && s[0].is_finite(),
                "{bench:?}: {s:?}"
            );
        }
        let req = MicrobenchRequest {
            id: "x".into(),
            processor: "cpu:0".into(),
            bench: MicrobenchKind::CopyD2h,
            bytes: None,
            peer: None,
            shape: None,
        };
        assert!(matches!(b.microbench(&req), Err(Error::BadRequest { .. })));
    }
}
