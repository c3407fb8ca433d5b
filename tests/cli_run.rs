//! `hetero run` end to end: a plan solved for a tiny model on cpu:0 and
//! npu-sim, checked outputs, JSON report, and every kind of bad input.

mod common;

use std::path::{Path, PathBuf};

use common::{HETERO, TINY_LLAMA, require, stderr, temp_dir};
use hetero_agent::{OpenOptions, Registry};
use hetero_plan::{DType, Phase};

/// Writes config.json, predictor.ron and plan.ron (solved for prefill
/// 1..=16 and decode 1) into `dir`.
fn setup(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let (config, model, pred) = common::tiny_cpu_npu(dir);
    let pred_path = dir.join("predictor.ron");
    hetero_plan::save(&pred_path, &pred).unwrap();
    let settings = hetero_solver::Settings {
        phases: vec![Phase::Prefill, Phase::Decode],
        prefill_lengths: (1..=16).collect(),
        decode_lengths: vec![1],
        graphs: hetero_solver::GraphChoice::Sizes(vec![4, 8, 16]),
        row_align: 16,
        dtypes: vec![(None, DType::F32)],
        ..Default::default()
    };
    let plan =
        hetero_solver::solve(&pred, pred.fingerprint("predictor.ron"), &model, &settings).unwrap();
    let plan_path = dir.join("plan.ron");
    hetero_plan::save(&plan_path, &plan).unwrap();
    (config, plan_path, pred_path)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn run_prefill_with_check_prints_json_with_the_promised_fields() {
    let dir = temp_dir("run-prefill");
    let (config, plan, pred) = setup(dir.path());
    let out = HETERO.ok(&[
        "run",
        s(&plan),
        "--model",
        s(&config),
        "--phase",
        "prefill",
        "--len",
        "13",
        "--check",
        "--json",
        "--repeat",
        "2",
        "--predictor",
        s(&pred),
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    for key in [
        "predicted_us",
        "measured_us",
        "per_op",
        "check",
        "ttft_us",
        "dispatch",
        "host",
    ] {
        assert!(v.get(key).is_some(), "{key} missing: {out}");
    }
    // This plan's predictor is synthetic: no profile, so no probe of its
    // own to compare with, but the run measures the host.
    assert!(v["host"]["probe_us"].as_f64().unwrap() > 0.0, "{out}");
    assert!(v["host"]["profiled_probe_us"].is_null(), "{out}");
    assert_eq!(v["check"]["passed"], v["check"]["outputs"]);
    assert_eq!(v["check"]["outputs"], 15);
    assert_eq!(v["per_op"].as_array().unwrap().len(), 8);
    assert!(v["per_op"][0]["predicted_us"].as_f64().unwrap() > 0.0);
    assert!(v["per_op"][0]["measured_us"].as_f64().unwrap() > 0.0);
    // Each operator's spread over its executions, and the medians summed,
    // which the total is compared with.
    let mut medians = 0.0;
    for o in v["per_op"].as_array().unwrap() {
        let (med, mean, max) = (
            o["measured_us"].as_f64().unwrap(),
            o["mean_us"].as_f64().unwrap(),
            o["max_us"].as_f64().unwrap(),
        );
        assert!(max >= med && max >= mean && mean > 0.0, "{o}");
        medians += med * o["layers"].as_f64().unwrap();
    }
    let summed = v["op_medians_us"].as_f64().unwrap();
    assert!(
        (summed - medians).abs() <= 1e-6 * medians,
        "{summed} {medians}"
    );
    // The table for people.
    let text = HETERO.ok(&[
        "run",
        s(&plan),
        "--model",
        s(&config),
        "--phase",
        "prefill",
        "--len",
        "5",
        "--repeat",
        "1",
    ]);
    assert!(
        text.contains("TTFT")
            && text.contains("the operators' medians sum to")
            && text.contains("dispatch per operator")
            && text.contains("host speed probe"),
        "{text}"
    );
}

#[test]
fn run_decode_with_block_sync_reports_tokens_per_second() {
    let dir = temp_dir("run-decode");
    let (config, plan, _) = setup(dir.path());
    let out = HETERO.ok(&[
        "run",
        s(&plan),
        "--model",
        s(&config),
        "--phase",
        "decode",
        "--len",
        "1",
        "--tokens",
        "3",
        "--sync",
        "block",
        "--json",
        "--repeat",
        "1",
        "--check",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["sync"], "block");
    assert_eq!(v["steps"], 3);
    assert!(v["tokens_per_s"].as_f64().unwrap() > 0.0);
    assert!(v["per_token_us"].as_f64().unwrap() > 0.0);
    assert_eq!(v["per_op"][0]["samples"], 2 * 3);
}

#[test]
fn bad_inputs_exit_2_naming_the_mismatch() {
    let dir = temp_dir("run-bad");
    let (config, plan, _) = setup(dir.path());
    // A plan for another model.
    let other = dir.path().join("other.json");
    std::fs::write(
        &other,
        TINY_LLAMA.replace("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 3"),
    )
    .unwrap();
    let e = HETERO.bad_input(&[
        "run",
        s(&plan),
        "--model",
        s(&other),
        "--phase",
        "prefill",
        "--len",
        "4",
    ]);
    assert!(e.contains("solved for model"), "{e}");
    // A processor that is not here.
    let text = std::fs::read_to_string(&plan).unwrap();
    let absent = dir.path().join("absent.ron");
    std::fs::write(&absent, text.replace("\"npu-sim\"", "\"cuda:7\"")).unwrap();
    let args = |plan: &Path| -> Vec<String> {
        [
            "run",
            s(plan),
            "--model",
            s(&config),
            "--phase",
            "prefill",
            "--len",
            "4",
        ]
        .map(String::from)
        .to_vec()
    };
    let run_bad = |plan: &Path| {
        let a = args(plan);
        HETERO.bad_input(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let e = run_bad(&absent);
    assert!(e.contains("`cuda:7`") && e.contains("not available"), "{e}");
    // A processor that is here but not what the plan describes: the plan
    // prepares static graphs for a dynamic-shape GPU.
    let reg = Registry::open(&OpenOptions::default(), Some(&["opencl:0:0".into()]));
    if reg.backends.is_empty() {
        require::OPENCL.skipping("the static-graph mismatch: no opencl:0:0 here");
    } else {
        let dynamic = dir.path().join("dynamic.ron");
        std::fs::write(&dynamic, text.replace("\"npu-sim\"", "\"opencl:0:0\"")).unwrap();
        let e = run_bad(&dynamic);
        assert!(
            e.contains("opencl:0:0") && e.contains("static graphs"),
            "{e}"
        );
    }
    // A length the plan does not cover.
    let e = HETERO.bad_input(&[
        "run",
        s(&plan),
        "--model",
        s(&config),
        "--phase",
        "prefill",
        "--len",
        "99",
    ]);
    assert!(e.contains("1..=16"), "{e}");
    // A CPU polling hold that is not a number, from the environment.
    let a = args(&plan);
    let e = HETERO
        .cmd()
        .args(&a)
        .env("HETERO_CPU_POLL_US", "soon")
        .bad_input();
    assert!(e.contains("HETERO_CPU_POLL_US"), "{e}");
    // Host cores: `rest` needs the groups; a group's core is refused.
    let mut a = args(&plan);
    a.extend(["--host-cores".into(), "rest".into()]);
    let e = HETERO.bad_input(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        e.contains("--host-cores") && e.contains("--cpu-groups"),
        "{e}"
    );
    let core = hetero_agent::cpu::topology::allowed_cores()[0].to_string();
    let mut a = args(&plan);
    a.extend([
        "--cpu-groups".into(),
        core.clone(),
        "--host-cores".into(),
        core,
    ]);
    let e = HETERO.bad_input(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(e.contains("is in a CPU group"), "{e}");
    // --tokens in prefill.
    HETERO.bad_input(&[
        "run",
        s(&plan),
        "--model",
        s(&config),
        "--phase",
        "prefill",
        "--len",
        "4",
        "--tokens",
        "2",
    ]);
}

#[test]
fn a_model_too_large_for_this_machine_is_refused_before_it_allocates() {
    // intermediate_size 4 000 000 000 is a valid u32: the config loads and
    // solves, but its FFN weights (64 × 4e9 f32 per layer) fit no machine.
    let dir = temp_dir("run-huge");
    let (_, _, pred) = setup(dir.path());
    let config = dir.path().join("huge.json");
    std::fs::write(
        &config,
        TINY_LLAMA.replace(
            "\"intermediate_size\": 96",
            "\"intermediate_size\": 4000000000",
        ),
    )
    .unwrap();
    let shown = HETERO.ok(&["model", "show", s(&config)]);
    assert!(shown.contains("4000000000"), "{shown}");
    let plan = dir.path().join("huge.ron");
    HETERO.ok(&[
        "solve",
        "--predictor",
        s(&pred),
        "--model",
        s(&config),
        "--out",
        s(&plan),
        "--lengths",
        "1..4",
        "--npu-graphs",
        "none",
        "--dtype",
        "f32",
    ]);
    let o = HETERO.run(&[
        "run",
        s(&plan),
        "--model",
        s(&config),
        "--phase",
        "prefill",
        "--len",
        "4",
    ]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(!e.contains("memory allocation of"), "{e}");
    assert!(!e.contains("panicked"), "{e}");
    for part in [
        s(&config),
        s(&plan),
        "too large for this machine",
        "needs ",
        "GiB",
        "4000000000",
        "available",
    ] {
        assert!(e.contains(part), "{part} missing: {e}");
    }
}

/// Tiny-llama weights as safetensors `[N, K]` f32 tensors; `wrong` gives
/// one tensor a bad shape.
fn write_weights(path: &Path, wrong: Option<&str>) {
    let model = hetero_plan::hf::from_str(Path::new("tiny.json"), TINY_LLAMA, "tiny").unwrap();
    let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for op in &model.ops {
        let layers: Vec<Option<u32>> = if op.name == "lm_head" {
            vec![None]
        } else {
            (0..op.layers).map(Some).collect()
        };
        for l in layers {
            let name = match l {
                Some(l) => format!("model.layers.{l}.{}.weight", op.hf_name),
                None => format!("{}.weight", op.hf_name),
            };
            let mut shape = vec![op.n as usize, op.k as usize];
            if wrong == Some(name.as_str()) {
                shape[1] += 1;
            }
            let data: Vec<u8> = (0..shape[0] * shape[1])
                .flat_map(|i| (((i * 31) % 17) as f32 / 17.0 - 0.5).to_le_bytes())
                .collect();
            tensors.push((name, shape, data));
        }
    }
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
        .iter()
        .map(|(n, s, d)| {
            (
                n.clone(),
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), d)
                    .unwrap(),
            )
        })
        .collect();
    let bytes = safetensors::serialize(views, None).unwrap();
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn real_weights_run_checked_and_mismatched_weights_exit_2() {
    let dir = temp_dir("run-weights");
    let (config, plan, _) = setup(dir.path());
    let good = dir.path().join("model.safetensors");
    write_weights(&good, None);
    let out = HETERO.ok(&[
        "run",
        s(&plan),
        "--model",
        s(&config),
        "--phase",
        "prefill",
        "--len",
        "9",
        "--weights",
        s(&good),
        "--check",
        "--json",
        "--repeat",
        "1",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["check"]["passed"], 15);
    let bad = dir.path().join("bad.safetensors");
    write_weights(&bad, Some("model.layers.1.mlp.down_proj.weight"));
    let e = HETERO.bad_input(&[
        "run",
        s(&plan),
        "--model",
        s(&config),
        "--phase",
        "prefill",
        "--len",
        "9",
        "--weights",
        s(&bad),
    ]);
    assert!(
        e.contains("model.layers.1.mlp.down_proj.weight")
            && e.contains("[64, 97]")
            && e.contains("[64, 96]"),
        "{e}"
    );
}

#[test]
fn a_processor_failing_mid_run_is_a_clear_error_and_writes_nothing() {
    let dir = temp_dir("run-fault");
    let (config, plan, _) = setup(dir.path());
    let report = dir.path().join("report.json");
    let o = HETERO.run(&[
        "run",
        s(&plan),
        "--model",
        s(&config),
        "--phase",
        "prefill",
        "--len",
        "12",
        "--out",
        s(&report),
        "--inject-fault",
        "cpu:0:6",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("cpu:0 failed running") && e.contains("injected fault"),
        "{e}"
    );
    assert!(!report.exists(), "nothing is written when a run fails");
    assert!(o.stdout.is_empty());
}

#[test]
fn run_help_has_an_example() {
    let out = HETERO.ok(&["run", "--help"]);
    assert!(
        out.contains(
            "hetero run plan.ron --model config.json --phase prefill --len 300 --check --json"
        ),
        "{out}"
    );
}

/// `hetero run` refuses a plan with a cost that is not a number or is
/// negative, naming the file and the field, before it runs anything; a
/// plan without tables for the phase asked for says so in words.
#[test]
fn run_refuses_bad_costs_and_names_a_missing_phase() {
    let dir = temp_dir("run-bad-cost");
    let (config, plan_path, pred_path) = setup(dir.path());
    let text = std::fs::read_to_string(&plan_path).unwrap();
    let run = |plan: &Path, phase: &str| {
        HETERO.bad_input(&[
            "run",
            s(plan),
            "--model",
            s(&config),
            "--phase",
            phase,
            "--len",
            "1",
        ])
    };
    let from = text
        .split("total_us: ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .unwrap()
        .to_string();
    for bad in ["NaN", "-405.4", "1e400"] {
        let path = dir.path().join("bad.ron");
        let edited = text.replacen(
            &format!("total_us: {from})"),
            &format!("total_us: {bad})"),
            1,
        );
        assert_ne!(edited, text);
        std::fs::write(&path, edited).unwrap();
        let e = run(&path, "prefill");
        assert!(
            e.contains("bad.ron:") && e.contains(".cost.total_us`") && e.contains("finite"),
            "{bad}: {e}"
        );
    }
    // A plan solved for decode only, run in prefill.
    let (_, model, pred) = common::tiny_cpu_npu(dir.path());
    let settings = hetero_solver::Settings {
        phases: vec![Phase::Decode],
        decode_lengths: vec![1],
        dtypes: vec![(None, DType::F32)],
        row_align: 16,
        ..Default::default()
    };
    let name = pred_path.file_name().unwrap().to_str().unwrap();
    let plan = hetero_solver::solve(&pred, pred.fingerprint(name), &model, &settings).unwrap();
    let decode_only = dir.path().join("decode.ron");
    hetero_plan::save(&decode_only, &plan).unwrap();
    let e = run(&decode_only, "prefill");
    assert!(
        e.contains("the plan has no prefill operators") && !e.contains("it covers"),
        "{e}"
    );
}

#[test]
fn a_pipe_runs_its_graphs_back_to_back_and_passes_the_check() {
    // npu-sim alone with graphs of 4 and 8: 9..=11 tokens run as 8 + 4,
    // the last graph padded.
    let dir = temp_dir("run-pipe");
    let (config, model, pred) = common::tiny_cpu_npu(dir.path());
    let settings = hetero_solver::Settings {
        phases: vec![Phase::Prefill],
        prefill_lengths: (1..=16).collect(),
        graphs: hetero_solver::GraphChoice::Sizes(vec![4, 8]),
        processors: vec!["npu-sim".into()],
        dtypes: vec![(None, DType::F32)],
        ..Default::default()
    };
    let plan =
        hetero_solver::solve(&pred, pred.fingerprint("predictor.ron"), &model, &settings).unwrap();
    let plan_path = dir.path().join("plan.ron");
    hetero_plan::save(&plan_path, &plan).unwrap();
    let d = plan.ops[0].at(10).unwrap();
    assert_eq!(d.strategy.kind(), hetero_plan::StrategyKind::Pipe, "{d:?}");
    let out = HETERO.ok(&[
        "run",
        s(&plan_path),
        "--model",
        s(&config),
        "--phase",
        "prefill",
        "--len",
        "10",
        "--check",
        "--json",
        "--repeat",
        "1",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["check"]["passed"], v["check"]["outputs"], "{out}");
}
