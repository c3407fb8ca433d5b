//! Helpers for end-to-end tests that run the real `hetero` binary.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A fresh temporary folder, removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!(
            "hetero-test-{name}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `hetero ARGS` in the repository root.
pub fn hetero(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hetero"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("run hetero")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts success and returns stdout.
pub fn ok(args: &[&str]) -> String {
    let o = hetero(args);
    assert!(
        o.status.success(),
        "hetero {args:?} failed: {}\n{}",
        o.status,
        stderr(&o)
    );
    stdout(&o)
}

/// Asserts exit code 2 and returns stderr.
pub fn bad_input(args: &[&str]) -> String {
    let o = hetero(args);
    assert_eq!(
        o.status.code(),
        Some(2),
        "hetero {args:?} should exit 2; stdout: {} stderr: {}",
        stdout(&o),
        stderr(&o)
    );
    stderr(&o)
}

/// Compares `text` with a golden file under `tests/golden/`;
/// `HETERO_BLESS=1` rewrites it.
pub fn golden(name: &str, text: &str) {
    let path = root().join("tests/golden").join(name);
    if std::env::var_os("HETERO_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with HETERO_BLESS=1)", path.display()));
    assert_eq!(text, want, "{} differs", path.display());
}

/// The `hetero-agent` next to the `hetero` under test, built when missing;
/// `None` (with the reason printed) when it cannot be built.
pub fn real_agent() -> Option<PathBuf> {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_hetero"));
    let agent = exe.with_file_name("hetero-agent");
    if !agent.is_file() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let o = Command::new(cargo)
            .args(["build", "-q", "-p", "hetero-agent", "--bin", "hetero-agent"])
            .current_dir(root())
            .output();
        if !o.is_ok_and(|o| o.status.success()) || !agent.is_file() {
            eprintln!(
                "skipping: no hetero-agent next to {} and it could not be built",
                exe.display()
            );
            return None;
        }
    }
    Some(agent)
}

/// A tiny llama config (hidden 64, 2 layers, FFN 96, vocabulary 80).
pub const TINY: &str = r#"{"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96,
  "vocab_size": 80, "_name_or_path": "tiny-llama"}"#;

/// Writes [`TINY`] to `dir/config.json` and returns its path, the model and
/// a roofline predictor for cpu:0 and npu-sim (which every machine has),
/// with this machine's processors.
pub fn tiny_cpu_npu(dir: &Path) -> (PathBuf, hetero_plan::ModelSpec, hetero_plan::Predictor) {
    use hetero_agent::{OpenOptions, Registry};
    use hetero_plan::{
        DType, LatencyModel, Overheads, Predictor, ProcessorModel, SchemaVersion, Score,
    };
    let config = dir.join("config.json");
    std::fs::write(&config, TINY).unwrap();
    let model = hetero_plan::hf::load_config(&config).unwrap();
    let reg = Registry::open(
        &OpenOptions::default(),
        Some(&["cpu:0".into(), "npu-sim".into()]),
    );
    let roof = |p: &str, peak: f64, bw: f64, launch: f64| ProcessorModel {
        processor: p.into(),
        dtype: DType::F32,
        model: LatencyModel::Roofline {
            peak_gflops: peak,
            bw_gbps: bw,
            launch_us: launch,
        },
        score: Score::default(),
        candidates: vec![],
        launch_us: None,
        order_free: false,
        measured: Vec::new(),
    };
    let over = |p: &str| Overheads {
        processor: p.into(),
        sync_poll_us: Some(2.0),
        submit_empty_us: Some(3.0),
        ..Default::default()
    };
    let pred = Predictor {
        schema_version: SchemaVersion,
        dataset: hetero_plan::Fingerprint::of_bytes("synthetic", b"synthetic"),
        processors: reg.processors(),
        models: vec![
            roof("cpu:0", 20.0, 10.0, 5.0),
            roof("npu-sim", 25.0, 12.0, 20.0),
        ],
        overheads: vec![over("cpu:0"), over("npu-sim")],
    };
    (config, model, pred)
}
