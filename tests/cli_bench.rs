//! `hetero bench offload` end to end: a machine without a discrete GPU
//! runs the whole path with its second CPU core group standing in for the
//! GPU (declared a discrete GPU with a copy cost in the test's predictor):
//! every strategy solved, run with --check on the tiny llama's synthetic
//! weights, the bandwidths measured, the table printed and the JSON report
//! written.
//! Bad arguments exit 2 naming the flag or the file.

mod common;

use std::path::{Path, PathBuf};

use common::{HETERO, TINY_LLAMA, roofline_predictor, temp_dir};
use hetero_agent::{OpenOptions, Registry};
use hetero_plan::{LinearCost, ProcessorKind};

/// The cores of two one-core groups, `a;b`, or none on a one-core machine.
fn two_groups() -> Option<String> {
    let cores = hetero_agent::cpu::topology::allowed_cores();
    (cores.len() >= 2).then(|| format!("{};{}", cores[0], cores[1]))
}

/// The tiny llama's config and a predictor whose cpu:1 is a discrete GPU
/// with 1 GiB of memory and a PCIe-like copy, in `dir`.
fn inputs(dir: &Path, groups: &str) -> (PathBuf, PathBuf) {
    let config = dir.join("config.json");
    std::fs::write(&config, TINY_LLAMA).unwrap();
    let open = OpenOptions {
        cpu_groups: Some(groups.into()),
        ..Default::default()
    };
    let reg = Registry::open(&open, Some(&["cpu:0".into(), "cpu:1".into()]));
    let mut procs = reg.processors();
    assert_eq!(procs.len(), 2, "{procs:?}");
    procs[1].kind = ProcessorKind::Gpu;
    procs[1].capabilities.unified_memory = false;
    procs[1].capabilities.memory_bytes = Some(1 << 30);
    let mut pred = roofline_predictor(
        procs,
        &[("cpu:0", 20.0, 10.0, 5.0), ("cpu:1", 40.0, 20.0, 5.0)],
    );
    pred.overheads[1].copy_h2d = Some(LinearCost {
        alpha_us: 7.0,
        beta_us_per_byte: 1e-4,
    });
    let path = dir.join("stand-in.ron");
    hetero_plan::save(&path, &pred).unwrap();
    (config, path)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn every_strategy_runs_end_to_end_beside_the_floor() {
    let Some(groups) = two_groups() else {
        common::skip!("one core: no second group to stand in for the GPU");
    };
    let dir = temp_dir("bench-offload");
    let (config, pred) = inputs(dir.path(), &groups);
    let (out, plans) = (dir.path().join("report.json"), dir.path().join("plans"));
    // The tiny llama's GEMMs hold 260 KiB of f32 weights, 120 KiB a layer:
    // 160 KiB resident.
    let text = HETERO
        .cmd()
        .env("HETERO_EVICT_MIB", "32")
        .args([
            "bench",
            "offload",
            "--model",
            s(&config),
            "--gpu-mem-budget",
            "160KiB",
            "--predictor",
            s(&pred),
            "--prompt",
            "12",
            "--tokens",
            "3",
            "--cpu-groups",
            &groups,
            "--unchecked-processors",
            "--check",
            "--out",
            s(&out),
            "--plans",
            s(&plans),
        ])
        .ok();
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    // The table on stdout: a row per strategy, the floor and its inputs.
    for want in [
        "\nbest ",
        "\nsliced ",
        "\ngpu-stream ",
        "\nlayer-split ",
        "\ncpu ",
        "floor of a decode step",
        "side by side",
        "best decodes",
        "check cpu: ",
    ] {
        assert!(text.contains(want), "{want}: {text}");
    }
    let names: Vec<&str> = (r["strategies"].as_array().unwrap().iter())
        .map(|x| x["strategy"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["best", "sliced", "gpu-stream", "layer-split", "cpu"]
    );
    for x in r["strategies"].as_array().unwrap() {
        let name = x["strategy"].as_str().unwrap();
        assert!(plans.join(format!("{name}.ron")).is_file(), "{name}");
        for f in [
            "ttft_us",
            "prefill_tokens_per_s",
            "tpot_us",
            "decode_tokens_per_s",
        ] {
            let (m, p) = (
                x[f]["measured"].as_f64().unwrap(),
                x[f]["predicted"].as_f64(),
            );
            assert!(m > 0.0 && m.is_finite(), "{name} {f}: {x}");
            assert!(
                p.is_some_and(|p| p > 0.0),
                "{name} {f} has no forecast: {x}"
            );
            let ratio = x[f]["ratio"].as_f64().unwrap();
            assert!((ratio - m / p.unwrap()).abs() < 1e-9 * ratio, "{x}");
        }
        let tpot = x["tpot_us"]["measured"].as_f64().unwrap();
        let floor = r["floor"]["decode_step_us"].as_f64().unwrap();
        assert!((x["floor_fraction"].as_f64().unwrap() - floor / tpot).abs() < 1e-9);
        let check = &x["check"];
        assert!(check["outputs"].as_u64().unwrap() > 0, "{x}");
        assert_eq!(
            check["passed"], check["outputs"],
            "{name}: a GEMM output off its bound"
        );
        assert!(x["resident_bytes"].as_u64().unwrap() <= 160 << 10, "{name}");
        let prepare = x["prepare_s"].as_f64().unwrap();
        assert!(prepare > 0.0 && prepare.is_finite(), "{name}: {x}");
    }
    // The floor's inputs: 260 KiB of f32 weights, 160 KiB of them resident.
    let (f, b) = (&r["floor"], &r["bandwidths"]);
    assert_eq!(
        f["weight_bytes"],
        2 * 4 * (64 * (64 + 32 + 32 + 64) + 3 * 64 * 96) + 4 * 64 * 80
    );
    assert_eq!(f["resident_bytes"], 160 << 10);
    for k in [
        "cpu_stream_gbps",
        "cpu_gemv_gbps",
        "h2d_gbps",
        "cpu_beside_gpu_gbps",
        "gpu_beside_cpu_gbps",
        "gpu_memory_gbps",
    ] {
        assert!(b[k].as_f64().unwrap() > 0.0, "{k}: {b}");
    }
    let host =
        b["cpu_beside_gpu_gbps"].as_f64().unwrap() + b["gpu_beside_cpu_gbps"].as_f64().unwrap();
    assert_eq!(b["host_gbps"].as_f64().unwrap(), host);
    assert_eq!(f["host_gbps"], b["host_gbps"]);
    assert_eq!(
        (b["cpu"].as_str(), b["gpu"].as_str()),
        (Some("cpu:0"), Some("cpu:1"))
    );
    let best = r["strategies"][0]["decode_tokens_per_s"]["measured"]
        .as_f64()
        .unwrap();
    let alt = (2..5)
        .map(|i| {
            r["strategies"][i]["decode_tokens_per_s"]["measured"]
                .as_f64()
                .unwrap()
        })
        .fold(0.0, f64::max);
    assert!((r["best_over_alternatives"].as_f64().unwrap() - best / alt).abs() < 1e-9);
}

#[test]
fn the_gpu_alone_takes_the_host_bandwidth_from_the_predictors_cpu() {
    let Some(groups) = two_groups() else {
        common::skip!("one core: no second group to stand in for the GPU");
    };
    let dir = temp_dir("bench-offload-gpu");
    let (config, pred) = inputs(dir.path(), &groups);
    let out = dir.path().join("report.json");
    HETERO
        .cmd()
        .env("HETERO_EVICT_MIB", "32")
        .args(["bench", "offload", "--model", s(&config)])
        .args(["--gpu-mem-budget", "160KiB", "--predictor", s(&pred)])
        .args([
            "--prompt",
            "4",
            "--tokens",
            "2",
            "--strategies",
            "gpu-stream",
        ])
        .args(["--cpu-groups", &groups, "--unchecked-processors", "--check"])
        .args(["--out", s(&out)])
        .ok();
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(r["bandwidths"]["cpu"], "cpu:0", "{r}");
    let x = &r["strategies"][0];
    assert_eq!(x["strategy"], "gpu-stream");
    assert_eq!(x["check"]["passed"], x["check"]["outputs"], "{x}");
}

#[test]
fn bad_arguments_exit_2_naming_the_flag_or_file() {
    let dir = temp_dir("bench-offload-bad");
    let config = dir.path().join("config.json");
    std::fs::write(&config, TINY_LLAMA).unwrap();
    let pred = common::root().join("tests/fixtures/predictors/discrete-cpu-gpu.ron");
    let run = |budget: &str, model: &str, extra: &[&str]| {
        let mut a = vec![
            "bench",
            "offload",
            "--model",
            model,
            "--gpu-mem-budget",
            budget,
            "--predictor",
            s(&pred),
        ];
        a.extend_from_slice(extra);
        HETERO.bad_input(&a)
    };
    let e = run("lots", s(&config), &[]);
    assert!(e.contains("--gpu-mem-budget"), "{e}");
    let missing = dir.path().join("nothing.json");
    let e = run("1GiB", s(&missing), &[]);
    assert!(e.contains("nothing.json"), "{e}");
    let e = run("1GiB", s(&config), &["--strategies", "best,fastest"]);
    assert!(e.contains("--strategies") && e.contains("fastest"), "{e}");
    let e = run("1GiB", s(&config), &["--tokens", "0"]);
    assert!(e.contains("--tokens"), "{e}");
    let e = HETERO.bad_input(&[
        "bench",
        "offload",
        "--model",
        s(&config),
        "--gpu-mem-budget",
        "1GiB",
    ]);
    assert!(e.contains("--predictor"), "{e}");
}
