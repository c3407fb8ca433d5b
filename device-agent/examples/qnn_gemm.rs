//! Measures one GEMM on `qnn:htp` as a sweep row ([`sweep::measure`]):
//! prepare (graph finalise, timed), write the input, warm up, time the
//! repetitions, verify against an f64 CPU reference, and print the row as
//! JSON; the exit status is 1 unless the row is `ok`.
//!
//! ```text
//! HETERO_QNN_LIB_DIR=DIR cargo run --release -p hetero-agent --example qnn_gemm -- 128x4096x4096 f16
//! ```
//!
//! Arguments: `SHAPE [DTYPE [ORDER [WEIGHTS]]]` (defaults f16, aw, static).
//! On x86-64 the times are HTP *emulator* times (`timing: emulated`), never
//! NPU latency.
use std::str::FromStr;
use std::sync::atomic::AtomicBool;

use anyhow::{Context, bail};
use hetero_agent::{OpenOptions, Registry, sweep};
use hetero_plan::{DType, GemmShape, OperandOrder, RowStatus, RunParams, SweepCase, WeightMode};

/// Argument `i`, or `default` when it is not given, parsed.
fn arg<T: FromStr<Err = String>>(args: &[String], i: usize, default: &str) -> anyhow::Result<T> {
    args.get(i)
        .map(String::as_str)
        .unwrap_or(default)
        .parse()
        .map_err(anyhow::Error::msg)
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let shape: GemmShape = arg(&args, 0, "128x4096x4096")?;
    let dtype: DType = arg(&args, 1, "f16")?;
    let order: OperandOrder = arg(&args, 2, "aw")?;
    let weights = match args.get(3).map(String::as_str).unwrap_or("static") {
        "static" => WeightMode::Static,
        "input" => WeightMode::Input,
        w => bail!("unknown weights `{w}`; expected static or input"),
    };

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

    let case = SweepCase {
        id: format!("{shape}-{dtype}-{order}"),
        processor: processor.id.clone(),
        shape,
        dtype,
        order,
        weights,
        run: None,
    };
    let row = sweep::measure(
        backend.as_mut(),
        &case,
        &RunParams::default(),
        &AtomicBool::new(false),
    );
    println!("{}", serde_json::to_string(&row)?);
    if row.status != RowStatus::Ok {
        std::process::exit(1);
    }
    Ok(())
}
