//! Plan load time: what the runtime does with a plan file before it
//! prepares anything — read it, parse and validate it, and build the
//! decider — timed over several runs, plus the time of one lookup and of
//! compacting the dense tables (what loading a schema 2 file adds).
//!
//! `cargo run --release -p hetero-runtime --example plan_load -- PLAN... [--runs N]`

use std::path::Path;
use std::time::Instant;

use hetero_plan::Plan;
use hetero_runtime::Decider;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runs: usize = args
        .iter()
        .position(|a| a == "--runs")
        .and_then(|i| args.get(i + 1))
        .map_or(11, |n| n.parse().expect("--runs N"));
    let paths: Vec<&String> = args
        .iter()
        .enumerate()
        .filter(|(i, a)| !a.starts_with("--") && (*i == 0 || args[i - 1] != "--runs"))
        .map(|(_, a)| a)
        .collect();
    if paths.is_empty() {
        eprintln!("usage: plan_load PLAN... [--runs N]");
        std::process::exit(2);
    }
    for p in paths {
        let bytes = std::fs::metadata(p).expect("the plan file").len();
        let mut times = Vec::with_capacity(runs);
        let mut plan = None;
        for _ in 0..runs {
            let t = Instant::now();
            let loaded: Plan = hetero_plan::load(Path::new(p)).unwrap_or_else(|e| panic!("{e}"));
            let decider = Decider::new(&loaded);
            times.push(t.elapsed().as_secs_f64() * 1e3);
            plan = Some((loaded, decider));
        }
        let (plan, decider) = plan.expect("at least one run");
        let ranges: usize = plan.ops.iter().map(|o| o.ranges.len()).sum();
        let decisions: usize = plan.ops.iter().map(|o| o.length_count()).sum();
        // Lookups of every length of every table, materialised as the
        // runtime does when it prepares a length.
        let t = Instant::now();
        let mut found = 0usize;
        for (oi, op) in plan.ops.iter().enumerate() {
            for len in op.lengths() {
                found += decider.decision(&plan, oi, len).is_ok() as usize;
            }
        }
        let per_lookup_ns = t.elapsed().as_secs_f64() * 1e9 / decisions as f64;
        assert_eq!(found, decisions);
        // Compacting the dense tables again, as a file of schema version 2
        // is compacted when it loads (one thread).
        let dense: Vec<Vec<hetero_plan::Decision>> =
            plan.ops.iter().map(|o| o.decisions().collect()).collect();
        let t = Instant::now();
        let again: usize = dense.iter().map(|d| hetero_plan::compact(d).len()).sum();
        let compact_ms = t.elapsed().as_secs_f64() * 1e3;
        let (lo, hi) = (
            times.iter().cloned().fold(f64::INFINITY, f64::min),
            times.iter().cloned().fold(0.0, f64::max),
        );
        println!(
            "{p}: {bytes} bytes ({:.2} MiB), {ranges} ranges holding {decisions} decisions; \
             load + decider median {:.1} ms (min {lo:.1}, max {hi:.1}) over {runs} runs; \
             lookup + materialise {per_lookup_ns:.0} ns per length; \
             compacting the dense tables again {compact_ms:.0} ms ({again} ranges)",
            bytes as f64 / (1 << 20) as f64,
            median(&mut times)
        );
    }
}
