//! `hetero compile` and `hetero run --graphs` end to end on the QNN HTP
//! emulator: a plan solved for cpu:0 and qnn:htp compiles its graphs ahead
//! of time, runs from them with `--check` passing and every QNN graph
//! reported `loaded`, and every mismatch between the folder and the run
//! exits 2 naming the graph and the field.
//!
//! Needs `libQnnHtp.so` in `HETERO_QNN_LIB_DIR` (`scripts/fetch-qnn.sh`);
//! skips otherwise (`HETERO_REQUIRE_QNN=1` makes that a failure). The
//! emulator's times are CPU emulation: nothing here is an NPU latency.

mod common;

use std::path::{Path, PathBuf};

use common::{HETERO, TINY_LLAMA, skip, temp_dir};
use hetero_agent::{OpenOptions, Registry};
use hetero_plan::{DType, Phase, WeightMode};

const SOC: &str = "69";

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Writes config.json and a plan solved for prefill 1..=16 and decode 1 on
/// cpu:0 and qnn:htp (the emulator's own processor description, roofline
/// models that make the NPU worth using), or says why not.
fn setup(dir: &Path) -> Result<(PathBuf, PathBuf), String> {
    setup_graphs(dir, false)
}

/// [`setup`]; with `inputs`, under a graph memory budget one byte short of
/// the static-weight graphs' memory, so the solver takes weights-as-inputs
/// graphs (one per operator and size, shared by the layers).
fn setup_graphs(dir: &Path, inputs: bool) -> Result<(PathBuf, PathBuf), String> {
    let ids = ["cpu:0".to_string(), "qnn:htp".to_string()];
    let reg = Registry::open(&OpenOptions::default(), Some(&ids));
    let processors = reg.processors();
    if !processors.iter().any(|p| p.id == "qnn:htp") {
        let why: Vec<String> = reg
            .unavailable
            .iter()
            .map(|u| u.reason.to_string())
            .collect();
        return Err(format!("qnn:htp did not open: {}", why.join("; ")));
    }
    let config = dir.join("config.json");
    std::fs::write(&config, TINY_LLAMA).unwrap();
    let model = hetero_plan::hf::load_config(&config).unwrap();
    let pred = common::roofline_predictor(
        processors,
        &[("cpu:0", 2.0, 2.0, 5.0), ("qnn:htp", 200.0, 60.0, 10.0)],
    );
    let mut settings = hetero_solver::Settings {
        phases: vec![Phase::Prefill, Phase::Decode],
        prefill_lengths: (1..=16).collect(),
        decode_lengths: vec![1],
        graphs: hetero_solver::GraphChoice::Sizes(vec![4, 8, 16]),
        row_align: 16,
        dtypes: vec![(None, DType::F32)],
        ..Default::default()
    };
    let fp = pred.fingerprint("predictor.ron");
    let mut plan = hetero_solver::solve(&pred, fp.clone(), &model, &settings).unwrap();
    let set = plan.graph_set("qnn:htp").expect("the plan uses the NPU");
    assert_eq!(set.weights, WeightMode::Static, "{set:?}");
    if inputs {
        settings.graph_mem_budget = Some(set.bytes - 1);
        plan = hetero_solver::solve(&pred, fp, &model, &settings).unwrap();
        let set = plan.graph_set("qnn:htp").expect("the plan uses the NPU");
        assert_eq!(set.weights, WeightMode::Input, "{set:?}");
    }
    let plan_path = dir.join("plan.ron");
    hetero_plan::save(&plan_path, &plan).unwrap();
    Ok((config, plan_path))
}

fn run_args<'a>(plan: &'a Path, config: &'a Path, graphs: &'a Path, len: &'a str) -> Vec<&'a str> {
    vec![
        "run",
        s(plan),
        "--model",
        s(config),
        "--phase",
        "prefill",
        "--len",
        len,
        "--graphs",
        s(graphs),
        "--repeat",
        "1",
    ]
}

/// The run's JSON report, from the processors' entries: qnn:htp's graph
/// origins.
fn qnn_origins(report: &serde_json::Value) -> (String, Vec<serde_json::Value>) {
    let p = report["processors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == "qnn:htp")
        .expect("qnn:htp in the report");
    assert_eq!(p["timing"], "emulated", "{p}");
    let origins = p["graph_origins"].as_array().cloned().unwrap_or_default();
    (p["graphs"].as_str().unwrap().to_string(), origins)
}

/// Runs `phase` at `len` from the compiled graphs with `--check`: nothing
/// prepared at run time, every QNN graph loaded, every output within its
/// bound. Returns how many QNN graphs ran.
fn run_loaded_checked(plan: &Path, config: &Path, graphs: &Path, phase: &str, len: &str) -> usize {
    let mut args = run_args(plan, config, graphs, len);
    args[5] = phase;
    args.extend(["--check", "--json"]);
    let report: serde_json::Value = serde_json::from_str(&HETERO.ok(&args)).unwrap();
    let (words, origins) = qnn_origins(&report);
    assert!(words.contains("0 prepared at run time"), "{words}");
    assert!(
        origins.iter().all(|o| o["source"] == "loaded"),
        "{origins:?}"
    );
    let check = &report["check"];
    assert_eq!(check["passed"], check["outputs"], "{check}");
    origins.len()
}

fn edit_manifest(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join("qnn-graphs.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

#[test]
fn compiled_graphs_run_checked_and_mismatches_exit_2() {
    let dir = temp_dir("compile");
    let (config, plan) = match setup(dir.path()) {
        Ok(x) => x,
        Err(why) => skip!(QNN, "{why}"),
    };
    let graphs = dir.path().join("graphs");
    let out = HETERO.ok(&[
        "compile",
        s(&plan),
        "--model",
        s(&config),
        "--soc",
        SOC,
        "--out",
        s(&graphs),
    ]);
    assert!(out.contains("emulated"), "{out}");
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(graphs.join("qnn-graphs.json")).unwrap())
            .unwrap();
    let n = manifest["graphs"].as_array().unwrap().len();
    assert!(n > 0, "{manifest}");
    for key in ["model", "predictor", "graph_sets"] {
        assert!(manifest["plan"][key]["sha256"].is_string(), "{key}");
    }
    let g0 = &manifest["graphs"][0];
    for key in ["weights_sha256", "layer", "op"] {
        assert!(!g0["plan_graph"][key].is_null(), "{key}: {g0}");
    }
    assert!(g0["binary_sha256"].is_string());

    // Every length the plan covers runs from the compiled graphs alone.
    let mut loaded = 0;
    for (phase, len) in [
        ("prefill", "3"),
        ("prefill", "13"),
        ("prefill", "16"),
        ("decode", "1"),
    ] {
        loaded += run_loaded_checked(&plan, &config, &graphs, phase, len);
    }
    assert!(loaded > 0, "some QNN graph ran");

    // The same run with other weights: the baked-in ones differ.
    let mut args = run_args(&plan, &config, &graphs, "13");
    args.extend(["--seed", "7"]);
    let e = HETERO.bad_input(&args);
    assert!(e.contains("weights_sha256") && e.contains(".bin"), "{e}");

    // A manifest edited to claim another plan's graph sets.
    let other = dir.path().join("other-plan");
    copy_dir(&graphs, &other);
    edit_manifest(&other, |v| {
        v["plan"]["graph_sets"]["sha256"] = "00".repeat(32).into();
    });
    let e = HETERO.bad_input(&run_args(&plan, &config, &other, "13"));
    assert!(
        e.contains("plan.graph_sets") && e.contains("qnn-graphs.json"),
        "{e}"
    );

    // A manifest whose weights hash was tampered with.
    let tampered = dir.path().join("tampered");
    copy_dir(&graphs, &tampered);
    edit_manifest(&tampered, |v| {
        for g in v["graphs"].as_array_mut().unwrap() {
            g["plan_graph"]["weights_sha256"] = "ab".repeat(32).into();
        }
    });
    let e = HETERO.bad_input(&run_args(&plan, &config, &tampered, "13"));
    assert!(e.contains("weights_sha256"), "{e}");

    // A context binary replaced by another graph's.
    let swapped = dir.path().join("swapped");
    copy_dir(&graphs, &swapped);
    let files: Vec<String> = manifest["graphs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["file"].as_str().unwrap().to_string())
        .collect();
    if files.len() >= 2 {
        for f in &files[1..] {
            std::fs::copy(swapped.join(&files[0]), swapped.join(f)).unwrap();
        }
        std::fs::copy(swapped.join(&files[1]), swapped.join(&files[0])).unwrap();
        std::fs::write(swapped.join(&files[0]), b"not a context binary").unwrap();
        let e = HETERO.bad_input(&run_args(&plan, &config, &swapped, "13"));
        assert!(e.contains("binary_sha256"), "{e}");
    }

    // A folder without a manifest.
    let empty = dir.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let e = HETERO.bad_input(&run_args(&plan, &config, &empty, "13"));
    assert!(e.contains("qnn-graphs.json"), "{e}");
}

#[test]
fn weights_as_inputs_graphs_compile_and_run_checked() {
    let dir = temp_dir("compile-inputs");
    let (config, plan) = match setup_graphs(dir.path(), true) {
        Ok(x) => x,
        Err(why) => skip!(QNN, "{why}"),
    };
    let graphs = dir.path().join("graphs");
    let (p, c, g) = (s(&plan), s(&config), s(&graphs));
    HETERO.ok(&["compile", p, "--model", c, "--soc", SOC, "--out", g]);
    for (phase, len) in [("prefill", "13"), ("decode", "1")] {
        let loaded = run_loaded_checked(&plan, &config, &graphs, phase, len);
        assert!(loaded > 0, "{phase} {len}: a QNN graph ran");
    }
}

#[test]
fn compile_refuses_a_plan_without_qnn_graphs() {
    let dir = temp_dir("compile-no-npu");
    let (config, _model, pred) = common::tiny_cpu_npu(dir.path());
    let model = hetero_plan::hf::load_config(&config).unwrap();
    let settings = hetero_solver::Settings {
        phases: vec![Phase::Prefill],
        prefill_lengths: (1..=8).collect(),
        graphs: hetero_solver::GraphChoice::Sizes(vec![4, 8]),
        row_align: 16,
        dtypes: vec![(None, DType::F32)],
        ..Default::default()
    };
    let plan = hetero_solver::solve(&pred, pred.fingerprint("p.ron"), &model, &settings).unwrap();
    let plan_path = dir.path().join("plan.ron");
    hetero_plan::save(&plan_path, &plan).unwrap();
    let out = dir.path().join("graphs");
    let args = [
        "compile",
        s(&plan_path),
        "--model",
        s(&config),
        "--soc",
        SOC,
        "--out",
        s(&out),
    ];
    let e = HETERO.bad_input(&args);
    if plan.graph_sets.is_empty() {
        assert!(e.contains("no static graphs"), "{e}");
    } else {
        assert!(
            e.contains("graph_sets[0].processor") && e.contains("npu-sim"),
            "{e}"
        );
    }
    // --soc is required.
    let e = HETERO
        .cmd()
        .args(&args[..4])
        .args(["--out", s(&out)])
        .env_remove("HETERO_QNN_SOC")
        .bad_input();
    assert!(e.contains("--soc"), "{e}");
}
