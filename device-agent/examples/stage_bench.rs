//! Times the per-operator data path of a GEMM on one processor, the way
//! runtime-min drives it: `write_input` (convert and copy A in),
//! `execute` (the kernel, submit to completion) and `read_output` (copy C
//! back and convert), each alone, median of timed runs, at several M. It
//! separates what the plan's copy term covers from what the runtime pays.
//!
//! ```text
//! cargo build --release -p hetero-agent --example stage_bench
//! target/release/examples/stage_bench cuda:0 f16 wt_at 1536x8960 1,16,128,512,2048
//! ```

use std::time::Instant;

use anyhow::{Context, Result, bail};
use hetero_agent::{GemmSpec, OpenOptions, Registry};
use hetero_plan::{DType, GemmShape, OperandOrder, WeightMode};

const WARMUPS: usize = 3;
const REPS: usize = 15;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [proc, dtype, order, kn, ms] = args.as_slice() else {
        bail!("usage: stage_bench PROCESSOR DTYPE ORDER KxN M,M,...");
    };
    let dtype: DType = dtype.parse().map_err(anyhow::Error::msg)?;
    let order: OperandOrder = order.parse().map_err(anyhow::Error::msg)?;
    let (k, n) = kn.split_once('x').context("KxN")?;
    let (k, n): (u32, u32) = (k.parse()?, n.parse()?);
    let mut reg = Registry::open(&OpenOptions::default(), Some(&[proc.clone()]));
    let backend = reg
        .get_mut(proc)
        .with_context(|| format!("{proc} is not on this machine"))?;
    let weights: Vec<f32> = (0..k as usize * n as usize)
        .map(|i| ((i * 7919) % 1000) as f32 * 1e-3 - 0.5)
        .collect();
    println!(
        "| processor | dtype | order | M×K×N | write_input µs | execute µs | read_output µs | in+out bytes | staging GB/s |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for m in ms.split(',') {
        let m: u32 = m.trim().parse()?;
        let spec = GemmSpec {
            shape: GemmShape::new(m, k, n).context("a zero dimension")?,
            dtype,
            order,
            weights: WeightMode::Static,
        };
        let mut g = backend.prepare(&spec, &weights)?;
        let a: Vec<f32> = (0..m as usize * k as usize)
            .map(|i| ((i * 31) % 97) as f32 * 1e-2)
            .collect();
        let mut c = vec![0f32; m as usize * n as usize];
        let (mut win, mut ex, mut rout) = (vec![], vec![], vec![]);
        for rep in 0..WARMUPS + REPS {
            let t = Instant::now();
            g.write_input(&a)?;
            let t1 = t.elapsed().as_secs_f64() * 1e6;
            let t = Instant::now();
            g.execute()?;
            let t2 = t.elapsed().as_secs_f64() * 1e6;
            let t = Instant::now();
            g.read_output(&mut c)?;
            let t3 = t.elapsed().as_secs_f64() * 1e6;
            if rep >= WARMUPS {
                win.push(t1);
                ex.push(t2);
                rout.push(t3);
            }
        }
        let (w, e, r) = (median(win), median(ex), median(rout));
        let bytes = (m as f64 * k as f64 + m as f64 * n as f64) * dtype.activation_bits() as f64 / 8.0;
        println!(
            "| {proc} | {dtype} | {order} | {m}×{k}×{n} | {w:.1} | {e:.1} | {r:.1} | {bytes:.0} | {:.2} |",
            bytes / ((w + r) * 1e3)
        );
    }
    Ok(())
}
