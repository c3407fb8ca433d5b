//! Measurements against measurements, and a predictor against a profile it
//! was not fitted on.
//!
//! The k-fold score of `hetero fit` holds out rows of the same run, and its
//! noise ceiling ([`super::noise_ceiling_10pct`]) sees only the scatter
//! within each row. Two questions need a second, independent profile of the
//! same device:
//!
//! - **[`agreement`]**: how well do two runs of the same cases agree? A
//!   case's medians from two runs differ by the scatter of both runs plus
//!   whatever drifts between them (clocks, the load, a virtual machine's
//!   cores sharing one host core). Their share within ±10 % is a ceiling
//!   for any predictor that is scored against one run's medians, and it
//!   includes the drift the noise ceiling leaves out.
//! - **[`test_predictor`]**: how close is a predictor to a fresh run? That
//!   is what the solver and the runtime rely on.

use std::collections::BTreeMap;

use hetero_plan::{DType, MeasurementRow, OperandOrder, Predictor, RowStatus, Score, Stats};
use serde::{Deserialize, Serialize};

use super::{FitError, WorstShape, score, usable_groups, worst_shapes};

/// A case measured in both runs, and how far apart they are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairDiff {
    /// The case id (processor/shape/dtype/order).
    pub case_id: String,
    /// Median of the first run, µs.
    pub first_us: f64,
    /// Median of the second run, µs.
    pub second_us: f64,
    /// (second − first) / first, percent.
    pub diff_pct: f64,
}

/// How two runs of one (processor, dtype) agree on the cases both measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Agreement {
    /// Processor id.
    pub processor: String,
    /// Element type.
    pub dtype: DType,
    /// Cases usable in both runs.
    pub pairs: u32,
    /// Share of them whose second median is within ±5 % of the first.
    pub within_5pct: f64,
    /// Within ±10 %.
    pub within_10pct: f64,
    /// Within ±20 %.
    pub within_20pct: f64,
    /// Median of |second − first| / first, percent.
    pub median_abs_diff_pct: f64,
    /// Median of second / first: above 1 when the second run was slower
    /// overall (drift between the runs rather than scatter).
    pub median_ratio: f64,
    /// The pairs furthest apart (by |ln(second / first)|), at most five.
    pub worst: Vec<PairDiff>,
}

/// The rows a fit would use: ok, verified, with a positive finite median.
fn usable(rows: &[MeasurementRow]) -> BTreeMap<&str, (&MeasurementRow, f64)> {
    rows.iter()
        .filter(|r| r.status == RowStatus::Ok && r.verified)
        .filter_map(|r| {
            let us = r.median_us.filter(|v| v.is_finite() && *v > 0.0)?;
            Some((r.case_id.as_str(), (r, us)))
        })
        .collect()
}

/// The median through the crate-wide [`Stats`]; NaN for no values.
fn median(v: Vec<f64>) -> f64 {
    Stats::from_samples(&v).map_or(f64::NAN, |s| s.median_us)
}

/// Pairs the usable rows of two runs by case id and measures, per
/// (processor, dtype), how far the second run's medians are from the
/// first's. Groups with no common case are left out. Where one side of a
/// pair was timed without the launch path (`launch_us`) and the other with
/// it, the first side's launch path is added back (its median then is the
/// ordinary runs' median), so both are ordinary times.
pub fn agreement(first: &[MeasurementRow], second: &[MeasurementRow]) -> Vec<Agreement> {
    let b = usable(second);
    let mut groups: BTreeMap<(String, DType), Vec<PairDiff>> = BTreeMap::new();
    for (id, (row, a_us)) in usable(first) {
        let Some((b_row, b_us)) = b.get(id) else {
            continue;
        };
        let ordinary = |r: &MeasurementRow, us: f64| us + r.launch_us.unwrap_or(0.0);
        let (a_us, b_us) = match (row.launch_us, b_row.launch_us) {
            (Some(_), None) | (None, Some(_)) => (ordinary(row, a_us), ordinary(b_row, *b_us)),
            _ => (a_us, *b_us),
        };
        groups
            .entry((row.processor.clone(), row.dtype))
            .or_default()
            .push(PairDiff {
                case_id: id.to_string(),
                first_us: a_us,
                second_us: b_us,
                diff_pct: 100.0 * (b_us - a_us) / a_us,
            });
    }
    groups
        .into_iter()
        .map(|((processor, dtype), mut pairs)| {
            let n = pairs.len() as f64;
            let share = |x: f64| pairs.iter().filter(|p| p.diff_pct.abs() <= x).count() as f64 / n;
            let (w5, w10, w20) = (share(5.0), share(10.0), share(20.0));
            let median_abs_diff_pct = median(pairs.iter().map(|p| p.diff_pct.abs()).collect());
            let median_ratio = median(pairs.iter().map(|p| p.second_us / p.first_us).collect());
            let apart = |p: &PairDiff| (p.second_us / p.first_us).ln().abs();
            pairs.sort_by(|x, y| apart(y).total_cmp(&apart(x)));
            let count = pairs.len() as u32;
            pairs.truncate(5);
            Agreement {
                processor,
                dtype,
                pairs: count,
                within_5pct: w5,
                within_10pct: w10,
                within_20pct: w20,
                median_abs_diff_pct,
                median_ratio,
                worst: pairs,
            }
        })
        .collect()
}

/// A predictor scored on another profile's rows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestEntry {
    /// Processor id.
    pub processor: String,
    /// Element type.
    pub dtype: DType,
    /// The predictor's rows against the test rows (`samples` is the number
    /// of test rows).
    pub score: Score,
    /// The worst predictions, at most five.
    pub worst: Vec<WorstShape>,
    /// The score on the test rows whose shape and operand order the fitted
    /// profile did not measure: a held-out score, where `score` also counts
    /// cases the predictor was fitted on. `None` when every test case was
    /// fitted on.
    #[serde(default)]
    pub unseen: Option<Score>,
}

/// Scores `predictor` on every usable row of `rows` whose (processor,
/// dtype) it has a model for; rows of other processors are not counted.
/// Rows timed without the launch path (`launch_us`) are scored against the
/// kernels' model, others against the model plus its `launch_us`. The
/// models answer every shape, the ones the predictor keeps measured medians
/// of too ([`ProcessorModel::model_us`](hetero_plan::ProcessorModel::model_us)): this scores the fit.
/// `fitted` are the rows it was fitted on: the test rows of shapes (with
/// their operand order) not among them are also scored apart
/// ([`TestEntry::unseen`]). Errors like [`usable_groups`] on an ok row with
/// a bad timing.
pub fn test_predictor(
    predictor: &Predictor,
    rows: &[MeasurementRow],
    fitted: &[MeasurementRow],
) -> Result<Vec<TestEntry>, FitError> {
    // By content, not case id: a sweep's ids need not be the profiler's.
    // For a model that takes every order as `aw` (order-free), a shape
    // measured in either order is seen in both.
    let key_order = |processor: &str, dtype: DType, order: OperandOrder| {
        predictor
            .model(processor, dtype)
            .map_or(order, |m| m.model_order(order))
    };
    let seen: std::collections::HashSet<_> = usable(fitted)
        .values()
        .filter_map(|(r, _)| {
            Some((
                r.processor.as_str(),
                r.dtype,
                r.shape()?,
                key_order(&r.processor, r.dtype, r.order),
            ))
        })
        .collect();
    let mut out = Vec::new();
    for ((processor, dtype), samples) in usable_groups(rows)? {
        let Some(model) = predictor.model(&processor, dtype) else {
            continue;
        };
        // Like with like: a test row timed without the launch path is
        // scored against the kernels' model alone, an ordinary row against
        // the model plus its launch path (where the model has one).
        let pred: Vec<f64> = samples
            .iter()
            .map(|s| {
                let t = if s.launch_us.is_some() {
                    model
                        .model
                        .predict_us(s.shape, dtype, model.model_order(s.order))
                } else {
                    model.model_us(s.shape, s.order)
                };
                t.unwrap_or(f64::INFINITY)
            })
            .collect();
        let pairs: Vec<(f64, f64)> = samples.iter().zip(&pred).map(|(s, p)| (s.us, *p)).collect();
        let unseen_pairs: Vec<(f64, f64)> = samples
            .iter()
            .zip(&pairs)
            .filter(|(s, _)| {
                !seen.contains(&(
                    processor.as_str(),
                    dtype,
                    s.shape,
                    model.model_order(s.order),
                ))
            })
            .map(|(_, p)| *p)
            .collect();
        out.push(TestEntry {
            unseen: (!unseen_pairs.is_empty()).then(|| score(&unseen_pairs, 0)),
            processor,
            dtype,
            score: score(&pairs, 0),
            worst: worst_shapes(&samples, &pred),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use hetero_plan::{LatencyModel, OperandOrder, ProcessorModel};

    use super::*;

    /// The fit tests' row (f16), under case id `id`.
    fn row(id: &str, processor: &str, us: f64) -> MeasurementRow {
        MeasurementRow {
            case_id: id.into(),
            ..crate::fit::tests::row(0, processor, 8, 64, 64, OperandOrder::Aw, us)
        }
    }

    #[test]
    fn agreement_pairs_by_case_and_counts_bands() {
        let first = vec![
            row("a", "cpu:0", 100.0),
            row("b", "cpu:0", 100.0),
            row("c", "cpu:0", 100.0),
            row("d", "cpu:0", 100.0),
            row("only-first", "cpu:0", 100.0),
            row("g", "gpu:0", 10.0),
        ];
        let mut failed = row("e", "cpu:0", 100.0);
        failed.status = RowStatus::Failed;
        let second = vec![
            row("a", "cpu:0", 103.0),
            row("b", "cpu:0", 92.0),
            row("c", "cpu:0", 115.0),
            row("d", "cpu:0", 250.0),
            failed,
            row("g", "gpu:0", 10.0),
        ];
        let groups = agreement(&first, &second);
        assert_eq!(groups.len(), 2);
        let cpu = &groups[0];
        assert_eq!((cpu.processor.as_str(), cpu.pairs), ("cpu:0", 4));
        assert_eq!(cpu.within_5pct, 0.25);
        assert_eq!(cpu.within_10pct, 0.5);
        assert_eq!(cpu.within_20pct, 0.75);
        assert_eq!(cpu.worst[0].case_id, "d");
        assert!((cpu.worst[0].diff_pct - 150.0).abs() < 1e-9);
        assert!(
            (cpu.median_ratio - 1.09).abs() < 1e-9,
            "{}",
            cpu.median_ratio
        );
        assert!((cpu.median_abs_diff_pct - 11.5).abs() < 1e-9);
        assert_eq!((groups[1].pairs, groups[1].within_5pct), (1, 1.0));

        // A kernel-only row against an ordinary one: its launch path is
        // added back, so 6 µs of kernels and 4 µs of launch match 10 µs.
        let kernels = MeasurementRow {
            launch_us: Some(4.0),
            ..row("g", "gpu:0", 6.0)
        };
        let g = &agreement(std::slice::from_ref(&kernels), &first[5..])[0];
        assert_eq!(
            (g.pairs, g.within_5pct, g.worst[0].first_us),
            (1, 1.0, 10.0)
        );
        // Both kernel-only: compared as they are.
        let one = std::slice::from_ref(&kernels);
        let g = &agreement(one, one)[0];
        assert_eq!(g.worst[0].first_us, 6.0);
    }

    #[test]
    fn a_predictor_is_scored_on_its_processors_rows_only() {
        let model = ProcessorModel {
            processor: "cpu:0".into(),
            dtype: DType::F16,
            model: LatencyModel::Linear {
                alpha_us: 100.0,
                beta_us: 0.0,
                work: hetero_plan::predictor::Work::Flops,
            },
            score: Score::default(),
            candidates: Vec::new(),
            launch_us: None,
            order_free: false,
            measured: Vec::new(),
        };
        let predictor = Predictor {
            schema_version: hetero_plan::SchemaVersion,
            dataset: hetero_plan::Fingerprint::of_bytes("d", b"d"),
            processors: vec![],
            models: vec![model],
            overheads: vec![],
        };
        let wider = |id: &str, us: f64| MeasurementRow {
            case_id: id.into(),
            ..crate::fit::tests::row(0, "cpu:0", 16, 64, 64, OperandOrder::Aw, us)
        };
        let rows = vec![
            row("a", "cpu:0", 100.0),
            wider("b", 125.0),
            row("g", "gpu:0", 1.0),
        ];
        // Fitted on a's shape (under another id: shapes count, not ids),
        // so only b is unseen.
        let mut fitted = vec![row("other-id", "cpu:0", 90.0), wider("b-wt", 1.0)];
        fitted[1].order = OperandOrder::Transposed;
        let t = test_predictor(&predictor, &rows, &fitted).unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].score.samples, 2);
        assert_eq!(t[0].score.within_10pct, 0.5);
        assert!((t[0].worst[0].error_pct + 20.0).abs() < 1e-9);
        let unseen = t[0].unseen.as_ref().expect("b is unseen");
        assert_eq!((unseen.samples, unseen.within_10pct), (1, 0.0));
        // Fitted on everything tested: nothing is unseen.
        let t = test_predictor(&predictor, &rows, &rows).unwrap();
        assert_eq!(t[0].unseen, None);
        // An order-free model has seen b in the other order too.
        let mut free = predictor.clone();
        free.models[0].order_free = true;
        let t = test_predictor(&free, &rows, &fitted).unwrap();
        assert_eq!(t[0].unseen, None, "b-wt stands for b");
    }
}
