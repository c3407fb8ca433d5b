//! `hetero demo` end to end on this machine's CPU: every step runs, every
//! file it names exists, a second demo replaces the first (and a failed one
//! does not), and a folder the demo did not write is refused.

mod common;

use common::*;

fn demo(out: &std::path::Path, overrides: &[(&str, &str)]) -> std::process::Output {
    demo_env(out, overrides, &[])
}

/// [`demo`] with extra environment variables.
fn demo_env(
    out: &std::path::Path,
    overrides: &[(&str, &str)],
    env: &[(&str, &str)],
) -> std::process::Output {
    // A small model and one processor keep this to seconds; the user's
    // `hetero demo` uses the bundled Qwen2.5-1.5B and every real processor.
    let mut opts = vec![
        ("--model", "runtime-min/bench/bench-model.json"),
        ("--processors", "cpu:0"),
        ("--budget", "15s"),
        ("--len", "24"),
        ("--tokens", "2"),
        ("--max-len", "64"),
    ];
    for (k, v) in overrides {
        match opts.iter_mut().find(|(o, _)| o == k) {
            Some(slot) => slot.1 = v,
            None => opts.push((k, v)),
        }
    }
    let mut args = vec!["demo", "--out", out.to_str().unwrap()];
    for (k, v) in opts {
        // An empty value is a flag without one.
        args.push(k);
        if !v.is_empty() {
            args.push(v);
        }
    }
    HETERO.cmd().args(&args).envs(env.iter().copied()).output()
}

#[test]
fn demo_runs_every_step_and_prints_the_table() {
    or_skip!(AGENT, real_agent());
    let t = temp_dir("demo");
    let out = t.path().join("demo");
    let o = demo(&out, &[]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    for step in 1..=8 {
        assert!(text.contains(&format!("[{step}/8]")), "step {step}: {text}");
    }
    // The table: every operator of the small model, predicted and measured.
    assert!(
        text.contains("predicted") && text.contains("measured"),
        "{text}"
    );
    assert!(text.contains("check: "), "{text}");
    for f in [
        "DEMO.md",
        "demo-manifest.json",
        "dataset/device.json",
        "predictor.ron",
        "fit-report.json",
        "plan.ron",
        "plan-summary.txt",
        "charts/plan/index.md",
        "charts/dataset/index.md",
        "charts/fit/index.md",
        "run-prefill.json",
        "run-decode.json",
    ] {
        assert!(out.join(f).is_file(), "{f} missing: {text}");
    }
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("run-prefill.json")).unwrap())
            .unwrap();
    assert_eq!(r["len"], 24);
    let c = &r["check"];
    assert_eq!(c["passed"], c["outputs"], "{c}");
    // The replay runs a layer's operators in turn, so the demo profiles
    // with cold caches (`--warm-cache` turns that off).
    let device: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("dataset/device.json")).unwrap())
            .unwrap();
    assert_eq!(device["sweep"]["run"]["cold_cache"], true, "{device}");
    // The host's speed probe went from the profile's rows through the
    // predictor and the plan to the run, which measured its own.
    let h = &r["host"];
    let (now, then) = (h["probe_us"].as_f64(), h["profiled_probe_us"].as_f64());
    assert!(now.is_some_and(|t| t > 0.0), "{h}");
    assert!(then.is_some_and(|t| t > 0.0), "{h}");
    let speed = h["speed"].as_f64().unwrap();
    assert!((speed - then.unwrap() / now.unwrap()).abs() < 1e-9, "{h}");
    let summary = std::fs::read_to_string(out.join("DEMO.md")).unwrap();
    assert!(summary.contains("Where everything went"), "{summary}");
    // The demo was written beside --out and moved there; the paths it
    // printed are the final ones.
    assert!(!out.with_file_name("demo.partial").exists());
    let plan = out.join("plan.ron");
    assert!(summary.contains(&plan.display().to_string()), "{summary}");
    // Step 5 measured the GEMMs the plan runs at --len 24 into the
    // dataset (`hetero profile --plan`) before the plan was solved again.
    assert!(text.contains("round 1: "), "{text}");
    let journal = std::fs::read_to_string(out.join("dataset/journal.jsonl")).unwrap();
    assert!(
        journal
            .lines()
            .any(|l| l.contains("\"type\":\"measurement\"") && l.contains("\"m\":24,")),
        "no 24-row GEMM in the dataset: {text}"
    );

    // Running it again replaces the earlier demo's folder (here without
    // step 5's measuring, `--no-refine`). A short warm profile: cold
    // caches cost an eviction before every timed run, which takes most of
    // 5 s in a test build on a host with a large cache.
    // Without a usable font (a bare server: the GPU host had none), the
    // charts are skipped with the reason and the demo runs the plan.
    // A file the demo did not write keeps the folder from being replaced.
    std::fs::write(out.join("stale.txt"), "mine").unwrap();
    let o = demo(&out, &[("--budget", "5s")]);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("stale.txt"), "{e}");
    std::fs::remove_file(out.join("stale.txt")).unwrap();
    // A demo that fails leaves the earlier one as it was.
    let plan_text = std::fs::read(&plan).unwrap();
    let o = demo(&out, &[("--agent", "/nonexistent/hetero-agent")]);
    assert!(!o.status.success());
    assert_eq!(std::fs::read(&plan).unwrap(), plan_text);
    assert!(out.join("run-prefill.json").is_file());
    let o = demo_env(
        &out,
        &[
            ("--budget", "5s"),
            ("--warm-cache", ""),
            ("--no-refine", ""),
        ],
        &[("HETERO_FONT", "/nonexistent/font.ttf")],
    );
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!out.with_file_name("demo.partial").exists());
    assert!(text.contains("skipped (--no-refine)"), "{text}");
    assert!(
        text.contains("skipped: HETERO_FONT=/nonexistent/font.ttf"),
        "{text}"
    );
    assert!(text.contains("not drawn: no TrueType font"), "{text}");
    assert!(!out.join("charts/plan/index.md").exists(), "{text}");
    for f in ["run-prefill.json", "run-decode.json", "DEMO.md"] {
        assert!(out.join(f).is_file(), "{f} missing: {text}");
    }
}

#[test]
fn demo_refuses_a_folder_it_did_not_write_and_bad_arguments() {
    let t = temp_dir("demo-bad");
    let mine = t.path().join("mine");
    std::fs::create_dir_all(&mine).unwrap();
    std::fs::write(mine.join("notes.txt"), "keep me").unwrap();
    let o = demo(&mine, &[]);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("not empty") && e.contains("mine"), "{e}");
    assert_eq!(
        std::fs::read_to_string(mine.join("notes.txt")).unwrap(),
        "keep me"
    );

    let o = demo(&t.path().join("x"), &[("--len", "100")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--max-len"));
    let o = demo(&t.path().join("y"), &[("--budget", "soon")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--budget"));
}
