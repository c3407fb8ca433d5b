//! How each model family predicts past the longest sequence it was fitted
//! on: fit on the rows with M ≤ `--train-max-m`, score on the rows with
//! M ≥ `--test-min-m` (`docs/benchmarks.md`, predictor accuracy).
//!
//! ```text
//! cargo run --release -p hetero-profiler --example extrapolate -- DATASET_DIR [TRAIN_MAX_M [TEST_MIN_M]]
//! ```
//!
//! Defaults: fit on M ≤ 512, score on M ≥ 1024.

use hetero_plan::DType;
use hetero_profiler::fit::{Family, MIN_ROWS, Sample, score, usable_groups};

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(dir) = args.next() else {
        eprintln!("usage: extrapolate DATASET_DIR [TRAIN_MAX_M [TEST_MIN_M]]");
        std::process::exit(2);
    };
    let train_max: u32 = args.next().map_or(512, |a| a.parse().expect("TRAIN_MAX_M"));
    let test_min: u32 = args.next().map_or(1024, |a| a.parse().expect("TEST_MIN_M"));
    let ds = hetero_profiler::Dataset::load(std::path::Path::new(&dir))
        .unwrap_or_else(|e| panic!("{dir}: {e}"));
    let groups = usable_groups(&ds.measurements).expect("usable rows");
    println!("fit on M <= {train_max}, score on M >= {test_min}");
    println!(
        "{:<14} {:<6} {:<13} {:>6} {:>6} {:>9} {:>8} {:>8}",
        "processor", "dtype", "family", "train", "test", "MAPE %", "±10 %", "±20 %"
    );
    for ((proc_, dtype), samples) in &groups {
        let train: Vec<Sample> = samples
            .iter()
            .filter(|s| s.shape.m.get() <= train_max)
            .copied()
            .collect();
        let test: Vec<Sample> = samples
            .iter()
            .filter(|s| s.shape.m.get() >= test_min)
            .copied()
            .collect();
        if train.len() < MIN_ROWS || test.is_empty() {
            continue;
        }
        for family in Family::ALL {
            let model = family.fit(&train, *dtype, 7).expect("fit");
            let pairs: Vec<(f64, f64)> = test
                .iter()
                .map(|s| {
                    let p = model
                        .predict_us(s.shape, *dtype, s.order)
                        .unwrap_or(f64::INFINITY);
                    (s.us, p)
                })
                .collect();
            let sc = score(&pairs, 1);
            println!(
                "{proc_:<14} {:<6} {:<13} {:>6} {:>6} {:>9.1} {:>7.1}% {:>7.1}%",
                DType::as_str(*dtype),
                family.name(),
                train.len(),
                test.len(),
                sc.mape,
                100.0 * sc.within_10pct,
                100.0 * sc.within_20pct
            );
        }
    }
}
