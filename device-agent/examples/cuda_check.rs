//! Checks the CUDA backend on a real GPU and prints its headline figures:
//! correctness against an f64 CPU reference in f32/f16/bf16 and both operand
//! orders, cuBLAS throughput at 4096³ (and 8192³ as the ceiling), the
//! M×4096×4096 f16 staircase, handoff latency blocking versus polling, and
//! the copy and launch microbenchmarks.
//!
//! ```text
//! cargo build --release -p hetero-agent --example cuda_check
//! target/release/examples/cuda_check [OUT.jsonl]
//! ```
//!
//! Every figure is the median of timed runs after untimed warm-ups; GEMM
//! times are CUDA-event times of the kernel alone unless labelled `host`.

use std::io::Write;

use anyhow::{Context, Result, bail};
use hetero_agent::verify::random_vec;
use hetero_agent::{Backend, GemmSpec, OpenOptions, SyncMode, cuda};
use hetero_plan::{
    DType, GemmShape, MicrobenchKind, MicrobenchRequest, OperandOrder, Stats, WeightMode,
};
use serde_json::json;

const WARMUPS: usize = 10;
const REPS: usize = 50;

/// Largest |c − ref| over `samples` outputs spread over C, relative to the
/// largest |ref| among them; the reference is f64 over the f32 inputs.
fn sampled_rel_err(a: &[f32], w: &[f32], c: &[f32], (m, k, n): (usize, usize, usize)) -> f64 {
    let samples = 512.min(m * n);
    let (mut err, mut scale) = (0f64, 0f64);
    for s in 0..samples {
        // Corners first, then a stride through the matrix.
        let idx = match s {
            0 => 0,
            1 => m * n - 1,
            _ => (s * 7919 * 104_729) % (m * n),
        };
        let (i, j) = (idx / n, idx % n);
        let r: f64 = (0..k)
            .map(|p| a[i * k + p] as f64 * w[p * n + j] as f64)
            .sum();
        let got = c[idx] as f64;
        if !got.is_finite() {
            return f64::INFINITY;
        }
        err = err.max((got - r).abs());
        scale = scale.max(r.abs());
    }
    err / scale.max(f64::MIN_POSITIVE)
}

struct Out {
    file: Option<std::fs::File>,
}

impl Out {
    fn row(&mut self, v: serde_json::Value) -> Result<()> {
        if let Some(f) = &mut self.file {
            writeln!(f, "{v}")?;
        }
        Ok(())
    }
}

fn spec(m: u32, k: u32, n: u32, dtype: DType, order: OperandOrder) -> GemmSpec {
    GemmSpec {
        shape: GemmShape::new(m, k, n).expect("positive"),
        dtype,
        order,
        weights: WeightMode::Static,
    }
}

/// Prepares, verifies and times one GEMM; returns (device median µs,
/// host median µs, rel err, tolerance).
fn run_gemm(dev: &mut dyn Backend, s: &GemmSpec, reps: usize) -> Result<(Stats, Stats, f64, f64)> {
    let (m, k, n) = s.shape.mkn();
    let (m, k, n) = (m as usize, k as usize, n as usize);
    let w = random_vec(k * n, 17 + n as u64);
    let a = random_vec(m * k, 29 + m as u64);
    let mut g = dev.prepare(s, &w)?;
    g.write_input(&a)?;
    g.execute()?;
    let mut c = vec![f32::NAN; m * n];
    g.read_output(&mut c)?;
    let err = sampled_rel_err(&a, &w, &c, (m, k, n));
    let tol = dev.tolerance(s.dtype, k as u32);
    for _ in 0..WARMUPS {
        g.execute()?;
    }
    let mut dev_us = Vec::new();
    let mut host_us = Vec::new();
    for _ in 0..reps {
        let t = g.execute()?;
        dev_us.push(t.device_us.context("no device time")?);
        host_us.push(t.host_us);
    }
    Ok((
        Stats::from_samples(&dev_us).expect("samples"),
        Stats::from_samples(&host_us).expect("samples"),
        err,
        tol,
    ))
}

/// Correctness, every dtype and order. Returns the failures.
fn correctness(dev: &mut dyn Backend, out: &mut Out) -> Result<usize> {
    let mut failures = 0;
    println!("\n== correctness (sampled f64 reference, 512 outputs)");
    for &(m, k, n) in &[
        (1, 4096, 4096),
        (7, 4096, 11008),
        (333, 1000, 777),
        (2048, 2048, 5632),
    ] {
        for dtype in [DType::F32, DType::F16, DType::Bf16] {
            for order in [OperandOrder::Aw, OperandOrder::Transposed] {
                let s = spec(m, k, n, dtype, order);
                let (d, h, err, tol) = run_gemm(dev, &s, 5)?;
                let ok = err <= tol;
                failures += usize::from(!ok);
                println!(
                    "{:>16} {:>4} {:>5}  rel_err {:9.2e} tol {:8.2e} {}  {:9.1} us",
                    s.shape.to_string(),
                    dtype.as_str(),
                    order.as_str(),
                    err,
                    tol,
                    if ok { "ok  " } else { "FAIL" },
                    d.median_us
                );
                out.row(
                    json!({"kind": "verify", "shape": s.shape.to_string(), "dtype": dtype,
                    "order": order, "rel_err": err, "tolerance": tol, "ok": ok,
                    "device_median_us": d.median_us, "host_median_us": h.median_us}),
                )?;
            }
        }
    }
    Ok(failures)
}

/// Throughput at 4096³, and the large shapes as the ceiling. Returns the
/// failures.
fn throughput(dev: &mut dyn Backend, out: &mut Out) -> Result<usize> {
    let mut failures = 0;
    println!("\n== throughput (median of {REPS} after {WARMUPS} warm-ups, CUDA events)");
    let mut cases = vec![];
    for dtype in [DType::F16, DType::Bf16, DType::F32] {
        for order in [OperandOrder::Aw, OperandOrder::Transposed] {
            cases.push(spec(4096, 4096, 4096, dtype, order));
        }
    }
    cases.push(spec(8192, 8192, 8192, DType::F16, OperandOrder::Transposed));
    cases.push(spec(
        8192,
        8192,
        8192,
        DType::Bf16,
        OperandOrder::Transposed,
    ));
    cases.push(spec(
        16384,
        8192,
        8192,
        DType::F16,
        OperandOrder::Transposed,
    ));
    for s in &cases {
        let (d, h, err, tol) = run_gemm(dev, s, REPS)?;
        let tflops = s.shape.flops() / d.median_us * 1e-6;
        let ok = err <= tol;
        failures += usize::from(!ok);
        println!(
            "{:>16} {:>4} {:>5}  {:9.1} us (host {:9.1}, cv {:.3})  {:7.1} TFLOP/s  rel_err {:.1e} {}",
            s.shape.to_string(),
            s.dtype.as_str(),
            s.order.as_str(),
            d.median_us,
            h.median_us,
            d.cv,
            tflops,
            err,
            if ok { "ok" } else { "FAIL" }
        );
        out.row(
            json!({"kind": "throughput", "shape": s.shape.to_string(), "dtype": s.dtype,
            "order": s.order, "device": d, "host": h, "tflops": tflops, "rel_err": err, "ok": ok}),
        )?;
    }
    Ok(failures)
}

/// The staircase, M×4096×4096 f16, both orders. Returns the failures.
fn staircase(dev: &mut dyn Backend, out: &mut Out) -> Result<usize> {
    let mut failures = 0;
    println!("\n== M x 4096 x 4096 f16, median us (device events)");
    for m in [
        1, 8, 32, 64, 128, 129, 256, 257, 512, 513, 1024, 1025, 2048, 4096,
    ] {
        let mut line = format!("M={m:>5}");
        for order in [OperandOrder::Aw, OperandOrder::Transposed] {
            let s = spec(m, 4096, 4096, DType::F16, order);
            let (d, h, err, tol) = run_gemm(dev, &s, 30)?;
            let ok = err <= tol;
            failures += usize::from(!ok);
            line += &format!(
                "  {:>5} {:8.1}{}",
                order.as_str(),
                d.median_us,
                if ok { "" } else { " FAIL" }
            );
            out.row(
                json!({"kind": "staircase", "m": m, "order": order, "device": d, "host": h,
                "rel_err": err, "ok": ok}),
            )?;
        }
        println!("{line}");
    }
    Ok(failures)
}

/// Handoff of a small GEMM, blocking wait versus polling the flag.
/// Returns the failures.
fn handoff(dev: &mut dyn Backend, out: &mut Out) -> Result<usize> {
    let mut failures = 0;
    println!("\n== GEMM handoff, host us from submit to observed completion (median of 200)");
    for (m, k, n) in [(1, 4096, 4096), (128, 4096, 4096)] {
        let s = spec(m, k, n, DType::F16, OperandOrder::Transposed);
        let w = random_vec((k * n) as usize, 5);
        let a = random_vec((m * k) as usize, 6);
        let mut g = dev.prepare(&s, &w)?;
        g.write_input(&a)?;
        let predicted = {
            let mut v = vec![];
            for _ in 0..50 {
                v.push(g.execute()?.best_us());
            }
            Stats::from_samples(&v).expect("samples").median_us
        };
        for (name, mode) in [
            ("block", SyncMode::Block),
            ("poll", SyncMode::Poll { predicted_us: 0.0 }),
            (
                "poll_predicted",
                SyncMode::Poll {
                    predicted_us: predicted,
                },
            ),
        ] {
            let mut host = vec![];
            let mut devt = vec![];
            for i in 0..220 {
                g.submit()?;
                let t = g.wait(mode)?;
                if i >= 20 {
                    host.push(t.host_us);
                    devt.push(t.device_us.unwrap_or(f64::NAN));
                }
            }
            let hs = Stats::from_samples(&host).expect("samples");
            let ds = Stats::from_samples(&devt).expect("samples");
            println!(
                "{:>16} {:>15}: host {:8.2} us (p90 {:8.2})  kernel {:8.2} us",
                s.shape.to_string(),
                name,
                hs.median_us,
                hs.p90_us,
                ds.median_us
            );
            out.row(
                json!({"kind": "handoff", "shape": s.shape.to_string(), "mode": name,
                "host": hs, "device": ds}),
            )?;
        }
        let mut c = vec![f32::NAN; (m * n) as usize];
        g.read_output(&mut c)?;
        let err = sampled_rel_err(&a, &w, &c, (m as usize, k as usize, n as usize));
        if err > dev.tolerance(DType::F16, k) {
            failures += 1;
            println!("handoff GEMM output FAILED verification: {err:e}");
        }
    }
    Ok(failures)
}

/// The copy, submit and synchronisation microbenchmarks.
fn microbenchmarks(dev: &mut dyn Backend, out: &mut Out) -> Result<()> {
    let p = dev.processor().clone();
    println!("\n== microbenchmarks (host us unless noted; median)");
    let req = |bench, bytes: Option<u64>| MicrobenchRequest {
        id: format!("{bench:?}-{}", bytes.unwrap_or(0)),
        processor: p.id.clone(),
        bench,
        bytes,
        peer: None,
        shape: None,
    };
    let mut benches = vec![];
    for kind in [MicrobenchKind::CopyH2d, MicrobenchKind::CopyD2h] {
        let mut b = 4096u64;
        while b <= 256 << 20 {
            benches.push(req(kind, Some(b)));
            b *= 4;
        }
    }
    for kind in [
        MicrobenchKind::SubmitEmpty,
        MicrobenchKind::SubmitBusy,
        MicrobenchKind::SyncBlock,
        MicrobenchKind::SyncPoll,
    ] {
        benches.push(req(kind, None));
    }
    for r in &benches {
        let samples = dev.microbench(r)?;
        let st = Stats::from_samples(&samples).expect("samples");
        let gbps = r.bytes.map(|b| b as f64 / st.median_us * 1e-3);
        println!(
            "{:>10?} {:>10}  median {:9.2} us  p90 {:9.2}  {}",
            r.bench,
            r.bytes.map(|b| b.to_string()).unwrap_or_default(),
            st.median_us,
            st.p90_us,
            gbps.map(|g| format!("{g:.2} GB/s")).unwrap_or_default()
        );
        out.row(
            json!({"kind": "microbench", "bench": r.bench, "bytes": r.bytes, "stats": st,
            "gbps": gbps, "flag": p.capabilities.extensions}),
        )?;
    }
    Ok(())
}

fn main() -> Result<()> {
    let out_path = std::env::args().nth(1);
    let mut out = Out {
        file: out_path.map(std::fs::File::create).transpose()?,
    };
    let mut devices = cuda::open(&OpenOptions::default()).context("opening the CUDA backend")?;
    let dev = devices.first_mut().context("no CUDA device")?;
    let dev: &mut dyn Backend = dev.as_mut();
    let p = dev.processor().clone();
    println!("probe: {}", serde_json::to_string(&p)?);
    out.row(json!({"kind": "probe", "processor": p}))?;
    let failures = correctness(dev, &mut out)?
        + throughput(dev, &mut out)?
        + staircase(dev, &mut out)?
        + handoff(dev, &mut out)?;
    microbenchmarks(dev, &mut out)?;
    if failures > 0 {
        bail!("{failures} case(s) failed verification");
    }
    println!("\nall cases verified");
    Ok(())
}
