//! What `hetero chart` can draw from, and the series it extracts.

use std::collections::BTreeMap;
use std::path::Path;

use hetero_plan::{DType, GemmShape, OperandOrder, Predictor, Timing};
use hetero_profiler::fit::Report;

use crate::BadInput;
use crate::fit_cmd::{Loaded, load_dataset};

/// A chart input.
pub enum Input {
    /// A dataset folder, with an optional predictor to overlay.
    Dataset {
        /// The rows.
        data: Box<Loaded>,
        /// The predictor.
        predictor: Option<Predictor>,
    },
    /// A fit report.
    FitReport(Report),
}

impl Input {
    /// Tells the input's kind from what it is.
    pub fn detect(path: &Path, predictor: Option<&Path>) -> anyhow::Result<Input> {
        if path.is_dir() {
            let predictor = predictor.map(hetero_plan::load::<Predictor>).transpose()?;
            return Ok(Input::Dataset {
                data: Box::new(load_dataset(path)?),
                predictor,
            });
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| BadInput(format!("{}: {e}", path.display())))?;
        if let Ok(report) = serde_json::from_str::<Report>(&text) {
            return Ok(Input::FitReport(report));
        }
        Err(BadInput(format!(
            "{}: not a dataset folder or a fit report (hetero fit --report)",
            path.display()
        ))
        .into())
    }
}

/// Measured points of one processor along one dimension, the others fixed.
pub struct StageSeries {
    /// Processor id.
    pub processor: String,
    /// Where its times come from.
    pub timing: Timing,
    /// The swept dimension (`M`, `K` or `N`).
    pub axis: &'static str,
    /// The fixed part, e.g. `K=1536 N=8960 f16 wt_at`.
    pub fixed: String,
    /// (dimension value, median µs), sorted.
    pub measured: Vec<(u32, f64)>,
    /// The predictor's curve at every integer value of the dimension in range.
    pub predicted: Vec<(u32, f64)>,
}

impl StageSeries {
    /// "real", or a warning that the times are not hardware latencies.
    pub fn timing_note(&self) -> &'static str {
        match self.timing {
            Timing::Real => "real measurements",
            Timing::Emulated => "EMULATED times (not hardware latency)",
            Timing::Simulated => "SIMULATED times (not hardware latency)",
        }
    }
}

/// For each processor, the line through the dataset with the most distinct
/// values along one dimension.
pub fn stage_series(data: &Loaded, predictor: Option<&Predictor>) -> Vec<StageSeries> {
    type Key = (String, DType, OperandOrder, usize, u32, u32);
    let mut lines: BTreeMap<Key, BTreeMap<u32, f64>> = BTreeMap::new();
    for r in data.rows.iter().filter(|r| r.is_usable()) {
        let us = r.median_us.expect("usable rows have a median");
        let dims = [r.m, r.k, r.n];
        for axis in 0..3 {
            let fixed: Vec<u32> = (0..3).filter(|d| *d != axis).map(|d| dims[d]).collect();
            lines
                .entry((
                    r.processor.clone(),
                    r.dtype,
                    r.order,
                    axis,
                    fixed[0],
                    fixed[1],
                ))
                .or_default()
                .insert(dims[axis], us);
        }
    }
    let mut best: BTreeMap<String, (Key, BTreeMap<u32, f64>)> = BTreeMap::new();
    for (key, pts) in lines {
        let better = best.get(&key.0).is_none_or(|(_, b)| pts.len() > b.len());
        if better && pts.len() >= 3 {
            best.insert(key.0.clone(), (key, pts));
        }
    }
    best.into_values()
        .map(|((processor, dtype, order, axis, f0, f1), pts)| {
            let names = ["M", "K", "N"];
            let fixed_names: Vec<&str> = (0..3).filter(|d| *d != axis).map(|d| names[d]).collect();
            let measured: Vec<(u32, f64)> = pts.into_iter().collect();
            let (lo, hi) = (measured[0].0, measured[measured.len() - 1].0);
            let step = ((hi - lo) / 600).max(1);
            let predicted = predictor
                .map(|p| {
                    (lo..=hi)
                        .step_by(step as usize)
                        .filter_map(|v| {
                            let mut d = [0u32; 3];
                            d[axis] = v;
                            let others: Vec<usize> = (0..3).filter(|x| *x != axis).collect();
                            d[others[0]] = f0;
                            d[others[1]] = f1;
                            let shape = GemmShape::new(d[0], d[1], d[2])?;
                            Some((v, p.gemm_us(&processor, shape, dtype, order)?))
                        })
                        .collect()
                })
                .unwrap_or_default();
            let timing = data
                .profile
                .processors
                .iter()
                .find(|p| p.id == processor)
                .map_or(Timing::Real, |p| p.timing());
            StageSeries {
                fixed: format!(
                    "{}={f0} {}={f1} {dtype} {order}",
                    fixed_names[0], fixed_names[1]
                ),
                processor,
                timing,
                axis: names[axis],
                measured,
                predicted,
            }
        })
        .collect()
}
