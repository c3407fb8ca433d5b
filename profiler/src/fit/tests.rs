use super::*;
use hetero_plan::{AgentInfo, Conditions, HostInfo, Timing, WeightMode};
use rand::Rng;

fn row(
    id: usize,
    proc_: &str,
    m: u32,
    k: u32,
    n: u32,
    order: OperandOrder,
    us: f64,
) -> MeasurementRow {
    MeasurementRow {
        case_id: format!("c{id}"),
        processor: proc_.into(),
        m,
        k,
        n,
        dtype: DType::F16,
        order,
        weights: WeightMode::Static,
        status: RowStatus::Ok,
        timing: Timing::Simulated,
        warmups: 1,
        repetitions: 5,
        median_us: Some(us),
        min_us: Some(us),
        p90_us: Some(us),
        cv: Some(0.0),
        host_median_us: None,
        prepare_us: None,
        verified: true,
        rel_err: Some(0.0),
        tolerance: Some(1e-3),
        message: None,
        conditions: Conditions::default(),
    }
}

fn profile(ids: &[&str]) -> DeviceProfile {
    DeviceProfile {
        schema_version: SchemaVersion,
        host: HostInfo::default(),
        agent: AgentInfo {
            version: "test".into(),
            protocol: 1,
            arch: "x86_64".into(),
        },
        processors: ids
            .iter()
            .map(|id| hetero_plan::Processor {
                id: id.to_string(),
                kind: hetero_plan::ProcessorKind::Npu,
                api: hetero_plan::ProcessorApi::Sim,
                name: "synthetic".into(),
                driver: String::new(),
                capabilities: Default::default(),
                simulated: true,
                emulated: false,
            })
            .collect(),
        unavailable: vec![],
        sweep: None,
        started_ms: 0,
        seconds: 0.0,
    }
}

/// A staged latency: cost grows with the number of 32-wide tiles, plus a
/// penalty in the activation-first order.
fn staged(m: u32, k: u32, n: u32, order: OperandOrder) -> f64 {
    let t = |d: u32| d.div_ceil(32) as f64;
    let base = 20.0 + 0.004 * t(m) * t(k) * t(n);
    if order == OperandOrder::Aw {
        base * 1.8
    } else {
        base
    }
}

#[test]
fn learns_stages_within_two_percent() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let ks = [512u32, 1024, 1536, 2048];
    let rows: Vec<MeasurementRow> = (0..360)
        .map(|i| {
            let m = rng.gen_range(1..=512);
            let k = ks[rng.gen_range(0..ks.len())];
            let n = ks[rng.gen_range(0..ks.len())];
            let order = if i % 2 == 0 {
                OperandOrder::Aw
            } else {
                OperandOrder::WtAt
            };
            row(i, "npu-sim", m, k, n, order, staged(m, k, n, order))
        })
        .collect();
    let (pred, report) = fit(
        &profile(&["npu-sim"]),
        Fingerprint::of_bytes("t", b"t"),
        &rows,
        &[],
        &FitParams::default(),
    )
    .unwrap();
    let e = &report.entries[0];
    assert!(e.mape < 2.0, "held-out MAPE {} with {}", e.mape, e.model);
    assert!(
        e.within_10pct > 0.97,
        "{} within 10 %: {}",
        e.model,
        e.within_10pct
    );
    // The stage is learnt: one row over a tile edge costs a full extra tile.
    let at = |m| {
        pred.gemm_us(
            "npu-sim",
            GemmShape::new(m, 1024, 1024).unwrap(),
            DType::F16,
            OperandOrder::WtAt,
        )
        .unwrap()
    };
    assert!((at(64) / staged(64, 1024, 1024, OperandOrder::WtAt) - 1.0).abs() < 0.03);
    assert!(
        at(65) > at(64) * 1.1,
        "no stage at 64→65: {} {}",
        at(64),
        at(65)
    );
}

#[test]
fn linear_data_picks_a_parametric_model() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(2);
    let rows: Vec<MeasurementRow> = (0..60)
        .map(|i| {
            let (m, k, n) = (
                rng.gen_range(1..2048),
                rng.gen_range(64..4096),
                rng.gen_range(64..4096),
            );
            let flops = 2.0 * m as f64 * k as f64 * n as f64;
            row(i, "gpu", m, k, n, OperandOrder::Aw, 8.0 + flops / 2.0e6)
        })
        .collect();
    let (pred, report) = fit(
        &profile(&["gpu"]),
        Fingerprint::of_bytes("t", b"t"),
        &rows,
        &[],
        &FitParams::default(),
    )
    .unwrap();
    let e = &report.entries[0];
    assert!(
        e.model == "linear_flops" || e.model == "roofline",
        "{}",
        e.model
    );
    assert!(e.mape < 0.5, "{} MAPE {}", e.model, e.mape);
    let m = &pred.models[0];
    assert_eq!(m.candidates.len(), Family::ALL.len() - 1);
}

#[test]
fn bad_and_small_datasets_are_refused() {
    let mut rows: Vec<MeasurementRow> = (0..20)
        .map(|i| row(i, "cpu:0", 1 + i as u32, 64, 64, OperandOrder::Aw, 10.0))
        .collect();
    rows[3].median_us = Some(-1.0);
    let err = fit(
        &profile(&["cpu:0"]),
        Fingerprint::of_bytes("t", b"t"),
        &rows,
        &[],
        &FitParams::default(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("c3"), "{err}");
    rows[3].median_us = Some(f64::NAN);
    assert!(matches!(
        fit(
            &profile(&["cpu:0"]),
            Fingerprint::of_bytes("t", b"t"),
            &rows,
            &[],
            &FitParams::default()
        ),
        Err(FitError::BadTiming { .. })
    ));
    // Failed and unverified rows are skipped, so a dataset of them is too small.
    for r in &mut rows {
        r.median_us = Some(5.0);
        r.verified = false;
    }
    let err = fit(
        &profile(&["cpu:0"]),
        Fingerprint::of_bytes("t", b"t"),
        &rows,
        &[],
        &FitParams::default(),
    )
    .unwrap_err();
    assert!(matches!(err, FitError::TooSmall { .. }), "{err}");
}

#[test]
fn scores_count_bands() {
    let s = score(
        &[
            (100.0, 105.0),
            (100.0, 115.0),
            (100.0, 130.0),
            (100.0, 100.0),
        ],
        5,
    );
    assert_eq!(s.within_10pct, 0.5);
    assert_eq!(s.within_20pct, 0.75);
    assert!((s.mape - 12.5).abs() < 1e-9);
}
