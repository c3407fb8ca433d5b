//! What `hetero chart` can draw from, and the series it extracts.

use std::collections::BTreeMap;
use std::path::Path;

use hetero_plan::{DType, GemmShape, ModelSpec, OperandOrder, Plan, Predictor, Timing};
use hetero_profiler::fit::Report;
use serde::Deserialize;

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
    /// A plan, with the predictor and model it was solved with when given
    /// (to re-evaluate every candidate).
    Plan {
        /// The plan.
        plan: Box<Plan>,
        /// Predictor and model, fingerprints checked.
        eval: Option<Box<(Predictor, ModelSpec)>>,
    },
    /// A runtime report (`hetero run --json`).
    RunReport(RunReport),
}

/// The part of a runtime report (`hetero run --json`, runtime-min's
/// `Report`) the chart reads.
#[derive(Debug, Clone, Deserialize)]
pub struct RunReport {
    /// The plan file.
    pub plan: String,
    /// The model.
    pub model: String,
    /// `prefill` or `decode`.
    pub phase: String,
    /// Sequence length or tokens per step.
    pub len: u32,
    /// `measured`, `simulated` or `emulated`.
    pub timing: String,
    /// Predicted time of one pass or step, µs.
    pub predicted_us: f64,
    /// Measured time of one pass or step, µs.
    pub measured_us: f64,
    /// Per operator.
    pub per_op: Vec<RunOp>,
}

/// One operator of a runtime report.
#[derive(Debug, Clone, Deserialize)]
pub struct RunOp {
    /// Operator.
    pub op: String,
    /// One layer's worth, predicted, µs.
    pub predicted_us: f64,
    /// One layer's worth, measured, µs.
    pub measured_us: f64,
    /// Its parts.
    pub parts: Vec<RunPart>,
}

/// One part of an operator's decision in a runtime report.
#[derive(Debug, Clone, Deserialize)]
pub struct RunPart {
    /// Processor.
    pub processor: String,
    /// Predicted, µs.
    pub predicted_us: f64,
    /// Measured, µs.
    pub measured_us: f64,
    /// `real`, `simulated` or `emulated`.
    pub timing: String,
}

impl Input {
    /// Tells the input's kind from what it is. `predictor` overlays a
    /// dataset, or with `model` re-evaluates a plan's candidates.
    pub fn detect(
        path: &Path,
        predictor: Option<&Path>,
        model: Option<&Path>,
    ) -> anyhow::Result<Input> {
        if path.is_dir() {
            if let Some(m) = model {
                return Err(BadInput(format!(
                    "--model {}: only a plan uses a model; {} is a dataset folder",
                    m.display(),
                    path.display()
                ))
                .into());
            }
            let predictor = predictor.map(hetero_plan::load::<Predictor>).transpose()?;
            return Ok(Input::Dataset {
                data: Box::new(load_dataset(path)?),
                predictor,
            });
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| BadInput(format!("{}: {e}", path.display())))?;
        let is_ron = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("ron"));
        let json: Option<serde_json::Value> = if is_ron {
            None
        } else {
            serde_json::from_str(&text).ok()
        };
        let has = |key: &str| json.as_ref().is_some_and(|v| v.get(key).is_some());
        if is_ron || (has("ops") && has("schema_version")) {
            let plan: Plan = hetero_plan::load(path)?;
            let eval = plan_eval(&plan, predictor, model)?;
            return Ok(Input::Plan {
                plan: Box::new(plan),
                eval,
            });
        }
        let only_plans = |what: &str| {
            BadInput(format!(
                "{what} is only for a plan or (--predictor) a dataset folder; {} is a report",
                path.display()
            ))
        };
        if let Ok(report) = serde_json::from_str::<Report>(&text) {
            if predictor.is_some() || model.is_some() {
                return Err(only_plans("--predictor/--model").into());
            }
            return Ok(Input::FitReport(report));
        }
        if has("per_op") {
            let report: RunReport = serde_json::from_str(&text).map_err(|e| {
                BadInput(format!(
                    "{}: not a runtime report (hetero run --json): {e}",
                    path.display()
                ))
            })?;
            if predictor.is_some() || model.is_some() {
                return Err(only_plans("--predictor/--model").into());
            }
            return Ok(Input::RunReport(report));
        }
        Err(BadInput(format!(
            "{}: not a plan (hetero solve), a dataset folder, a fit report (hetero fit --report) or a runtime report (hetero run --json)",
            path.display()
        ))
        .into())
    }
}

/// Loads the predictor and model a plan's candidates are re-evaluated
/// with: both or neither, and only the ones it was solved with.
fn plan_eval(
    plan: &Plan,
    predictor: Option<&Path>,
    model: Option<&Path>,
) -> anyhow::Result<Option<Box<(Predictor, ModelSpec)>>> {
    let (pp, mp) = match (predictor, model) {
        (None, None) => return Ok(None),
        (Some(p), Some(m)) => (p, m),
        (Some(_), None) => {
            return Err(BadInput(format!(
                "--predictor without --model: re-evaluating the candidates of a plan needs both; give --model with the config the plan was solved for (`{}`)",
                plan.model.name
            ))
            .into());
        }
        (None, Some(_)) => {
            return Err(BadInput(format!(
                "--model without --predictor: re-evaluating the candidates of a plan needs both; give --predictor with the predictor the plan was solved with (`{}`)",
                plan.predictor.name
            ))
            .into());
        }
    };
    let (predictor, pfp) = crate::solve_cmd::load_predictor(pp)?;
    let model = crate::solve_cmd::load_model(mp)?;
    plan.check_inputs(Some(&pfp), Some(&model.fingerprint()))
        .map_err(|e| BadInput(e.to_string()))?;
    Ok(Some(Box::new((predictor, model))))
}

/// Measured points of one processor along one dimension, the others fixed.
pub struct StageSeries {
    /// Processor id.
    pub processor: String,
    /// Where its times come from.
    pub timing: Timing,
    /// The swept dimension (`M`, `K` or `N`).
    pub axis: &'static str,
    /// The fixed part, e.g. `K=1536 N=8960 f16 transposed`.
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
                            // The model's curve: the measured points
                            // are drawn as themselves.
                            let m = p.model(&processor, dtype)?;
                            Some((v, m.model_us(shape, order)?))
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
