//! The C example, compiled with `cc` against the generated header and the
//! cdylib, gives the same output as the Rust API.

mod common;

use std::path::PathBuf;
use std::process::Command;

use hetero_plan::Phase;
use hetero_runtime::{Runtime, RuntimeOptions};
use hetero_test_support::{Run, skip, temp_dir};

/// The folder holding the cdylib built with this test: `target/debug/deps`
/// (the copy in `target/debug` is only refreshed by `cargo build`).
fn lib_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let deps = exe.parent()?;
    [deps.to_path_buf(), deps.parent()?.to_path_buf()]
        .into_iter()
        .find(|d| d.join("libhetero_runtime.so").exists())
}

#[test]
fn c_example_compiles_runs_and_matches_the_rust_api() {
    if Command::new("cc").arg("--version").output().is_err() {
        skip!(CC, "no C compiler (`cc`) on this machine");
    }
    let Some(lib) = lib_dir() else {
        panic!(
            "libhetero_runtime.so not found next to the test binary: the cdylib crate-type was not built"
        );
    };
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = temp_dir("capi");
    let (config, plan, _) = common::solved(dir.path());
    let exe = dir.path().join("example");
    Run::new("cc")
        .arg(root.join("examples/c/example.c"))
        .arg("-I")
        .arg(root.join("include"))
        .arg("-L")
        .arg(&lib)
        .arg("-lhetero_runtime")
        .arg("-Wall")
        .arg("-Werror")
        .arg("-o")
        .arg(&exe)
        .ok();

    let (op, len, layer) = ("attn_q", 11u32, 1u32);
    let stdout = Run::new(&exe)
        .args([&plan, &config])
        .arg(op)
        .arg(len.to_string())
        .arg(layer.to_string())
        .env("LD_LIBRARY_PATH", &lib)
        // Known issue: loading libQnnHtp.so points C's stdout at stderr (the
        // library writes noise there), which would swallow the example's
        // output. The plan here needs no QNN, so keep the library out.
        .env_remove("HETERO_QNN_LIB_DIR")
        .ok();
    let field = |key: &str| -> Vec<String> {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("no `{key}` in {stdout}"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    let dims: Vec<usize> = field("dims ").iter().map(|d| d.parse().unwrap()).collect();
    let c_sum: f64 = field("checksum ")[0].parse().unwrap();
    assert!(stdout.contains("unknown op rc 2:"), "{stdout}");
    assert!(stdout.contains("no_such_op"), "{stdout}");

    // The same call through the Rust API.
    let model = hetero_plan::hf::load_config(&config).unwrap();
    let mut rt = Runtime::open(&plan, model, RuntimeOptions::default()).unwrap();
    let (m, k, n, inst) = (dims[0], dims[1], dims[2], dims[3]);
    let input: Vec<f32> = (0..inst * m * k)
        .map(|i| ((i * 7) % 13) as f32 / 13.0 - 0.5)
        .collect();
    let mut output = vec![0f32; inst * m * n];
    rt.linear(op, Phase::Prefill, layer, len, &input, &mut output)
        .unwrap();
    let sum: f64 = output
        .iter()
        .enumerate()
        .map(|(i, x)| *x as f64 * (i % 5 + 1) as f64)
        .sum();
    assert!(
        (sum - c_sum).abs() <= 1e-6 * sum.abs().max(1.0),
        "C {c_sum} vs Rust {sum}"
    );
}
