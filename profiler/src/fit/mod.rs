//! Fitting latency models from measured rows.
//!
//! For every (processor, dtype) with enough usable rows, each model family is
//! scored by k-fold held-out error, the best is refitted on all rows, and the
//! choice is stored with its score and the runners-up. Trees and ensembles
//! learn ln(latency) on [`hetero_plan::predictor::features`]; the linear and
//! roofline models are fitted by relative least squares; the residual family
//! boosts trees on the ln-residual of the best parametric model, so that it
//! keeps the parametric trend past the measured shapes, where trees are flat.
//!
//! k-fold scores only see shapes inside the measured range, so on a near tie
//! the simpler family wins ([`choose`]).

mod conditions;
mod families;
pub mod line;
mod overheads;
pub mod repeat;
pub mod retest;
pub mod tree;

use std::collections::BTreeMap;

use hetero_plan::{
    DType, DeviceProfile, Fingerprint, GemmShape, MeasuredGemm, MeasurementRow, MicrobenchRow,
    OperandOrder, Predictor, ProcessorModel, RowStatus, SchemaVersion, Score, Stats,
};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

pub use families::Family;
pub use overheads::fit_overheads;
pub use repeat::Repeatability;
pub use retest::{Agreement, PairDiff, TestEntry, agreement, test_predictor};

/// Fewest usable rows a (processor, dtype) needs to be fitted.
pub const MIN_ROWS: usize = 12;

/// Why fitting failed. All of these are the dataset's fault (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum FitError {
    /// A usable-looking row has a timing that is not a positive finite number.
    #[error(
        "row `{case_id}` ({processor}): median_us is {value}; timings must be positive and finite"
    )]
    BadTiming {
        /// The row's case id.
        case_id: String,
        /// Its processor.
        processor: String,
        /// The offending value.
        value: f64,
    },
    /// Nothing could be fitted.
    #[error(
        "too few usable rows to fit any processor: need at least {MIN_ROWS} ok, verified rows per processor and dtype; have {have}"
    )]
    TooSmall {
        /// Usable rows per (processor, dtype), as `id/dtype: n`.
        have: String,
    },
    /// Kernel-only rows (with `launch_us`) and ordinary rows in one group:
    /// their times mean different things.
    #[error(
        "{processor}/{dtype}: {kernel_only} rows were timed without the launch path (hetero profile --kernel-timer) and {ordinary} with it; fit one kind: profile again, or merge datasets timed alike"
    )]
    MixedTiming {
        /// Processor id.
        processor: String,
        /// Element type.
        dtype: DType,
        /// Rows with `launch_us`.
        kernel_only: usize,
        /// Rows without.
        ordinary: usize,
    },
    /// Rows of one group measured under different conditions (a dataset
    /// resumed with `--allow-mixed`): their times do not compare.
    #[error(
        "{processor}/{dtype}: its rows were measured under different conditions: {sets}; fit one set: pass --conditions with the pairs that pick it (e.g. --conditions cache=warm)"
    )]
    MixedConditions {
        /// Processor id.
        processor: String,
        /// Element type.
        dtype: DType,
        /// Each set of conditions with its rows, as `N rows `label``.
        sets: String,
    },
    /// A tree could not be grown.
    #[error(transparent)]
    Tree(#[from] tree::TreeError),
}

/// Fitting options.
#[derive(Debug, Clone)]
pub struct FitParams {
    /// Folds of the cross-validation.
    pub folds: usize,
    /// Seed for fold assignment and ensembles.
    pub seed: u64,
    /// Families to try.
    pub families: Vec<Family>,
    /// Rows whose coefficient of variation over their timed runs is above
    /// this are left out (and counted in the report); all kept when `None`.
    pub max_cv: Option<f64>,
    /// Keep the profile's medians of the shapes it measured in the
    /// predictor ([`ProcessorModel::measured`], HeteroLLM's real-execution
    /// mode), which then answers those shapes with them; `false` (`hetero
    /// fit --model-only`): the model answers every shape.
    pub measured: bool,
    /// Fit only the rows (and microbenchmarks) measured under these
    /// conditions, `key=value` pairs of [`hetero_plan::Setup::label`]
    /// (`hetero fit --conditions`). `None`: all rows, and a group whose
    /// rows mix conditions is refused ([`FitError::MixedConditions`]).
    pub conditions: Option<Vec<(String, String)>>,
}

impl Default for FitParams {
    fn default() -> Self {
        FitParams {
            folds: 5,
            seed: 7,
            families: Family::ALL.to_vec(),
            max_cv: None,
            measured: true,
            conditions: None,
        }
    }
}

/// A held-out prediction that missed by the most.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorstShape {
    /// `MxKxN`.
    pub shape: String,
    /// Operand order.
    pub order: OperandOrder,
    /// Measured median, µs.
    pub measured_us: f64,
    /// Held-out prediction, µs.
    pub predicted_us: f64,
    /// (predicted − measured) / measured, percent.
    pub error_pct: f64,
}

/// One line of the fit report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReportEntry {
    /// Processor id.
    pub processor: String,
    /// Element type.
    pub dtype: DType,
    /// Where its times come from (`real`, `emulated`, `simulated`).
    pub timing: hetero_plan::Timing,
    /// The chosen family.
    pub model: String,
    /// Held-out MAPE, percent.
    pub mape: f64,
    /// Share of held-out rows within ±10 %.
    pub within_10pct: f64,
    /// Share within ±20 %.
    pub within_20pct: f64,
    /// Rows used.
    pub samples: u32,
    /// Usable rows left out because their cv was above the report's `max_cv`.
    #[serde(default)]
    pub excluded_noisy: u32,
    /// Held-out score of every family tried.
    pub candidates: Vec<(String, Score)>,
    /// Held-out accuracy of the chosen family by the rows' cv: how much of
    /// the miss is the measurements' own noise.
    #[serde(default)]
    pub by_cv: Vec<CvBand>,
    /// The share within ±10 % that even a perfect model would reach on
    /// these rows, given their own scatter ([`noise_ceiling_10pct`]); `None`
    /// when the rows carry no cv.
    #[serde(default)]
    pub noise_ceiling_10pct: Option<f64>,
    /// The worst held-out predictions of the chosen family.
    pub worst: Vec<WorstShape>,
    /// Every held-out prediction of the chosen family: (measured, predicted) µs.
    pub held_out: Vec<(f64, f64)>,
    /// The launch path added to every prediction (rows timed with the
    /// kernel timer; [`ProcessorModel::launch_us`]); the scores above are
    /// about the kernels alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_us: Option<f64>,
    /// How often the profile's repeat pass measured a case again within
    /// ±10 % of its first row: the ceiling `within_10pct` is measured
    /// against. `None` when the dataset has no repeats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeatability: Option<Repeatability>,
}

/// Held-out accuracy over the rows whose cv lies in `(above, up_to]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CvBand {
    /// Lower bound (exclusive; the first band includes 0 and rows without a cv).
    pub above: f64,
    /// Upper bound (inclusive); `None` for the last band.
    pub up_to: Option<f64>,
    /// Rows in the band.
    pub rows: u32,
    /// Their share within ±10 %.
    pub within_10pct: f64,
    /// Their MAPE, percent.
    pub mape: f64,
}

/// Band edges of [`CvBand`].
pub const CV_BANDS: [f64; 3] = [0.02, 0.05, 0.10];

/// Splits held-out (measured, predicted) pairs by the rows' cv.
pub fn cv_bands(samples: &[Sample], pred: &[f64]) -> Vec<CvBand> {
    let mut out = Vec::new();
    let mut lo = f64::NEG_INFINITY;
    for hi in CV_BANDS.iter().map(|&b| Some(b)).chain([None]) {
        let pairs: Vec<(f64, f64)> = samples
            .iter()
            .zip(pred)
            .filter(|(s, _)| {
                let c = s.cv.unwrap_or(0.0);
                c > lo && hi.is_none_or(|h| c <= h)
            })
            .map(|(s, p)| (s.us, *p))
            .collect();
        if !pairs.is_empty() {
            let sc = score(&pairs, 0);
            out.push(CvBand {
                above: lo.max(0.0),
                up_to: hi,
                rows: pairs.len() as u32,
                within_10pct: sc.within_10pct,
                mape: sc.mape,
            });
        }
        lo = hi.unwrap_or(f64::INFINITY);
    }
    out
}

/// The fit report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The dataset fitted.
    pub dataset: Fingerprint,
    /// The cv above which rows were left out, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cv: Option<f64>,
    /// One entry per fitted processor and dtype.
    pub entries: Vec<ReportEntry>,
    /// Groups with too few rows, as `processor/dtype: n rows`.
    pub skipped: Vec<String>,
    /// Microbenchmark repeats the profile's budget plan skipped (its
    /// `budget.json`): a resume with a longer budget measures them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped_microbench: Vec<String>,
    /// The predictor against another profile of the device (`hetero fit
    /// --test`), if one was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test: Option<TestRun>,
}

/// The fitted predictor scored on a second profile, and how the two
/// profiles agree where they measured the same cases.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestRun {
    /// The second profile.
    pub dataset: Fingerprint,
    /// The predictor on every usable row of it (`folds` is 0: not a
    /// cross-validation).
    pub entries: Vec<TestEntry>,
    /// The fitted profile against the second, case by case: a ceiling for
    /// `entries` that includes the drift between runs.
    pub agreement: Vec<Agreement>,
}

/// One usable measurement, as the fitting code sees it.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// Shape.
    pub shape: GemmShape,
    /// Operand order.
    pub order: OperandOrder,
    /// Median latency, µs.
    pub us: f64,
    /// Coefficient of variation of the row's timed runs, when known.
    pub cv: Option<f64>,
    /// Timed runs behind the median (0 when unknown).
    pub reps: u32,
    /// The host's launch path left out of `us` (kernel timer), µs.
    pub launch_us: Option<f64>,
}

/// The share of rows that a perfect model (one that knows each shape's true
/// median) would put within ±10 % of the *measured* median, given each
/// row's own scatter: a ceiling that no fit of these rows can beat.
///
/// The median of `n` runs with coefficient of variation `cv` scatters by
/// about `1.2533 · cv / √n` (the median's standard error under normal
/// noise), so a row is within ±10 % with probability
/// `erf(0.1 / (√2 · 1.2533 · cv / √n))`. Rows without a cv or a count of
/// runs are left out; `None` when no row has both. Only the scatter within
/// a row counts: drift between rows (clocks, load) lowers the real ceiling
/// further, so this one is optimistic.
pub fn noise_ceiling_10pct(samples: &[Sample]) -> Option<f64> {
    let p: Vec<f64> = samples
        .iter()
        .filter_map(|s| {
            let cv = s.cv.filter(|c| c.is_finite() && *c >= 0.0)?;
            (s.reps > 0).then_some(())?;
            let se = 1.2533 * cv / (s.reps as f64).sqrt();
            Some(if se == 0.0 {
                1.0
            } else {
                libm::erf(0.1 / (std::f64::consts::SQRT_2 * se))
            })
        })
        .collect();
    (!p.is_empty()).then(|| p.iter().sum::<f64>() / p.len() as f64)
}

/// Checks the rows and groups the usable ones by (processor, dtype).
///
/// Failed, unsupported, timed-out and unverified rows are never used; an
/// ok, verified row whose timing is not positive and finite is an error.
pub fn usable_groups(
    rows: &[MeasurementRow],
) -> Result<BTreeMap<(String, DType), Vec<Sample>>, FitError> {
    let mut groups: BTreeMap<(String, DType), Vec<Sample>> = BTreeMap::new();
    for r in rows {
        if r.status != RowStatus::Ok || !r.verified {
            continue;
        }
        let value = r.median_us.unwrap_or(f64::NAN);
        let shape = r.shape();
        if !(value.is_finite() && value > 0.0) || shape.is_none() {
            return Err(FitError::BadTiming {
                case_id: r.case_id.clone(),
                processor: r.processor.clone(),
                value,
            });
        }
        groups
            .entry((r.processor.clone(), r.dtype))
            .or_default()
            .push(Sample {
                shape: shape.expect("checked above"),
                order: r.order,
                us: value,
                cv: r.cv,
                reps: r.repetitions,
                // A row's launch path is a difference of two medians and
                // can come out below 0 on a fast kernel; the group's median
                // is what counts ([`launch_of`]).
                launch_us: r.launch_us.filter(|v| v.is_finite()),
            });
    }
    Ok(groups)
}

/// Scores held-out predictions.
pub fn score(pairs: &[(f64, f64)], folds: usize) -> Score {
    let n = pairs.len().max(1) as f64;
    let errs: Vec<f64> = pairs.iter().map(|(m, p)| ((p - m) / m).abs()).collect();
    Score {
        mape: 100.0 * errs.iter().sum::<f64>() / n,
        within_10pct: errs.iter().filter(|e| **e <= 0.10).count() as f64 / n,
        within_20pct: errs.iter().filter(|e| **e <= 0.20).count() as f64 / n,
        samples: pairs.len() as u32,
        folds: folds as u32,
    }
}

/// The held-out rows of each fold, for rows of the given shapes: the
/// distinct shapes, in a seeded shuffle, are dealt into `folds` sets, and
/// every row goes with its shape (each set sorted), 2 ≤ folds ≤ shapes.
///
/// A shape's rows are held out together: the two operand orders of one
/// shape often run the same kernel (on cuBLAS, within 1 % of each other in
/// half the shapes), so a held-out row whose twin was trained on would
/// score the model's memory of the twin, not its prediction of an
/// unmeasured shape.
pub fn fold_sets(shapes: &[GemmShape], folds: usize, seed: u64) -> Vec<Vec<usize>> {
    let mut distinct: Vec<GemmShape> = shapes.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    distinct.shuffle(&mut rand::rngs::StdRng::seed_from_u64(seed));
    let folds = folds.clamp(2, distinct.len().max(2));
    let fold_of: BTreeMap<GemmShape, usize> = distinct
        .into_iter()
        .enumerate()
        .map(|(j, shape)| (shape, j % folds))
        .collect();
    let mut sets = vec![Vec::new(); folds];
    for (i, shape) in shapes.iter().enumerate() {
        sets[fold_of[shape]].push(i);
    }
    sets
}

/// Held-out predictions of one family by k-fold cross-validation, in the
/// order of `samples`.
pub fn cross_validate(
    family: Family,
    samples: &[Sample],
    dtype: DType,
    folds: usize,
    seed: u64,
) -> Result<Vec<f64>, FitError> {
    let shapes: Vec<GemmShape> = samples.iter().map(|s| s.shape).collect();
    let per_fold: Vec<Result<Vec<(usize, f64)>, FitError>> = fold_sets(&shapes, folds, seed)
        .into_par_iter()
        .enumerate()
        .map(|(f, test)| {
            let train: Vec<Sample> = (0..samples.len())
                .filter(|i| test.binary_search(i).is_err())
                .map(|i| samples[i])
                .collect();
            let model = family.fit(&train, dtype, seed + f as u64)?;
            Ok(test
                .into_iter()
                .map(|i| {
                    let s = samples[i];
                    let p = model
                        .predict_us(s.shape, dtype, s.order)
                        .unwrap_or(f64::INFINITY);
                    (i, p)
                })
                .collect())
        })
        .collect();
    let mut pred = vec![f64::NAN; samples.len()];
    for fold in per_fold {
        for (i, p) in fold? {
            pred[i] = p;
        }
    }
    Ok(pred)
}

/// Ranks scores: most rows within ±10 %, then lowest MAPE.
fn better(a: &Score, b: &Score) -> bool {
    (a.within_10pct, -a.mape) > (b.within_10pct, -b.mape)
}

/// Held-out share within ±10 % that a simpler family may lose to the best
/// and still count as tied with it.
pub const TIE_WITHIN_10: f64 = 0.0025;
/// Relative MAPE a simpler family may lose and still count as tied (plus
/// 0.01 points, so that two near-exact fits tie).
pub const TIE_MAPE: f64 = 0.10;

/// The index of the chosen score: the best (most rows within ±10 %, then
/// lowest MAPE), unless a family with a lower [`Family::preference`] ties
/// with it (within [`TIE_WITHIN_10`] and [`TIE_MAPE`]). k-fold held-out rows lie inside the
/// measured range, so they cannot show that trees stay flat past it: on a
/// tie the family that extrapolates, and the one with fewer parameters, wins.
pub fn choose(scored: &[(Family, Score)]) -> Option<usize> {
    let best = (0..scored.len()).reduce(|a, b| {
        if better(&scored[b].1, &scored[a].1) {
            b
        } else {
            a
        }
    })?;
    let top = &scored[best].1;
    (0..scored.len())
        .filter(|&i| {
            let s = &scored[i].1;
            s.within_10pct >= top.within_10pct - TIE_WITHIN_10
                && s.mape <= top.mape * (1.0 + TIE_MAPE) + 0.01
        })
        .min_by_key(|&i| scored[i].0.preference())
}

/// The outcome of fitting one (processor, dtype).
#[derive(Debug, Clone)]
pub struct GroupFit {
    /// The chosen family.
    pub family: Family,
    /// The refitted model with its held-out score.
    pub model: ProcessorModel,
    /// The worst held-out predictions.
    pub worst: Vec<WorstShape>,
    /// Held-out accuracy by the rows' cv.
    pub by_cv: Vec<CvBand>,
    /// [`noise_ceiling_10pct`] of the rows fitted.
    pub noise_ceiling_10pct: Option<f64>,
    /// Every held-out (measured, predicted) pair, µs.
    pub held_out: Vec<(f64, f64)>,
}

/// The five predictions of `pred` (one per sample) furthest from their
/// samples' measured medians, worst first.
pub fn worst_shapes(samples: &[Sample], pred: &[f64]) -> Vec<WorstShape> {
    let mut worst: Vec<WorstShape> = samples
        .iter()
        .zip(pred)
        .map(|(s, p)| WorstShape {
            shape: s.shape.to_string(),
            order: s.order,
            measured_us: s.us,
            predicted_us: *p,
            error_pct: 100.0 * (p - s.us) / s.us,
        })
        .collect();
    worst.sort_by(|a, b| b.error_pct.abs().total_cmp(&a.error_pct.abs()));
    worst.truncate(5);
    worst
}

/// [`order_gap`] above which the two operand orders count as apart: the
/// order-blind families ([`Family::order_blind`]) are then not chosen.
/// About 16 %; a row's median of seven runs at a cv of 0.2 scatters by
/// about 10 %, so two orders of one speed stay below it.
pub const ORDER_GAP: f64 = 0.15;

/// How far the two operand orders are apart in `samples`: over the shapes
/// measured in both, the median of |ln(`transposed` µs / `aw` µs)|. `None` where
/// no shape was measured in both (an order-free processor's rows are all
/// `aw`).
pub fn order_gap(samples: &[Sample]) -> Option<f64> {
    let mut by: BTreeMap<GemmShape, [Vec<f64>; 2]> = BTreeMap::new();
    for s in samples {
        let side = usize::from(s.order == OperandOrder::Transposed);
        by.entry(s.shape).or_default()[side].push(s.us);
    }
    let gaps: Vec<f64> = by
        .values()
        .filter_map(|[aw, transposed]| {
            let aw = Stats::from_samples(aw)?.median_us;
            let transposed = Stats::from_samples(transposed)?.median_us;
            Some((transposed / aw).ln().abs())
        })
        .collect();
    Stats::from_samples(&gaps).map(|s| s.median_us)
}

/// The profile's median per (shape, order) of `samples`, sorted as
/// [`ProcessorModel::measured`] keeps it: a shape profiled more than once
/// (a refinement, a `--resume`) takes the median of its rows' medians.
pub fn measured_table(samples: &[Sample]) -> Vec<MeasuredGemm> {
    let mut by: BTreeMap<(GemmShape, OperandOrder), Vec<f64>> = BTreeMap::new();
    for s in samples {
        by.entry((s.shape, s.order)).or_default().push(s.us);
    }
    by.into_iter()
        .filter_map(|((shape, order), us)| {
            let us = Stats::from_samples(&us)?.median_us;
            Some(MeasuredGemm { shape, order, us })
        })
        .collect()
}

/// Fits one (processor, dtype) group: scores every family, refits the best.
/// For an `order_free` processor ([`hetero_plan::Capabilities::order_free`])
/// every row is taken as `aw`, and the model says so
/// ([`ProcessorModel::order_free`]): both orders are then predicted alike,
/// from one set of features.
pub fn fit_group(
    processor: &str,
    dtype: DType,
    samples: &[Sample],
    order_free: bool,
    params: &FitParams,
) -> Result<GroupFit, FitError> {
    let as_aw: Vec<Sample>;
    let samples = if order_free {
        as_aw = samples
            .iter()
            .map(|s| Sample {
                order: OperandOrder::Aw,
                ..*s
            })
            .collect();
        &as_aw
    } else {
        samples
    };
    let launch_us = launch_of(processor, dtype, samples)?;
    let mut scored: Vec<(Family, Score, Vec<f64>)> = Vec::new();
    for &family in &params.families {
        let pred = cross_validate(family, samples, dtype, params.folds, params.seed)?;
        let pairs: Vec<(f64, f64)> = samples.iter().zip(&pred).map(|(s, p)| (s.us, *p)).collect();
        scored.push((family, score(&pairs, params.folds), pred));
    }
    // Where the rows show the two orders apart, a family that predicts
    // them alike is not chosen, however it scores (its score averages the
    // two orders' errors).
    let apart = order_gap(samples).is_some_and(|g| g > ORDER_GAP);
    let mut eligible: Vec<usize> = (0..scored.len())
        .filter(|&i| !(apart && scored[i].0.order_blind()))
        .collect();
    if eligible.is_empty() {
        eligible = (0..scored.len()).collect();
    }
    let pairs: Vec<(Family, Score)> = eligible
        .iter()
        .map(|&i| (scored[i].0, scored[i].1.clone()))
        .collect();
    let best = eligible[choose(&pairs).expect("at least one family")];
    let (family, best_score, pred) = scored[best].clone();
    let model = family.fit(samples, dtype, params.seed)?;
    let worst = worst_shapes(samples, &pred);
    let held_out = samples.iter().zip(&pred).map(|(s, p)| (s.us, *p)).collect();
    let by_cv = cv_bands(samples, &pred);
    let candidates = scored
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != best)
        .map(|(_, (f, s, _))| (f.name().to_string(), s.clone()))
        .collect();
    Ok(GroupFit {
        family,
        model: ProcessorModel {
            processor: processor.to_string(),
            dtype,
            model,
            score: best_score,
            candidates,
            launch_us,
            order_free,
            measured: if params.measured {
                measured_table(samples)
            } else {
                Vec::new()
            },
        },
        worst,
        by_cv,
        noise_ceiling_10pct: noise_ceiling_10pct(samples),
        held_out,
    })
}

/// The launch path a group's models add back: the median of its rows'
/// `launch_us` (at least 0) when every row has one (kernel timer), `None`
/// when none has; an error for a mix.
fn launch_of(processor: &str, dtype: DType, samples: &[Sample]) -> Result<Option<f64>, FitError> {
    let launches: Vec<f64> = samples.iter().filter_map(|s| s.launch_us).collect();
    if launches.is_empty() {
        return Ok(None);
    }
    if launches.len() < samples.len() {
        return Err(FitError::MixedTiming {
            processor: processor.to_string(),
            dtype,
            kernel_only: launches.len(),
            ordinary: samples.len() - launches.len(),
        });
    }
    Ok(Stats::from_samples(&launches).map(|s| s.median_us.max(0.0)))
}

/// Fits a predictor and its report from a dataset's rows.
pub fn fit(
    profile: &DeviceProfile,
    dataset: Fingerprint,
    rows: &[MeasurementRow],
    micro: &[MicrobenchRow],
    params: &FitParams,
) -> Result<(Predictor, Report), FitError> {
    let (rows, micro) = conditions::select(profile, rows, micro, params.conditions.as_deref());
    // The repeat pass's rows score the measurements, not the fit.
    let (rows, repeats) = repeat::split_repeats(&rows);
    let mut repeatability = repeat::repeatability(&rows, &repeats);
    let (rows, micro) = (rows.as_slice(), micro.as_slice());
    conditions::check_not_mixed(profile, rows)?;
    let mut groups = usable_groups(rows)?;
    // Noisy rows, counted per group, then left out.
    let mut noisy: BTreeMap<(String, DType), u32> = BTreeMap::new();
    if let Some(max_cv) = params.max_cv {
        let quiet = |r: &&MeasurementRow| r.cv.is_none_or(|c| c <= max_cv);
        for r in rows
            .iter()
            .filter(|r| r.status == RowStatus::Ok && r.verified)
        {
            if !quiet(&r) {
                *noisy.entry((r.processor.clone(), r.dtype)).or_default() += 1;
            }
        }
        let kept: Vec<MeasurementRow> = rows.iter().filter(quiet).cloned().collect();
        groups = usable_groups(&kept)?;
    }
    let (fit_these, skip): (Vec<_>, Vec<_>) = groups.iter().partition(|(_, s)| s.len() >= MIN_ROWS);
    if fit_these.is_empty() {
        let have = groups
            .iter()
            .map(|((p, d), s)| format!("{p}/{d}: {}", s.len()))
            .collect::<Vec<_>>();
        return Err(FitError::TooSmall {
            have: if have.is_empty() {
                "none".into()
            } else {
                have.join(", ")
            },
        });
    }
    let order_free = |id: &str| {
        profile
            .processors
            .iter()
            .any(|p| p.id == id && p.capabilities.order_free)
    };
    let fitted: Vec<_> = fit_these
        .par_iter()
        .map(|((p, d), s)| fit_group(p, *d, s, order_free(p), params))
        .collect::<Result<_, _>>()?;
    let timing = |id: &str| {
        profile
            .processors
            .iter()
            .find(|p| p.id == id)
            .map_or(hetero_plan::Timing::Real, |p| p.timing())
    };
    let mut models = Vec::new();
    let mut entries = Vec::new();
    for GroupFit {
        family,
        model: m,
        worst,
        by_cv,
        noise_ceiling_10pct,
        held_out,
    } in fitted
    {
        entries.push(ReportEntry {
            processor: m.processor.clone(),
            dtype: m.dtype,
            timing: timing(&m.processor),
            model: family.name().to_string(),
            mape: m.score.mape,
            within_10pct: m.score.within_10pct,
            within_20pct: m.score.within_20pct,
            samples: m.score.samples,
            excluded_noisy: noisy
                .get(&(m.processor.clone(), m.dtype))
                .copied()
                .unwrap_or(0),
            candidates: m.candidates.clone(),
            by_cv,
            noise_ceiling_10pct,
            worst,
            held_out,
            launch_us: m.launch_us,
            repeatability: repeatability.remove(&(m.processor.clone(), m.dtype)),
        });
        models.push(m);
    }
    let predictor = Predictor {
        schema_version: SchemaVersion,
        dataset: dataset.clone(),
        processors: profile.processors.clone(),
        models,
        overheads: fit_overheads(&profile.processors, rows, micro),
    };
    let report = Report {
        dataset,
        max_cv: params.max_cv,
        entries,
        skipped: skip
            .iter()
            .map(|((p, d), s)| format!("{p}/{d}: {} rows", s.len()))
            .collect(),
        skipped_microbench: Vec::new(),
        test: None,
    };
    Ok((predictor, report))
}

#[cfg(test)]
mod tests;
