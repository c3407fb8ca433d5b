//! The runtime benchmark (`bench/replay.sh`): replays a plan per phase and
//! length, alternating polling and blocking synchronisation pass by pass in
//! one process so that both see the same machine load, and prints medians.
//!
//! `cargo run --release -p hetero-runtime --example replay_bench -- PLAN CONFIG CPU_GROUPS PASSES prefill:16,prefill:128,decode:1 OUT_DIR`
//!
//! Per case it also writes `OUT_DIR/report-PHASE-LEN.json`: a blocking run
//! of PASSES timed passes, per-operator medians.

use hetero_agent::OpenOptions;
use hetero_plan::Phase;
use hetero_runtime::report::{median, quantile};
use hetero_runtime::{RunSpec, Runtime, RuntimeOptions, SyncChoice};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [plan, config, groups, passes, cases, out] = args.as_slice() else {
        eprintln!("usage: replay_bench PLAN CONFIG CPU_GROUPS PASSES phase:len,... OUT_DIR");
        std::process::exit(2);
    };
    let passes: u32 = passes.parse().unwrap();
    let model = hetero_plan::hf::load_config(std::path::Path::new(config)).unwrap();
    let mut rt = Runtime::open(
        std::path::Path::new(plan),
        model,
        RuntimeOptions {
            open: OpenOptions {
                cpu_groups: Some(groups.clone()),
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .unwrap();
    println!(
        "| phase | len | predicted | measured poll | measured block | poll/pred | block/pred | block/poll | dispatch median (p90) | submit median (p90) | check |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for case in cases.split(',') {
        let (phase, len) = case.split_once(':').unwrap();
        let phase: Phase = phase.parse().unwrap();
        let len: u32 = len.parse().unwrap();
        let spec = |check, repeat| RunSpec {
            phase,
            len,
            steps: if phase == Phase::Decode { 4 } else { 1 },
            repeat,
            check,
        };
        // Warm-up, prepare and check once.
        let first = rt.run(&spec(true, 1)).unwrap();
        let c = first.check.as_ref().unwrap();
        let check = format!("{}/{}", c.passed, c.outputs);
        let (mut poll, mut block, mut dispatch, mut submit) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..passes {
            for sync in [SyncChoice::Poll, SyncChoice::Block] {
                rt.set_sync(sync);
                let r = rt.run(&spec(false, 1)).unwrap();
                match sync {
                    SyncChoice::Poll => poll.push(r.measured_us),
                    SyncChoice::Block => block.push(r.measured_us),
                }
                dispatch.extend(r.per_op.iter().map(|o| o.dispatch_us));
                submit.extend(r.per_op.iter().map(|o| o.submit_us));
            }
        }
        let (p, b) = (median(&poll), median(&block));
        println!(
            "| {phase} | {len} | {:.0} µs | {p:.0} µs | {b:.0} µs | {:.2} | {:.2} | {:.3} | {:.2} µs ({:.2}) | {:.2} µs ({:.2}) | {check} |",
            first.predicted_us,
            p / first.predicted_us,
            b / first.predicted_us,
            b / p,
            median(&dispatch),
            quantile(&dispatch, 0.9),
            median(&submit),
            quantile(&submit, 0.9),
        );
        rt.set_sync(SyncChoice::Block);
        let full = rt.run(&spec(false, passes)).unwrap();
        let path = format!("{out}/report-{phase}-{len}.json");
        std::fs::write(&path, serde_json::to_string_pretty(&full).unwrap()).unwrap();
        eprintln!("{}", full.to_text());
    }
}
