//! Compares this crate's regression trees with smartcore's on the same
//! features, target (ln µs) and folds, to decide which to ship
//! (`docs/decisions.md`, "Regression trees").
//!
//! ```text
//! cargo run --release -p hetero-profiler --example tree_compare -- [DATASET_DIR]
//! ```
//!
//! With a dataset folder (anything `hetero fit` reads: Parquet, or JSON
//! Lines rows such as `datasets/gpu-host-h200`), every (processor, dtype)
//! with enough rows is compared. Without one, a synthetic staged processor
//! (labelled simulated) is used.

use std::collections::BTreeMap;
use std::time::Instant;

use hetero_plan::predictor::features;
use hetero_plan::{DType, GemmShape, OperandOrder};
use hetero_profiler::fit::{Family, Sample, cross_validate, fold_sets, score, usable_groups};
use smartcore::ensemble::random_forest_regressor::{
    RandomForestRegressor, RandomForestRegressorParameters,
};
use smartcore::linalg::basic::matrix::DenseMatrix;
use smartcore::tree::decision_tree_regressor::{
    DecisionTreeRegressor, DecisionTreeRegressorParameters,
};

const FOLDS: usize = 5;
const SEED: u64 = 7;

fn synthetic() -> BTreeMap<(String, DType), Vec<Sample>> {
    let mut v = Vec::new();
    for m in (1..=600).step_by(5) {
        for (k, n) in [(1536, 256), (1536, 1536), (8960, 1536), (1536, 8960)] {
            for order in [OperandOrder::Aw, OperandOrder::Transposed] {
                let t = |d: u32| d.div_ceil(32) as f64;
                let base = 12.0 + 2e-4 * t(m) * t(k) * t(n);
                let us = if order == OperandOrder::Aw && n > k {
                    base * 2.0
                } else {
                    base
                };
                v.push(Sample {
                    shape: GemmShape::new(m, k, n).unwrap(),
                    order,
                    us,
                    cv: None,
                    reps: 0,
                    launch_us: None,
                });
            }
        }
    }
    BTreeMap::from([(("synthetic-staged (simulated)".to_string(), DType::F16), v)])
}

fn smartcore_cv(samples: &[Sample], dtype: DType, forest: bool) -> Vec<f64> {
    let x: Vec<Vec<f64>> = samples
        .iter()
        .map(|s| features(s.shape, dtype, s.order).to_vec())
        .collect();
    let y: Vec<f64> = samples.iter().map(|s| s.us.ln()).collect();
    let mut pred = vec![f64::NAN; samples.len()];
    let shapes: Vec<_> = samples.iter().map(|s| s.shape).collect();
    for test in fold_sets(&shapes, FOLDS, SEED) {
        let train: Vec<usize> = (0..samples.len())
            .filter(|i| test.binary_search(i).is_err())
            .collect();
        let xt = DenseMatrix::from_2d_vec(&train.iter().map(|&i| x[i].clone()).collect()).unwrap();
        let yt: Vec<f64> = train.iter().map(|&i| y[i]).collect();
        let xs = DenseMatrix::from_2d_vec(&test.iter().map(|&i| x[i].clone()).collect()).unwrap();
        let out = if forest {
            let p = RandomForestRegressorParameters::default()
                .with_n_trees(40)
                .with_max_depth(16);
            RandomForestRegressor::fit(&xt, &yt, p)
                .unwrap()
                .predict(&xs)
                .unwrap()
        } else {
            let p = DecisionTreeRegressorParameters::default()
                .with_max_depth(14)
                .with_min_samples_leaf(2);
            DecisionTreeRegressor::fit(&xt, &yt, p)
                .unwrap()
                .predict(&xs)
                .unwrap()
        };
        for (&i, v) in test.iter().zip(out) {
            pred[i] = v.exp();
        }
    }
    pred
}

fn main() {
    let groups = match std::env::args().nth(1) {
        Some(dir) => {
            let ds = hetero_profiler::Dataset::load(std::path::Path::new(&dir))
                .unwrap_or_else(|e| panic!("{dir}: {e}"));
            usable_groups(&ds.measurements).expect("usable rows")
        }
        None => synthetic(),
    };
    println!(
        "{:<32} {:<6} {:<22} {:>8} {:>8} {:>8} {:>9}",
        "processor", "dtype", "learner", "rows", "MAPE %", "±10 %", "seconds"
    );
    for ((proc_, dtype), samples) in groups.iter().filter(|(_, s)| s.len() >= 20) {
        let line = |name: &str, pred: Vec<f64>, secs: f64| {
            let pairs: Vec<(f64, f64)> = samples.iter().zip(pred).map(|(s, p)| (s.us, p)).collect();
            let sc = score(&pairs, FOLDS);
            println!(
                "{proc_:<32} {:<6} {name:<22} {:>8} {:>8.2} {:>7.1}% {secs:>9.2}",
                dtype.as_str(),
                samples.len(),
                sc.mape,
                100.0 * sc.within_10pct
            );
        };
        for family in [
            Family::Tree,
            Family::Forest,
            Family::Boosted,
            Family::Residual,
            Family::ResidualForest,
        ] {
            let t = Instant::now();
            let pred = cross_validate(family, samples, *dtype, FOLDS, SEED).unwrap();
            line(
                &format!("hetero {}", family.name()),
                pred,
                t.elapsed().as_secs_f64(),
            );
        }
        for forest in [false, true] {
            let t = Instant::now();
            let pred = smartcore_cv(samples, *dtype, forest);
            let name = if forest {
                "smartcore forest"
            } else {
                "smartcore tree"
            };
            line(name, pred, t.elapsed().as_secs_f64());
        }
    }
}
