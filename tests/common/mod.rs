//! The `hetero` binary and the tiny model the end-to-end tests share; the
//! generic helpers come from `hetero-test-support`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

pub use hetero_test_support::*;

/// The `hetero` binary under test, run in the repository root.
pub const HETERO: Bin = bin!("hetero");

/// The repository root.
pub fn root() -> PathBuf {
    HETERO.root()
}

/// Compares `text` with `tests/golden/NAME`; `HETERO_BLESS=1` rewrites it.
pub fn golden(name: &str, text: &str) {
    hetero_test_support::golden(&root().join("tests/golden").join(name), text);
}

/// The `hetero-agent` next to the `hetero` under test, or why there is none.
pub fn real_agent() -> Result<PathBuf, String> {
    HETERO.sibling("hetero-agent")
}

/// Writes [`TINY_LLAMA`] to `dir/config.json` and returns its path, the model and
/// a roofline predictor for cpu:0 and npu-sim (which every machine has),
/// with this machine's processors.
pub fn tiny_cpu_npu(dir: &Path) -> (PathBuf, hetero_plan::ModelSpec, hetero_plan::Predictor) {
    use hetero_agent::{OpenOptions, Registry};
    let config = dir.join("config.json");
    std::fs::write(&config, TINY_LLAMA).unwrap();
    let model = hetero_plan::hf::load_config(&config).unwrap();
    let reg = Registry::open(
        &OpenOptions::default(),
        Some(&["cpu:0".into(), "npu-sim".into()]),
    );
    let pred = roofline_predictor(
        reg.processors(),
        &[("cpu:0", 20.0, 10.0, 5.0), ("npu-sim", 25.0, 12.0, 20.0)],
    );
    (config, model, pred)
}

/// A predictor for `processors` whose f32 models are rooflines
/// `(processor, peak GFLOP/s, bandwidth GB/s, launch µs)`, with small
/// poll and submit overheads.
pub fn roofline_predictor(
    processors: Vec<hetero_plan::Processor>,
    roofs: &[(&str, f64, f64, f64)],
) -> hetero_plan::Predictor {
    use hetero_plan::{
        DType, LatencyModel, Overheads, Predictor, ProcessorModel, SchemaVersion, Score,
    };
    let model = |&(p, peak, bw, launch): &(&str, f64, f64, f64)| ProcessorModel {
        processor: p.into(),
        dtype: DType::F32,
        model: LatencyModel::Roofline {
            peak_gflops: peak,
            bw_gbps: bw,
            launch_us: launch,
        },
        score: Score::default(),
        candidates: vec![],
        launch_us: None,
        order_free: false,
        measured: Vec::new(),
    };
    let over = |&(p, ..): &(&str, f64, f64, f64)| Overheads {
        processor: p.into(),
        sync_poll_us: Some(2.0),
        submit_empty_us: Some(3.0),
        ..Default::default()
    };
    Predictor {
        schema_version: SchemaVersion,
        dataset: hetero_plan::Fingerprint::of_bytes("synthetic", b"synthetic"),
        processors,
        models: roofs.iter().map(model).collect(),
        overheads: roofs.iter().map(over).collect(),
    }
}
