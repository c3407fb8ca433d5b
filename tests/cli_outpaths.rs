//! End to end: no command writes over one of its own inputs or into a
//! dataset folder, and `hetero demo` replaces only a folder an earlier demo
//! wrote, and only once the new demo has succeeded.

mod common;
mod synthetic;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::*;
use synthetic::*;

const SOC: &str = "tests/fixtures/predictors/soc-npu-gpu.ron";
const LLAMA: &str = "datasets/models/llama-3.1-8b.json";

/// Every file under `dir` with its contents, by path.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                pending.push(p);
            } else {
                files.insert(
                    p.strip_prefix(dir).unwrap().to_path_buf(),
                    std::fs::read(&p).unwrap(),
                );
            }
        }
    }
    files
}

#[test]
fn solve_refuses_to_write_the_plan_over_its_predictor() {
    let t = TempDir::new("out-solve");
    let p = t.path().join("p.ron");
    std::fs::copy(root().join(SOC), &p).unwrap();
    let before = std::fs::read(&p).unwrap();
    let ps = p.to_str().unwrap();
    let e = bad_input(&["solve", "--predictor", ps, "--model", LLAMA, "--out", ps]);
    assert!(e.contains("--out") && e.contains("--predictor"), "{e}");
    assert!(e.contains(ps), "{e}");
    assert_eq!(std::fs::read(&p).unwrap(), before, "the predictor changed");
    #[cfg(unix)]
    {
        let link = t.path().join("link.ron");
        std::os::unix::fs::symlink(&p, &link).unwrap();
        let ls = link.to_str().unwrap();
        let e = bad_input(&["solve", "--predictor", ps, "--model", LLAMA, "--out", ls]);
        assert!(e.contains(ls) && e.contains(ps), "{e}");
        let hard = t.path().join("hard.ron");
        std::fs::hard_link(&p, &hard).unwrap();
        let hs = hard.to_str().unwrap();
        let e = bad_input(&["solve", "--predictor", hs, "--model", LLAMA, "--out", ps]);
        assert!(e.contains(hs) && e.contains(ps), "{e}");
        assert_eq!(std::fs::read(&p).unwrap(), before, "the predictor changed");
    }
    // The model is an input too; another file is fine.
    let model = t.path().join("config.json");
    std::fs::copy(root().join(LLAMA), &model).unwrap();
    let ms = model.to_str().unwrap();
    let e = bad_input(&["solve", "--predictor", ps, "--model", ms, "--out", ms]);
    assert!(e.contains("--model"), "{e}");
    let plan = t.path().join("plan.ron");
    ok(&[
        "solve",
        "--predictor",
        ps,
        "--model",
        ms,
        "--out",
        plan.to_str().unwrap(),
        "--lengths",
        "1..64",
    ]);
}

#[test]
fn fit_refuses_to_write_into_the_dataset() {
    let t = TempDir::new("out-fit");
    let ds = t.path().join("ds");
    write_dataset(&ds, &staged_rows());
    let before = snapshot(&ds);
    let d = ds.to_str().unwrap();
    for out in ["device.json", "predictor.ron"] {
        let out = ds.join(out);
        let e = bad_input(&["fit", d, "--out", out.to_str().unwrap()]);
        assert!(e.contains("dataset folder") && e.contains(d), "{e}");
    }
    // The report too, and the two outputs may not be one file.
    let p = t.path().join("p.ron");
    let (ps, report) = (p.to_str().unwrap(), ds.join("r.json"));
    let e = bad_input(&["fit", d, "--out", ps, "--report", report.to_str().unwrap()]);
    assert!(e.contains("--report"), "{e}");
    let e = bad_input(&["fit", d, "--out", ps, "--report", ps]);
    assert!(e.contains("--out") && e.contains("--report"), "{e}");
    assert_eq!(snapshot(&ds), before, "the dataset changed");
    assert!(!p.exists());
    // The dataset still loads, and a predictor beside it is written.
    ok(&["dataset", "show", d]);
    ok(&["fit", d, "--out", ps]);
}

#[test]
fn chart_and_run_outputs_are_guarded_too() {
    let t = TempDir::new("out-chart");
    let ds = t.path().join("ds");
    write_dataset(&ds, &staged_rows());
    let before = snapshot(&ds);
    let d = ds.to_str().unwrap();
    let charts = ds.join("charts");
    let e = bad_input(&["chart", d, "--out", charts.to_str().unwrap()]);
    assert!(e.contains("dataset folder"), "{e}");
    let e = bad_input(&[
        "dataset",
        "export",
        d,
        "--csv",
        "--out",
        charts.to_str().unwrap(),
    ]);
    assert!(e.contains("dataset folder"), "{e}");
    let merged = ds.join("merged");
    let e = bad_input(&["dataset", "merge", "--out", merged.to_str().unwrap(), d, d]);
    assert!(e.contains("dataset folder"), "{e}");
    assert_eq!(snapshot(&ds), before, "the dataset changed");
    // A run report over the plan it runs.
    let plan = t.path().join("plan.ron");
    let pl = plan.to_str().unwrap();
    ok(&[
        "solve",
        "--predictor",
        SOC,
        "--model",
        LLAMA,
        "--out",
        pl,
        "--lengths",
        "1..8",
    ]);
    let e = bad_input(&[
        "run", pl, "--model", LLAMA, "--phase", "prefill", "--len", "4", "--out", pl,
    ]);
    assert!(e.contains("PLAN") && e.contains(pl), "{e}");
}

/// `hetero demo --out OUT` with an agent that does not exist: it fails
/// right after preparing its folder, in well under a second.
fn failing_demo(out: &Path) -> std::process::Output {
    let missing = out.with_file_name("no-such-agent");
    hetero(&[
        "demo",
        "--out",
        out.to_str().unwrap(),
        "--agent",
        missing.to_str().unwrap(),
        "--model",
        "runtime-min/bench/bench-model.json",
    ])
}

#[test]
fn demo_refuses_a_folder_with_the_users_files_beside_a_demo_md() {
    let t = TempDir::new("out-demo-mine");
    let mine = t.path().join("mine");
    std::fs::create_dir_all(&mine).unwrap();
    std::fs::write(mine.join("DEMO.md"), "# my notes on the demo").unwrap();
    std::fs::write(mine.join("thesis.tex"), "keep me").unwrap();
    let before = snapshot(&mine);
    let o = failing_demo(&mine);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains(mine.to_str().unwrap()), "{e}");
    assert!(e.contains("demo-manifest.json"), "{e}");
    assert_eq!(snapshot(&mine), before, "the folder changed");
    assert!(!t.path().join("mine.partial").exists());
}

#[test]
fn demo_keeps_the_earlier_demo_when_the_new_one_fails() {
    let t = TempDir::new("out-demo-keep");
    let out = t.path().join("demo");
    let partial = t.path().join("demo.partial");
    // A demo that fails leaves what it wrote beside --out, named .partial,
    // with a manifest.
    let o = failing_demo(&out);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains(partial.to_str().unwrap()), "{e}");
    assert!(!out.exists(), "{e}");
    assert!(partial.join("demo-manifest.json").is_file(), "{e}");
    // That folder, moved to --out, is a demo's folder; a plan in it stands
    // for an earlier demo's results.
    std::fs::write(partial.join("plan.ron"), "an earlier demo's plan").unwrap();
    std::fs::rename(&partial, &out).unwrap();
    // Not listed in the manifest: refused. Listed: kept while the next fails.
    let e = stderr(&failing_demo(&out));
    assert!(e.contains("plan.ron") && e.contains("not write"), "{e}");
    std::fs::remove_file(out.join("plan.ron")).unwrap();
    let before = snapshot(&out);
    assert!(before.contains_key(Path::new("demo-manifest.json")));
    let o = failing_demo(&out);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("is as it was"), "{}", stderr(&o));
    assert_eq!(snapshot(&out), before, "the earlier demo changed");
    assert!(partial.join("demo-manifest.json").is_file());
    // A third failure replaces the second's .partial folder.
    let o = failing_demo(&out);
    assert!(!o.status.success());
    assert_eq!(snapshot(&out), before, "the earlier demo changed");
    // A model inside the folder the demo would replace is refused.
    let model = out.join("config.json");
    let e = bad_input(&[
        "demo",
        "--out",
        out.to_str().unwrap(),
        "--model",
        model.to_str().unwrap(),
    ]);
    assert!(e.contains("--model") && e.contains("inside"), "{e}");
    assert_eq!(snapshot(&out), before, "the earlier demo changed");
}
