//! A tiny model and a plan solved for it by the solver, on this machine's
//! cpu:0 and npu-sim, for the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use hetero_agent::{OpenOptions, Registry};
use hetero_plan::{
    DType, LatencyModel, Overheads, Phase, Plan, Predictor, ProcessorModel, SchemaVersion, Score,
};
use hetero_solver::{GraphChoice, Settings};
use hetero_test_support::TINY_LLAMA;

/// A predictor for cpu:0 and npu-sim as opened here (roofline models with
/// made-up constants: the plan's predictions are not expected to hold).
pub fn predictor() -> Predictor {
    predictor_with("npu-sim", (25.0, 12.0, 20.0))
}

/// A predictor for cpu:0 and the NPU `npu` as opened here, the NPU's
/// roofline `(GFLOP/s, GB/s, launch µs)` (cpu:0: 20, 10, 5).
pub fn predictor_with(npu: &str, (peak, bw, launch): (f64, f64, f64)) -> Predictor {
    let reg = Registry::open(&OpenOptions::default(), Some(&["cpu:0".into(), npu.into()]));
    let processors = reg.processors();
    let roof = |peak: f64, bw: f64, launch: f64| LatencyModel::Roofline {
        peak_gflops: peak,
        bw_gbps: bw,
        launch_us: launch,
    };
    let model = |p: &str, m: LatencyModel| ProcessorModel {
        processor: p.into(),
        dtype: DType::F32,
        model: m,
        score: Score::default(),
        candidates: vec![],
        launch_us: None,
        order_free: false,
        measured: Vec::new(),
    };
    let over = |p: &str| Overheads {
        processor: p.into(),
        sync_poll_us: Some(2.0),
        sync_block_us: Some(10.0),
        submit_empty_us: Some(3.0),
        prepare: Some(hetero_plan::LinearCost {
            alpha_us: 1000.0,
            beta_us_per_byte: 1e-4,
        }),
        ..Default::default()
    };
    Predictor {
        schema_version: SchemaVersion,
        dataset: hetero_plan::Fingerprint::of_bytes("synthetic", b"synthetic"),
        processors,
        models: vec![
            model("cpu:0", roof(20.0, 10.0, 5.0)),
            model(npu, roof(peak, bw, launch)),
        ],
        overheads: vec![over("cpu:0"), over(npu)],
    }
}

/// Writes the tiny llama config, a predictor and a plan solved for lengths
/// 1..=16 (prefill) and 1, 2 (decode); returns (config, plan, predictor).
pub fn solved(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    solved_for(dir, predictor())
}

/// [`solved`] with the predictor `pred`.
pub fn solved_for(dir: &Path, pred: Predictor) -> (PathBuf, PathBuf, PathBuf) {
    let config = dir.join("config.json");
    std::fs::write(&config, TINY_LLAMA).unwrap();
    let (plan_path, pred_path) = solve_with(&config, dir, pred);
    (config, plan_path, pred_path)
}

/// Solves a plan for the model of `config` with [`predictor`] (prefill
/// 1..=16, decode 1 and 2, f32) into `dir/plan.ron`, beside
/// `dir/predictor.ron`; returns both paths.
pub fn solve_for(config: &Path, dir: &Path) -> (PathBuf, PathBuf) {
    solve_with(config, dir, predictor())
}

/// [`solve_for`] with the predictor `pred`.
fn solve_with(config: &Path, dir: &Path, pred: Predictor) -> (PathBuf, PathBuf) {
    let model = hetero_plan::hf::load_config(config).unwrap();
    let pred_path = dir.join("predictor.ron");
    hetero_plan::save(&pred_path, &pred).unwrap();
    let settings = Settings {
        phases: vec![Phase::Prefill, Phase::Decode],
        prefill_lengths: (1..=16).collect(),
        decode_lengths: vec![1, 2],
        graphs: GraphChoice::Sizes(vec![4, 8, 16]),
        row_align: 16,
        dtypes: vec![(None, DType::F32)],
        ..Default::default()
    };
    let plan: Plan =
        hetero_solver::solve(&pred, pred.fingerprint("predictor.ron"), &model, &settings).unwrap();
    let plan_path = dir.join("plan.ron");
    hetero_plan::save(&plan_path, &plan).unwrap();
    (plan_path, pred_path)
}
