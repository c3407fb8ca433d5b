//! OpenCL GEMM and microbenchmarks on the first OpenCL device, side by side
//! with the `gemm` crate on the host CPU in the same process.
//!
//! ```text
//! cargo run --release -p hetero-agent --example opencl_bench -- [--shapes 512,1024,2048]
//!     [--reps 7] [--tiles] [--micro] [--gemms 1x4096x4096,64x4096x4096] [--cache-dir DIR]
//! ```
//! `--tiles` times every candidate tile at each shape (kernel development);
//! `--gemms` times further shapes in both operand orders;
//! `--micro` runs the copy (4 KiB to 256 MiB), submit and sync microbenchmarks.
//! Every GEMM result is checked against an f64 reference on sampled outputs
//! before its time is printed. OpenCL and `gemm` runs alternate, with a
//! 30 ms pause before each, so that other load on the machine hits both
//! alike and neither runtime's spinning workers slow the other.

use std::time::Instant;

use hetero_agent::cpu::gemm_crate;
use hetero_agent::opencl::{self, CANDIDATES, ClGemm, OpenClBackend, Tile};
use hetero_agent::verify::random_vec;
use hetero_agent::{Backend, Gemm, GemmSpec, OpenOptions, default_tolerance};
use hetero_plan::{DType, GemmShape, MicrobenchKind, MicrobenchRequest, OperandOrder, WeightMode};

/// Largest |c - ref| / Σ|a·w| over 256 sampled outputs.
fn sampled_err(a: &[f32], w: &[f32], c: &[f32], m: usize, k: usize, n: usize) -> f64 {
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    let mut worst = 0f64;
    for _ in 0..256 {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        let (i, j) = ((s % m as u64) as usize, ((s >> 32) % n as u64) as usize);
        let (mut dot, mut abs) = (0f64, 0f64);
        for p in 0..k {
            let x = f64::from(a[i * k + p]) * f64::from(w[p * n + j]);
            dot += x;
            abs += x.abs();
        }
        let e = (f64::from(c[i * n + j]) - dot).abs() / abs.max(f64::MIN_POSITIVE);
        if e.is_nan() || e > worst {
            worst = e;
        }
    }
    worst
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn gflops(m: usize, k: usize, n: usize, us: f64) -> f64 {
    2.0 * (m * k * n) as f64 / us / 1e3
}

/// An OpenCL GEMM of `(m, k, n)` prepared (with `tile`, else the tuned
/// one) and run once, with its inputs and that first result.
struct Checked {
    g: ClGemm,
    a: Vec<f32>,
    w: Vec<f32>,
    c: Vec<f32>,
    /// The f32 tolerance for this K.
    tol: f64,
}

/// Prepares and runs the GEMM once; an error unless its result is within
/// the tolerance.
fn checked(
    be: &mut OpenClBackend,
    tile: Option<Tile>,
    (m, k, n): (usize, usize, usize),
    order: OperandOrder,
) -> Result<Checked, String> {
    let spec = GemmSpec {
        shape: GemmShape::new(m as u32, k as u32, n as u32).unwrap(),
        dtype: DType::F32,
        order,
        weights: WeightMode::Static,
    };
    let a = random_vec(m * k, 1);
    let w = random_vec(k * n, 2);
    let mut g = match tile {
        Some(t) => be.prepare_with_tile(&spec, &w, t),
        None => be.prepare_cl(&spec, &w),
    }
    .map_err(|e| e.to_string())?;
    g.write_input(&a).map_err(|e| e.to_string())?;
    g.execute().map_err(|e| e.to_string())?;
    let mut c = vec![0f32; m * n];
    g.read_output(&mut c).map_err(|e| e.to_string())?;
    let err = sampled_err(&a, &w, &c, m, k, n);
    let tol = default_tolerance(DType::F32, k as u32);
    if err.is_nan() || err > tol {
        return Err(format!("OpenCL wrong: rel err {err:.2e} > {tol:.2e}"));
    }
    Ok(Checked { g, a, w, c, tol })
}

/// Median kernel (device timer) and host times of `reps` runs, after checking.
fn time_opencl(
    be: &mut OpenClBackend,
    tile: Option<Tile>,
    m: usize,
    k: usize,
    n: usize,
    order: OperandOrder,
    reps: usize,
) -> Result<(f64, f64), String> {
    let Checked { mut g, .. } = checked(be, tile, (m, k, n), order)?;
    let (mut dev, mut host) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let t = g.execute().map_err(|e| e.to_string())?;
        dev.push(t.best_us());
        host.push(t.host_us);
    }
    Ok((median(dev), median(host)))
}

/// OpenCL (tuned tile) and the `gemm` crate on the same shape, runs
/// interleaved so that load from other processes hits both alike; both
/// outputs checked first. Returns median OpenCL kernel µs, median OpenCL
/// host µs, median gemm-crate µs.
fn side_by_side(
    be: &mut OpenClBackend,
    (m, k, n): (usize, usize, usize),
    order: OperandOrder,
    reps: usize,
) -> Result<(f64, f64, f64), String> {
    let Checked {
        mut g,
        a,
        w,
        mut c,
        tol,
    } = checked(be, None, (m, k, n), order)?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    c.fill(0.0);
    gemm_crate(&a, &w, &mut c, (m, k, n), threads);
    let err = sampled_err(&a, &w, &c, m, k, n);
    if err.is_nan() || err > tol {
        return Err(format!("gemm crate wrong: rel err {err:.2e} > {tol:.2e}"));
    }
    let (mut dev, mut host, mut cpu) = (Vec::new(), Vec::new(), Vec::new());
    // A pause before each run lets the other runtime's worker threads
    // (PoCL's, rayon's) stop spinning; on a 2-core host back-to-back runs
    // steal each other's cores.
    let pause = || std::thread::sleep(std::time::Duration::from_millis(30));
    for _ in 0..reps {
        pause();
        let t = g.execute().map_err(|e| e.to_string())?;
        dev.push(t.best_us());
        host.push(t.host_us);
        pause();
        let t0 = Instant::now();
        gemm_crate(&a, &w, &mut c, (m, k, n), threads);
        cpu.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    let min = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    eprintln!(
        "  {m}x{k}x{n} {order}: fastest OpenCL {:.0} µs, fastest gemm crate {:.0} µs",
        min(&dev),
        min(&cpu)
    );
    Ok((median(dev), median(host), median(cpu)))
}

/// The command line.
struct Args {
    shapes: Vec<usize>,
    reps: usize,
    tiles: bool,
    micro: bool,
    cache_dir: Option<std::path::PathBuf>,
    skinny: Vec<(usize, usize, usize)>,
}

/// Parses the command line; an unknown argument exits with status 2.
fn parse_args() -> Args {
    let mut o = Args {
        shapes: vec![512, 1024, 2048],
        reps: 7,
        tiles: false,
        micro: false,
        cache_dir: None,
        skinny: Vec::new(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--shapes" => {
                o.shapes = args
                    .next()
                    .expect("--shapes LIST")
                    .split(',')
                    .map(|s| s.parse().expect("a number"))
                    .collect()
            }
            "--reps" => o.reps = args.next().expect("--reps N").parse().expect("a number"),
            "--tiles" => o.tiles = true,
            "--gemms" => {
                o.skinny = args
                    .next()
                    .expect("--gemms MxKxN,...")
                    .split(',')
                    .map(|t| {
                        let v: Vec<usize> =
                            t.split('x').map(|d| d.parse().expect("a number")).collect();
                        assert_eq!(v.len(), 3, "MxKxN");
                        (v[0], v[1], v[2])
                    })
                    .collect()
            }
            "--micro" => o.micro = true,
            "--cache-dir" => o.cache_dir = Some(args.next().expect("--cache-dir DIR").into()),
            other => {
                eprintln!("unknown argument {other}");
                std::process::exit(2);
            }
        }
    }
    o
}

/// Autotunes the f32 tile (or reads it from the cache) and prints every
/// candidate's time.
fn print_tuning(be: &mut OpenClBackend) {
    let t0 = Instant::now();
    let report = be.tune(DType::F32).expect("autotune").clone();
    println!(
        "tile {} ({}, {:.1} s)",
        report.tile,
        if report.from_cache {
            "from cache".to_string()
        } else {
            format!("tuned on {:?}", report.shape)
        },
        t0.elapsed().as_secs_f64()
    );
    for t in &report.trials {
        match (t.best_us, &t.error) {
            (Some(us), _) => println!("  candidate {}: best {us:.0} µs", t.tile),
            (None, e) => println!("  candidate {}: {}", t.tile, e.as_deref().unwrap_or("?")),
        }
    }
}

/// The square shapes against the `gemm` crate, and with `--tiles` every
/// candidate tile at each.
fn square_table(be: &mut OpenClBackend, o: &Args) {
    println!();
    println!(
        "| shape | OpenCL kernel median µs | OpenCL GFLOP/s | host median µs | gemm crate median µs | gemm GFLOP/s | OpenCL / gemm |"
    );
    println!("|---|---|---|---|---|---|---|");
    for &s in &o.shapes {
        let (dev, host, cpu) = match side_by_side(be, (s, s, s), OperandOrder::Aw, o.reps) {
            Ok(t) => t,
            Err(e) => {
                println!("| {s}³ | failed: {e} | | | | | |");
                continue;
            }
        };
        println!(
            "| {s}³ | {dev:.0} | {:.1} | {host:.0} | {cpu:.0} | {:.1} | {:.3} |",
            gflops(s, s, s, dev),
            gflops(s, s, s, cpu),
            cpu / dev
        );
        if o.tiles {
            for &t in CANDIDATES {
                match time_opencl(be, Some(t), s, s, s, OperandOrder::Aw, o.reps.min(3)) {
                    Ok((d, _)) => println!(
                        "|   tile {t} | {d:.0} | {:.1} | | | | |",
                        gflops(s, s, s, d)
                    ),
                    Err(e) => println!("|   tile {t} | {e} | | | | | |"),
                }
            }
        }
    }
}

/// The `--gemms` shapes in both operand orders against the `gemm` crate.
fn skinny_table(be: &mut OpenClBackend, o: &Args) {
    if o.skinny.is_empty() {
        return;
    }
    println!();
    println!(
        "| M×K×N order | OpenCL kernel median µs | OpenCL GFLOP/s | gemm crate median µs | OpenCL / gemm |"
    );
    println!("|---|---|---|---|---|");
    for &(m, k, n) in &o.skinny {
        for order in [OperandOrder::Aw, OperandOrder::Transposed] {
            match side_by_side(be, (m, k, n), order, o.reps) {
                Ok((d, _, cpu)) => println!(
                    "| {m}×{k}×{n} {order} | {d:.0} | {:.1} | {cpu:.0} | {:.3} |",
                    gflops(m, k, n, d),
                    cpu / d
                ),
                Err(e) => println!("| {m}×{k}×{n} {order} | failed: {e} | | | |"),
            }
        }
    }
}

/// The copy (4 KiB to 256 MiB), submit and sync microbenchmarks.
fn micro_table(be: &mut OpenClBackend) {
    println!();
    println!("| microbenchmark | bytes | median µs | min µs | cv | GB/s |");
    println!("|---|---|---|---|---|---|");
    let mut reqs = Vec::new();
    for kind in [MicrobenchKind::CopyH2d, MicrobenchKind::CopyD2h] {
        let mut b = 4096u64;
        while b <= 256 << 20 {
            reqs.push((kind, Some(b)));
            b *= 8;
        }
        if reqs.last().map(|r| r.1) != Some(Some(256 << 20)) {
            reqs.push((kind, Some(256 << 20)));
        }
    }
    for kind in [
        MicrobenchKind::SubmitEmpty,
        MicrobenchKind::SubmitBusy,
        MicrobenchKind::SyncBlock,
        MicrobenchKind::SyncPoll,
    ] {
        reqs.push((kind, None));
    }
    let processor = be.processor().id.clone();
    for (bench, bytes) in reqs {
        let req = MicrobenchRequest {
            id: format!("{bench:?}"),
            processor: processor.clone(),
            bench,
            bytes,
            peer: None,
            shape: None,
        };
        match be.microbench(&req) {
            Ok(samples) => {
                let st = hetero_plan::Stats::from_samples(&samples).unwrap();
                let gbps = bytes
                    .map(|b| format!("{:.2}", b as f64 / st.median_us / 1e3))
                    .unwrap_or_default();
                println!(
                    "| {bench:?} | {} | {:.1} | {:.1} | {:.2} | {gbps} |",
                    bytes.map(|b| b.to_string()).unwrap_or_default(),
                    st.median_us,
                    st.min_us,
                    st.cv
                );
            }
            Err(e) => println!("| {bench:?} | {bytes:?} | failed: {e} | | | |"),
        }
    }
}

fn main() {
    let o = parse_args();
    let opts = OpenOptions {
        cache_dir: o.cache_dir.clone(),
        ..OpenOptions::default()
    };
    let mut devs = match opencl::open_devices(&opts) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("no OpenCL device: {e}");
            std::process::exit(1);
        }
    };
    let be = &mut devs[0];
    let p = be.processor().clone();
    println!("device: {} ({}), {}", p.id, p.name, p.driver);
    print_tuning(be);
    square_table(be, &o);
    skinny_table(be, &o);
    if o.micro {
        micro_table(be);
    }
}
