//! The model families and how each is fitted.

use hetero_plan::predictor::{Work, features, gemm_bytes};
use hetero_plan::{DType, LatencyModel, Tree};
use rand::SeedableRng;
use rand::rngs::StdRng;

use super::line::{Line, relative_line};
use super::tree::{Features, TreeParams};
use super::{FitError, Sample};

/// A model family the fitter can try.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// One regression tree on ln(µs).
    Tree,
    /// A random forest (bagged trees, random feature subsets) on ln(µs).
    Forest,
    /// Gradient-boosted shallow trees on ln(µs).
    Boosted,
    /// α + β·flops.
    LinearFlops,
    /// α + β·bytes.
    LinearBytes,
    /// launch + max(flops/peak, bytes/bw).
    Roofline,
    /// Gradient-boosted shallow trees on the ln-residual of the best
    /// parametric base (roofline, α+β·flops or α+β·bytes): the trees learn
    /// the stages and the base carries the trend past the measured shapes.
    Residual,
    /// Extremely randomised trees (see [`TreeParams::random_thresholds`])
    /// averaged on the ln-residual of the same parametric base as
    /// [`Family::Residual`]: many deep trees with random cuts interpolate
    /// between measured shapes where a few best cuts leave steps.
    ResidualForest,
}

impl Family {
    /// Every family.
    pub const ALL: [Family; 8] = [
        Family::Tree,
        Family::Forest,
        Family::Boosted,
        Family::LinearFlops,
        Family::LinearBytes,
        Family::Roofline,
        Family::Residual,
        Family::ResidualForest,
    ];

    /// Rank when held-out scores tie (see [`super::choose`]), lowest first:
    /// the parametric models (fewest parameters), then the residual family
    /// (extrapolates like its base), then the tree models (flat past the
    /// measured shapes).
    pub fn preference(self) -> u8 {
        match self {
            Family::LinearFlops => 0,
            Family::LinearBytes => 1,
            Family::Roofline => 2,
            Family::Residual => 3,
            Family::ResidualForest => 4,
            Family::Boosted => 5,
            Family::Tree => 6,
            Family::Forest => 7,
        }
    }

    /// Predicts both operand orders alike: the parametric families, whose
    /// work counts have no order.
    pub fn order_blind(self) -> bool {
        matches!(
            self,
            Family::LinearFlops | Family::LinearBytes | Family::Roofline
        )
    }

    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Family::Tree => "tree",
            Family::Forest => "forest",
            Family::Boosted => "boosted",
            Family::LinearFlops => "linear_flops",
            Family::LinearBytes => "linear_bytes",
            Family::Roofline => "roofline",
            Family::Residual => "residual",
            Family::ResidualForest => "residual_forest",
        }
    }

    /// Fits the family on `samples`.
    pub fn fit(
        self,
        samples: &[Sample],
        dtype: DType,
        seed: u64,
    ) -> Result<LatencyModel, FitError> {
        let x: Vec<Features> = samples
            .iter()
            .map(|s| features(s.shape, dtype, s.order))
            .collect();
        let y: Vec<f64> = samples.iter().map(|s| s.us.ln()).collect();
        let all: Vec<usize> = (0..samples.len()).collect();
        let mut rng = StdRng::seed_from_u64(seed);
        Ok(match self {
            Family::Tree => LatencyModel::Tree(TreeParams::default().grow(&x, &y, &all, &mut rng)?),
            Family::Forest => LatencyModel::Forest {
                trees: forest(&x, &y, &mut rng)?,
            },
            Family::Boosted => {
                let base = y.iter().sum::<f64>() / y.len() as f64;
                let (rate, trees) = boost(&x, &y, base, &mut rng)?;
                LatencyModel::Boosted { base, rate, trees }
            }
            Family::LinearFlops => linear(samples, dtype, Work::Flops),
            Family::LinearBytes => linear(samples, dtype, Work::Bytes),
            Family::Roofline => roofline(samples, dtype),
            Family::Residual => residual(samples, dtype, &x, &y, &mut rng, false)?,
            Family::ResidualForest => residual(samples, dtype, &x, &y, &mut rng, true)?,
        })
    }
}

fn forest(x: &[Features], y: &[f64], rng: &mut StdRng) -> Result<Vec<Tree>, FitError> {
    use rand::Rng;
    let p = TreeParams {
        max_depth: 16,
        min_samples_leaf: 1,
        max_features: Some(hetero_plan::predictor::N_FEATURES / 3),
        random_thresholds: false,
    };
    (0..40)
        .map(|_| {
            let boot: Vec<usize> = (0..x.len()).map(|_| rng.gen_range(0..x.len())).collect();
            Ok(p.grow(x, y, &boot, rng)?)
        })
        .collect()
}

/// Gradient boosting of shallow trees on `y`, starting from `init`:
/// the learning rate and the trees.
fn boost(
    x: &[Features],
    y: &[f64],
    init: f64,
    rng: &mut StdRng,
) -> Result<(f64, Vec<Tree>), FitError> {
    let p = TreeParams {
        max_depth: 5,
        min_samples_leaf: 2,
        max_features: None,
        random_thresholds: false,
    };
    let rate = 0.1;
    let mut pred = vec![init; y.len()];
    let all: Vec<usize> = (0..y.len()).collect();
    let mut trees = Vec::new();
    for _ in 0..250 {
        let resid: Vec<f64> = y.iter().zip(&pred).map(|(t, p)| t - p).collect();
        let tree = p.grow(x, &resid, &all, rng)?;
        for (i, row) in x.iter().enumerate() {
            pred[i] += rate * tree.eval(row).unwrap_or(0.0);
        }
        trees.push(tree);
    }
    Ok((rate, trees))
}

/// The parametric base whose ln-residuals have the least squared sum, with
/// those residuals; `None` when no base predicts every row (cannot happen
/// with positive timings).
fn best_base(samples: &[Sample], dtype: DType, y: &[f64]) -> Option<(LatencyModel, Vec<f64>)> {
    let ln_base = |m: &LatencyModel| -> Vec<f64> {
        samples
            .iter()
            .map(|s| {
                m.predict_us(s.shape, dtype, s.order)
                    .map_or(f64::INFINITY, f64::ln)
            })
            .collect()
    };
    let (base, ln_b) = [
        roofline(samples, dtype),
        linear(samples, dtype, Work::Flops),
        linear(samples, dtype, Work::Bytes),
    ]
    .into_iter()
    .map(|m| {
        let b = ln_base(&m);
        (m, b)
    })
    .min_by(|(_, a), (_, b)| {
        let sse = |v: &[f64]| y.iter().zip(v).map(|(y, b)| (y - b).powi(2)).sum::<f64>();
        sse(a).total_cmp(&sse(b))
    })
    .expect("three bases");
    if ln_b.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let r = y.iter().zip(&ln_b).map(|(y, b)| y - b).collect();
    Some((base, r))
}

/// Trees of [`Family::ResidualForest`].
const EXTRA_TREES: usize = 50;

/// The best parametric base, then trees on its ln-residuals: boosted
/// (`forest` false), or the mean of [`EXTRA_TREES`] extremely randomised
/// trees (`forest` true), stored with rate 1/trees, so that
/// `base · exp(rate · Σ)` is the base times the trees' geometric mean.
/// Without a usable base, the same trees fit ln µs directly.
fn residual(
    samples: &[Sample],
    dtype: DType,
    x: &[Features],
    y: &[f64],
    rng: &mut StdRng,
    forest: bool,
) -> Result<LatencyModel, FitError> {
    let base = best_base(samples, dtype, y);
    if forest {
        let p = TreeParams {
            max_depth: 24,
            min_samples_leaf: 1,
            max_features: None,
            random_thresholds: true,
        };
        let all: Vec<usize> = (0..x.len()).collect();
        let target = base.as_ref().map_or(y, |(_, r)| r.as_slice());
        let trees = (0..EXTRA_TREES)
            .map(|_| p.grow(x, target, &all, rng))
            .collect::<Result<_, _>>()?;
        return Ok(match base {
            Some((base, _)) => LatencyModel::Residual {
                base: Box::new(base),
                rate: 1.0 / EXTRA_TREES as f64,
                trees,
            },
            None => LatencyModel::Forest { trees },
        });
    }
    Ok(match base {
        Some((base, r)) => {
            let (rate, trees) = boost(x, &r, 0.0, rng)?;
            LatencyModel::Residual {
                base: Box::new(base),
                rate,
                trees,
            }
        }
        None => {
            // Boost from the mean instead of failing.
            let init = y.iter().sum::<f64>() / y.len() as f64;
            let (rate, trees) = boost(x, y, init, rng)?;
            LatencyModel::Boosted {
                base: init,
                rate,
                trees,
            }
        }
    })
}

/// Relative least squares α + β·work (see [`relative_line`]); through the
/// origin when every row has the same work.
fn linear(samples: &[Sample], dtype: DType, work: Work) -> LatencyModel {
    let w = |s: &Sample| match work {
        Work::Flops => s.shape.flops(),
        Work::Bytes => gemm_bytes(s.shape, dtype),
    };
    let points: Vec<(f64, f64)> = samples.iter().map(|s| (w(s), s.us)).collect();
    let line = relative_line(&points).unwrap_or_else(|| {
        let (sw, sww) = points.iter().fold((0.0, 0.0), |(a, b), (w, t)| {
            (a + w / t, b + (w / t).powi(2))
        });
        Line {
            alpha: 0.0,
            beta: sw / sww,
        }
    });
    LatencyModel::Linear {
        alpha_us: line.alpha,
        beta_us: line.beta,
        work,
    }
}

/// Fits launch + max(flops/peak, bytes/bw) by coordinate search on the mean
/// absolute log error, starting from the best achieved rates.
fn roofline(samples: &[Sample], dtype: DType) -> LatencyModel {
    let fl: Vec<f64> = samples.iter().map(|s| s.shape.flops()).collect();
    let by: Vec<f64> = samples.iter().map(|s| gemm_bytes(s.shape, dtype)).collect();
    let t: Vec<f64> = samples.iter().map(|s| s.us).collect();
    let max_rate = |work: &[f64]| {
        work.iter()
            .zip(&t)
            .map(|(w, t)| w / t / 1e3)
            .fold(f64::MIN_POSITIVE, f64::max)
    };
    let mut p = [
        max_rate(&fl),
        max_rate(&by),
        0.5 * t.iter().cloned().fold(f64::INFINITY, f64::min),
    ];
    let loss = |p: &[f64; 3]| {
        fl.iter()
            .zip(&by)
            .zip(&t)
            .map(|((f, b), t)| {
                let pred = p[2] + (f / (p[0] * 1e3)).max(b / (p[1] * 1e3));
                (pred / t).ln().abs()
            })
            .sum::<f64>()
    };
    let mut best = loss(&p);
    for round in 0..6 {
        let span = 4.0f64.powf(1.0 / (1 + round) as f64);
        for k in 0..3 {
            let centre = p[k];
            for step in 0..=40 {
                let mut q = p;
                q[k] = if k == 2 {
                    centre * (step as f64 / 20.0) * span.min(2.0)
                } else {
                    centre * span.powf(step as f64 / 20.0 - 1.0)
                };
                let l = loss(&q);
                if l < best {
                    best = l;
                    p = q;
                }
            }
        }
    }
    LatencyModel::Roofline {
        peak_gflops: p[0],
        bw_gbps: p[1],
        launch_us: p[2],
    }
}
