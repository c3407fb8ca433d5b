//! The solve that costs lengths in blocks against the exhaustive one: at
//! every operator, phase and length, its decision costs at most
//! `1 + TOLERANCE` times the exhaustive optimum. Prints how many lengths
//! differ at all (`cargo test -p hetero-solver --test sampled -- --nocapture`).
//!
//! Devices: the predictor fixtures, the simulated devices, a device of
//! tree models with the features that oscillate with M (alignment,
//! padding), and, where `HETERO_FITTED_PREDICTOR` names one, a fitted
//! predictor (`hetero fit datasets/gpu-host-h200`, docs/benchmarks.md).

use std::path::{Path, PathBuf};

use hetero_plan::predictor::{FEATURE_NAMES, LatencyModel, Score, Tree, TreeNode};
use hetero_plan::{
    DType, Fingerprint, ModelSpec, Phase, Predictor, ProcessorModel, SchemaVersion, hf,
};
use hetero_solver::settings::TOLERANCE;
use hetero_solver::{LatencyOracle, Settings, SolveStats, solve_with_tables, synthetic};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn config(path: &str) -> ModelSpec {
    hf::load_config(&root().join(path)).expect("config")
}

fn settings(exhaustive: bool, top: u32, processors: &[&str]) -> Settings {
    Settings {
        phases: vec![Phase::Prefill, Phase::Decode],
        prefill_lengths: (1..=top).collect(),
        decode_lengths: (1..=4).collect(),
        processors: processors.iter().map(|p| p.to_string()).collect(),
        // One graph size of a 70B operator takes seconds to prepare.
        prepare_budget_us: Some(600e6),
        exhaustive,
        ..Settings::default()
    }
}

/// Solves both ways and checks the bound at every length; returns the
/// lengths whose decision differs at all, all lengths, and the solve's
/// counts of cells.
fn compare<O: LatencyOracle>(
    name: &str,
    oracle: &O,
    model: &ModelSpec,
    top: u32,
    procs: &[&str],
) -> (usize, usize, SolveStats) {
    let fp = Fingerprint::of_bytes(name, name.as_bytes());
    let solve = |exhaustive| {
        solve_with_tables(oracle, fp.clone(), model, &settings(exhaustive, top, procs))
            .expect("solve")
    };
    let (_, dense, _) = solve(true);
    let (_, sampled, stats) = solve(false);
    assert_eq!(dense.len(), sampled.len());
    let (mut differ, mut all, mut runner_up) = (0, 0, 0);
    for (d, s) in dense.iter().zip(&sampled) {
        assert_eq!((&d.op, d.phase), (&s.op, s.phase));
        assert_eq!(d.decisions.len(), s.decisions.len(), "{name} {}", d.op);
        for (a, b) in d.decisions.iter().zip(&s.decisions) {
            assert_eq!(a.len, b.len);
            let (opt, got) = (a.cost.total_us, b.cost.total_us);
            // Plans write times in hundredths of a µs.
            assert!(
                got <= (1.0 + TOLERANCE) * opt + 0.02,
                "{name}, {} ({}) at {}: {got} µs ({:?}) against the optimum {opt} µs ({:?})",
                d.op,
                d.phase,
                a.len,
                b.strategy,
                a.strategy
            );
            all += 1;
            if a.strategy != b.strategy || a.cost.total_us != b.cost.total_us {
                differ += 1;
            }
            if a.runner_up != b.runner_up {
                runner_up += 1;
            }
        }
    }
    println!(
        "{name} / {}: {differ} of {all} decisions differ from the exhaustive solve \
         ({runner_up} runners-up); {} of {} cells costed in full",
        model.name, stats.costed, stats.cells
    );
    (differ, all, stats)
}

/// A tree over one feature: `value` where it is above `threshold`.
fn step(feature: &str, threshold: f64, value: f64) -> Tree {
    let feature = FEATURE_NAMES.iter().position(|n| *n == feature).unwrap() as u16;
    Tree {
        nodes: vec![
            TreeNode::Split {
                feature,
                threshold,
                left: 1,
                right: 2,
            },
            TreeNode::Leaf { value: 0.0 },
            TreeNode::Leaf { value },
        ],
    }
}

/// Three processors of the simulated discrete host and a mobile GPU, each
/// a roofline times trees on the features that oscillate with M: an
/// unaligned M is slower (much slower on the discrete GPU), padding waste
/// costs, and long M changes the slope.
fn tree_device() -> Predictor {
    let host = synthetic::discrete_cpu_gpu();
    let (igpu, _, igpu_ov) = synthetic::mobile_gpu("igpu");
    let mut processors = host.processors().to_vec();
    processors.push(igpu);
    let mut overheads: Vec<_> = host
        .processors()
        .iter()
        .map(|p| host.overheads(&p.id))
        .collect();
    overheads.push(igpu_ov);
    let models = [
        ("cpu", 1500.0, 80.0, 0.3),
        ("cuda", 100_000.0, 900.0, 1.2),
        ("igpu", 2000.0, 60.0, 0.5),
    ]
    .into_iter()
    .map(|(id, peak, bw, unaligned)| ProcessorModel {
        processor: id.into(),
        dtype: DType::F16,
        model: LatencyModel::Residual {
            base: Box::new(LatencyModel::Roofline {
                peak_gflops: peak,
                bw_gbps: bw,
                launch_us: 5.0,
            }),
            rate: 1.0,
            trees: vec![
                step("align_m", 2.5, -unaligned),
                step("pad_waste_64", 0.3, 0.2),
                step("log2_m", 11.0, 0.15),
            ],
        },
        score: Score::default(),
        candidates: vec![],
        launch_us: None,
        order_free: false,
        measured: vec![],
    })
    .collect();
    Predictor {
        schema_version: SchemaVersion,
        dataset: Fingerprint::of_bytes("tree device", b"tree device"),
        processors,
        models,
        overheads,
    }
}

#[test]
fn the_fixture_predictors_stay_within_the_bound() {
    for fixture in ["soc-npu-gpu", "discrete-cpu-gpu"] {
        let path = root().join(format!("tests/fixtures/predictors/{fixture}.ron"));
        let p: Predictor = hetero_plan::load(&path).expect("fixture");
        for model in [
            "tests/fixtures/configs/qwen3-0.6b.json",
            "tests/fixtures/configs/qwen1.5-moe-a2.7b.json",
            "datasets/models/llama-3.1-8b.json",
        ] {
            let (_, _, stats) = compare(fixture, &p, &config(model), 2500, &[]);
            if fixture == "discrete-cpu-gpu" {
                // Its GPU alone wins far ahead: most lengths are proved.
                assert!(stats.costed * 4 < stats.cells, "{stats:?}");
            }
        }
    }
}

#[test]
fn the_simulated_devices_stay_within_the_bound() {
    let model = config("tests/fixtures/configs/llama-70b-class.json");
    compare(
        "npu+gpu",
        &synthetic::paper_like_npu_gpu(),
        &model,
        3000,
        &[],
    );
    compare("2 gpus", &synthetic::identical_gpus(), &model, 3000, &[]);
    let (differ, all, _) = compare(
        "cpu+cuda",
        &synthetic::discrete_cpu_gpu(),
        &model,
        3000,
        &[],
    );
    // Rooflines: the bounds are exact, and the decisions are the same.
    assert_eq!(differ, 0, "of {all}");
}

#[test]
fn tree_models_with_oscillating_features_stay_within_the_bound() {
    let p = tree_device();
    for model in [
        "tests/fixtures/configs/llama-70b-class.json",
        "datasets/models/mixtral-8x7b.json",
        "datasets/models/qwen2.5-1.5b.json",
    ] {
        compare("tree device", &p, &config(model), 3000, &[]);
    }
}

/// `HETERO_FITTED_PREDICTOR=/tmp/h200.ron`: a predictor fitted on
/// `datasets/gpu-host-h200` (about 30 s of `hetero fit` in a release
/// build, too long for every test run), with three of its processors.
#[test]
fn a_fitted_predictor_stays_within_the_bound() {
    let Some(path) = std::env::var_os("HETERO_FITTED_PREDICTOR") else {
        eprintln!("skipped: HETERO_FITTED_PREDICTOR is not set");
        return;
    };
    let p: Predictor = hetero_plan::load(Path::new(&path)).expect("predictor");
    let procs = ["cuda:0", "cpu:0", "opencl:1:0"];
    for model in [
        "tests/fixtures/configs/llama-70b-class.json",
        "datasets/models/llama-3.1-8b.json",
    ] {
        compare("fitted", &p, &config(model), 8192, &procs);
    }
}
