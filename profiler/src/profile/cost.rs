//! How long a case or benchmark will take, learnt as rows arrive: what
//! fills a batch to its time target and stops items that no longer fit the
//! budget.

use std::collections::HashMap;

use hetero_plan::{GemmShape, MicrobenchKind, Processor, ProcessorKind, RunParams};

use crate::design::{Group, Item};
use crate::guide::{Point, ThroughputGuide};
use crate::journal::Rows;

/// Seconds a case or benchmark is expected to take, learnt as rows arrive.
pub(super) struct CostModel {
    run: RunParams,
    kinds: HashMap<String, ProcessorKind>,
    pub guides: HashMap<Group, ThroughputGuide>,
    per_proc: HashMap<String, ThroughputGuide>,
    /// Observed wall time / estimate, per processor.
    factor: HashMap<String, f64>,
    /// Seconds from spawning the agent to its hello line.
    pub startup: f64,
}

impl CostModel {
    /// A model with no rows yet: estimates from each processor's kind.
    pub fn new(run: RunParams, processors: &[Processor]) -> CostModel {
        CostModel {
            run,
            kinds: processors.iter().map(|p| (p.id.clone(), p.kind)).collect(),
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

    /// The calibrated estimate, seconds.
    pub fn estimate(&self, item: &Item) -> f64 {
        self.raw(item) * self.factor.get(item.processor()).copied().unwrap_or(1.0)
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
