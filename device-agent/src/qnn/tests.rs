//! Tests of the QNN backend. Those that need `libQnnHtp.so` run when
//! `HETERO_QNN_LIB_DIR` names a folder holding it (`scripts/fetch-qnn.sh`)
//! and otherwise print why they skip.

use std::path::PathBuf;
use std::sync::Mutex;

use hetero_plan::{DType, GemmShape, OperandOrder, WeightMode};

use super::*;
use crate::SyncMode;

/// The HTP emulator is heavy; the library tests take turns. Every test here
/// opens the library without a SoC (the library holds one SoC per process,
/// and other tests of this crate open the registry without one); the SoC
/// tests are in `tests/qnn_soc.rs`, their own process.
static SERIAL: Mutex<()> = Mutex::new(());

fn lib_dir() -> Option<PathBuf> {
    match std::env::var_os(LIB_DIR_ENV).filter(|d| !d.is_empty()) {
        Some(d) if PathBuf::from(&d).join(LIBRARY).is_file() => Some(PathBuf::from(d)),
        Some(d) => {
            eprintln!(
                "skipping: {LIB_DIR_ENV}={} has no {LIBRARY}",
                PathBuf::from(d).display()
            );
            None
        }
        None => {
            eprintln!("skipping: {LIB_DIR_ENV} is not set (run scripts/fetch-qnn.sh)");
            None
        }
    }
}

fn open_backend(dir: PathBuf) -> QnnBackend {
    let q = QnnOptions::from_open(&OpenOptions {
        qnn_lib_dir: Some(dir),
        ..Default::default()
    })
    .unwrap();
    QnnBackend::open(&q).unwrap()
}

fn spec(
    m: u32,
    k: u32,
    n: u32,
    dtype: DType,
    order: OperandOrder,
    weights: WeightMode,
) -> GemmSpec {
    GemmSpec {
        shape: GemmShape::new(m, k, n).unwrap(),
        dtype,
        order,
        weights,
    }
}

/// `C = A·W` in f64.
fn reference(a: &[f32], w: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0f64; m * n];
    for i in 0..m {
        for p in 0..k {
            let x = a[i * k + p] as f64;
            for j in 0..n {
                c[i * n + j] += x * w[p * n + j] as f64;
            }
        }
    }
    c
}

/// Largest absolute error relative to the largest reference value.
fn rel_err(c: &[f32], r: &[f64]) -> f64 {
    let scale = r.iter().fold(0f64, |m, x| m.max(x.abs())).max(1e-30);
    c.iter()
        .zip(r)
        .fold(0f64, |m, (&x, &y)| m.max((x as f64 - y).abs()))
        / scale
}

/// Runs one GEMM end to end and checks it against the exact reference with
/// the backend's tolerance, and (for quantised dtypes) against the
/// reference of the dequantised weights with a tight bound.
fn run_and_verify(b: &mut QnnBackend, s: GemmSpec) -> f64 {
    let (m, k, n) = s.shape.mkn();
    let (m, k, n) = (m as usize, k as usize, n as usize);
    let w = synthetic_weights(s.shape, 7);
    let a: Vec<f32> = synthetic_weights(GemmShape::new(1, m as u32, k as u32).unwrap(), 11);
    let mut g = b
        .prepare_qnn(&s, &w)
        .unwrap_or_else(|e| panic!("{s:?}: {e}"));
    assert!(g.prepare_us().unwrap() > 0.0);
    g.write_input(&a).unwrap();
    let t = g.execute().unwrap();
    assert!(t.host_us > 0.0);
    let mut c = vec![f32::NAN; m * n];
    g.read_output(&mut c).unwrap();
    let err = rel_err(&c, &reference(&a, &w, m, k, n));
    let tol = b.tolerance(s.dtype, k as u32);
    eprintln!(
        "{} {} {} {:?}: rel_err {err:.2e} (tolerance {tol:.1e}), prepare {:.1} ms, execute {:.1} ms (emulator)",
        s.shape,
        s.dtype,
        s.order,
        s.weights,
        g.prepare_us().unwrap() / 1e3,
        t.host_us / 1e3
    );
    assert!(err <= tol, "{s:?}: rel_err {err} > {tol}");
    if matches!(s.dtype, DType::W8a16 | DType::W4a16) {
        // Against the weights the HTP actually holds: only activation and
        // output rounding (16-bit) remain.
        let el = graph::elements_for(s.dtype, &w, k, n, b.act_abs_max).unwrap();
        let wq = effective_weights(el.w, &w);
        let err_q = rel_err(&c, &reference(&a, &wq, m, k, n));
        eprintln!("  vs dequantised weights: rel_err {err_q:.2e}");
        assert!(
            err_q <= 2e-3,
            "{s:?}: rel_err vs dequantised weights {err_q}"
        );
    }
    err
}

#[test]
fn wrong_library_path_is_a_clear_error() {
    let dir = std::env::temp_dir().join("hetero-no-such-qnn-dir");
    let err = open(&OpenOptions {
        qnn_lib_dir: Some(dir.clone()),
        ..Default::default()
    })
    .err()
    .expect("no library there");
    match &err {
        Error::Library { library, tried, .. } => {
            assert_eq!(library, LIBRARY);
            assert_eq!(tried, &vec![dir.join(LIBRARY).display().to_string()]);
        }
        other => panic!("expected a library error, got {other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("libQnnHtp.so") && text.contains("hetero-no-such-qnn-dir"),
        "{text}"
    );
}

#[test]
fn a_file_that_is_not_the_library_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(LIBRARY), b"not an ELF file").unwrap();
    let err = open(&OpenOptions {
        qnn_lib_dir: Some(dir.path().to_path_buf()),
        ..Default::default()
    })
    .err()
    .expect("not a library");
    assert!(matches!(err, Error::Library { .. }), "{err:?}");
    assert!(err.to_string().contains(LIBRARY));
}

#[test]
fn standard_dirs_are_tried_without_an_explicit_folder() {
    // Only meaningful when the environment variable is unset.
    if std::env::var_os(LIB_DIR_ENV).is_some() {
        eprintln!("skipping: {LIB_DIR_ENV} is set");
        return;
    }
    let dirs = runtime::candidate_dirs(None);
    assert_eq!(dirs.first().unwrap(), &PathBuf::from("/vendor/lib64"));
    assert_eq!(dirs.len(), STANDARD_DIRS.len());
}

#[test]
fn bad_options_are_refused_by_field() {
    let err = QnnOptions::from_open(&OpenOptions {
        qnn_perf: Some("turbo".into()),
        ..Default::default()
    })
    .unwrap_err();
    assert!(
        matches!(&err, Error::BadRequest { field, .. } if field == "qnn_perf"),
        "{err}"
    );
}

#[test]
fn f16_matmul_is_verified() {
    let Some(dir) = lib_dir() else { return };
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut b = open_backend(dir);
    let p = b.processor().clone();
    assert_eq!(p.id, "qnn:htp");
    assert!(p.capabilities.static_graphs);
    assert_eq!(p.emulated, EMULATED);
    assert_eq!(p.timing() == hetero_plan::Timing::Emulated, EMULATED);
    run_and_verify(
        &mut b,
        spec(16, 64, 48, DType::F16, OperandOrder::Aw, WeightMode::Static),
    );
    run_and_verify(
        &mut b,
        spec(
            16,
            64,
            48,
            DType::F16,
            OperandOrder::Transposed,
            WeightMode::Static,
        ),
    );
    run_and_verify(
        &mut b,
        spec(8, 64, 32, DType::F16, OperandOrder::Aw, WeightMode::Input),
    );
    run_and_verify(
        &mut b,
        spec(
            8,
            64,
            32,
            DType::F16,
            OperandOrder::Transposed,
            WeightMode::Input,
        ),
    );
}

#[test]
fn f32_matmul_is_verified() {
    let Some(dir) = lib_dir() else { return };
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut b = open_backend(dir);
    run_and_verify(
        &mut b,
        spec(8, 64, 32, DType::F32, OperandOrder::Aw, WeightMode::Static),
    );
}

#[test]
fn quantized_matmul_is_verified() {
    let Some(dir) = lib_dir() else { return };
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut b = open_backend(dir);
    run_and_verify(
        &mut b,
        spec(
            16,
            128,
            64,
            DType::W8a16,
            OperandOrder::Aw,
            WeightMode::Static,
        ),
    );
    run_and_verify(
        &mut b,
        spec(
            16,
            128,
            64,
            DType::W4a16,
            OperandOrder::Aw,
            WeightMode::Static,
        ),
    );
    run_and_verify(
        &mut b,
        spec(
            8,
            128,
            32,
            DType::W8a16,
            OperandOrder::Transposed,
            WeightMode::Input,
        ),
    );
    run_and_verify(
        &mut b,
        spec(
            8,
            128,
            32,
            DType::W4a16,
            OperandOrder::Transposed,
            WeightMode::Static,
        ),
    );
}

#[test]
fn saturated_quantized_output_is_an_error() {
    let Some(dir) = lib_dir() else { return };
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut b = open_backend(dir);
    let s = spec(
        4,
        128,
        16,
        DType::W8a16,
        OperandOrder::Aw,
        WeightMode::Static,
    );
    // All-positive weights and inputs at the top of the range: every output
    // is far beyond the 4-sigma output encoding.
    let w = vec![0.5f32; 128 * 16];
    let mut g = b.prepare_qnn(&s, &w).unwrap();
    g.write_input(&vec![b.act_abs_max; 4 * 128]).unwrap();
    g.execute().unwrap();
    let mut c = vec![0f32; 4 * 16];
    let err = g.read_output(&mut c).unwrap_err();
    assert!(err.to_string().contains("saturated"), "{err}");
    // Inputs outside the prepared range are refused, not clamped.
    let err = g
        .write_input(&vec![2.0 * b.act_abs_max; 4 * 128])
        .unwrap_err();
    assert!(matches!(err, Error::BadRequest { .. }), "{err}");
}

#[test]
fn concurrent_backends_in_threads_work() {
    let Some(dir) = lib_dir() else { return };
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let handles: Vec<_> = (0..3)
        .map(|i| {
            let dir = dir.clone();
            std::thread::spawn(move || {
                let mut b = open_backend(dir);
                let d = if i == 1 { DType::W8a16 } else { DType::F16 };
                run_and_verify(
                    &mut b,
                    spec(8, 64 + 64 * i, 32, d, OperandOrder::Aw, WeightMode::Static),
                )
            })
        })
        .collect();
    for h in handles {
        h.join().expect("thread panicked");
    }
}

#[test]
fn graph_prepare_microbenchmark_times_fresh_graphs() {
    let Some(dir) = lib_dir() else { return };
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut b = open_backend(dir);
    let mut req = MicrobenchRequest {
        id: "prep".into(),
        processor: PROCESSOR_ID.into(),
        bench: MicrobenchKind::GraphPrepare,
        bytes: None,
        peer: None,
        shape: Some(GemmShape::new(8, 64, 32).unwrap()),
    };
    let samples = b.microbench(&req).unwrap();
    assert_eq!(samples.len(), GRAPH_PREPARE_SAMPLES);
    assert!(samples.iter().all(|&t| t > 0.0), "{samples:?}");
    req.shape = None;
    assert!(matches!(b.microbench(&req), Err(Error::BadRequest { .. })));
    req.bench = MicrobenchKind::CopyH2d;
    assert!(matches!(b.microbench(&req), Err(Error::Unsupported { .. })));
}

#[test]
fn burst_vote_is_reported_not_fatal() {
    let Some(dir) = lib_dir() else { return };
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let q = QnnOptions::from_open(&OpenOptions {
        qnn_lib_dir: Some(dir),
        qnn_perf: Some("burst".into()),
        ..Default::default()
    })
    .unwrap();
    let b = QnnBackend::open(&q).unwrap();
    let ext = &b.processor().capabilities.extensions;
    eprintln!("extensions: {ext:?}");
    assert!(ext.iter().any(|e| e.starts_with("perf:burst")), "{ext:?}");
}

#[test]
fn qnn_passes_the_shared_backend_suite() {
    let Some(dir) = lib_dir() else { return };
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut b = open_backend(dir);
    crate::conformance::check_backend(&mut b);
}

/// Submitted runs go to the worker thread: `submit` returns before the run
/// ends, the completion flag rises when it ends (read without blocking),
/// and both waits give the verified product. Two graphs in flight at once
/// queue on the one worker and both finish.
#[test]
fn submitted_runs_raise_the_completion_flag() {
    let Some(dir) = lib_dir() else { return };
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut b = open_backend(dir);
    let s = spec(
        64,
        256,
        128,
        DType::F16,
        OperandOrder::Aw,
        WeightMode::Static,
    );
    let (m, k, n) = (64, 256, 128);
    let w = synthetic_weights(s.shape, 7);
    let a: Vec<f32> = synthetic_weights(GemmShape::new(1, m as u32, k as u32).unwrap(), 11);
    let r = reference(&a, &w, m, k, n);
    let tol = b.tolerance(s.dtype, k as u32);
    let mut g1 = b.prepare_qnn(&s, &w).unwrap();
    let mut g2 = b.prepare_qnn(&s, &w).unwrap();
    assert_eq!(g1.finished(), None, "nothing submitted yet");
    assert!(g1.submit().is_err(), "submit before write_input");
    for mode in [
        SyncMode::Block,
        SyncMode::Poll {
            predicted_us: 500.0,
        },
    ] {
        for g in [&mut g1, &mut g2] {
            g.write_input(&a).unwrap();
            g.submit().unwrap();
            assert!(g.write_input(&a).is_err(), "the worker owns the buffers");
        }
        // The flag is read without blocking; it rises on its own.
        let t0 = std::time::Instant::now();
        while g2.finished() != Some(true) {
            assert!(t0.elapsed().as_secs() < 60, "the flag never rose");
            std::thread::yield_now();
        }
        assert_eq!(g1.finished(), Some(true), "jobs run in order");
        for g in [&mut g1, &mut g2] {
            let t = g.wait(mode).unwrap();
            assert!(
                t.ran_us.unwrap() > 0.0 && t.ran_us.unwrap() <= t.host_us,
                "{t:?}"
            );
            assert_eq!(g.finished(), None);
            let mut c = vec![f32::NAN; m * n];
            g.read_output(&mut c).unwrap();
            let err = rel_err(&c, &r);
            assert!(err <= tol, "{mode:?}: rel_err {err} > {tol}");
        }
    }
    assert!(g1.wait(SyncMode::Block).is_err(), "wait without submit");
    // A gemm dropped with a run in flight waits for it first.
    g1.write_input(&a).unwrap();
    g1.submit().unwrap();
    drop(g1);
}

/// What this library offers of the three asynchronous-processor features,
/// printed, and each path checked against the report: the execution path
/// (`graphExecuteAsync` or the worker), the buffers (rpcmem or client) and
/// the device timer (profiled or host clock).
#[test]
fn the_report_names_the_paths_the_library_takes() {
    let Some(dir) = lib_dir() else { return };
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut b = open_backend(dir);
    let ext = b.processor().capabilities.extensions.clone();
    eprintln!("extensions: {ext:#?}");
    let s = spec(32, 64, 64, DType::F16, OperandOrder::Aw, WeightMode::Input);
    let w = synthetic_weights(s.shape, 7);
    let a: Vec<f32> = synthetic_weights(GemmShape::new(1, 32, 64).unwrap(), 11);
    let mut g = b.prepare_qnn(&s, &w).unwrap();
    eprintln!("memory: {}", g.memory());
    g.write_input(&a).unwrap();
    let mut device = Vec::new();
    for i in 0..3 {
        let t = g.execute().unwrap();
        eprintln!("run {i}: {t:?}");
        for line in g.profile_events() {
            eprintln!("  {line}");
        }
        if let Some(d) = t.device_us {
            assert!(d > 0.0 && d <= t.host_us, "{t:?}");
        }
        device.push(t.device_us);
    }
    g.submit().unwrap();
    let t = g.wait(SyncMode::Block).unwrap();
    eprintln!("submitted: {t:?}");
    assert_eq!(
        t.device_us.is_some(),
        b.processor().capabilities.device_timer
    );
    let mut c = vec![f32::NAN; 32 * 64];
    g.read_output(&mut c).unwrap();
    let err = rel_err(&c, &reference(&a, &w, 32, 64, 64));
    assert!(err <= b.tolerance(s.dtype, 64), "rel_err {err}");

    let has = |p: &str| ext.iter().find(|e| e.starts_with(p)).cloned().unwrap();
    let caps = &b.processor().capabilities;
    let shared = has("shared_buffers:");
    assert_eq!(
        g.memory().starts_with("shared:"),
        shared.starts_with("shared_buffers:rpcmem"),
        "{shared} / {}",
        g.memory()
    );
    assert_eq!(caps.unified_memory, g.memory().starts_with("shared:"));
    // Every run gives a device time or none, as the report says.
    assert!(
        device.iter().all(|d| d.is_some() == caps.device_timer),
        "{device:?} vs device_timer {}",
        caps.device_timer
    );
    let timer = has("device_timer:");
    assert_eq!(
        caps.device_timer,
        timer.starts_with("device_timer:QNN profiling"),
        "{timer}"
    );
    let exec = has("execution:");
    assert_eq!(b.rt.async_available(), exec.contains("graphExecuteAsync, "));
    if EMULATED {
        assert!(shared.starts_with("shared_buffers:none"), "{shared}");
    }
}

/// The registration path with a stand-in rpcmem library: a C file compiled
/// here with `cc` whose `rpcmem_alloc` maps a memfd (memory that a file
/// descriptor names, as ION's does), `rpcmem_to_fd` returns that fd and
/// `rpcmem_free` unmaps it. Whatever the library answers to
/// `QnnMem_register`, the graph runs and verifies, the report agrees with
/// the buffers, and every allocation is freed.
#[test]
fn registration_with_a_stand_in_rpcmem_library() {
    let Some(dir) = lib_dir() else { return };
    let Some(fake) = build_fake_rpcmem() else {
        return;
    };
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let rpc = rpcmem::load_leaked(fake.as_os_str()).unwrap();
    let mut b = open_backend(dir);
    b.use_rpcmem(rpc);
    let shared = b
        .processor()
        .capabilities
        .extensions
        .iter()
        .find(|e| e.starts_with("shared_buffers:"))
        .cloned()
        .unwrap();
    eprintln!("with the stand-in: {shared}");
    for weights in [WeightMode::Input, WeightMode::Static] {
        let s = spec(32, 64, 64, DType::F16, OperandOrder::Aw, weights);
        let w = synthetic_weights(s.shape, 7);
        let a: Vec<f32> = synthetic_weights(GemmShape::new(1, 32, 64).unwrap(), 11);
        let mut g = b.prepare_qnn(&s, &w).unwrap();
        eprintln!("{weights:?}: {}", g.memory());
        assert_eq!(
            g.memory().starts_with("shared:"),
            shared.starts_with("shared_buffers:rpcmem"),
            "{}",
            g.memory()
        );
        if !g.memory().starts_with("shared:") {
            assert!(g.memory().contains("memRegister"), "{}", g.memory());
        }
        g.write_input(&a).unwrap();
        g.execute().unwrap();
        let mut c = vec![f32::NAN; 32 * 64];
        g.read_output(&mut c).unwrap();
        let err = rel_err(&c, &reference(&a, &w, 32, 64, 64));
        assert!(err <= b.tolerance(s.dtype, 64), "rel_err {err}");
    }
    // SAFETY: the stand-in's own counter, no arguments.
    let live = unsafe {
        let lib = libloading::Library::new(&fake).unwrap();
        let f = *lib
            .get::<unsafe extern "C" fn() -> i32>(b"fake_rpcmem_live\0")
            .unwrap();
        f()
    };
    assert_eq!(live, 0, "every rpcmem allocation was freed");
    // The loaded library stays mapped; its files can go.
    let _ = std::fs::remove_dir_all(fake.parent().unwrap());
}

/// Compiles the stand-in rpcmem library, or says why not and skips.
fn build_fake_rpcmem() -> Option<PathBuf> {
    const SRC: &str = r#"
#define _GNU_SOURCE
#include <sys/mman.h>
#include <unistd.h>
#include <pthread.h>
#define SLOTS 64
static struct { void *p; int fd, size; } slot[SLOTS];
static int live;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
void *rpcmem_alloc(int heap, unsigned flags, int size) {
  (void)heap; (void)flags;
  int fd = memfd_create("rpcmem", 0);
  if (fd < 0 || ftruncate(fd, size) != 0) return 0;
  void *p = mmap(0, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) { close(fd); return 0; }
  pthread_mutex_lock(&mu);
  for (int i = 0; i < SLOTS; i++)
    if (!slot[i].p) { slot[i].p = p; slot[i].fd = fd; slot[i].size = size; live++; break; }
  pthread_mutex_unlock(&mu);
  return p;
}
int rpcmem_to_fd(void *p) {
  int fd = -1;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < SLOTS; i++) if (slot[i].p == p) fd = slot[i].fd;
  pthread_mutex_unlock(&mu);
  return fd;
}
void rpcmem_free(void *p) {
  pthread_mutex_lock(&mu);
  for (int i = 0; i < SLOTS; i++)
    if (slot[i].p == p) { munmap(p, slot[i].size); close(slot[i].fd); slot[i].p = 0; live--; }
  pthread_mutex_unlock(&mu);
}
int fake_rpcmem_live(void) { return live; }
"#;
    let dir = std::env::temp_dir().join(format!("hetero-fake-rpcmem-{}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    let (src, out) = (dir.join("rpcmem.c"), dir.join("libfakerpcmem.so"));
    std::fs::write(&src, SRC).ok()?;
    let status = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&out)
        .arg(&src)
        .arg("-lpthread")
        .status();
    match status {
        Ok(s) if s.success() => Some(out),
        other => {
            eprintln!("skipping: no C compiler built the stand-in rpcmem library ({other:?})");
            None
        }
    }
}

/// A submitted run that `graphExecuteAsync` refuses runs on the worker
/// thread instead, verified, and later runs go there directly; the report
/// then names the refusal. (The emulator declares no asynchronous
/// execution; the call is made anyway to take this path.)
#[test]
fn a_refused_asynchronous_run_falls_back_to_the_worker() {
    let Some(dir) = lib_dir() else { return };
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut b = open_backend(dir);
    let s = spec(32, 64, 64, DType::F16, OperandOrder::Aw, WeightMode::Static);
    let w = synthetic_weights(s.shape, 7);
    let a: Vec<f32> = synthetic_weights(GemmShape::new(1, 32, 64).unwrap(), 11);
    let r = reference(&a, &w, 32, 64, 64);
    let mut g = b.prepare_qnn(&s, &w).unwrap();
    g.write_input(&a).unwrap();
    b.rt.try_async();
    for round in 0..2 {
        g.submit().unwrap();
        let t = g.wait(SyncMode::Block).unwrap();
        let note = b.rt.execution_note();
        eprintln!("round {round}: {t:?}; {note}");
        let mut c = vec![f32::NAN; 32 * 64];
        g.read_output(&mut c).unwrap();
        let err = rel_err(&c, &r);
        assert!(err <= b.tolerance(s.dtype, 64), "rel_err {err}");
        if !b.rt.async_available() {
            assert!(note.contains("graphExecuteAsync failed: error"), "{note}");
        }
    }
    if EMULATED {
        assert!(!b.rt.async_available(), "the emulator refuses the call");
    }
}
