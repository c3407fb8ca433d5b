//! A short profile's fit, offline: how well a predictor fitted on as many
//! rows as a demo-length budget measures predicts the shapes it did not
//! measure (`docs/benchmarks.md`, predictor accuracy within the demo's
//! budget).
//!
//! ```text
//! cargo run --release -p hetero-profiler --example demo_budget -- DATASET_DIR [ROWS [DRAWS [random|spread]]]
//! ```
//!
//! For each (processor, dtype) of the dataset with at least `ROWS` + 40
//! usable rows: first every row fitted as `hetero fit` fits it (its k-fold
//! share within ±10 %: what the whole dataset allows); then `DRAWS` times
//! (default 5, seeds 0..DRAWS) the rows of about `ROWS` rows' worth of
//! shapes are drawn (every row of a drawn shape goes with it, as a profile
//! measures a shape in both operand orders), fitted alike, and scored
//! twice: by the fit's own k-fold held-out share within ±10 % (what the
//! fit report of such a profile prints) and on every row of the dataset it
//! did not draw ("unseen": the model alone, as for a shape the profile did
//! not measure). `ROWS` defaults to 170, the rows per processor a 150 s
//! `hetero demo` profile measured on a 16-core host with one H200
//! (`docs/benchmarks.md`). The shapes are drawn `random`ly (default) or
//! `spread`: a seeded random start, then each next shape the farthest in
//! log2 (M, K, N) from those drawn, as a space-filling design would pick.

use std::collections::BTreeSet;

use hetero_plan::{DType, GemmShape};
use hetero_profiler::fit::{
    FitParams, GroupFit, Sample, fit_group, noise_ceiling_10pct, score, usable_groups,
};
use rand::SeedableRng;
use rand::seq::SliceRandom;

/// The demo's rows per processor (see the module's text).
const DEMO_ROWS: usize = 170;
/// Fewest rows left over to score a group on.
const MIN_UNSEEN: usize = 40;

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(dir) = args.next() else {
        eprintln!("usage: demo_budget DATASET_DIR [ROWS [DRAWS [random|spread]]]");
        std::process::exit(2);
    };
    let rows: usize = args.next().map_or(DEMO_ROWS, |a| a.parse().expect("ROWS"));
    let draws: u64 = args.next().map_or(5, |a| a.parse().expect("DRAWS"));
    let spread = match args.next().as_deref() {
        None | Some("random") => false,
        Some("spread") => true,
        Some(other) => panic!("the selection is random or spread, not {other}"),
    };
    let ds = hetero_profiler::Dataset::load(std::path::Path::new(&dir))
        .unwrap_or_else(|e| panic!("{dir}: {e}"));
    let order_free = |id: &str| {
        ds.profile.as_ref().is_some_and(|p| {
            p.processors
                .iter()
                .any(|q| q.id == id && q.capabilities.order_free)
        })
    };
    let groups = usable_groups(&ds.measurements).expect("usable rows");
    let how = if spread { "spread" } else { "random" };
    println!("{dir}: about {rows} rows per processor, {how} shapes, {draws} draws");
    println!(
        "{:<12} {:<5} {:>6} {:<6} {:<16} {:>7} {:>7} {:>7} {:>7}",
        "processor", "dtype", "rows", "draw", "model", "k-fold", "unseen", "rows", "noise"
    );
    let params = FitParams::default();
    for ((proc_, dtype), samples) in &groups {
        if samples.len() < rows + MIN_UNSEEN {
            continue;
        }
        let fit = |train: &[Sample]| {
            fit_group(proc_, *dtype, train, order_free(proc_), &params)
                .unwrap_or_else(|e| panic!("{proc_}/{dtype}: {e}"))
        };
        let line = |n: usize, draw: &str, f: &GroupFit, unseen: Option<(f64, usize)>, noise| {
            let (u, un) = unseen.map_or(("—".into(), "—".into()), |(u, n)| {
                (format!("{:.1}%", 100.0 * u), n.to_string())
            });
            println!(
                "{proc_:<12} {:<5} {n:>6} {draw:<6} {:<16} {:>6.1}% {u:>7} {un:>7} {:>7}",
                DType::as_str(*dtype),
                f.family.name(),
                100.0 * f.model.score.within_10pct,
                pct(noise),
            );
        };
        line(
            samples.len(),
            "all",
            &fit(samples),
            None,
            noise_ceiling_10pct(samples),
        );
        let (mut kfold, mut unseen) = (0.0, 0.0);
        for seed in 0..draws {
            let (train, test) = draw(samples, rows, seed, spread);
            let f = fit(&train);
            let pairs: Vec<(f64, f64)> = test
                .iter()
                .map(|s| {
                    let order = f.model.model_order(s.order);
                    let p = f.model.model.predict_us(s.shape, *dtype, order);
                    (s.us, p.unwrap_or(f64::INFINITY))
                })
                .collect();
            let u = score(&pairs, 0).within_10pct;
            let noise = noise_ceiling_10pct(&train);
            line(
                train.len(),
                &seed.to_string(),
                &f,
                Some((u, test.len())),
                noise,
            );
            kfold += f.model.score.within_10pct;
            unseen += u;
        }
        let n = draws.max(1) as f64;
        println!(
            "{proc_:<12} {:<5} mean of {draws} draws: k-fold {:.1} %, unseen {:.1} %",
            DType::as_str(*dtype),
            100.0 * kfold / n,
            100.0 * unseen / n
        );
    }
}

fn pct(v: Option<f64>) -> String {
    v.map_or("—".into(), |v| format!("{:.1}%", 100.0 * v))
}

/// The rows of about `rows` rows' worth of shapes drawn from `seed`
/// (random, or spread from a random start), and the rest.
fn draw(samples: &[Sample], rows: usize, seed: u64, spread: bool) -> (Vec<Sample>, Vec<Sample>) {
    let mut shapes: Vec<GemmShape> = samples
        .iter()
        .map(|s| s.shape)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    shapes.shuffle(&mut rand::rngs::StdRng::seed_from_u64(seed));
    if spread {
        shapes = farthest_first(shapes);
    }
    let mut chosen = BTreeSet::new();
    let mut n = 0;
    for s in shapes {
        if n >= rows {
            break;
        }
        n += samples.iter().filter(|x| x.shape == s).count();
        chosen.insert(s);
    }
    samples.iter().partition(|s| chosen.contains(&s.shape))
}

/// `shapes` from the first, each next the farthest (squared distance in
/// log2 M, K, N) from every one before it.
fn farthest_first(mut rest: Vec<GemmShape>) -> Vec<GemmShape> {
    let at = |s: &GemmShape| {
        let (m, k, n) = s.mkn();
        [m, k, n].map(|d| (d as f64).log2())
    };
    let apart = |a: &GemmShape, b: &GemmShape| {
        let (a, b) = (at(a), at(b));
        (0..3).map(|i| (a[i] - b[i]).powi(2)).sum::<f64>()
    };
    if rest.is_empty() {
        return rest;
    }
    let mut out = vec![rest.remove(0)];
    let mut dist: Vec<f64> = rest.iter().map(|s| apart(s, &out[0])).collect();
    while !rest.is_empty() {
        let i = (0..rest.len())
            .max_by(|&a, &b| dist[a].total_cmp(&dist[b]))
            .expect("not empty");
        let s = rest.remove(i);
        dist.remove(i);
        for (d, r) in dist.iter_mut().zip(&rest) {
            *d = d.min(apart(r, &s));
        }
        out.push(s);
    }
    out
}
