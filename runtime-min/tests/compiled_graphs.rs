//! Graphs compiled ahead of time through the C API, on the QNN HTP
//! emulator: a plan solved for cpu:0 and qnn:htp, compiled with
//! [`compile_plan`], opened with `options.graphs`, gives the same outputs
//! as the same plan with its graphs prepared at run time; the same folder
//! opened with other weights is refused as bad input naming the field.
//!
//! Needs `libQnnHtp.so` in `HETERO_QNN_LIB_DIR` (`scripts/fetch-qnn.sh`);
//! skips otherwise (`HETERO_REQUIRE_QNN=1` makes that a failure).

mod common;

use std::ffi::{CStr, CString};
use std::path::Path;

use hetero_agent::OpenOptions;
use hetero_runtime::capi::{
    HETERO_BAD_INPUT, HETERO_OK, HETERO_PREFILL, HeteroRuntime, hetero_last_error, hetero_linear,
    hetero_op_dims, hetero_options_default, hetero_runtime_close, hetero_runtime_open,
};
use hetero_runtime::{CompileOptions, WeightSource, compile_plan};
use hetero_test_support::{skip, temp_dir};

fn open(plan: &Path, config: &Path, graphs: Option<&Path>, seed: u64) -> *mut HeteroRuntime {
    let c = |p: &Path| CString::new(p.to_str().unwrap()).unwrap();
    let (plan, config) = (c(plan), c(config));
    let graphs = graphs.map(c);
    let mut o = hetero_options_default();
    o.model_config = config.as_ptr();
    o.seed = seed;
    o.graphs = graphs.as_ref().map_or(std::ptr::null(), |g| g.as_ptr());
    // SAFETY: NUL-terminated strings alive for the call.
    unsafe { hetero_runtime_open(plan.as_ptr(), &o) }
}

fn last_error() -> String {
    // SAFETY: the library's own NUL-terminated message.
    unsafe { CStr::from_ptr(hetero_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// `op` at `len` through the C API: its output.
fn linear(rt: *mut HeteroRuntime, op: &str, len: u32) -> Vec<f32> {
    let op = CString::new(op).unwrap();
    let (mut m, mut k, mut n, mut inst) = (0u32, 0u32, 0u32, 0u32);
    // SAFETY: valid out-pointers, NUL-terminated name.
    let rc = unsafe {
        hetero_op_dims(
            rt,
            op.as_ptr(),
            HETERO_PREFILL,
            len,
            &mut m,
            &mut k,
            &mut n,
            &mut inst,
        )
    };
    assert_eq!(rc, HETERO_OK, "{}", last_error());
    let rows = (inst * m) as usize;
    let input: Vec<f32> = (0..rows * k as usize)
        .map(|i| ((i * 37 % 101) as f32 / 101.0) - 0.5)
        .collect();
    let mut out = vec![f32::NAN; rows * n as usize];
    // SAFETY: buffers of the sizes hetero_op_dims gave.
    let rc = unsafe { hetero_linear(rt, op.as_ptr(), len, input.as_ptr(), out.as_mut_ptr()) };
    assert_eq!(rc, HETERO_OK, "{}", last_error());
    out
}

#[test]
fn the_c_api_runs_compiled_graphs_and_refuses_other_weights() {
    let pred = common::predictor_with("qnn:htp", (400.0, 60.0, 1.0));
    if !pred.processors.iter().any(|p| p.id == "qnn:htp") {
        skip!(
            QNN,
            "qnn:htp did not open (HETERO_QNN_LIB_DIR, scripts/fetch-qnn.sh)"
        );
    }
    let dir = temp_dir("capi-graphs");
    let (config, plan, _) = common::solved_for(dir.path(), pred);
    let graphs = dir.path().join("graphs");
    let model = hetero_plan::hf::load_config(&config).unwrap();
    let opts = CompileOptions {
        open: OpenOptions::default(),
        weights: WeightSource::Synthetic {
            seed: 0x5eed,
            share_layers: false,
        },
        soc: 69,
    };
    let mut calls = 0;
    let m = compile_plan(&plan, &model, &opts, &graphs, &mut |_, _| calls += 1).unwrap();
    assert!(!m.graphs.is_empty() && calls == m.graphs.len());

    let ops = ["attn_q", "layers.1.ffn_down", "lm_head"];
    let loaded = open(&plan, &config, Some(&graphs), 0x5eed);
    assert!(!loaded.is_null(), "{}", last_error());
    let with: Vec<Vec<f32>> = ops.iter().map(|op| linear(loaded, op, 13)).collect();
    assert_eq!(hetero_runtime_close(loaded), HETERO_OK);

    let prepared = open(&plan, &config, None, 0x5eed);
    assert!(!prepared.is_null(), "{}", last_error());
    let without: Vec<Vec<f32>> = ops.iter().map(|op| linear(prepared, op, 13)).collect();
    assert_eq!(hetero_runtime_close(prepared), HETERO_OK);
    assert_eq!(
        with, without,
        "a loaded graph computes what a prepared one does"
    );

    // Other weights: the first QNN graph the runtime asks for is refused.
    let other = open(&plan, &config, Some(&graphs), 7);
    assert!(!other.is_null(), "{}", last_error());
    let op = CString::new("ffn_down").unwrap();
    let (k, n) = (96, 64);
    let input = vec![0.1f32; 13 * k];
    let mut out = vec![0f32; 13 * n];
    // SAFETY: ffn_down of the tiny llama at 13 tokens: 13×96 in, 13×64 out.
    let rc = unsafe { hetero_linear(other, op.as_ptr(), 13, input.as_ptr(), out.as_mut_ptr()) };
    let e = last_error();
    hetero_runtime_close(other);
    // The plan runs ffn_down at 13 on qnn:htp, so a compiled graph is asked for.
    assert_eq!(rc, HETERO_BAD_INPUT, "{e}");
    assert!(e.contains("weights_sha256"), "{e}");
}
