//! Measures one GEMM on `qnn:htp` the way a sweep row is measured: prepare
//! (graph finalise, timed), write the input, warm up, time the repetitions,
//! verify against an f64 CPU reference, and print the row as JSON.
//!
//! ```text
//! HETERO_QNN_LIB_DIR=DIR cargo run --release -p hetero-agent --example qnn_gemm -- 128x4096x4096 f16
//! ```
//!
//! Arguments: `SHAPE [DTYPE [ORDER [WEIGHTS]]]` (defaults f16, aw, static).
//! On x86-64 the times are HTP *emulator* times (`timing: emulated`), never
//! NPU latency. This is a stand-in until `hetero-agent sweep` exists.
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use hetero_agent::qnn::synthetic_weights;
use hetero_agent::{GemmSpec, OpenOptions, Registry};
use hetero_plan::{
    Conditions, DType, GemmShape, MeasurementRow, OperandOrder, RowStatus, RunParams, Stats,
    WeightMode,
};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let shape: GemmShape = args
        .first()
        .map(String::as_str)
        .unwrap_or("128x4096x4096")
        .parse()
        .map_err(anyhow::Error::msg)?;
    let dtype: DType = args
        .get(1)
        .map(String::as_str)
        .unwrap_or("f16")
        .parse()
        .map_err(anyhow::Error::msg)?;
    let order: OperandOrder = args
        .get(2)
        .map(String::as_str)
        .unwrap_or("aw")
        .parse()
        .map_err(anyhow::Error::msg)?;
    let weights = match args.get(3).map(String::as_str).unwrap_or("static") {
        "static" => WeightMode::Static,
        "input" => WeightMode::Input,
        w => bail!("unknown weights `{w}`; expected static or input"),
    };
    let spec = GemmSpec {
        shape,
        dtype,
        order,
        weights,
    };
    let run = RunParams::default();

    let mut reg = Registry::open(&OpenOptions::default(), Some(&["qnn:htp".to_string()]));
    if reg.backends.is_empty() {
        for u in &reg.unavailable {
            eprintln!("{}: {:#}", u.backend, u.reason);
        }
        bail!("qnn:htp did not open");
    }
    let backend = reg.get_mut("qnn:htp").context("qnn:htp")?;
    let processor = backend.processor().clone();
    eprintln!(
        "{} — {} [{}]",
        processor.id, processor.name, processor.driver
    );

    let (m, k, n) = shape.mkn();
    let (m, k, n) = (m as usize, k as usize, n as usize);
    let w = synthetic_weights(shape, 1);
    let a = synthetic_weights(GemmShape::new(1, m as u32, k as u32).unwrap(), 2);
    let mut gemm = backend.prepare(&spec, &w)?;
    gemm.write_input(&a)?;
    for _ in 0..run.warmups {
        gemm.execute()?;
    }
    let mut samples = Vec::new();
    for _ in 0..run.repetitions {
        samples.push(gemm.execute()?.best_us());
    }
    let mut c = vec![f32::NAN; m * n];
    gemm.read_output(&mut c)?;

    // f64 reference, full.
    let mut r = vec![0f64; m * n];
    for i in 0..m {
        for p in 0..k {
            let x = a[i * k + p] as f64;
            let row = &w[p * n..(p + 1) * n];
            for (acc, &y) in r[i * n..(i + 1) * n].iter_mut().zip(row) {
                *acc += x * y as f64;
            }
        }
    }
    let scale = r.iter().fold(0f64, |s, x| s.max(x.abs()));
    let rel_err = c
        .iter()
        .zip(&r)
        .fold(0f64, |e, (&x, &y)| e.max((x as f64 - y).abs()))
        / scale;
    let tolerance = backend.tolerance(dtype, k as u32);
    let verified = rel_err <= tolerance;
    let stats = Stats::from_samples(&samples).context("no samples")?;

    let mut row = MeasurementRow {
        case_id: format!("{shape}-{dtype}-{order}"),
        processor: processor.id.clone(),
        m: m as u32,
        k: k as u32,
        n: n as u32,
        dtype,
        order,
        weights,
        status: if verified {
            RowStatus::Ok
        } else {
            RowStatus::Failed
        },
        timing: processor.timing(),
        warmups: run.warmups,
        repetitions: run.repetitions,
        median_us: None,
        min_us: None,
        p90_us: None,
        cv: None,
        mean_us: None,
        host_median_us: None,
        launch_us: None,
        prepare_us: gemm.prepare_us(),
        verified,
        rel_err: Some(rel_err),
        tolerance: Some(tolerance),
        message: (!verified).then(|| format!("rel_err {rel_err:.3e} > {tolerance:.3e}")),
        conditions: Conditions {
            timestamp_ms: SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis() as u64,
            ..Default::default()
        },
    };
    if verified {
        row.set_stats(&stats);
    }
    println!("{}", serde_json::to_string(&row)?);
    if !verified {
        std::process::exit(1);
    }
    Ok(())
}
