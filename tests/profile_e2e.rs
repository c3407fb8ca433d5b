//! End-to-end tests of `hetero profile` and `hetero dataset`: the real
//! `hetero` binary over the local, adb and ssh transports.
//!
//! The transport tests run `tests/fixtures/profiler/fake-agent.py`, a
//! stand-in that speaks the agent protocol with made-up (and so
//! `simulated`-labelled) times; adb goes through `fake-adb`, put first on
//! PATH; ssh goes through a real `sshd` started on 127.0.0.1. The local test
//! runs the real `hetero-agent`.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

fn fixtures() -> PathBuf {
    root().join("tests/fixtures/profiler")
}

/// The fake agent, or why it cannot run here.
fn fake_agent() -> Result<String, &'static str> {
    let ok = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        return Err("python3 is missing (the fake agent is a Python script)");
    }
    Ok(fixtures().join("fake-agent.py").display().to_string())
}

/// Runs hetero with extra environment variables.
fn hetero_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    HETERO.cmd().args(args).envs(env.iter().copied()).output()
}

/// `hetero fit DATASET --out PREDICTOR EXTRA...`, which must succeed; its
/// standard output.
fn fit(dataset: &Path, predictor: &Path, extra: &[&str]) -> String {
    let mut args = vec![
        "fit",
        dataset.to_str().unwrap(),
        "--out",
        predictor.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    expect_ok(&hetero_env(&args, &[]), &args.join(" "))
}

fn expect_ok(o: &Output, what: &str) -> String {
    assert!(
        o.status.success(),
        "{what} failed: {}\nstdout: {}\nstderr: {}",
        o.status,
        stdout(o),
        stderr(o)
    );
    stdout(o)
}

fn expect_bad(o: &Output, what: &str) -> String {
    assert_eq!(
        o.status.code(),
        Some(2),
        "{what} should exit 2\nstdout: {}\nstderr: {}",
        stdout(o),
        stderr(o)
    );
    stderr(o)
}

/// Case ids of a JSON Lines file, in order, with repeats.
fn journal_ids(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("journal.jsonl"))
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            v["case_id"].as_str().unwrap().to_string()
        })
        .collect()
}

fn assert_unique(ids: &[String]) -> HashSet<String> {
    let set: HashSet<String> = ids.iter().cloned().collect();
    assert_eq!(set.len(), ids.len(), "duplicate case ids in the journal");
    set
}

fn show_json(dir: &Path) -> Value {
    let out = expect_ok(
        &hetero_env(&["dataset", "show", dir.to_str().unwrap(), "--json"], &[]),
        "dataset show",
    );
    serde_json::from_str(&out).unwrap()
}

fn dataset_ids(dir: &Path) -> HashSet<String> {
    let ds = hetero_profiler::Dataset::load(dir).unwrap();
    let ids: Vec<String> = ds.case_ids().map(str::to_string).collect();
    let set: HashSet<String> = ids.iter().cloned().collect();
    assert_eq!(set.len(), ids.len(), "duplicate case ids in the dataset");
    set
}

#[test]
fn profile_and_dataset_help_have_examples() {
    for args in [
        &["profile", "--help"][..],
        &["dataset", "show", "--help"][..],
        &["dataset", "merge", "--help"][..],
        &["dataset", "export", "--help"][..],
    ] {
        let h = HETERO.ok(args);
        assert!(
            h.contains("Example"),
            "{args:?} --help has no example:\n{h}"
        );
    }
}

#[test]
fn bad_device_strings_exit_2_with_the_accepted_forms() {
    let t = temp_dir("baddev");
    let out = t.path().join("ds");
    for dev in ["phone", "pi@host", "ssh://", "adb:"] {
        let e = HETERO.bad_input(&["profile", "--device", dev, "--out", out.to_str().unwrap()]);
        assert!(e.contains("ssh://user@host"), "{dev}: {e}");
    }
    let e = HETERO.bad_input(&[
        "profile",
        "--device",
        "local",
        "--budget",
        "soon",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(e.contains("--budget"), "{e}");
}

#[test]
fn local_fake_agent_end_to_end() {
    let agent = or_skip!(PYTHON, fake_agent());
    let t = temp_dir("local");
    let out = t.path().join("ds");
    let o = hetero_env(
        &[
            "profile",
            "--device",
            "local",
            "--agent",
            &agent,
            "--models",
            "datasets/models/qwen2.5-1.5b.json",
            "--budget",
            "300s",
            "--out",
            out.to_str().unwrap(),
            "--json",
        ],
        &[],
    );
    let text = expect_ok(&o, "profile");
    let events: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("every stdout line is a JSON event"))
        .collect();
    let kinds: HashSet<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    for k in [
        "start",
        "connected",
        "processors",
        "batch",
        "row",
        "refine",
        "done",
    ] {
        assert!(kinds.contains(k), "no {k} event in {kinds:?}");
    }
    let rows = events.iter().filter(|e| e["event"] == "row").count();
    let done = events.last().unwrap();
    assert_eq!(done["event"], "done");
    assert_eq!(done["new_rows"].as_u64().unwrap() as usize, rows);

    for f in [
        "device.json",
        "measurements.parquet",
        "microbench.parquet",
        "journal.jsonl",
    ] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    let ids = journal_ids(&out);
    let journal = assert_unique(&ids);
    assert_eq!(dataset_ids(&out), journal);
    // Both operand orders, model shapes (qwen2.5-1.5b's ffn_down at decode) and stage probes.
    assert!(
        journal.contains("cpu:0/1x8960x1536/f32/aw"),
        "model shape missing"
    );
    assert!(journal.contains("cpu:0/1x8960x1536/f32/transposed"));
    assert!(
        journal.contains("fake-gpu/257x1024x1024/f16/aw"),
        "stage probe missing"
    );
    assert!(
        journal
            .iter()
            .any(|id| id.starts_with("mb/cpu:0/copy_h2d/"))
    );
    // The host-path microbenchmarks, measured again in the batches (agent
    // processes) after the first round, one round per batch.
    let mut batch = 0;
    let mut batch_of = std::collections::HashMap::new();
    for e in &events {
        match e["event"].as_str() {
            Some("batch") => batch += 1,
            Some("row") => {
                batch_of.insert(e["case_id"].as_str().unwrap().to_string(), batch);
            }
            _ => {}
        }
    }
    let first = batch_of["mb/cpu:0/submit_empty"];
    let second = batch_of["mb/cpu:0/submit_empty@2"];
    assert!(second > first, "{first} {second}");
    for round in 2..=4 {
        for id in ["mb/cpu:0/submit_empty", "mb/cpu:0/copy_h2d/4096"] {
            let id = format!("{id}@{round}");
            assert_eq!(batch_of.get(&id), Some(&(second + round - 2)), "{id}");
        }
    }
    assert!(!batch_of.contains_key("mb/cpu:0/copy_h2d/67108864@2"));

    let v = show_json(&out);
    assert_eq!(v["fingerprint"]["sha256"], done["fingerprint"]);
    let procs = v["processors"].as_array().unwrap();
    let cpu = procs.iter().find(|p| p["id"] == "cpu:0").unwrap();
    assert!(cpu["rows"].as_u64().unwrap() > 50);
    assert_eq!(cpu["timing"][0], "simulated");
    assert_eq!(cpu["unsupported"], 0);
    assert!(
        v["device"]["unavailable"][0]
            .as_str()
            .unwrap()
            .contains("opencl")
    );
    let dev: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("device.json")).unwrap()).unwrap();
    let spec_ids: HashSet<&str> = dev["sweep"]["cases"]
        .as_array()
        .unwrap()
        .iter()
        .chain(dev["sweep"]["microbench"].as_array().unwrap())
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert!(journal.iter().all(|id| spec_ids.contains(id.as_str())));

    // The table form, export and a merge with itself.
    let table = expect_ok(
        &hetero_env(&["dataset", "show", out.to_str().unwrap()], &[]),
        "dataset show",
    );
    assert!(
        table.contains("cpu:0") && table.contains("fake-gpu"),
        "{table}"
    );
    let csv = t.path().join("csv");
    expect_ok(
        &hetero_env(
            &[
                "dataset",
                "export",
                out.to_str().unwrap(),
                "--csv",
                "--out",
                csv.to_str().unwrap(),
            ],
            &[],
        ),
        "export",
    );
    let m = std::fs::read_to_string(csv.join("measurements.csv")).unwrap();
    assert!(
        m.starts_with("case_id,processor,m,k,n,dtype,order"),
        "{}",
        &m[..80]
    );
    assert_eq!(
        m.lines().count(),
        1 + cpu["rows"].as_u64().unwrap() as usize
            + procs.iter().find(|p| p["id"] == "fake-gpu").unwrap()["rows"]
                .as_u64()
                .unwrap() as usize
    );
    let merged = t.path().join("merged");
    let msg = expect_ok(
        &hetero_env(
            &[
                "dataset",
                "merge",
                "--out",
                merged.to_str().unwrap(),
                out.to_str().unwrap(),
                out.to_str().unwrap(),
            ],
            &[],
        ),
        "merge",
    );
    assert!(msg.contains(&format!("{} duplicate", ids.len())), "{msg}");
    assert_eq!(dataset_ids(&merged), journal);

    // The fitter reads the Parquet dataset.
    let pred = t.path().join("p.ron");
    let fit = fit(&out, &pred, &[]);
    assert!(fit.contains("fake-gpu"), "{fit}");
    let p: hetero_plan::Predictor = hetero_plan::load(&pred).unwrap();
    assert_eq!(p.dataset.sha256, done["fingerprint"].as_str().unwrap());
}

/// `--max-cases` bounds the GEMM cases of each processor, refinement
/// included, and says why the run stopped.
#[test]
fn max_cases_bounds_each_processor() {
    let agent = or_skip!(PYTHON, fake_agent());
    let t = temp_dir("max-cases");
    let out = t.path().join("ds");
    let o = hetero_env(
        &[
            "profile",
            "--device",
            "local",
            "--agent",
            &agent,
            "--models",
            "datasets/models/qwen2.5-1.5b.json",
            "--no-microbench",
            "--max-cases",
            "9",
            "--budget",
            "300s",
            "--out",
            out.to_str().unwrap(),
            "--json",
        ],
        &[],
    );
    let text = expect_ok(&o, "profile");
    let done: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(done["stopped"], "max_cases", "{done}");
    let ids = journal_ids(&out);
    assert_unique(&ids);
    for p in ["cpu:0", "fake-gpu"] {
        let n = ids
            .iter()
            .filter(|id| id.starts_with(&format!("{p}/")))
            .count();
        assert_eq!(n, 9, "{p}: {ids:?}");
    }
    let e = expect_bad(
        &hetero_env(
            &[
                "profile",
                "--device",
                "local",
                "--max-cases",
                "0",
                "--out",
                "/tmp/x",
            ],
            &[],
        ),
        "max-cases 0",
    );
    assert!(e.contains("--max-cases"), "{e}");
}

/// `--max-len` keeps every measured GEMM at or below that many rows, and
/// refuses 0.
#[test]
fn max_len_keeps_every_gemm_at_or_below_it() {
    let agent = or_skip!(PYTHON, fake_agent());
    let t = temp_dir("max-len");
    let out = t.path().join("ds");
    let o = hetero_env(
        &[
            "profile",
            "--device",
            "local",
            "--agent",
            &agent,
            "--models",
            "datasets/models/qwen2.5-1.5b.json",
            "--no-microbench",
            "--max-len",
            "16",
            "--max-cases",
            "60",
            "--budget",
            "60s",
            "--out",
            out.to_str().unwrap(),
            "--json",
        ],
        &[],
    );
    expect_ok(&o, "profile --max-len 16");
    let ids = journal_ids(&out);
    assert!(ids.len() >= 60, "{} rows", ids.len());
    let rows = |id: &String| -> u32 {
        let shape = id.split('/').nth(1).expect("processor/MxKxN/dtype/order");
        shape.split('x').next().unwrap().parse().unwrap()
    };
    assert!(ids.iter().all(|id| rows(id) <= 16), "{ids:?}");
    assert!(
        ids.iter().any(|id| rows(id) == 16),
        "the cap itself is measured"
    );
    let e = expect_bad(
        &hetero_env(
            &[
                "profile",
                "--device",
                "local",
                "--max-len",
                "0",
                "--out",
                "/tmp/x",
            ],
            &[],
        ),
        "max-len 0",
    );
    assert!(e.contains("--max-len"), "{e}");
}

/// `hetero profile --device local` of the fake agent into `out` with a
/// 60 s budget and `--json`, then `extra`; it must succeed. Its last event.
fn fake_profile(agent: &str, out: &Path, extra: &[&str]) -> Value {
    let mut args = vec![
        "profile",
        "--device",
        "local",
        "--agent",
        agent,
        "--budget",
        "60s",
        "--out",
        out.to_str().unwrap(),
        "--json",
    ];
    args.extend_from_slice(extra);
    let text = expect_ok(&hetero_env(&args, &[]), &args.join(" "));
    serde_json::from_str::<Value>(text.lines().last().unwrap()).unwrap()
}

#[test]
fn a_queries_profile_holds_only_its_draws_and_fit_scores_them_as_unseen() {
    let agent = or_skip!(PYTHON, fake_agent());
    let t = temp_dir("queries");
    let profile = |out: &Path, extra: &[&str]| {
        let mut args = vec![
            "--processors",
            "fake-gpu",
            "--models",
            "datasets/models/qwen2.5-1.5b.json",
        ];
        args.extend_from_slice(extra);
        fake_profile(&agent, out, &args)
    };
    let q = t.path().join("q");
    let done = profile(&q, &["--queries", "6:3"]);
    assert_eq!(done["stopped"], "complete", "{done}");
    let ids = assert_unique(&journal_ids(&q));
    // Six shapes in both orders, and no microbenchmark or refinement.
    assert_eq!(ids.len(), 12, "{ids:?}");
    assert!(ids.iter().all(|id| id.starts_with("fake-gpu/")), "{ids:?}");
    let again = t.path().join("q2");
    profile(&again, &["--queries", "6:3", "--ordinary-timer"]);
    assert_eq!(
        dataset_ids(&again),
        dataset_ids(&q),
        "the seed fixes the draws"
    );
    // The kernel timer is the default; --ordinary-timer turns it off.
    let kernel_timer = |dir: &Path| {
        let d: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("device.json")).unwrap())
                .unwrap();
        d["sweep"]["run"]["kernel_timer"].as_bool().unwrap_or(false)
    };
    assert!(kernel_timer(&q));
    assert!(!kernel_timer(&again));

    let ds = t.path().join("ds");
    profile(
        &ds,
        &["--no-microbench", "--no-refine", "--max-cases", "60"],
    );
    let report = t.path().join("r.json");
    fit(
        &ds,
        &t.path().join("p.ron"),
        &[
            "--report",
            report.to_str().unwrap(),
            "--test",
            q.to_str().unwrap(),
        ],
    );
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let e = &r["test"]["entries"][0];
    assert_eq!(e["score"]["samples"], 12, "{e}");
    let unseen = e["unseen"]["samples"].as_u64().expect("some draws are new");
    assert!((1..=12).contains(&unseen), "{e}");

    for (value, models, says) in [
        ("0", true, "at least 1"),
        ("5:x", true, "not a seed"),
        ("5", false, "--models"),
    ] {
        let mut args = vec!["profile", "--device", "local", "--queries", value];
        if models {
            args.extend_from_slice(&["--models", "datasets/models/qwen2.5-1.5b.json"]);
        }
        args.extend_from_slice(&["--out", "/tmp/never-written"]);
        let e = expect_bad(&hetero_env(&args, &[]), value);
        assert!(e.contains("--queries") && e.contains(says), "{e}");
    }
}

#[test]
fn a_plan_profile_measures_the_gemms_the_plan_runs() {
    let agent = or_skip!(PYTHON, fake_agent());
    let t = temp_dir("plan-profile");
    let model = "datasets/models/qwen2.5-1.5b.json";
    let profile = |out: &Path, extra: &[&str]| fake_profile(&agent, out, extra);
    // A plan for the fake agent's two processors, from a short profile.
    let ds = t.path().join("ds");
    profile(
        &ds,
        &[
            "--models",
            model,
            "--no-microbench",
            "--no-refine",
            "--max-cases",
            "60",
        ],
    );
    let predictor = t.path().join("p.ron");
    fit(&ds, &predictor, &[]);
    let plan = t.path().join("plan.ron");
    let args = [
        "solve",
        "--predictor",
        predictor.to_str().unwrap(),
        "--model",
        model,
        "--lengths",
        "1..32",
        "--phase",
        "both",
        "--out",
        plan.to_str().unwrap(),
    ];
    expect_ok(&hetero_env(&args, &[]), "solve");
    let plan_text = std::fs::read_to_string(&plan).unwrap();

    let pp = t.path().join("pp");
    let p = plan.to_str().unwrap();
    let done = profile(&pp, &["--plan", p, "--at", "decode:1,prefill:16"]);
    assert_eq!(done["stopped"], "complete", "{done}");
    let ids = assert_unique(&journal_ids(&pp));
    // M is the length (1 for the lm_head in prefill too: its last token);
    // K and N are a model operator's, N or a share of it; no
    // microbenchmark or refinement.
    let model_kn: HashSet<(u32, u32)> = [
        (1536, 1536),
        (1536, 256),
        (1536, 8960),
        (8960, 1536),
        (1536, 151936),
    ]
    .into_iter()
    .collect();
    let model_k: HashSet<u32> = model_kn.iter().map(|&(k, _)| k).collect();
    for id in &ids {
        let shape: Vec<u32> = id
            .split('/')
            .nth(1)
            .unwrap()
            .split('x')
            .map(|x| x.parse().unwrap())
            .collect();
        assert!([1, 16].contains(&shape[0]), "{id}");
        assert!(model_k.contains(&shape[1]), "{id}");
        assert!(
            model_kn
                .iter()
                .any(|&(k, n)| k == shape[1] && shape[2] <= n),
            "{id}"
        );
    }
    // Every operator of both phases: seven operators at two lengths at least.
    assert!(ids.len() >= 7, "{ids:?}");
    assert!(ids.iter().any(|id| id.contains("/1x1536x")), "{ids:?}");
    assert!(ids.iter().any(|id| id.contains("/16x1536x")), "{ids:?}");
    // The processors asked for, among the plan's.
    let cpu = t.path().join("cpu");
    profile(
        &cpu,
        &["--plan", p, "--at", "decode:1", "--processors", "cpu:0"],
    );
    let cpu_ids = assert_unique(&journal_ids(&cpu));
    assert!(
        cpu_ids.iter().all(|id| id.starts_with("cpu:0/")),
        "{cpu_ids:?}"
    );
    assert_eq!(
        cpu_ids.is_empty(),
        !plan_text.contains("\"cpu:0\""),
        "cpu:0's GEMMs, where the plan runs any"
    );

    // Bad input names the flag or the plan, exit 2.
    for (extra, says) in [
        (&["--plan", p][..], "--at"),
        (&["--at", "decode:1"][..], "--plan"),
        (&["--plan", p, "--at", "decode"][..], "PHASE:LEN"),
        (&["--plan", p, "--at", "middle:3"][..], "unknown phase"),
        (&["--plan", p, "--at", "prefill:999"][..], "plan.ron"),
    ] {
        let mut args = vec!["profile", "--device", "local"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--out", "/tmp/never-written"]);
        let e = expect_bad(&hetero_env(&args, &[]), &args.join(" "));
        assert!(e.contains(says), "{args:?}: {e}");
    }
}

#[test]
fn used_folders_are_refused_unless_resumed_on_the_same_device() {
    let agent = or_skip!(PYTHON, fake_agent());
    let t = temp_dir("refuse");
    let out = t.path().join("ds");
    let o = out.to_str().unwrap();
    let args = [
        "profile",
        "--device",
        "local",
        "--agent",
        &agent,
        "--processors",
        "cpu:0",
        "--no-refine",
        "--no-microbench",
        "--budget",
        "60s",
        "--out",
        o,
    ];
    expect_ok(&hetero_env(&args, &[]), "first run");
    let before = journal_ids(&out);
    let e = expect_bad(&hetero_env(&args, &[]), "second run without --resume");
    assert!(e.contains("--resume"), "{e}");
    // Resuming a complete dataset measures nothing again.
    let mut resume = args.to_vec();
    resume.push("--resume");
    expect_ok(&hetero_env(&resume, &[]), "resume");
    assert_eq!(journal_ids(&out), before);
    // Another device's folder.
    let dev = out.join("device.json");
    let text = std::fs::read_to_string(&dev).unwrap();
    let mut v: Value = serde_json::from_str(&text).unwrap();
    v["host"]["name"] = "someone-elses-phone".into();
    std::fs::write(&dev, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    let e = expect_bad(&hetero_env(&resume, &[]), "resume on another device");
    assert!(
        e.contains("another device") && e.contains("someone-elses-phone"),
        "{e}"
    );
    // A folder with other files.
    let other = t.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("thesis.tex"), "x").unwrap();
    let mut a = args.to_vec();
    let last = a.len() - 1;
    let os = other.to_str().unwrap().to_string();
    a[last] = &os;
    let e = expect_bad(&hetero_env(&a, &[]), "non-empty folder");
    assert!(e.contains("holds no dataset"), "{e}");
}

#[test]
fn protocol_mismatch_is_a_clear_error() {
    let agent = or_skip!(PYTHON, fake_agent());
    let t = temp_dir("proto");
    let out = t.path().join("ds");
    let e = expect_bad(
        &hetero_env(
            &[
                "profile",
                "--device",
                "local",
                "--agent",
                &agent,
                "--out",
                out.to_str().unwrap(),
            ],
            &[("FAKE_AGENT_PROTOCOL", "7")],
        ),
        "protocol mismatch",
    );
    assert!(
        e.contains("speaks protocol 7") && e.contains("--agent"),
        "{e}"
    );
    assert!(e.contains("version --json"), "the command is named: {e}");
}

#[test]
fn unknown_processor_lists_what_the_device_has() {
    let agent = or_skip!(PYTHON, fake_agent());
    let t = temp_dir("proc");
    let out = t.path().join("ds");
    let e = expect_bad(
        &hetero_env(
            &[
                "profile",
                "--device",
                "local",
                "--agent",
                &agent,
                "--processors",
                "qnn:htp",
                "--out",
                out.to_str().unwrap(),
            ],
            &[],
        ),
        "unknown processor",
    );
    assert!(
        e.contains("qnn:htp") && e.contains("cpu:0, fake-gpu"),
        "{e}"
    );
}

/// The fake agent kills the host (and itself) after N rows: a resume then
/// yields every row of an uninterrupted run, each once.
#[test]
fn kill_host_then_resume_yields_every_row_once() {
    let agent = or_skip!(PYTHON, fake_agent());
    let t = temp_dir("kill");
    let base = [
        "profile",
        "--device",
        "local",
        "--agent",
        &agent,
        "--no-refine",
        "--budget",
        "600s",
    ];
    // Small made-up times: every planned case fits the budget in both runs,
    // and the budget affords every microbenchmark repeat round in both.
    let scale = ("FAKE_AGENT_SCALE", "0.0001");
    let full = t.path().join("full");
    let mut a = base.to_vec();
    a.extend(["--out", full.to_str().unwrap()]);
    let o = hetero_env(&a, &[scale]);
    expect_ok(&o, "uninterrupted run");
    assert!(stdout(&o).contains("stopped: complete"), "{}", stdout(&o));
    let want = assert_unique(&journal_ids(&full));

    let cut = t.path().join("cut");
    let mut a = base.to_vec();
    a.extend(["--out", cut.to_str().unwrap()]);
    let o = hetero_env(
        &a,
        &[
            scale,
            ("FAKE_AGENT_KILL_PARENT_AFTER", "40"),
            ("FAKE_AGENT_DELAY", "0.02"),
        ],
    );
    assert!(!o.status.success(), "the host should have been killed");
    let partial = assert_unique(&journal_ids(&cut));
    assert!(
        !partial.is_empty() && partial.len() < want.len(),
        "{}",
        partial.len()
    );
    assert!(!cut.join("measurements.parquet").exists());
    let v = show_json(&cut);
    assert!(v["sources"]["files"].as_array().unwrap().len() == 1, "{v}");

    a.push("--resume");
    expect_ok(&hetero_env(&a, &[scale]), "resume");
    let got = assert_unique(&journal_ids(&cut));
    assert_eq!(got, want);
    assert_eq!(dataset_ids(&cut), want);
}

/// The agent dies in the middle of a batch (once): the host restarts it
/// with the cases left, within the same run.
#[test]
fn agent_killed_mid_batch_is_restarted_without_duplicates() {
    let agent = or_skip!(PYTHON, fake_agent());
    let t = temp_dir("die");
    let out = t.path().join("ds");
    let marker = t.path().join("died");
    let o = hetero_env(
        &[
            "profile",
            "--device",
            "local",
            "--agent",
            &agent,
            "--no-refine",
            "--processors",
            "cpu:0",
            "--budget",
            "120s",
            "--out",
            out.to_str().unwrap(),
            "--json",
        ],
        &[
            ("FAKE_AGENT_DIE_AFTER", "5"),
            ("FAKE_AGENT_DIE_ONCE", marker.to_str().unwrap()),
        ],
    );
    let text = expect_ok(&o, "profile with a dying agent");
    assert!(marker.exists(), "the agent did not die");
    assert!(text.contains("\"event\":\"agent_stopped\""), "{text}");
    let ids = journal_ids(&out);
    assert_unique(&ids);
    let v = show_json(&out);
    assert!(v["measurements"].as_u64().unwrap() > 100);
}

/// `hetero profile` of the fake agent's cpu:0 alone, without refinement or
/// microbenchmarks, into `out`, with `extra` flags after.
fn cpu_profile_args<'a>(agent: &'a str, out: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec![
        "profile",
        "--device",
        "local",
        "--agent",
        agent,
        "--processors",
        "cpu:0",
        "--no-refine",
        "--no-microbench",
        "--budget",
        "60s",
        "--out",
        out.to_str().unwrap(),
    ];
    a.extend_from_slice(extra);
    a
}

/// The `cold_cache` of each journal row's recorded conditions, in order.
fn journal_cold(dir: &Path) -> Vec<bool> {
    std::fs::read_to_string(dir.join("journal.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            v["conditions"]["setup"]["cold_cache"].as_bool().unwrap()
        })
        .collect()
}

/// A warm-cache dataset resumed with --cold-cache is refused (device.json
/// untouched); with --allow-mixed it goes on, each row keeping its own
/// conditions, and a fit must pick one set of them.
#[test]
fn resume_refuses_other_conditions_unless_allowed_and_rows_keep_theirs() {
    let agent = or_skip!(PYTHON, fake_agent());
    let t = temp_dir("mixed");
    let out = t.path().join("ds");
    let first = cpu_profile_args(&agent, &out, &["--max-cases", "16"]);
    expect_ok(&hetero_env(&first, &[]), "warm run");
    let warm = journal_cold(&out).len();
    assert!(journal_cold(&out).iter().all(|c| !c));
    let device = std::fs::read(out.join("device.json")).unwrap();

    let cold = cpu_profile_args(
        &agent,
        &out,
        &["--max-cases", "32", "--resume", "--cold-cache"],
    );
    let e = expect_bad(&hetero_env(&cold, &[]), "resume with --cold-cache");
    assert!(
        e.contains("cache=warm") && e.contains("cache=cold") && e.contains("--cold-cache"),
        "{e}"
    );
    assert!(e.contains("--allow-mixed"), "{e}");
    assert_eq!(std::fs::read(out.join("device.json")).unwrap(), device);

    let mut mixed = cold.clone();
    mixed.push("--allow-mixed");
    let o = hetero_env(&mixed, &[]);
    expect_ok(&o, "resume with --allow-mixed");
    assert!(stderr(&o).contains("--allow-mixed"), "{}", stderr(&o));
    let cold_flags = journal_cold(&out);
    assert!(cold_flags.len() > warm, "{}", cold_flags.len());
    assert!(cold_flags[..warm].iter().all(|c| !c) && cold_flags[warm..].iter().all(|c| *c));
    // device.json still says what the first run's rows were measured with.
    let v: Value =
        serde_json::from_slice(&std::fs::read(out.join("device.json")).unwrap()).unwrap();
    assert_ne!(
        v["sweep"]["run"]["cold_cache"], true,
        "{}",
        v["sweep"]["run"]
    );
    // The tables keep each row's conditions too.
    let ds = hetero_profiler::Dataset::load(&out).unwrap();
    let cold_rows = ds
        .measurements
        .iter()
        .filter(|r| r.conditions.setup.as_ref().unwrap().cold_cache)
        .count();
    assert_eq!(cold_rows, cold_flags.len() - warm);

    let p = t.path().join("p.ron");
    let args = ["fit", out.to_str().unwrap(), "--out", p.to_str().unwrap()];
    let e = expect_bad(&hetero_env(&args, &[]), "fit of a mixed dataset");
    assert!(
        e.contains("different conditions") && e.contains("--conditions"),
        "{e}"
    );
    fit(&out, &p, &["--conditions", "cache=warm"]);
    fit(&out, &p, &["--conditions", "cache=cold"]);
}

/// A line torn in the middle of the journal is named (file and line) in a
/// warning and skipped; its case is measured again.
#[test]
fn a_torn_middle_journal_line_is_warned_of_and_skipped() {
    let agent = or_skip!(PYTHON, fake_agent());
    let t = temp_dir("torn");
    let out = t.path().join("ds");
    expect_ok(
        &hetero_env(&cpu_profile_args(&agent, &out, &["--max-cases", "12"]), &[]),
        "first run",
    );
    let want = dataset_ids(&out);
    let journal = out.join("journal.jsonl");
    let text = std::fs::read_to_string(&journal).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines[2] = lines[2][..lines[2].len() / 2].to_string();
    std::fs::write(&journal, lines.join("\n") + "\n").unwrap();
    let o = hetero_env(
        &cpu_profile_args(&agent, &out, &["--max-cases", "12", "--resume"]),
        &[],
    );
    expect_ok(&o, "resume over a torn line");
    let e = stderr(&o);
    assert!(e.contains("journal.jsonl:3: skipped"), "{e}");
    assert_eq!(dataset_ids(&out), want);
}

/// A small tmpfs mounted on a folder, unmounted when dropped (a failing
/// test leaves no mount behind).
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs of `size` (as `mount -o size=` reads it) on `dir`, or
    /// says why it cannot (not root, a container that forbids mounts).
    fn mount(dir: &Path, size: &str) -> Result<Tmpfs, String> {
        std::fs::create_dir_all(dir).unwrap();
        let o = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !o.status.success() {
            return Err(format!("cannot mount a tmpfs: {}", stderr(&o).trim()));
        }
        Ok(Tmpfs(dir.to_path_buf()))
    }

    /// Gives the mounted tmpfs a new size, keeping its files.
    fn resize(&self, size: &str) {
        let o = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.0)
            .output()
            .unwrap();
        assert!(o.status.success(), "remount: {}", stderr(&o));
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// The disk fills up in the middle of a profile: the run exits 1 naming the
/// journal and the cause, the journal holds only whole rows, and `--resume`
/// once space is freed measures the rest, each case once, as an
/// uninterrupted run does.
#[test]
fn a_full_disk_fails_naming_the_file_and_resume_finishes_without_loss() {
    let agent = or_skip!(PYTHON, fake_agent());
    let t = temp_dir("fulldisk");
    let scale = ("FAKE_AGENT_SCALE", "0.0001");
    let cases = ["--max-cases", "400"];
    let full = t.path().join("full");
    expect_ok(
        &hetero_env(&cpu_profile_args(&agent, &full, &cases), &[scale]),
        "uninterrupted run",
    );
    let want = assert_unique(&journal_ids(&full));

    // Declared after `t`, so unmounted before the folder is removed.
    let disk = or_skip!(MOUNT, Tmpfs::mount(&t.path().join("disk"), "64k"));
    let out = disk.0.join("ds");
    let args = cpu_profile_args(&agent, &out, &cases);
    let o = hetero_env(&args, &[scale]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "a full disk should exit 1\nstdout: {}\nstderr: {}",
        stdout(&o),
        stderr(&o)
    );
    let e = stderr(&o);
    assert!(
        e.contains("journal.jsonl") && e.contains("No space left on device"),
        "{e}"
    );
    let text = std::fs::read_to_string(out.join("journal.jsonl")).unwrap();
    assert!(text.is_empty() || text.ends_with('\n'), "a torn last line");
    for (i, line) in text.lines().enumerate() {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|err| panic!("journal line {}: {err}: {line}", i + 1));
        assert!(v["case_id"].is_string(), "line {}: {line}", i + 1);
    }
    let before = assert_unique(&journal_ids(&out));
    assert!(
        !before.is_empty() && before.len() < want.len(),
        "{} of {} rows fit",
        before.len(),
        want.len()
    );

    disk.resize("16m");
    let mut resume = args.clone();
    resume.push("--resume");
    let o = hetero_env(&resume, &[scale]);
    expect_ok(&o, "resume after freeing space");
    assert!(!stderr(&o).contains("skipped"), "{}", stderr(&o));
    let got = assert_unique(&journal_ids(&out));
    assert!(before.is_subset(&got));
    assert_eq!(got, want);
    assert_eq!(dataset_ids(&out), want);
}

/// The scratch folder a killed run left in TMPDIR is removed at the next
/// start; other folders stay.
#[test]
fn a_dead_runs_scratch_folder_is_removed_at_start() {
    let agent = or_skip!(PYTHON, fake_agent());
    let t = temp_dir("scratch");
    let tmp = t.path().join("tmp");
    // A process id above any Linux hands out: its run is over.
    let stale = tmp.join("hetero-4194305-123");
    let other = tmp.join("hetero-notes-1");
    std::fs::create_dir_all(&stale).unwrap();
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(stale.join("spec.json"), "{}").unwrap();
    let out = t.path().join("ds");
    let o = hetero_env(
        &cpu_profile_args(&agent, &out, &["--max-cases", "12"]),
        &[("TMPDIR", tmp.to_str().unwrap())],
    );
    expect_ok(&o, "profile");
    assert!(!stale.exists(), "{}", stderr(&o));
    assert!(other.exists());
    // The run's own scratch folder is gone too.
    let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().collect();
    assert_eq!(left.len(), 1, "{left:?}");
}

/// The agent is stopped once the budget is spent: the run ends within the
/// budget plus one case's timeout, though its batch holds more.
#[test]
fn the_budget_is_kept_within_one_case_timeout() {
    let agent = or_skip!(PYTHON, fake_agent());
    let t = temp_dir("budget");
    let out = t.path().join("ds");
    let mut args = cpu_profile_args(&agent, &out, &["--timeout-ms", "1000"]);
    let at = args.iter().position(|a| *a == "60s").unwrap();
    // The shortest budget that gives cpu:0 its fit rows (refused below).
    args[at] = "20s";
    let t0 = Instant::now();
    let o = hetero_env(&args, &[("FAKE_AGENT_DELAY", "1.5")]);
    let wall = t0.elapsed().as_secs_f64();
    expect_ok(&o, "profile on a 20 s budget");
    assert!(stdout(&o).contains("the budget ran out"), "{}", stdout(&o));
    assert!(wall < 20.0 + 1.0 + 1.5, "{wall:.1} s on a 20 s budget");
}

// ---------------------------------------------------------------- adb

struct FakeAdb {
    dir: TempDir,
    path: String,
}

impl FakeAdb {
    fn new(name: &str) -> FakeAdb {
        let dir = temp_dir(name);
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::copy(fixtures().join("fake-adb"), bin.join("adb")).unwrap();
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        FakeAdb { dir, path }
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn run(&self, args: &[&str], devices: &str, extra: &[(&str, &str)]) -> Output {
        let mut env = vec![
            ("PATH", self.path.as_str()),
            ("FAKE_ADB_ROOT", self.root().to_str().unwrap()),
            ("FAKE_ADB_DEVICES", devices),
        ];
        env.extend_from_slice(extra);
        hetero_env(args, &env)
    }

    fn log(&self) -> Vec<String> {
        std::fs::read_to_string(self.root().join("adb.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

#[test]
fn adb_end_to_end_through_the_real_command_lines() {
    let agent = or_skip!(PYTHON, fake_agent());
    let adb = FakeAdb::new("adb");
    let out = adb.root().join("ds");
    let o = adb.run(
        &[
            "profile",
            "--device",
            "adb",
            "--agent",
            &agent,
            "--no-refine",
            "--processors",
            "fake-gpu",
            "--budget",
            "60s",
            "--out",
            out.to_str().unwrap(),
        ],
        "emulator-5554:device",
        &[],
    );
    expect_ok(&o, "profile over adb");
    let log = adb.log();
    let has = |want: &str| log.iter().any(|l| l == want);
    assert_eq!(log[0], "devices");
    assert!(
        log.iter()
            .any(|l| l.starts_with("-s | emulator-5554 | push | ")
                && l.ends_with(" | /data/local/tmp/hetero/hetero-agent")),
        "{log:#?}"
    );
    assert!(
        has("-s | emulator-5554 | shell | chmod 755 /data/local/tmp/hetero/hetero-agent"),
        "{log:#?}"
    );
    assert!(
        has(
            "-s | emulator-5554 | shell | cd /data/local/tmp/hetero && ./hetero-agent version --json 2>agent-cmd.log"
        ),
        "{log:#?}"
    );
    assert!(
        log.iter()
            .any(|l| l.starts_with("-s | emulator-5554 | push | ")
                && l.ends_with(" | /data/local/tmp/hetero/spec.json")),
        "{log:#?}"
    );
    assert!(
        has(
            "-s | emulator-5554 | shell | cd /data/local/tmp/hetero && ./hetero-agent --processors fake-gpu sweep --spec spec.json 2>agent.log"
        ),
        "{log:#?}"
    );
    // The agent was pushed once: a second run finds the same bytes there.
    let pushes = |log: &[String]| {
        log.iter()
            .filter(|l| {
                l.ends_with("/data/local/tmp/hetero/hetero-agent") && l.contains("| push |")
            })
            .count()
    };
    assert_eq!(pushes(&log), 1);
    assert!(
        adb.root()
            .join("emulator-5554/data/local/tmp/hetero/hetero-agent")
            .is_file()
    );
    let v = show_json(&out);
    assert_eq!(v["device"]["transport"], "adb:emulator-5554");
    assert!(
        v["device"]["name"]
            .as_str()
            .unwrap()
            .contains("emulator-5554")
    );
    let gpu = &v["processors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == "fake-gpu")
        .unwrap()
        .clone();
    assert!(gpu["rows"].as_u64().unwrap() > 50, "{gpu}");

    let o = adb.run(
        &[
            "profile",
            "--device",
            "adb:emulator-5554",
            "--agent",
            &agent,
            "--no-refine",
            "--processors",
            "fake-gpu",
            "--resume",
            "--out",
            out.to_str().unwrap(),
        ],
        "emulator-5554:device",
        &[],
    );
    expect_ok(&o, "resume over adb");
    assert_eq!(pushes(&adb.log()), 1, "the agent was pushed again");
}

#[test]
fn adb_device_problems_exit_2_with_the_fix() {
    let agent = or_skip!(PYTHON, fake_agent());
    let adb = FakeAdb::new("adb-bad");
    let out = adb.root().join("ds");
    let run = |dev: &str, devices: &str| {
        let o = adb.run(
            &[
                "profile",
                "--device",
                dev,
                "--agent",
                &agent,
                "--out",
                out.to_str().unwrap(),
            ],
            devices,
            &[],
        );
        expect_bad(&o, &format!("{dev} with [{devices}]"))
    };
    let e = run("adb", "");
    assert!(
        e.contains("no adb device") && e.contains("USB debugging"),
        "{e}"
    );
    let e = run("adb", "A1:device B2:device");
    assert!(
        e.contains("2 adb devices") && e.contains("--device adb:A1"),
        "{e}"
    );
    let e = run("adb", "A1:unauthorized");
    assert!(e.contains("Allow USB debugging"), "{e}");
    let e = run("adb:C3", "A1:device");
    assert!(
        e.contains("no adb device `C3`") && e.contains("A1 (device)"),
        "{e}"
    );
    assert!(!out.exists(), "nothing is written on bad input");
}

#[test]
fn adb_link_failures_are_retried_and_agent_refusals_bring_its_log() {
    let agent = or_skip!(PYTHON, fake_agent());
    let adb = FakeAdb::new("adb-flaky");
    let out = adb.root().join("ds");
    let o = adb.run(
        &[
            "profile",
            "--device",
            "adb",
            "--agent",
            &agent,
            "--no-refine",
            "--no-microbench",
            "--processors",
            "cpu:0",
            "--out",
            out.to_str().unwrap(),
            "--json",
        ],
        "S1:device",
        &[("FAKE_ADB_FLAKY", "2")],
    );
    let text = expect_ok(&o, "flaky adb");
    let retries: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["event"] == "retry")
        .collect();
    assert_eq!(retries.len(), 2, "{text}");
    assert!(
        retries[0]["command"]
            .as_str()
            .unwrap()
            .starts_with("adb -s S1 shell")
    );
    assert!(
        retries[0]["detail"]
            .as_str()
            .unwrap()
            .contains("device offline")
    );

    let out2 = adb.root().join("ds2");
    let o = adb.run(
        &[
            "profile",
            "--device",
            "adb",
            "--agent",
            &agent,
            "--out",
            out2.to_str().unwrap(),
        ],
        "S1:device",
        &[("FAKE_AGENT_REFUSE", "1")],
    );
    let e = expect_bad(&o, "refused spec");
    assert!(
        e.contains("refused on purpose"),
        "the agent's log is shown: {e}"
    );
    assert!(e.contains("adb -s S1 shell"), "the command is shown: {e}");
    assert!(
        adb.log()
            .iter()
            .any(|l| l.starts_with("-s | S1 | pull | /data/local/tmp/hetero/agent.log | ")),
        "{:#?}",
        adb.log()
    );
}

// ---------------------------------------------------------------- ssh

struct Sshd {
    child: std::process::Child,
    port: u16,
    config: PathBuf,
    _dir: TempDir,
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn user() -> String {
    let o = Command::new("id").arg("-un").output().unwrap();
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// `ssh` and `scp` first on PATH: scripts that write their arguments to a
/// log and run the real program.
struct SshLog {
    dir: TempDir,
    path: String,
}

impl SshLog {
    fn new() -> SshLog {
        let dir = temp_dir("sshlog");
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let log = dir.path().join("ssh.log");
        for tool in ["ssh", "scp"] {
            let real = find_tool(tool).unwrap();
            let script = bin.join(tool);
            std::fs::write(
                &script,
                format!(
                    "#!/bin/sh\n{{ printf '%s\\037' {tool} \"$@\"; printf '\\n'; }} >> '{}'\n\
                     exec '{}' \"$@\"\n",
                    log.display(),
                    real.display()
                ),
            )
            .unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        SshLog { dir, path }
    }

    /// Every command run, as its program and arguments.
    fn commands(&self) -> Vec<Vec<String>> {
        std::fs::read_to_string(self.dir.path().join("ssh.log"))
            .unwrap_or_default()
            .lines()
            .map(|l| {
                l.trim_end_matches('\x1f')
                    .split('\x1f')
                    .map(str::to_string)
                    .collect()
            })
            .collect()
    }
}

/// Starts sshd on 127.0.0.1 with a temporary host key, user key and
/// configs; or says why it cannot.
fn start_sshd() -> Result<Sshd, String> {
    let Some(sshd) = find_tool("sshd") else {
        return Err("sshd is missing (apt-get install openssh-server)".into());
    };
    if ["ssh", "ssh-keygen", "scp"]
        .iter()
        .any(|t| find_tool(t).is_none())
    {
        return Err("ssh, scp or ssh-keygen is missing (apt-get install openssh-client)".into());
    }
    let dir = temp_dir("sshd");
    let d = dir.path().to_path_buf();
    let keygen = |file: &Path| {
        let o = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(file)
            .output()
            .unwrap();
        assert!(o.status.success(), "ssh-keygen: {}", stderr(&o));
    };
    keygen(&d.join("host_key"));
    keygen(&d.join("user_key"));
    std::fs::copy(d.join("user_key.pub"), d.join("authorized_keys")).unwrap();
    let port = free_port();
    // sshd needs its privilege separation folder when started as root.
    if user() == "root" {
        let _ = std::fs::create_dir_all("/run/sshd");
    }
    let sftp = [
        "/usr/lib/openssh/sftp-server",
        "/usr/libexec/sftp-server",
        "/usr/libexec/openssh/sftp-server",
    ]
    .into_iter()
    .find(|p| Path::new(p).exists())
    .unwrap_or("internal-sftp");
    std::fs::write(
        d.join("sshd_config"),
        format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {hk}\nAuthorizedKeysFile {ak}\n\
             PidFile {pid}\nStrictModes no\nUsePAM no\nPasswordAuthentication no\n\
             KbdInteractiveAuthentication no\nPubkeyAuthentication yes\n\
             PermitRootLogin prohibit-password\nSubsystem sftp {sftp}\nLogLevel ERROR\n",
            hk = d.join("host_key").display(),
            ak = d.join("authorized_keys").display(),
            pid = d.join("sshd.pid").display(),
        ),
    )
    .unwrap();
    let host_pub = std::fs::read_to_string(d.join("host_key.pub")).unwrap();
    std::fs::write(
        d.join("known_hosts"),
        format!("[127.0.0.1]:{port} {}", host_pub.trim()),
    )
    .unwrap();
    std::fs::write(
        d.join("ssh_config"),
        format!(
            "Host 127.0.0.1\n  IdentityFile {}\n  IdentitiesOnly yes\n  UserKnownHostsFile {}\n  \
             StrictHostKeyChecking yes\n  LogLevel ERROR\n",
            d.join("user_key").display(),
            d.join("known_hosts").display()
        ),
    )
    .unwrap();
    let mut child = Command::new(&sshd)
        .args(["-D", "-e", "-f"])
        .arg(d.join("sshd_config"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            break;
        }
        if let Ok(Some(status)) = child.try_wait() {
            let mut err = String::new();
            use std::io::Read;
            let _ = child.stderr.take().unwrap().read_to_string(&mut err);
            return Err(format!("sshd exited at start ({status}): {err}"));
        }
        if start.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            return Err("sshd did not listen within 10 s".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(Sshd {
        child,
        port,
        config: d.join("ssh_config"),
        _dir: dir,
    })
}

#[test]
fn ssh_end_to_end_against_a_real_sshd() {
    let agent = or_skip!(PYTHON, fake_agent());
    let sshd = or_skip!(SSHD, start_sshd());
    let t = temp_dir("ssh");
    let out = t.path().join("ds");
    let remote = t.path().join("remote");
    let device = format!("ssh://{}@127.0.0.1:{}", user(), sshd.port);
    let args = [
        "profile",
        "--device",
        &device,
        "--ssh-config",
        sshd.config.to_str().unwrap(),
        "--remote-dir",
        remote.to_str().unwrap(),
        "--agent",
        &agent,
        "--no-refine",
        "--processors",
        "cpu:0",
        "--budget",
        "60s",
        "--out",
        out.to_str().unwrap(),
    ];
    let log = SshLog::new();
    let o = hetero_env(&args, &[("PATH", &log.path)]);
    expect_ok(&o, "profile over ssh");
    // Every ssh and scp command has the destination right after `--`, and
    // nowhere before it, where ssh reads options.
    let dest = format!("{}@127.0.0.1", user());
    let commands = log.commands();
    assert!(commands.iter().any(|c| c[0] == "scp"), "{commands:#?}");
    for c in &commands {
        let dash = c.iter().position(|a| a == "--");
        let dash = dash.unwrap_or_else(|| panic!("no `--`: {c:?}"));
        assert!(
            !c[..dash].iter().any(|a| a.contains(&dest)),
            "the destination before `--`: {c:?}"
        );
        match c[0].as_str() {
            "ssh" => assert_eq!(c[dash + 1], dest, "{c:?}"),
            _ => assert!(
                c[dash + 1..].len() == 2
                    && c[dash + 1..]
                        .iter()
                        .any(|a| a.starts_with(&format!("{dest}:"))),
                "{c:?}"
            ),
        }
    }
    assert!(
        remote.join("hetero-agent").is_file(),
        "the agent was copied"
    );
    assert!(remote.join("spec.json").is_file(), "the spec was copied");
    let v = show_json(&out);
    assert_eq!(v["device"]["transport"], device);
    let cpu = &v["processors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == "cpu:0")
        .unwrap()
        .clone();
    assert!(cpu["rows"].as_u64().unwrap() > 50, "{cpu}");
    assert_unique(&journal_ids(&out));
}

/// A user or host that ssh would read as an option (`-oProxyCommand=...`
/// runs a command on this machine; `-E FILE` writes a file) is refused
/// before ssh or scp runs, even with a live sshd at the address.
#[test]
fn ssh_names_that_ssh_would_read_as_options_are_refused_and_run_nothing() {
    let sshd = or_skip!(SSHD, start_sshd());
    let t = temp_dir("inject");
    let marker = t.path().join("pwned");
    let me = user();
    let port = sshd.port;
    let cases = [
        (
            format!("ssh://-oProxyCommand=touch${{IFS}}pwned@127.0.0.1:{port}"),
            "the user",
        ),
        (
            format!(
                "ssh://-oProxyCommand=touch%20{}@127.0.0.1:{port}",
                marker.display()
            ),
            "the user",
        ),
        (
            format!("ssh://-Epwned@127.0.0.1:{port}"),
            "the user `-Epwned`",
        ),
        (format!("ssh://-V@127.0.0.1:{port}"), "the user `-V`"),
        (
            format!("ssh://{me}@-oProxyCommand=touch${{IFS}}pwned"),
            "the host",
        ),
        (
            format!("ssh://{me};touch${{IFS}}pwned@127.0.0.1:{port}"),
            "the user",
        ),
    ];
    for (device, part) in &cases {
        let log = SshLog::new();
        let o = HETERO
            .cmd()
            .args([
                "profile",
                "--device",
                device,
                "--ssh-config",
                sshd.config.to_str().unwrap(),
                "--retries",
                "1",
                "--out",
                t.path().join("ds").to_str().unwrap(),
            ])
            .env("PATH", &log.path)
            .current_dir(t.path())
            .output();
        let e = expect_bad(&o, device);
        assert!(
            e.contains(&format!("`{device}`")) && e.contains(part),
            "names the device and {part}: {e}"
        );
        assert_eq!(log.commands(), Vec::<Vec<String>>::new(), "{device}");
        let left: Vec<_> = std::fs::read_dir(t.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(left.is_empty(), "{device} left {left:?}");
    }
}

#[test]
fn unreachable_ssh_host_exits_2_with_the_command() {
    if find_tool("ssh").is_none() {
        skip!(SSHD, "ssh is missing (apt-get install openssh-client)");
    }
    let t = temp_dir("unreach");
    let port = free_port(); // nothing listens there
    let device = format!("ssh://nobody@127.0.0.1:{port}");
    let e = expect_bad(
        &hetero_env(
            &[
                "profile",
                "--device",
                &device,
                "--retries",
                "2",
                "--out",
                t.path().join("ds").to_str().unwrap(),
            ],
            &[],
        ),
        "unreachable host",
    );
    assert!(e.contains("cannot reach") && e.contains(&device), "{e}");
    assert!(
        e.contains(&format!("-p {port} -- nobody@127.0.0.1")),
        "the exact command: {e}"
    );
    assert!(e.contains("fix:"), "{e}");
}

// ---------------------------------------------------------------- real agent

/// The check a user runs (`--budget 60s` shortened): the real agent on this
/// machine's CPU, killed mid-run, then resumed: every row once.
#[test]
fn local_real_agent_kill_and_resume() {
    or_skip!(AGENT, real_agent());
    let t = temp_dir("real");
    let out = t.path().join("ds");
    let args = [
        "profile",
        "--device",
        "local",
        "--processors",
        "cpu:0",
        "--no-microbench",
        "--reps",
        "3",
        "--warmups",
        "1",
        "--budget",
        "15s",
        "--out",
        out.to_str().unwrap(),
        "--json",
    ];
    // Kill the host and the agent (the whole process group) after 6 rows.
    let mut child = Command::new(HETERO.path)
        .args(args)
        .current_dir(root())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let pgid = child.id();
    assert!(pgid > 1, "a process group of its own");
    let mut seen: BTreeMap<String, Option<f64>> = BTreeMap::new();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for l in lines.by_ref() {
        let v: Value = serde_json::from_str(&l.unwrap()).unwrap();
        if v["event"] == "row" {
            seen.insert(
                v["case_id"].as_str().unwrap().into(),
                v["median_us"].as_f64(),
            );
            if seen.len() == 6 {
                // `--` so the negative id is a process group, never an option;
                // the group is the host's own (process_group(0) above).
                assert!(pgid > 1, "process group {pgid}");
                let _ = Command::new("kill")
                    .args(["-s", "KILL", "--", &format!("-{pgid}")])
                    .status();
                break;
            }
        }
    }
    drop(lines);
    let _ = child.wait();
    assert_eq!(seen.len(), 6, "the agent produced fewer than 6 rows");

    // The resume's minimum budget comes from the cost model calibrated on
    // the rows measured so far, which a loaded machine makes slower than
    // the first run's priors: give it room (17 s was asked for once).
    let mut resume = args.to_vec();
    let b = resume.iter().position(|a| *a == "--budget").unwrap() + 1;
    resume[b] = "45s";
    resume.push("--resume");
    let text = expect_ok(&hetero_env(&resume, &[]), "resume");
    let journal = journal_ids(&out);
    let ids = assert_unique(&journal);
    let ds = hetero_profiler::Dataset::load(&out).unwrap();
    for (id, median) in &seen {
        assert!(ids.contains(id), "{id} measured before the kill is lost");
        let row = ds.measurements.iter().find(|r| &r.case_id == id).unwrap();
        assert_eq!(&row.median_us, median, "{id} was measured again");
    }
    assert!(
        ds.measurements.len() > seen.len(),
        "the resume measured nothing: {text}"
    );
    assert!(
        ds.measurements
            .iter()
            .all(|r| r.timing == hetero_plan::Timing::Real)
    );
    assert!(ds.measurements.iter().filter(|r| r.is_usable()).count() > 6);
    let v = show_json(&out);
    let cpu = &v["processors"][0];
    assert_eq!(cpu["id"], "cpu:0");
    assert_eq!(
        cpu["rows"].as_u64().unwrap() as usize,
        ds.measurements.len()
    );
    assert!(
        v["device"]["agent"]
            .as_str()
            .unwrap()
            .contains("protocol 1")
    );
}

// ---------------------------------------------------------------- budget plan

/// `hetero profile` of the fake agent's two processors for qwen2.5-1.5b
/// into `out` within `budget`, `--json`; its events.
fn planned_profile(agent: &str, out: &Path, budget: &str, env: &[(&str, &str)]) -> Vec<Value> {
    let args = [
        "profile",
        "--device",
        "local",
        "--agent",
        agent,
        "--models",
        "datasets/models/qwen2.5-1.5b.json",
        "--no-refine",
        "--budget",
        budget,
        "--out",
        out.to_str().unwrap(),
        "--json",
    ];
    let text = expect_ok(&hetero_env(&args, env), &args.join(" "));
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Every processor gets the rows a fit needs, and the repeat pass, before
/// any microbenchmark; a 60 s budget affords one round of microbenchmarks,
/// and the repeats it skips are in the plan, `budget.json` and the fit's
/// report; the fit shows each processor's repeatability.
#[test]
fn fit_rows_come_before_microbenchmarks_and_skipped_repeats_are_recorded() {
    let agent = or_skip!(PYTHON, fake_agent());
    let t = temp_dir("split");
    let out = t.path().join("ds");
    let events = planned_profile(&agent, &out, "60s", &[]);
    let plan_at = events.iter().position(|e| e["event"] == "plan").unwrap();
    let batch_at = events.iter().position(|e| e["event"] == "batch").unwrap();
    assert!(plan_at < batch_at, "the plan comes before the first batch");
    let plan = &events[plan_at];
    let stages: Vec<&str> = plan["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["stage"].as_str().unwrap())
        .collect();
    assert_eq!(
        stages,
        [
            "gemm",
            "repeat_pass",
            "microbench",
            "microbench_repeats",
            "more_gemm"
        ]
    );
    for p in plan["processors"].as_array().unwrap() {
        assert!(p["gemm_rows"].as_u64().unwrap() >= 36, "{p}");
        assert_eq!(p["repeat_rows"], 10, "{p}");
    }
    assert_eq!(plan["microbench_rounds"], 1, "{plan}");
    let skipped: Vec<&str> = plan["skipped_microbench"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(skipped.contains(&"mb/cpu:0/submit_empty@2"), "{skipped:?}");

    // The journal: per processor at least 36 GEMM rows and its 10 repeats
    // before the first microbenchmark, and no skipped repeat at all.
    let ids = journal_ids(&out);
    let first_mb = ids.iter().position(|id| id.starts_with("mb/")).unwrap();
    for p in ["cpu:0/", "fake-gpu/"] {
        let before = &ids[..first_mb];
        let rows = before
            .iter()
            .filter(|id| id.starts_with(p) && !id.ends_with("@repeat"))
            .count();
        let repeats = before
            .iter()
            .filter(|id| id.starts_with(p) && id.ends_with("@repeat"))
            .count();
        assert!(rows >= 36, "{p}: {rows} rows before the microbenchmarks");
        assert_eq!(repeats, 10, "{p}");
    }
    assert!(ids.iter().all(|id| !skipped.contains(&id.as_str())));
    let done = events.last().unwrap();
    assert_eq!(done["skipped_microbench"], skipped.len());
    let saved: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("budget.json")).unwrap()).unwrap();
    assert_eq!(saved["skipped_microbench"], plan["skipped_microbench"]);

    // The fit: repeatability beside the predictor, and the skipped repeats.
    let report = t.path().join("r.json");
    let text = fit(
        &out,
        &t.path().join("p.ron"),
        &["--report", report.to_str().unwrap()],
    );
    for p in ["cpu:0 f32", "fake-gpu f16"] {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(p) && l.contains("predictor"))
            .unwrap_or_else(|| panic!("no accuracy line for {p}: {text}"));
        assert!(
            line.contains("within ±10 %") && line.contains("repeatability 100 % (ceiling"),
            "{line}"
        );
    }
    assert!(
        text.contains(&format!(
            "the profile's budget skipped {} repeat(s)",
            skipped.len()
        )),
        "{text}"
    );
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    for e in r["entries"].as_array().unwrap() {
        assert_eq!(e["repeatability"]["pairs"], 10, "{e}");
        assert_eq!(e["repeatability"]["within_10pct"], 1.0, "{e}");
        // The repeats are not fitted: the samples are the first rows.
        assert!(e["samples"].as_u64().unwrap() >= 36);
    }
    assert_eq!(
        r["skipped_microbench"].as_array().unwrap().len(),
        skipped.len()
    );

    // Repeats that come back 30 % slower for odd M: the share is the
    // repeats within ±10 %, below 100 %.
    let noisy = t.path().join("noisy");
    planned_profile(&agent, &noisy, "60s", &[("FAKE_AGENT_REPEAT_SCALE", "1.3")]);
    let _ = fit(
        &noisy,
        &t.path().join("q.ron"),
        &["--report", report.to_str().unwrap()],
    );
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let odd = |dir: &Path, p: &str| {
        journal_ids(dir)
            .iter()
            .filter(|id| id.starts_with(p) && id.ends_with("@repeat"))
            .filter(|id| {
                let m: u32 = id
                    .split('/')
                    .nth(1)
                    .unwrap()
                    .split('x')
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap();
                m % 2 == 1
            })
            .count()
    };
    for e in r["entries"].as_array().unwrap() {
        let p = format!("{}/", e["processor"].as_str().unwrap());
        let want = (10 - odd(&noisy, &p)) as f64 / 10.0;
        assert_eq!(e["repeatability"]["within_10pct"], want, "{e}");
    }
}

/// A budget too short for the fit rows is refused before the agent runs a
/// case, with the minimum; that minimum is accepted, and the text output
/// prints the plan first.
#[test]
fn a_budget_too_short_for_a_fit_is_refused_with_its_minimum() {
    let agent = or_skip!(PYTHON, fake_agent());
    let t = temp_dir("short");
    let out = t.path().join("ds");
    let log = t.path().join("agent.log");
    let args = |budget: &'static str, out: &Path| -> Vec<String> {
        [
            "profile",
            "--device",
            "local",
            "--agent",
            &agent,
            "--models",
            "datasets/models/qwen2.5-1.5b.json",
            "--no-refine",
            "--budget",
            budget,
            "--out",
            out.to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let a = args("5s", &out);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let e = expect_bad(
        &hetero_env(&a, &[("FAKE_AGENT_LOG", log.to_str().unwrap())]),
        "a 5 s budget",
    );
    let head = "--budget 5s is too short to profile cpu:0, fake-gpu for a fit: it needs at least ";
    let at = e.find(head).unwrap_or_else(|| panic!("{e}"));
    let minimum = e[at + head.len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    let secs = hetero_profiler::report::parse_duration(&minimum)
        .unwrap_or_else(|err| panic!("`{minimum}`: {err}"));
    assert!(secs > Duration::from_secs(5), "{minimum}");
    let commands = std::fs::read_to_string(&log).unwrap();
    assert!(!commands.contains("sweep"), "a case ran: {commands}");
    assert!(journal_ids(&out).is_empty());

    // The minimum is accepted; the plan is printed before the run.
    let min: &'static str = Box::leak(minimum.into_boxed_str());
    let ok_out = t.path().join("ok");
    let a = args(min, &ok_out);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let text = expect_ok(&hetero_env(&a, &[]), "the minimum budget");
    let first: Vec<&str> = text.lines().take(5).collect();
    assert!(
        first[0].starts_with(&format!("budget plan for {min} (at least {min} for a fit)")),
        "{text}"
    );
    assert!(first[1].contains("GEMM rows") && first[1].contains("repeats"));
    assert!(first[2].trim_start().starts_with("cpu:0"));
    assert!(first[3].trim_start().starts_with("fake-gpu"));
    assert!(first[4].contains("stages: gemm"), "{text}");
    assert!(text.contains("repeat(s) skipped for the budget"), "{text}");
}
