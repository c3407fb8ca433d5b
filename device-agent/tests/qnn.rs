//! QNN tests that need a process of their own: those that set a SoC model
//! (`libQnnHtp.so` holds one SoC per process, and the crate's unit tests
//! open the library without one) and those that run the agent binary. They run when
//! `HETERO_QNN_LIB_DIR` names a folder holding the library
//! (`scripts/fetch-qnn.sh`) and otherwise print why they skip
//! (`HETERO_REQUIRE_QNN=1` makes that a failure).
#![cfg(feature = "qnn")]

use std::path::PathBuf;
use std::sync::Mutex;

use hetero_agent::qnn::{
    CompileArgs, GraphEntry, LIB_DIR_ENV, LIBRARY, MANIFEST_FILE, QnnBackend, QnnGemm, QnnOptions,
    compile, compile_cli, load, read_manifest, synthetic_weights, tolerance,
};
use hetero_agent::{Error, Gemm, GemmSpec, OpenOptions};
use hetero_plan::{DType, GemmShape, OperandOrder, WeightMode};
use hetero_test_support::{bin, or_skip};

/// One SoC at a time in this process.
static SERIAL: Mutex<()> = Mutex::new(());

/// The folder holding the library, or why there is none.
fn lib_dir() -> Result<PathBuf, String> {
    match std::env::var_os(LIB_DIR_ENV).filter(|d| !d.is_empty()) {
        Some(d) if PathBuf::from(&d).join(LIBRARY).is_file() => Ok(PathBuf::from(d)),
        Some(d) => Err(format!(
            "{LIB_DIR_ENV}={} has no {LIBRARY}",
            PathBuf::from(d).display()
        )),
        None => Err(format!(
            "{LIB_DIR_ENV} is not set (run scripts/fetch-qnn.sh)"
        )),
    }
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

/// Largest absolute error of `C = A·W` relative to the largest reference value.
fn rel_err(a: &[f32], w: &[f32], c: &[f32], m: usize, k: usize, n: usize) -> f64 {
    let mut r = vec![0f64; m * n];
    for i in 0..m {
        for p in 0..k {
            let x = a[i * k + p] as f64;
            for j in 0..n {
                r[i * n + j] += x * w[p * n + j] as f64;
            }
        }
    }
    let scale = r.iter().fold(0f64, |s, x| s.max(x.abs())).max(1e-30);
    c.iter()
        .zip(&r)
        .fold(0f64, |e, (&x, &y)| e.max((x as f64 - y).abs()))
        / scale
}

/// Runs a loaded graph on synthetic input and checks it against the CPU.
fn verify_loaded(entry: &GraphEntry, g: &mut QnnGemm) -> f64 {
    let (m, k, n) = entry.shape.mkn();
    let (m, k, n) = (m as usize, k as usize, n as usize);
    let w = synthetic_weights(entry.shape, entry.weights_seed.expect("synthetic"));
    let a = synthetic_weights(GemmShape::new(1, m as u32, k as u32).unwrap(), 3);
    g.write_input(&a).unwrap();
    g.execute().unwrap();
    let mut c = vec![f32::NAN; m * n];
    g.read_output(&mut c).unwrap();
    let err = rel_err(&a, &w, &c, m, k, n);
    let tol = tolerance(entry.dtype, k as u32);
    eprintln!(
        "loaded {}: rel_err {err:.2e} (tolerance {tol:.1e}), load {:.1} ms",
        entry.file,
        g.prepare_us().unwrap() / 1e3
    );
    assert!(err <= tol, "{}: rel_err {err} > {tol}", entry.file);
    err
}

#[test]
fn context_binary_round_trip_is_verified() {
    let dir = or_skip!(QNN, lib_dir());
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let out = tempfile::tempdir().unwrap();
    let opts = OpenOptions {
        qnn_lib_dir: Some(dir),
        ..Default::default()
    };
    let specs = [
        spec(8, 64, 32, DType::F16, OperandOrder::Aw, WeightMode::Static),
        spec(
            8,
            128,
            32,
            DType::W8a16,
            OperandOrder::Transposed,
            WeightMode::Input,
        ),
        spec(
            4,
            64,
            16,
            DType::W4a16,
            OperandOrder::Aw,
            WeightMode::Static,
        ),
    ];
    let m = compile(&opts, 57, &specs, out.path()).unwrap();
    assert_eq!(m.soc, 57);
    assert_eq!(m.graphs.len(), specs.len());
    for (g, s) in m.graphs.iter().zip(&specs) {
        assert_eq!(&g.spec(), s);
        let bytes = std::fs::metadata(out.path().join(&g.file)).unwrap().len();
        assert!(bytes > 0 && bytes == g.bytes, "{}: {bytes} bytes", g.file);
    }
    // JSON keeps every field; floats to within parsing rounding.
    let mut back = read_manifest(out.path()).unwrap();
    for (b, g) in back.graphs.iter_mut().zip(&m.graphs) {
        assert!((b.prepare_us - g.prepare_us).abs() <= 1e-9 * g.prepare_us);
        b.prepare_us = g.prepare_us;
    }
    assert_eq!(back, m);

    let loaded = load(&opts, out.path()).unwrap();
    assert_eq!(loaded.len(), specs.len());
    for (entry, mut g) in loaded {
        assert!(g.prepare_us().unwrap() > 0.0);
        verify_loaded(&entry, &mut g);
    }

    // A different SoC than the graphs were compiled for is refused.
    let err = load(
        &OpenOptions {
            qnn_soc: Some(69),
            ..opts.clone()
        },
        out.path(),
    )
    .err()
    .expect("SoC mismatch");
    assert!(err.to_string().contains("SoC 57"), "{err}");
}

#[test]
fn compile_cli_writes_a_loadable_folder() {
    let dir = or_skip!(QNN, lib_dir());
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let out = tempfile::tempdir().unwrap();
    let args = CompileArgs {
        soc: 69,
        graphs: "4x64x32,4x64x32:f32:transposed".into(),
        out: out.path().join("graphs"),
        json: false,
    };
    let opts = OpenOptions {
        qnn_lib_dir: Some(dir),
        ..Default::default()
    };
    let m = compile_cli(&args, &opts).unwrap();
    assert_eq!(m.graphs.len(), 2);
    for (entry, mut g) in load(&opts, &args.out).unwrap() {
        verify_loaded(&entry, &mut g);
    }
    // A missing folder names the manifest it looked for.
    let err = load(&opts, &out.path().join("nowhere")).err().unwrap();
    assert!(err.to_string().contains(MANIFEST_FILE), "{err}");
}

#[test]
fn a_second_soc_while_one_is_open_is_refused() {
    let dir = or_skip!(QNN, lib_dir());
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let open_soc = |soc| {
        QnnBackend::open(
            &QnnOptions::from_open(&OpenOptions {
                qnn_lib_dir: Some(dir.clone()),
                qnn_soc: soc,
                ..Default::default()
            })
            .unwrap(),
        )
    };
    let first = open_soc(Some(57)).unwrap();
    let same = open_soc(Some(57)).unwrap();
    let err = open_soc(Some(69)).err().expect("a second SoC");
    assert!(matches!(err, Error::Unsupported { .. }), "{err}");
    assert!(
        err.to_string().contains("SoC 57") && err.to_string().contains("SoC 69"),
        "{err}"
    );
    drop((first, same));
    // Once they are closed, another SoC opens.
    open_soc(Some(69)).unwrap();
}

/// Regression: the library prints ` # LIBNATIVE: ...` through C stdio's
/// stdout, which landed at the end of `probe --json` and broke the JSON.
#[test]
fn library_prints_never_reach_the_agent_stdout() {
    let dir = or_skip!(QNN, lib_dir());
    let text = bin!("hetero-agent")
        .cmd()
        .arg("--qnn-lib-dir")
        .arg(&dir)
        .args(["probe", "--json"])
        .ok();
    let v: serde_json::Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("stdout is not one JSON document: {e}\n{text}"));
    let qnn = v["processors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == "qnn:htp")
        .expect("qnn:htp listed");
    assert_eq!(qnn["emulated"], cfg!(not(target_arch = "aarch64")));
    assert_eq!(qnn["capabilities"]["static_graphs"], true);
}
