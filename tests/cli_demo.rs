//! `hetero demo` end to end on this machine's CPU: every step runs, every
//! file it names exists, the plan is compared with the built-in reference
//! profile, a second demo replaces the first (and a failed one does not),
//! and a folder the demo did not write is refused. With the fake agent
//! (`tests/fixtures/profiler/fake-agent.py`) probing a GPU host: which
//! processors the demo profiles and why, and the offload plan it solves.

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
        // Above the minimum `hetero profile` asks for a fit with cold
        // caches (49 s with a test build of the agent: an eviction before
        // every timed run).
        ("--budget", "70s"),
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
    for step in 1..=9 {
        assert!(text.contains(&format!("[{step}/9]")), "step {step}: {text}");
    }
    // The table: every operator of the small model, predicted and measured.
    assert!(
        text.contains("predicted") && text.contains("measured"),
        "{text}"
    );
    assert!(text.contains("check: "), "{text}");
    // The profile step shows its budget plan, with a row per processor.
    let plan_rows = text
        .lines()
        .skip_while(|l| !l.contains("budget plan for"))
        .take_while(|l| !l.contains("stages:"))
        .filter(|l| l.trim_start().starts_with("cpu:0"))
        .count();
    assert_eq!(plan_rows, 1, "{text}");
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
        "generate.json",
    ] {
        assert!(out.join(f).is_file(), "{f} missing: {text}");
    }
    // `hetero generate` of a 24-token prompt and 2 new tokens on synthetic
    // weights, every GEMM output checked, with the plan's forecast.
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("generate.json")).unwrap()).unwrap();
    assert_eq!(r["prompt_tokens"], 24);
    assert_eq!(r["tokens"].as_array().unwrap().len(), 2);
    let c = &r["check"];
    assert_eq!(c["passed"], c["outputs"], "{c}");
    for (m, p) in [("ttft_us", "ttft_us"), ("tpot_us", "tpot_us")] {
        assert!(r[m].as_f64().is_some_and(|t| t > 0.0), "{m}: {r}");
        assert!(
            r["predicted"][p].as_f64().is_some_and(|t| t > 0.0),
            "{p}: {r}"
        );
    }
    assert!(text.contains("time to first token"), "{text}");
    // The replay runs a layer's operators in turn, so the demo profiles
    // with cold caches (`--warm-cache` turns that off).
    let device: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("dataset/device.json")).unwrap())
            .unwrap();
    assert_eq!(device["sweep"]["run"]["cold_cache"], true, "{device}");
    let summary = std::fs::read_to_string(out.join("DEMO.md")).unwrap();
    assert!(summary.contains("Where everything went"), "{summary}");
    one_processor_screen(&out, &text, &summary);
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
    // step 5's measuring, `--no-refine`). A short warm profile: without
    // the evictions a fit's rows need about 8 s.
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
    assert!(out.join("generate.json").is_file());
    let o = demo_env(
        &out,
        &[
            ("--budget", "20s"),
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
    let summary = std::fs::read_to_string(out.join("DEMO.md")).unwrap();
    assert!(summary.contains("not drawn: no TrueType font"), "{summary}");
    assert!(!out.join("charts/plan/index.md").exists(), "{text}");
    for f in ["generate.json", "DEMO.md"] {
        assert!(out.join(f).is_file(), "{f} missing: {text}");
    }
}

/// With one processor, the demo ends with a screen that shows the plan's
/// strategy mix and runs, and the plans of the built-in reference profile
/// of a GPU host, labelled as that machine's and not run.
fn one_processor_screen(out: &std::path::Path, text: &str, summary: &str) {
    let screen = &text[text.find("[9/9]").expect("step 9")..];
    assert!(screen.lines().count() <= 32, "{screen}");
    assert!(screen.contains("100.0 %  single cpu:0"), "{screen}");
    assert!(
        screen.contains("the plan has one processor (cpu:0)"),
        "{screen}"
    );
    assert!(
        screen.contains("REFERENCE profile of a 16-core Xeon host"),
        "{screen}"
    );
    assert!(screen.contains("not run here"), "{screen}");
    for row in [
        "the plan (cpu:0 + cuda:0)",
        "cpu:0 alone",
        "cuda:0 alone",
        "offload, ",
    ] {
        assert!(screen.contains(row), "{row}: {screen}");
    }
    assert!(summary.contains("REFERENCE profile"), "{summary}");
    // The reference plans were solved from the built-in profile, and the
    // offload plan keeps part of the weights off the GPU.
    let plan = |name: &str| -> hetero_plan::Plan {
        hetero_plan::load(&out.join("reference").join(name)).unwrap()
    };
    assert_eq!(plan("plan.ron").processors, ["cpu:0", "cuda:0"]);
    let off = plan("offload-plan.ron");
    let placed = off.solver.as_ref().unwrap().offload.as_ref().unwrap();
    assert!(placed.resident_bytes <= placed.gpu_mem_budget, "{placed:?}");
    assert!(
        (off.ops.iter().flat_map(|o| o.decisions()))
            .any(|d| d.strategy.kind() == hetero_plan::StrategyKind::Offload),
        "no offload decision"
    );
    // Nothing of the reference was run here.
    let runs: Vec<String> = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("generate"))
        .collect();
    assert_eq!(runs, ["generate.json"], "{runs:?}");
}

/// The fake agent and the probe of a GPU host it then reports (cpu:0,
/// PoCL on the same cores, NVIDIA's OpenCL and cuda:0 on the same card),
/// or why the fake agent cannot run here.
fn fake_gpu_host() -> Result<(String, String), String> {
    let python = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !python {
        return Err("python3 is missing (the fake agent is a Python script)".into());
    }
    let agent = root().join("tests/fixtures/profiler/fake-agent.py");
    let probe = root().join("tests/fixtures/demo/gpu-host-probe.json");
    Ok((agent.display().to_string(), probe.display().to_string()))
}

/// The line of step 1 that says whether the demo uses processor `id`.
fn line_of(text: &str, id: &str) -> String {
    text.lines()
        .find(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            matches!(w.as_slice(), ["use", p, ..] | ["leave", "out", p, ..] if *p == id)
        })
        .unwrap_or_else(|| panic!("{id}: {text}"))
        .to_string()
}

#[test]
fn demo_chooses_the_processors_that_matter_and_says_why() {
    let (agent, probe) = or_skip!(PYTHON, fake_gpu_host());
    let t = temp_dir("demo-choice");
    // The profile's sweep is refused, so the demo stops at step 2, after
    // printing its choice and the profile command it chose.
    let env = [
        ("FAKE_AGENT_PROBE", probe.as_str()),
        ("FAKE_AGENT_REFUSE", "1"),
    ];
    let run = |out: &str, processors: &[&str]| {
        let out = t.path().join(out).display().to_string();
        let mut args = vec!["demo", "--out", &out, "--agent", &agent];
        args.extend(processors);
        let o = HETERO.cmd().args(&args).envs(env).output();
        assert!(!o.status.success());
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let text = run("default", &[]);
    let line = |id: &str| line_of(&text, id);
    assert!(line("cpu:0").starts_with("  use "), "{text}");
    assert!(line("cuda:0").starts_with("  use "), "{text}");
    let pocl = line("opencl:0:0");
    assert!(
        pocl.starts_with("  leave out ") && pocl.contains("same CPU cores as cpu:0"),
        "{pocl}"
    );
    let nv = line("opencl:1:0");
    assert!(
        nv.starts_with("  leave out ") && nv.contains("same GPU as cuda:0"),
        "{nv}"
    );
    assert!(text.contains("using: cpu:0, cuda:0\n"), "{text}");
    assert!(text.contains("cuda:0 is a discrete GPU"), "{text}");
    assert!(text.contains("--processors cpu:0,cuda:0 "), "{text}");

    // --processors overrides the choice.
    let text = run("by-hand", &["--processors", "cpu:0,opencl:0:0"]);
    assert!(
        text.contains("using: cpu:0, opencl:0:0 (--processors)"),
        "{text}"
    );
    assert!(text.contains("--processors cpu:0,opencl:0:0 "), "{text}");
    let cuda = line_of(&text, "cuda:0");
    assert!(
        cuda.contains("leave out") && cuda.contains("not in --processors"),
        "{cuda}"
    );
    // Two processors on the same cores: one real processor for the plan.
    assert!(text.contains("one real processor"), "{text}");
}

#[test]
fn demo_on_a_discrete_gpu_solves_the_offload_plan_and_the_best_single_processor() {
    let (agent, probe) = or_skip!(PYTHON, fake_gpu_host());
    let t = temp_dir("demo-offload");
    let out = t.path().join("demo");
    // The fake cuda:0 cannot run here: the demo solves everything, then
    // stops at its generations (step 8), leaving what it wrote in
    // OUT.partial.
    let args = [
        "demo",
        "--out",
        out.to_str().unwrap(),
        "--agent",
        &agent,
        "--model",
        "runtime-min/bench/bench-model.json",
        // Above the minimum the profile asks for this probe's 16-core CPU
        // and H100 (58 s); the fake agent answers at once, so the profile
        // ends when its design is measured, long before the budget.
        "--budget",
        "120s",
        "--len",
        "24",
        "--tokens",
        "2",
        "--max-len",
        "64",
        "--no-refine",
    ];
    let env = [
        ("FAKE_AGENT_PROBE", probe.as_str()),
        ("HETERO_FONT", "/nonexistent/font.ttf"),
    ];
    let o = HETERO.cmd().args(args).envs(env).output();
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        text.contains("[8/9] generate with the plan, cuda:0 alone, offload"),
        "{text}\n{err}"
    );
    let work = out.with_file_name("demo.partial");
    let plan = |name: &str| -> hetero_plan::Plan { hetero_plan::load(&work.join(name)).unwrap() };
    assert_eq!(plan("plan.ron").processors, ["cpu:0", "cuda:0"]);
    for (file, only) in [
        ("single-cpu-0.ron", "cpu:0"),
        ("single-cuda-0.ron", "cuda:0"),
    ] {
        assert_eq!(plan(file).processors, [only], "{file}");
    }
    // The offload plan: half the model's f16 weights fit the GPU's budget,
    // and some operators stream the rest from host memory.
    let model =
        hetero_plan::hf::load_config(&root().join("runtime-min/bench/bench-model.json")).unwrap();
    let weights = model.linear_params_stored() * 2;
    let off = plan("offload-plan.ron");
    let placed = off.solver.as_ref().unwrap().offload.as_ref().unwrap();
    assert_eq!(placed.gpu, "cuda:0");
    assert_eq!(placed.gpu_mem_budget, weights / 2, "{placed:?}");
    assert!(placed.resident_bytes < weights, "{placed:?}");
    assert!(
        (off.ops.iter().flat_map(|o| o.decisions()))
            .any(|d| d.strategy.kind() == hetero_plan::StrategyKind::Offload),
        "no offload decision: {text}"
    );
    assert!(
        text.contains("offload plan: 12.8 MiB of the model's 25.5 MiB"),
        "{text}"
    );
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
    // A family the decoder refuses is refused before anything runs.
    let o = demo(
        &t.path().join("m"),
        &[("--model", "datasets/models/mixtral-8x7b.json")],
    );
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("mixture-of-experts"), "{e}");
    let o = demo(&t.path().join("y"), &[("--budget", "soon")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--budget"));
}
