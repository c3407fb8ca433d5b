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
//!
//! With `--pinned` first, A and C live in the processor's host memory
//! ([`HostBuf::for_backend`], page-locked on CUDA), as in the runtime's
//! pool and the agent's `stage_in`/`stage_out` microbenchmarks; else on
//! the heap.

use std::time::Instant;

use anyhow::{Context, Result, bail};
use hetero_agent::{Backend, Gemm, GemmSpec, HostBuf, OpenOptions, Registry, SyncMode, verify};
use hetero_plan::{DType, GemmShape, OperandOrder, WeightMode};

const WARMUPS: usize = 3;
const REPS: usize = 15;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A static-weight GEMM of `M×K×N`.
fn spec(m: u32, k: u32, n: u32, dtype: DType, order: OperandOrder) -> Result<GemmSpec> {
    Ok(GemmSpec {
        shape: GemmShape::new(m, k, n).context("a zero dimension")?,
        dtype,
        order,
        weights: WeightMode::Static,
    })
}

/// Open options with `HETERO_CPU_GROUPS` as the CPU groups (the poll hold
/// comes from `HETERO_CPU_POLL_US` in the backend itself).
fn env_open_options() -> OpenOptions {
    OpenOptions {
        cpu_groups: std::env::var("HETERO_CPU_GROUPS").ok(),
        ..OpenOptions::default()
    }
}

/// `MxKxN` as three sizes.
fn mkn(text: &str) -> Result<(u32, u32, u32)> {
    let d: Vec<u32> = text
        .split('x')
        .map(str::parse)
        .collect::<Result<_, _>>()
        .context("MxKxN")?;
    let [m, k, n] = d[..] else {
        bail!("MxKxN: three sizes");
    };
    Ok((m, k, n))
}

/// `values` in the processor's host memory when `pinned`, else on the heap.
fn buffer(backend: &dyn Backend, pinned: bool, values: &[f32]) -> HostBuf {
    let mut b = if pinned {
        HostBuf::for_backend(backend, values.len())
    } else {
        HostBuf::heap(values.len())
    };
    b.copy_from_slice(values);
    b
}

/// `write_input`, `execute` and `read_output` of one GEMM, round after
/// round, each call timed alone: their medians over [`REPS`] rounds after
/// [`WARMUPS`], µs.
fn alone(g: &mut dyn Gemm, a: &[f32], c: &mut [f32]) -> Result<(f64, f64, f64)> {
    let (mut win, mut ex, mut rout) = (vec![], vec![], vec![]);
    for rep in 0..WARMUPS + REPS {
        let t = Instant::now();
        g.write_input(a)?;
        let t1 = t.elapsed().as_secs_f64() * 1e6;
        let t = Instant::now();
        g.execute()?;
        let t2 = t.elapsed().as_secs_f64() * 1e6;
        let t = Instant::now();
        g.read_output(c)?;
        let t3 = t.elapsed().as_secs_f64() * 1e6;
        if rep >= WARMUPS {
            win.push(t1);
            ex.push(t2);
            rout.push(t3);
        }
    }
    Ok((median(win), median(ex), median(rout)))
}

fn main() -> Result<()> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let pinned = args.first().map(String::as_str) == Some("--pinned");
    if pinned {
        args.remove(0);
    }
    if args.first().map(String::as_str) == Some("--layers") {
        return layers(&args[1..], pinned);
    }
    if args.first().map(String::as_str) == Some("--alloc") {
        return alloc(&args[1..], pinned);
    }
    if args.first().map(String::as_str) == Some("--idle") {
        return idle(&args[1..]);
    }
    if args.first().map(String::as_str) == Some("--after") {
        return after(&args[1..]);
    }
    if args.first().map(String::as_str) == Some("--beside") {
        return beside(&args[1..]);
    }
    if args.first().map(String::as_str) == Some("--follow") {
        return follow(&args[1..]);
    }
    let [proc, dtype, order, kn, ms] = args.as_slice() else {
        bail!(
            "usage: stage_bench [--pinned] PROCESSOR DTYPE ORDER KxN M,M,...\n       stage_bench [--pinned] --layers PROCESSOR DTYPE ORDER M KxN,KxN,... LAYERS\n       stage_bench [--pinned] --alloc PROCESSOR DTYPE ORDER MxKxN COUNT\n       stage_bench --idle PROCESSOR DTYPE ORDER MxKxN GAP_US,...\n       stage_bench --after PROC_A MxKxN PROC_B MxKxN\n       stage_bench --beside PROC_A DTYPE MxKxN PROC_B DTYPE MxKxN LAYERS copied|resident a-first|b-first\n       stage_bench --follow CPU GPU DTYPE LAYERS"
        );
    };
    let dtype: DType = dtype.parse().map_err(anyhow::Error::msg)?;
    let order: OperandOrder = order.parse().map_err(anyhow::Error::msg)?;
    let (k, n) = kn.split_once('x').context("KxN")?;
    let (k, n): (u32, u32) = (k.parse()?, n.parse()?);
    let mut reg = Registry::open(&OpenOptions::default(), Some(std::slice::from_ref(proc)));
    let backend = reg
        .get_mut(proc)
        .with_context(|| format!("{proc} is not on this machine"))?;
    println!(
        "| processor | dtype | order | M×K×N | write_input µs | execute µs | read_output µs | in+out bytes | staging GB/s |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for m in ms.split(',') {
        let m: u32 = m.trim().parse()?;
        let spec = spec(m, k, n, dtype, order)?;
        let (a, weights) = verify::inputs(&spec.shape, 0);
        let mut g = backend.prepare(&spec, &weights)?;
        let a = buffer(&**backend, pinned, &a);
        let mut c = buffer(&**backend, pinned, &vec![0f32; m as usize * n as usize]);
        let (w, e, r) = alone(&mut *g, &a, &mut c)?;
        let bytes =
            (m as f64 * k as f64 + m as f64 * n as f64) * dtype.activation_bits() as f64 / 8.0;
        println!(
            "| {proc} | {dtype} | {order} | {m}×{k}×{n} | {w:.1} | {e:.1} | {r:.1} | {bytes:.0} | {:.2} |",
            bytes / ((w + r) * 1e3)
        );
    }
    Ok(())
}

/// `--layers`: the operators of a decoder layer one after the other, as
/// runtime-min runs them (each its own GEMM and input buffer, one shared
/// output buffer), LAYERS times per pass, 5 passes: per operator, the
/// median `write_input`, run (host clock) and `read_output` in that
/// sequence against the same calls repeated on one GEMM alone.
fn layers(args: &[String], pinned: bool) -> Result<()> {
    let [proc, dtype, order, m, kns, layers, rest @ ..] = args else {
        bail!(
            "usage: stage_bench --layers PROCESSOR DTYPE ORDER M KxN,KxN,... LAYERS [execute|block|poll]"
        );
    };
    // How the run between input and output is waited for: `execute`, or
    // `submit` then `wait` blocking or polling, as runtime-min does.
    let how = rest.first().map_or("execute", String::as_str);
    let dtype: DType = dtype.parse().map_err(anyhow::Error::msg)?;
    let order: OperandOrder = order.parse().map_err(anyhow::Error::msg)?;
    let m: u32 = m.parse()?;
    let layers: usize = layers.parse()?;
    let mut reg = Registry::open(&OpenOptions::default(), Some(std::slice::from_ref(proc)));
    let backend = reg
        .get_mut(proc)
        .with_context(|| format!("{proc} is not on this machine"))?;
    let mut ops = vec![];
    for kn in kns.split(',') {
        let (k, n) = kn.split_once('x').context("KxN")?;
        let (k, n): (u32, u32) = (k.parse()?, n.parse()?);
        let spec = spec(m, k, n, dtype, order)?;
        let (a, weights) = verify::inputs(&spec.shape, 0);
        let g = backend.prepare(&spec, &weights)?;
        let a = buffer(&**backend, pinned, &a);
        ops.push((k, n, g, a));
    }
    let most = ops.iter().map(|o| o.1 as usize).max().unwrap_or(0) * m as usize;
    let mut c = buffer(&**backend, pinned, &vec![0f32; most]);
    let mut seq: Vec<(Vec<f64>, Vec<f64>, Vec<f64>)> = vec![(vec![], vec![], vec![]); ops.len()];
    for pass in 0..6 {
        for _ in 0..layers {
            for (i, (_, n, g, a)) in ops.iter_mut().enumerate() {
                let out = &mut c[..m as usize * *n as usize];
                let t = Instant::now();
                g.write_input(a)?;
                let w = t.elapsed().as_secs_f64() * 1e6;
                let t = Instant::now();
                match how {
                    "block" => {
                        g.submit()?;
                        g.wait(SyncMode::Block)?;
                    }
                    "poll" => {
                        g.submit()?;
                        g.wait(SyncMode::Poll { predicted_us: 10.0 })?;
                    }
                    _ => {
                        g.execute()?;
                    }
                }
                let x = t.elapsed().as_secs_f64() * 1e6;
                let t = Instant::now();
                g.read_output(out)?;
                let r = t.elapsed().as_secs_f64() * 1e6;
                if pass > 0 {
                    seq[i].0.push(w);
                    seq[i].1.push(r);
                    seq[i].2.push(x);
                }
            }
        }
    }
    println!(
        "| {proc} {dtype} {order} M={m}, {how}{} | write_input in sequence | alone | read_output in sequence | alone | run in sequence | alone |",
        if pinned { ", pinned" } else { "" }
    );
    println!("|---|---|---|---|---|---|---|");
    for (i, (k, n, g, a)) in ops.iter_mut().enumerate() {
        let out = &mut c[..m as usize * *n as usize];
        let (w1, x1, r1) = alone(&mut **g, a, out)?;
        let (ws, rs, xs) = std::mem::take(&mut seq[i]);
        println!(
            "| {m}×{k}×{n} | {:.1} | {w1:.1} | {:.1} | {r1:.1} | {:.1} | {x1:.1} |",
            median(ws),
            median(rs),
            median(xs),
        );
    }
    Ok(())
}

/// `--alloc`: COUNT GEMMs of one shape, each prepared on its own, and
/// COUNT input buffers, each allocated on its own: the median
/// `write_input` of every GEMM from every buffer (each round followed by
/// `execute` and `read_output`, as in the runtime), with each buffer's
/// address, twice over. It tells whether a copy's cost follows the host
/// buffer or the GEMM (its device buffers).
fn alloc(args: &[String], pinned: bool) -> Result<()> {
    let [proc, dtype, order, mkn, count] = args else {
        bail!("usage: stage_bench [--pinned] --alloc PROCESSOR DTYPE ORDER MxKxN COUNT");
    };
    let dtype: DType = dtype.parse().map_err(anyhow::Error::msg)?;
    let order: OperandOrder = order.parse().map_err(anyhow::Error::msg)?;
    let (m, k, n) = self::mkn(mkn)?;
    let count: usize = count.parse()?;
    let mut reg = Registry::open(&OpenOptions::default(), Some(std::slice::from_ref(proc)));
    let backend = reg
        .get_mut(proc)
        .with_context(|| format!("{proc} is not on this machine"))?;
    let spec = spec(m, k, n, dtype, order)?;
    let (a, weights) = verify::inputs(&spec.shape, 0);
    let mut gemms = vec![];
    let mut inputs = vec![];
    for _ in 0..count {
        gemms.push(backend.prepare(&spec, &weights)?);
        inputs.push(buffer(&**backend, pinned, &a));
    }
    let mut c = buffer(&**backend, pinned, &vec![0f32; m as usize * n as usize]);
    let at = |b: &HostBuf| {
        let p = b.as_ptr() as usize;
        format!("{:#x} ({} KiB into 2 MiB)", p, (p % (2 << 20)) >> 10)
    };
    print!(
        "| {m}×{k}×{n}{}: GEMM \\ buffer |",
        if pinned { ", pinned" } else { "" }
    );
    for (j, b) in inputs.iter().enumerate() {
        print!(" {j}: {} |", at(b));
    }
    println!();
    println!("|---|{}", "---|".repeat(count));
    // Two passes: a pair slow in both is slow by placement, not by chance.
    for i in (0..2).flat_map(|_| 0..count) {
        let g = &mut gemms[i];
        print!("| {i} |");
        for src in &inputs {
            let (w, _, _) = alone(&mut **g, src, &mut c)?;
            print!(" {w:.1} |");
        }
        println!();
    }
    Ok(())
}

/// `--idle`: one GEMM submitted and waited for (blocking) after the host
/// has spun for each of the GAPS µs since the last wait ended, rounds of
/// the gaps alternated: the median submit-to-wait time per gap. A time that
/// grows with the gap is the processor's wake-up (a CPU pool's workers
/// fall asleep when idle). `HETERO_CPU_GROUPS` sets the CPU groups.
fn idle(args: &[String]) -> Result<()> {
    let [proc, dtype, order, mkn, gaps] = args else {
        bail!("usage: stage_bench --idle PROCESSOR DTYPE ORDER MxKxN GAP_US,GAP_US,...");
    };
    let dtype: DType = dtype.parse().map_err(anyhow::Error::msg)?;
    let order: OperandOrder = order.parse().map_err(anyhow::Error::msg)?;
    let (m, k, n) = self::mkn(mkn)?;
    let gaps: Vec<f64> = gaps
        .split(',')
        .map(str::parse)
        .collect::<Result<_, _>>()
        .context("GAP_US")?;
    let opts = env_open_options();
    let mut reg = Registry::open(&opts, Some(std::slice::from_ref(proc)));
    let backend = reg
        .get_mut(proc)
        .with_context(|| format!("{proc} is not on this machine"))?;
    let spec = spec(m, k, n, dtype, order)?;
    let (a, weights) = verify::inputs(&spec.shape, 0);
    let mut g = backend.prepare(&spec, &weights)?;
    g.write_input(&a)?;
    let mut times: Vec<Vec<f64>> = vec![vec![]; gaps.len()];
    for round in 0..WARMUPS + 4 * REPS {
        for (i, gap) in gaps.iter().enumerate() {
            let t = Instant::now();
            while t.elapsed().as_secs_f64() * 1e6 < *gap {
                std::hint::spin_loop();
            }
            let t = Instant::now();
            g.submit()?;
            g.wait(SyncMode::Block)?;
            if round >= WARMUPS {
                times[i].push(t.elapsed().as_secs_f64() * 1e6);
            }
        }
    }
    println!(
        "| {proc} {dtype} {order} {m}×{k}×{n}: idle gap µs | submit to wait µs, median | p90 |"
    );
    println!("|---|---|---|");
    for (gap, mut t) in gaps.iter().zip(times) {
        t.sort_by(f64::total_cmp);
        let p90 = t[t.len() * 9 / 10];
        println!("| {gap} | {:.1} | {p90:.1} |", median(t));
    }
    Ok(())
}

/// `--after`: a GEMM of processor B run right after one of processor A,
/// against the same GEMM of B run 5 ms after anything else, rounds
/// alternated (f32 `wt_at`): medians. It shows what A's pool does to B in
/// the moments after A's run, where the two share cores (a CPU group's
/// workers polling for work beside PoCL's threads).
fn after(args: &[String]) -> Result<()> {
    let [a_proc, a_mkn, b_proc, b_mkn] = args else {
        bail!("usage: stage_bench --after PROC_A MxKxN PROC_B MxKxN");
    };
    let opts = env_open_options();
    let procs = [a_proc.clone(), b_proc.clone()];
    let mut reg = Registry::open(&opts, Some(&procs));
    let mut prep = |proc: &str, mkn: &str| -> Result<Box<dyn Gemm>> {
        let (m, k, n) = self::mkn(mkn)?;
        let backend = reg
            .get_mut(proc)
            .with_context(|| format!("{proc} is not on this machine"))?;
        let spec = spec(m, k, n, DType::F32, OperandOrder::WtAt)?;
        let (a, w) = verify::inputs(&spec.shape, 0);
        let mut g = backend.prepare(&spec, &w)?;
        g.write_input(&a)?;
        Ok(g)
    };
    let mut ga = prep(a_proc, a_mkn)?;
    let mut gb = prep(b_proc, b_mkn)?;
    let (mut right_after, mut alone) = (vec![], vec![]);
    for round in 0..WARMUPS + 2 * REPS {
        ga.execute()?;
        let t = Instant::now();
        gb.execute()?;
        let x = t.elapsed().as_secs_f64() * 1e6;
        std::thread::sleep(std::time::Duration::from_millis(5));
        let t = Instant::now();
        gb.execute()?;
        let y = t.elapsed().as_secs_f64() * 1e6;
        if round >= WARMUPS {
            right_after.push(x);
            alone.push(y);
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    println!("| {b_proc} {b_mkn} | right after {a_proc} {a_mkn}, µs | 5 ms after, µs |");
    println!("|---|---|---|");
    println!(
        "| median | {:.1} | {:.1} |",
        median(right_after),
        median(alone)
    );
    Ok(())
}

/// `--beside`: `LAYERS` GEMMs of processor A, each with its own weights
/// and run in turn (as a plan's layers run, so none finds another's
/// weights cached), timed alone and while processor B runs its own
/// `LAYERS` GEMMs beside them. Each round passes over the layers three
/// times: A alone, B alone, then both, submitted in the order asked (the
/// runtime submits a plan's parts in the plan's order, CPU first). With `copied`, B keeps its
/// weights in page-locked host memory and copies them in every run
/// ([`Gemm::host_weights`], offload's CG rows); with `resident`, they stay
/// in B's memory. Each GEMM's first output is checked against the CPU
/// reference before anything is timed. Medians, µs, and A's slowdown.
fn beside(args: &[String]) -> Result<()> {
    let [
        a_proc,
        a_dtype,
        a_mkn,
        b_proc,
        b_dtype,
        b_mkn,
        layers,
        b_weights,
        first,
    ] = args
    else {
        bail!(
            "usage: stage_bench --beside PROC_A DTYPE MxKxN PROC_B DTYPE MxKxN LAYERS copied|resident a-first|b-first"
        );
    };
    let a_first = match first.as_str() {
        "a-first" => true,
        "b-first" => false,
        other => bail!("submit order: `a-first` or `b-first`, not `{other}`"),
    };
    let copied = match b_weights.as_str() {
        "copied" => true,
        "resident" => false,
        other => bail!("B's weights: `copied` or `resident`, not `{other}`"),
    };
    let layers: u64 = layers.parse().context("LAYERS")?;
    let opts = env_open_options();
    let procs = [a_proc.clone(), b_proc.clone()];
    let mut reg = Registry::open(&opts, Some(&procs));
    let mut prep = |proc: &str, dtype: &str, mkn: &str, host: bool| -> Result<Vec<Box<dyn Gemm>>> {
        let dtype: DType = dtype.parse().map_err(anyhow::Error::msg)?;
        let shape = self::mkn(mkn)?;
        (0..layers)
            .map(|layer| checked_gemm(&mut reg, proc, dtype, shape, layer, host))
            .collect()
    };
    let mut ga = prep(a_proc, a_dtype, a_mkn, false)?;
    let mut gb = prep(b_proc, b_dtype, b_mkn, copied)?;
    let (mut a_alone, mut b_alone, mut a_beside, mut b_beside) = (vec![], vec![], vec![], vec![]);
    // Each pass runs every layer once, so that a layer's weights come
    // back only after the other layers' have gone through the caches.
    for round in 0..WARMUPS + REPS {
        let keep = round >= WARMUPS;
        for a in ga.iter_mut() {
            let t = Instant::now();
            a.execute()?;
            if keep {
                a_alone.push(t.elapsed().as_secs_f64() * 1e6);
            }
        }
        for b in gb.iter_mut() {
            let t = Instant::now();
            b.execute()?;
            if keep {
                b_alone.push(t.elapsed().as_secs_f64() * 1e6);
            }
        }
        for (a, b) in ga.iter_mut().zip(gb.iter_mut()) {
            let t = Instant::now();
            if a_first {
                a.submit()?;
                b.submit()?;
            } else {
                b.submit()?;
                a.submit()?;
            }
            a.wait(SyncMode::Block)?;
            let xb = t.elapsed().as_secs_f64() * 1e6;
            b.wait(SyncMode::Block)?;
            if keep {
                a_beside.push(xb);
                b_beside.push(t.elapsed().as_secs_f64() * 1e6);
            }
        }
    }
    let (xa, xb) = (median(a_alone), median(a_beside));
    let (ya, yb) = (median(b_alone), median(b_beside));
    println!(
        "| {a_proc} {a_dtype} {a_mkn} beside {b_proc} {b_dtype} {b_mkn} ({b_weights}, {first}), {layers} layers | alone µs | beside µs | beside / alone |"
    );
    println!("|---|---|---|---|");
    println!("| {a_proc} | {xa:.1} | {xb:.1} | {:.3} |", xb / xa);
    println!(
        "| {b_proc} (from the first submit) | {ya:.1} | {yb:.1} | {:.3} |",
        yb / ya
    );
    Ok(())
}

/// The attention operators of a 1.5B model's decoder layer at decode
/// (Qwen2-1.5B: q, k, v, o), M×K×N.
const FOLLOW_ATTN: [(u32, u32, u32); 4] = [
    (1, 1536, 1536),
    (1, 1536, 256),
    (1, 1536, 256),
    (1, 1536, 1536),
];
/// One FFN offload step before them: the CPU's columns and the GPU's
/// copied columns of `ffn_gate` (1792 each), M×K×N.
const FOLLOW_STEP: (u32, u32, u32) = (1, 1536, 1792);

/// One layer's `M×K×N` GEMM on `proc`, `wt_at`, weights seeded by the
/// layer (in page-locked host memory where `host`), its product checked
/// against the CPU reference before it is timed.
fn checked_gemm(
    reg: &mut Registry,
    proc: &str,
    dtype: DType,
    (m, k, n): (u32, u32, u32),
    layer: u64,
    host: bool,
) -> Result<Box<dyn Gemm>> {
    let backend = reg
        .get_mut(proc)
        .with_context(|| format!("{proc} is not on this machine"))?;
    let spec = spec(m, k, n, dtype, OperandOrder::WtAt)?;
    let tol = backend.tolerance(dtype, k);
    let (a, w) = verify::inputs(&spec.shape, layer);
    let mut g = backend.prepare(&spec, &w)?;
    if host {
        g.host_weights(&w)?;
    }
    g.write_input(&a)?;
    g.execute()?;
    let mut c = vec![0f32; (m * n) as usize];
    g.read_output(&mut c)?;
    let r = verify::check(&spec.shape, &a, &w, &c);
    if !r.passes(tol) {
        bail!(
            "{proc} {m}x{k}x{n} layer {layer}: error {} over {tol}",
            r.rel_err
        );
    }
    Ok(g)
}

/// `--follow`: the GPU's four attention GEMMs of each of `LAYERS` layers
/// (in DTYPE, weights resident, each layer its own), run one after another as
/// runtime-min runs a plan's GPU-alone operators, after one of four
/// things in each layer: nothing; the CPU's part of an FFN step (f32,
/// its own weights per layer); the GPU's copied part of it (weights
/// copied in from page-locked host memory); or both beside each other,
/// as an offload step. The contexts alternate layer by layer. Per context
/// and operator: the median time inside `submit`, the device timer, and
/// submit to the wait's return (blocking), µs. It tells which of the
/// offload step's work slows the GPU operators after it.
fn follow(args: &[String]) -> Result<()> {
    let [cpu, gpu, dtype, layers] = args else {
        bail!("usage: stage_bench --follow CPU GPU DTYPE LAYERS");
    };
    let dtype: DType = dtype.parse().map_err(anyhow::Error::msg)?;
    let layers: u64 = layers.parse().context("LAYERS")?;
    let opts = env_open_options();
    let procs = [cpu.clone(), gpu.clone()];
    let mut reg = Registry::open(&opts, Some(&procs));
    let mut prep = |proc: &str, dtype: DType, shape: (u32, u32, u32), layer: u64, host: bool| {
        checked_gemm(&mut reg, proc, dtype, shape, layer, host)
    };
    let mut attn = vec![];
    let (mut steps_cpu, mut steps_gpu) = (vec![], vec![]);
    for layer in 0..layers {
        let ops: Vec<Box<dyn Gemm>> = FOLLOW_ATTN
            .iter()
            .map(|&s| prep(gpu, dtype, s, layer, false))
            .collect::<Result<_>>()?;
        attn.push(ops);
        steps_cpu.push(prep(cpu, DType::F32, FOLLOW_STEP, layer, false)?);
        steps_gpu.push(prep(gpu, dtype, FOLLOW_STEP, layer, true)?);
    }
    const CONTEXTS: [&str; 4] = ["nothing", "the CPU part", "the GPU's copies", "both beside"];
    // [context][operator] -> (submit, device, wall) samples.
    let mut t: Vec<Vec<[Vec<f64>; 3]>> = (0..4)
        .map(|_| (0..4).map(|_| Default::default()).collect())
        .collect();
    for round in 0..WARMUPS + REPS {
        for layer in 0..layers as usize {
            let ctx = (layer + round) % 4;
            let (c, g) = (&mut steps_cpu[layer], &mut steps_gpu[layer]);
            match ctx {
                1 => {
                    c.execute()?;
                }
                2 => {
                    g.execute()?;
                }
                3 => {
                    c.submit()?;
                    g.submit()?;
                    c.wait(SyncMode::Block)?;
                    g.wait(SyncMode::Block)?;
                }
                _ => {}
            }
            for (i, op) in attn[layer].iter_mut().enumerate() {
                let t0 = Instant::now();
                op.submit()?;
                let s = t0.elapsed().as_secs_f64() * 1e6;
                let timed = op.wait(SyncMode::Block)?;
                let w = t0.elapsed().as_secs_f64() * 1e6;
                if round >= WARMUPS {
                    let cell = &mut t[ctx][i];
                    cell[0].push(s);
                    cell[1].push(timed.device_us.unwrap_or(f64::NAN));
                    cell[2].push(w);
                }
            }
        }
    }
    println!("| {gpu} {dtype} attention after | op | submit µs | device µs | submit to wait µs |");
    println!("|---|---|---|---|---|");
    for (ctx, ops) in t.into_iter().enumerate() {
        for (i, [s, d, w]) in ops.into_iter().enumerate() {
            let (m, k, n) = FOLLOW_ATTN[i];
            println!(
                "| {} | {m}×{k}×{n} | {:.1} | {:.1} | {:.1} |",
                CONTEXTS[ctx],
                median(s),
                median(d),
                median(w)
            );
        }
    }
    Ok(())
}
