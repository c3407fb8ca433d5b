//! A synthetic dataset for end-to-end tests: a staged processor, labelled
//! simulated everywhere.
#![allow(dead_code)]

use hetero_plan::*;

pub fn processor(id: &str) -> Processor {
    Processor {
        id: id.into(),
        kind: ProcessorKind::Npu,
        api: ProcessorApi::Sim,
        name: "synthetic staged processor (test fixture)".into(),
        driver: String::new(),
        capabilities: Capabilities {
            dtypes: vec![DType::F16],
            static_graphs: true,
            tile: Some(32),
            ..Default::default()
        },
        simulated: true,
        emulated: false,
    }
}

pub fn staged_us(m: u32, k: u32, n: u32) -> f64 {
    let t = |d: u32| d.div_ceil(32) as f64;
    15.0 + 0.01 * t(m) * t(k) * t(n)
}

pub fn row(i: usize, m: u32, k: u32, n: u32, us: Option<f64>) -> MeasurementRow {
    MeasurementRow {
        case_id: format!("npu-sim/{m}x{k}x{n}/{i}"),
        processor: "npu-sim".into(),
        m,
        k,
        n,
        dtype: DType::F16,
        order: OperandOrder::Transposed,
        weights: WeightMode::Static,
        status: RowStatus::Ok,
        timing: Timing::Simulated,
        warmups: 1,
        repetitions: 3,
        median_us: us,
        min_us: us,
        p90_us: us,
        cv: Some(0.0),
        mean_us: None,
        host_median_us: None,
        launch_us: None,
        // 1 ms plus 1 ns per byte the f16 graph moves (activations,
        // weights, output), as `hetero fit` counts them.
        prepare_us: Some(1000.0 + (m * k + k * n + m * n) as f64 * 2e-3),
        verified: true,
        rel_err: Some(1e-4),
        tolerance: Some(1e-2),
        message: None,
        conditions: Conditions::default(),
    }
}

pub fn write_dataset(dir: &std::path::Path, rows: &[MeasurementRow]) {
    let profile = DeviceProfile {
        schema_version: SchemaVersion,
        host: HostInfo::default(),
        agent: AgentInfo {
            version: "test".into(),
            protocol: 1,
            arch: "x86_64".into(),
        },
        processors: vec![processor("npu-sim")],
        unavailable: vec![],
        sweep: None,
        started_ms: 0,
        seconds: 0.0,
    };
    std::fs::create_dir_all(dir).unwrap();
    save(&dir.join("device.json"), &profile).unwrap();
    let lines: String = rows
        .iter()
        .map(|r| serde_json::to_string(r).unwrap() + "\n")
        .collect();
    std::fs::write(dir.join("measurements.jsonl"), lines).unwrap();
}

pub fn staged_rows() -> Vec<MeasurementRow> {
    let mut rows = Vec::new();
    for (i, m) in (1..=480).step_by(7).enumerate() {
        for (k, n) in [(512, 512), (1024, 512), (512, 1536)] {
            rows.push(row(i, m, k, n, Some(staged_us(m, k, n))));
        }
    }
    rows
}
