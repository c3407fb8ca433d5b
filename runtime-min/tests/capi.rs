//! The C example, compiled with `cc` against the generated header and the
//! cdylib, gives the same output as the Rust API; misused handles are
//! refused, from C and from several threads.

mod common;

use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};

use hetero_plan::Phase;
use hetero_runtime::capi::{
    HETERO_BAD_HANDLE, HETERO_OK, HETERO_PREFILL, HeteroRuntime, hetero_last_error, hetero_linear,
    hetero_op_dims, hetero_options_default, hetero_runtime_close, hetero_runtime_open,
};
use hetero_runtime::{Runtime, RuntimeOptions};

/// The folder holding the cdylib built with this test: `target/debug/deps`
/// (the copy in `target/debug` is only refreshed by `cargo build`).
fn lib_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let deps = exe.parent()?;
    [deps.to_path_buf(), deps.parent()?.to_path_buf()]
        .into_iter()
        .find(|d| d.join("libhetero_runtime.so").exists())
}

/// The C compiler and the cdylib's folder, or None (with a note) when this
/// machine has no C compiler.
fn c_toolchain() -> Option<PathBuf> {
    if Command::new("cc").arg("--version").output().is_err() {
        hetero_test_support::require::CC.skipping("no C compiler (`cc`) on this machine");
        return None;
    }
    let Some(lib) = lib_dir() else {
        panic!(
            "libhetero_runtime.so not found next to the test binary: the cdylib crate-type was not built"
        );
    };
    Some(lib)
}

/// Compiles the C program `src` (relative to the crate) against the header
/// and the cdylib in `lib` into `exe`.
fn compile(src: &str, lib: &Path, exe: &Path) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let cc = Command::new("cc")
        .arg(root.join(src))
        .arg("-I")
        .arg(root.join("include"))
        .arg("-L")
        .arg(lib)
        .arg("-lhetero_runtime")
        .arg("-Wall")
        .arg("-Werror")
        .arg("-o")
        .arg(exe)
        .output()
        .unwrap();
    assert!(
        cc.status.success(),
        "cc {src} failed: {}",
        String::from_utf8_lossy(&cc.stderr)
    );
}

/// Runs a compiled C program with the cdylib in `lib`.
fn run_c(exe: &Path, lib: &Path, args: &[&std::ffi::OsStr]) -> Output {
    Command::new(exe)
        .args(args)
        .env("LD_LIBRARY_PATH", lib)
        // Known issue: loading libQnnHtp.so points C's stdout at stderr (the
        // library writes noise there), which would swallow the program's
        // output. The plan here needs no QNN, so keep the library out.
        .env_remove("HETERO_QNN_LIB_DIR")
        .output()
        .unwrap()
}

#[test]
fn c_example_compiles_runs_and_matches_the_rust_api() {
    let Some(lib) = c_toolchain() else { return };
    let dir = hetero_test_support::temp_dir("capi");
    let (config, plan, _) = common::solved(dir.path());
    let exe = dir.path().join("example");
    compile("examples/c/example.c", &lib, &exe);

    let (op, len, layer) = ("attn_q", 11u32, 1u32);
    let (len_arg, layer_arg) = (len.to_string(), layer.to_string());
    let out = run_c(
        &exe,
        &lib,
        &[
            plan.as_os_str(),
            config.as_os_str(),
            op.as_ref(),
            len_arg.as_ref(),
            layer_arg.as_ref(),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "example failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
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

#[test]
fn c_example_generates_the_reference_tokens_of_the_llama_fixture() {
    let Some(lib) = c_toolchain() else { return };
    let dir = hetero_test_support::temp_dir("capi-generate");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/models/llama");
    let config = fixture.join("config.json");
    let (plan, _) = common::solve_for(&config, dir.path());
    let exe = dir.path().join("example");
    compile("examples/c/example.c", &lib, &exe);
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture.join("expected.json")).unwrap())
            .unwrap();
    let ids = |key: &str| -> Vec<String> {
        expected[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.to_string())
            .collect()
    };
    let (prompt, want) = (ids("prompt_tokens").join(","), ids("tokens"));
    let max_new = want.len().to_string();
    let out = run_c(
        &exe,
        &lib,
        &[
            plan.as_os_str(),
            config.as_os_str(),
            "attn_q".as_ref(),
            "3".as_ref(),
            "0".as_ref(),
            fixture.as_os_str(),
            prompt.as_ref(),
            max_new.as_ref(),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "example failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = stdout
        .lines()
        .find_map(|l| l.strip_prefix("generated "))
        .unwrap_or_else(|| panic!("no tokens in {stdout}"));
    assert_eq!(got, want.join(" "), "{stdout}");
    assert!(stdout.contains("ttft_us "), "{stdout}");
}

#[test]
fn c_misused_handles_are_refused_with_bad_handle() {
    let Some(lib) = c_toolchain() else { return };
    let dir = hetero_test_support::temp_dir("capi-handles");
    let (config, plan, _) = common::solved(dir.path());
    let exe = dir.path().join("handles");
    compile("tests/c/handles.c", &lib, &exe);
    let out = run_c(&exe, &lib, &[plan.as_os_str(), config.as_os_str()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("\n0 failed"),
        "{}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("ok double close: rc 3,"), "{stdout}");
    println!("{stdout}");
}

/// Several threads run one operator on one handle while another closes it:
/// every call either finishes or is refused with HETERO_BAD_HANDLE, and
/// after the close every call is refused.
#[test]
fn calls_racing_a_close_finish_or_are_refused() {
    let dir = hetero_test_support::temp_dir("capi-race");
    let (config, plan, _) = common::solved(dir.path());
    let config = CString::new(config.to_str().unwrap()).unwrap();
    let plan = CString::new(plan.to_str().unwrap()).unwrap();
    let mut o = hetero_options_default();
    o.model_config = config.as_ptr();
    // SAFETY: valid strings and options.
    let rt = unsafe { hetero_runtime_open(plan.as_ptr(), &o) };
    assert!(!rt.is_null());
    let op = CString::new("attn_q").unwrap();
    let (mut m, mut k, mut n, mut inst) = (0, 0, 0, 0);
    // SAFETY: valid handle, string and outputs.
    let rc = unsafe {
        hetero_op_dims(
            rt,
            op.as_ptr(),
            HETERO_PREFILL,
            4,
            &mut m,
            &mut k,
            &mut n,
            &mut inst,
        )
    };
    assert_eq!(rc, HETERO_OK);
    let (ilen, olen) = ((inst * m * k) as usize, (inst * m * n) as usize);
    // Raw pointers are not Send: the threads get the handle's value.
    let handle = rt.addr();
    let closed = AtomicBool::new(false);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let (op, closed) = (&op, &closed);
                s.spawn(move || {
                    let rt = std::ptr::without_provenance_mut::<HeteroRuntime>(handle);
                    let input = vec![0.5f32; ilen];
                    let mut output = vec![0f32; olen];
                    loop {
                        let was_closed = closed.load(Ordering::SeqCst);
                        // SAFETY: buffers of the operator's sizes; any handle value is allowed.
                        let rc = unsafe {
                            hetero_linear(rt, op.as_ptr(), 4, input.as_ptr(), output.as_mut_ptr())
                        };
                        if rc == HETERO_OK {
                            assert!(!was_closed, "a call after the close ran");
                            continue;
                        }
                        assert_eq!(rc, HETERO_BAD_HANDLE);
                        // SAFETY: the library returns a NUL-terminated string.
                        let msg = unsafe { CStr::from_ptr(hetero_last_error()) };
                        assert!(msg.to_string_lossy().contains("was closed"), "{msg:?}");
                        return;
                    }
                })
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(hetero_runtime_close(rt), HETERO_OK);
        closed.store(true, Ordering::SeqCst);
        assert_eq!(hetero_runtime_close(rt), HETERO_BAD_HANDLE);
        for w in workers {
            w.join().unwrap();
        }
    });
}
