//! The model families and how each is fitted.

use hetero_plan::predictor::{Work, features, gemm_bytes};
use hetero_plan::{DType, LatencyModel, Tree};
use rand::SeedableRng;
use rand::rngs::StdRng;

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
}

impl Family {
    /// Every family.
    pub const ALL: [Family; 6] = [
        Family::Tree,
        Family::Forest,
        Family::Boosted,
        Family::LinearFlops,
        Family::LinearBytes,
        Family::Roofline,
    ];

    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Family::Tree => "tree",
            Family::Forest => "forest",
            Family::Boosted => "boosted",
            Family::LinearFlops => "linear_flops",
            Family::LinearBytes => "linear_bytes",
            Family::Roofline => "roofline",
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
            Family::Boosted => boosted(&x, &y, &mut rng)?,
            Family::LinearFlops => linear(samples, dtype, Work::Flops),
            Family::LinearBytes => linear(samples, dtype, Work::Bytes),
            Family::Roofline => roofline(samples, dtype),
        })
    }
}

fn forest(x: &[Features], y: &[f64], rng: &mut StdRng) -> Result<Vec<Tree>, FitError> {
    use rand::Rng;
    let p = TreeParams {
        max_depth: 16,
        min_samples_leaf: 1,
        max_features: Some(hetero_plan::predictor::N_FEATURES / 3),
    };
    (0..40)
        .map(|_| {
            let boot: Vec<usize> = (0..x.len()).map(|_| rng.gen_range(0..x.len())).collect();
            Ok(p.grow(x, y, &boot, rng)?)
        })
        .collect()
}

fn boosted(x: &[Features], y: &[f64], rng: &mut StdRng) -> Result<LatencyModel, FitError> {
    let p = TreeParams {
        max_depth: 5,
        min_samples_leaf: 2,
        max_features: None,
    };
    let rate = 0.1;
    let base = y.iter().sum::<f64>() / y.len() as f64;
    let mut pred = vec![base; y.len()];
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
    Ok(LatencyModel::Boosted { base, rate, trees })
}

/// Relative least squares: minimises Σ ((α + β·w − t) / t)².
fn linear(samples: &[Sample], dtype: DType, work: Work) -> LatencyModel {
    let w = |s: &Sample| match work {
        Work::Flops => s.shape.flops(),
        Work::Bytes => gemm_bytes(s.shape, dtype),
    };
    // Normal equations of the weighted problem with weights 1/t².
    let (mut s00, mut s01, mut s11, mut b0, mut b1) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for s in samples {
        let (wi, ti) = (w(s), s.us);
        let q = 1.0 / (ti * ti);
        s00 += q;
        s01 += q * wi;
        s11 += q * wi * wi;
        b0 += q * ti;
        b1 += q * wi * ti;
    }
    let det = s00 * s11 - s01 * s01;
    let (mut alpha, mut beta) = if det.abs() > 0.0 {
        ((b0 * s11 - b1 * s01) / det, (s00 * b1 - s01 * b0) / det)
    } else {
        (0.0, b1 / s11)
    };
    if alpha < 0.0 || beta <= 0.0 {
        // Keep the model physical: no negative fixed cost.
        alpha = alpha.max(0.0);
        beta = ((b1 - alpha * s01) / s11).max(f64::MIN_POSITIVE);
    }
    LatencyModel::Linear {
        alpha_us: alpha,
        beta_us: beta,
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
