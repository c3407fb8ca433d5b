//! How long a case or benchmark will take, learnt as rows arrive: what
//! fills a batch to its time target and stops items that no longer fit the
//! budget.

use std::collections::{HashMap, HashSet};

use hetero_plan::{GemmShape, MicrobenchKind, Processor, ProcessorApi, ProcessorKind, RunParams};

use crate::design::{Group, Item};
use crate::guide::{Point, ThroughputGuide};
use crate::journal::Rows;

/// Seconds a case or benchmark is expected to take, learnt as rows arrive.
pub(super) struct CostModel {
    run: RunParams,
    /// Each processor's prior cost of a run: fixed µs, flop/s and the
    /// seconds of a cache eviction ([`prior_run`]).
    priors: HashMap<String, (f64, f64, f64)>,
    /// Processors whose backend times kernels alone under the kernel timer
    /// (CUDA's alone), each such run followed by an ordinary one.
    kernel_only: HashSet<String>,
    pub guides: HashMap<Group, ThroughputGuide>,
    per_proc: HashMap<String, ThroughputGuide>,
    /// Observed wall time / estimate, per processor and kind of item
    /// (GEMM cases apart from microbenchmarks: their estimates miss by
    /// different factors).
    factor: HashMap<(String, bool), f64>,
    /// Seconds from spawning the agent to its hello line.
    pub startup: f64,
}

impl CostModel {
    /// A model with no rows yet: estimates from each processor's kind.
    pub fn new(run: RunParams, processors: &[Processor]) -> CostModel {
        CostModel {
            run,
            priors: processors
                .iter()
                .map(|p| (p.id.clone(), prior_run(p)))
                .collect(),
            kernel_only: processors
                .iter()
                .filter(|p| p.api == ProcessorApi::Cuda)
                .map(|p| p.id.clone())
                .collect(),
            guides: HashMap::new(),
            per_proc: HashMap::new(),
            factor: HashMap::new(),
            startup: 1.0,
        }
    }

    /// The same model before any row: the estimates of the priors alone,
    /// which do not depend on what a dataset holds.
    pub fn uncalibrated(&self) -> CostModel {
        CostModel {
            run: self.run,
            priors: self.priors.clone(),
            kernel_only: self.kernel_only.clone(),
            guides: HashMap::new(),
            per_proc: HashMap::new(),
            factor: HashMap::new(),
            startup: 1.0,
        }
    }

    /// The throughput guides again, from every usable row.
    pub fn rebuild(&mut self, rows: &Rows) {
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
        self.guides = groups
            .into_iter()
            .map(|(g, v)| (g, ThroughputGuide::new(v)))
            .collect();
        self.per_proc = procs
            .into_iter()
            .map(|(g, v)| (g, ThroughputGuide::new(v)))
            .collect();
    }

    /// The uncalibrated estimate, seconds.
    fn raw(&self, item: &Item) -> f64 {
        match item {
            Item::Case(c) => {
                let group = (c.processor.clone(), c.dtype, c.order);
                let per_run_us = self
                    .guides
                    .get(&group)
                    .and_then(|q| q.predict(&c.shape))
                    .or_else(|| self.per_proc.get(&c.processor)?.predict(&c.shape))
                    .unwrap_or_else(|| {
                        let (fixed_us, flops, _) = self.prior(&c.processor);
                        fixed_us + c.shape.flops() / flops * 1e6
                    });
                let run = c.run.unwrap_or(self.run);
                // The kernel timer follows each timed run with an ordinary one.
                let twice = run.kernel_timer && self.kernel_only.contains(&c.processor);
                let timed = run.repetitions * if twice { 2 } else { 1 };
                let runs = (run.warmups + timed + 2) as f64;
                // Warming up lasts at least `warmup_ms`.
                let warm = run.warmup_ms as f64 * 1e-3;
                // Cold caches: an eviction before every timed run.
                let evict = if run.cold_cache || run.rotate_weights {
                    timed as f64 * self.prior(&c.processor).2
                } else {
                    0.0
                };
                runs * per_run_us * 1e-6 + warm + evict + CASE_OVERHEAD_S + setup_seconds(&c.shape)
            }
            Item::Bench(b) => {
                let runs = (self.run.warmups + self.run.repetitions) as f64;
                let (bytes, fixed) = match b.bench {
                    // Two GEMVs streaming 64 MiB of weights, several times:
                    // 0.5 to 2.6 s each on a 16-core Xeon host with an H200.
                    MicrobenchKind::BandwidthAlone | MicrobenchKind::BandwidthConcurrent => {
                        (b.bytes.unwrap_or(64 << 20), 0.5)
                    }
                    // Timed loops of a fixed length: about a second each there.
                    MicrobenchKind::SubmitEmpty | MicrobenchKind::SyncBlock => {
                        (b.bytes.unwrap_or(0), 1.0)
                    }
                    _ => (b.bytes.unwrap_or(0), 0.02),
                };
                let graph = b.shape.map_or(0.0, |s| setup_seconds(&s) * 5.0);
                fixed + runs * bytes as f64 / 1e9 + graph
            }
        }
    }

    /// A processor's prior ([`prior_run`]).
    fn prior(&self, id: &str) -> (f64, f64, f64) {
        self.priors
            .get(id)
            .copied()
            .unwrap_or((20.0, 1e10, HOST_EVICT_S))
    }

    /// The calibrated estimate, seconds.
    pub fn estimate(&self, item: &Item) -> f64 {
        self.raw(item) * self.factor.get(&factor_key(item)).copied().unwrap_or(1.0)
    }

    /// Calibrates the processor's factor with an item's wall time.
    pub fn observe(&mut self, item: &Item, wall: f64) {
        let raw = self.raw(item);
        if raw <= 0.0 || !wall.is_finite() {
            return;
        }
        // The factor corrects the estimates as a whole; it never goes below
        // 0.5 so that small cases, whose overheads dominate, cannot make a
        // large one look cheap enough to start near the end of the budget.
        let ratio = (wall / raw).clamp(0.5, 20.0);
        let f = self.factor.entry(factor_key(item)).or_insert(ratio);
        *f = 0.7 * *f + 0.3 * ratio;
    }
}

/// The key of an item's calibration factor: its processor, and whether it
/// is a microbenchmark.
fn factor_key(item: &Item) -> (String, bool) {
    (item.processor().to_string(), matches!(item, Item::Bench(_)))
}

/// What the agent spends on a case besides its runs, its warm-up time and
/// its setup: the row's verification, output and bookkeeping. On a
/// 16-core Xeon host with an H200, the wall time between two rows was
/// 0.01 to 0.07 s (medians per processor) above the runs and the setup.
const CASE_OVERHEAD_S: f64 = 0.03;

/// A processor's cost of one run before any of its rows is measured:
/// fixed µs and flop/s, low on purpose so that a first batch and the
/// budget plan err on the long side, and the seconds of one cache
/// eviction (`--cold-cache`). A CPU counts 15 Gflop/s a core where the
/// probe gives its cores (a 16-core Xeon host ran 4096³ f32 at 630
/// Gflop/s). OpenCL on a CPU (PoCL) pays a fixed cost on every run: on
/// that host 80 to 110 ms a run below 2 Gflop, about 30 Gflop/s above.
pub(super) fn prior_run(p: &Processor) -> (f64, f64, f64) {
    match (p.kind, p.api) {
        (ProcessorKind::Gpu, _) => (20.0, 2e11, GPU_EVICT_S),
        (ProcessorKind::Npu, _) => (20.0, 5e11, HOST_EVICT_S),
        (ProcessorKind::Cpu, ProcessorApi::Opencl) => (80e3, 3e10, HOST_EVICT_S),
        _ => (
            20.0,
            p.capabilities
                .compute_units
                .map_or(1e10, |cores| 1.5e10 * cores.max(1) as f64),
            HOST_EVICT_S,
        ),
    }
}

/// One eviction of the host's caches: writing up to 512 MiB took 77 ms a
/// run on a 2-core x86-64 machine with a 260 MiB cache (about 180 ms in a
/// debug build).
const HOST_EVICT_S: f64 = 0.1;
/// One eviction of a GPU's L2, by a kernel.
const GPU_EVICT_S: f64 = 0.005;

/// Input generation, the CPU reference check and buffer setup, seconds.
fn setup_seconds(s: &GemmShape) -> f64 {
    let (m, k, n) = s.mkn();
    let (m, k, n) = (m as f64, k as f64, n as f64);
    let elems = m * k + k * n + m * n;
    let checked = (m * n).min(4096.0 + 260.0);
    2e-4 + elems * 2e-9 + 2.0 * checked * k * 2e-9
}
