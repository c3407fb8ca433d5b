//! End-to-end tests of the `hetero-agent` binary (built with its default
//! backends, cpu and npu-sim).
#![cfg(all(feature = "cpu", feature = "sim"))]

use std::collections::BTreeMap;

use hetero_test_support::{Bin, bin, json_lines, of_type, skip, temp_dir, write};
use serde_json::Value;

/// The agent under test, run in `device-agent/`.
const AGENT: Bin = bin!("hetero-agent");

/// Compares `text` with `device-agent/tests/golden/NAME`;
/// `HETERO_BLESS=1` rewrites it.
fn golden(name: &str, text: &str) {
    hetero_test_support::golden(&AGENT.root().join("tests/golden").join(name), text);
}

/// Sorted keys, machine-dependent fields removed (see tests/golden/README.md).
fn normalise(v: &Value) -> Value {
    let real = v.get("timing").and_then(Value::as_str) == Some("real");
    let ty = v.get("type").and_then(Value::as_str).unwrap_or("");
    let drop_always = ["conditions", "rel_err"];
    let drop_real = [
        "median_us",
        "min_us",
        "p90_us",
        "cv",
        "mean_us",
        "host_median_us",
        "stats",
        "gbps",
    ];
    let drop_hello = ["arch", "os", "features"];
    let Value::Object(map) = v else {
        return v.clone();
    };
    let sorted: BTreeMap<String, Value> = map
        .iter()
        .filter(|(k, _)| {
            let k = k.as_str();
            let dropped = drop_always.contains(&k)
                || (real && drop_real.contains(&k))
                || (ty == "done" && k == "seconds")
                || (ty == "hello" && drop_hello.contains(&k));
            !dropped
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    serde_json::to_value(sorted).unwrap()
}

#[test]
fn golden_sweep_protocol() {
    let spec = AGENT.root().join("tests/golden/sweep-spec.json");
    let out = AGENT.ok(&[
        "--processors",
        "cpu:0,npu-sim",
        "sweep",
        "--spec",
        spec.to_str().unwrap(),
    ]);
    let mut text = String::new();
    for l in json_lines(&out) {
        text.push_str(&serde_json::to_string(&normalise(&l)).unwrap());
        text.push('\n');
    }
    golden("sweep.jsonl", &text);
}

#[test]
fn version_is_a_hello_line_with_the_protocol() {
    let out = AGENT.ok(&["version", "--json"]);
    let l = json_lines(&out);
    assert_eq!(l.len(), 1);
    assert_eq!(l[0]["type"], "hello");
    assert_eq!(l[0]["agent"], "hetero-agent");
    assert_eq!(l[0]["protocol"], hetero_agent::PROTOCOL_VERSION);
    assert_eq!(l[0]["version"], env!("CARGO_PKG_VERSION"));
    assert!(AGENT.ok(&["version"]).contains("protocol 1"));
}

#[test]
fn probe_lists_processors_and_unavailable_backends() {
    let out = AGENT.ok(&["probe", "--json"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    let procs = v["processors"].as_array().unwrap();
    let cpu = procs.iter().find(|p| p["id"] == "cpu:0").expect("cpu:0");
    for key in ["id", "kind", "api", "name", "capabilities", "simulated"] {
        assert!(cpu.get(key).is_some(), "no `{key}` in {cpu}");
    }
    assert_eq!(cpu["simulated"], false);
    let sim = procs
        .iter()
        .find(|p| p["id"] == "npu-sim")
        .expect("npu-sim");
    assert_eq!(sim["simulated"], true);
    assert_eq!(sim["capabilities"]["static_graphs"], true);
    assert_eq!(sim["capabilities"]["tile"], 32);
    for u in v["unavailable"].as_array().unwrap() {
        assert!(u["reason"].as_str().unwrap().len() > 5, "{u}");
    }
    // The filter.
    let v: Value =
        serde_json::from_str(&AGENT.ok(&["--processors", "npu-*", "probe", "--json"])).unwrap();
    let ids: Vec<&str> = v["processors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec!["npu-sim"]);
    assert!(AGENT.ok(&["probe"]).contains("cpu:0"));
}

#[test]
fn shorthand_sweep_rows_have_the_promised_fields() {
    let out = AGENT.ok(&[
        "sweep",
        "--processor",
        "cpu:0",
        "--shapes",
        "64x256x256,1x1024x1024",
        "--dtype",
        "f32",
        "--reps",
        "3",
        "--warmups",
        "1",
    ]);
    let l = json_lines(&out);
    assert_eq!(l.first().unwrap()["type"], "hello");
    assert_eq!(l.last().unwrap()["type"], "done");
    let rows = of_type(&l, "measurement");
    assert_eq!(rows.len(), 2);
    for r in rows {
        for key in ["processor", "m", "k", "n", "dtype", "median_us", "verified"] {
            assert!(r.get(key).is_some(), "no `{key}` in {r}");
        }
        assert_eq!(r["status"], "ok");
        assert_eq!(r["verified"], true);
        assert_eq!(r["timing"], "real");
        assert_eq!(r["repetitions"], 3);
        assert!(r["median_us"].as_f64().unwrap() > 0.0);
        assert!(r["rel_err"].as_f64().unwrap() <= r["tolerance"].as_f64().unwrap());
        assert!(r["conditions"]["timestamp_ms"].as_u64().unwrap() > 0);
    }
    assert_eq!(l.last().unwrap()["ok"], 2);
}

#[test]
fn shorthand_print_spec_round_trips_through_stdin() {
    let spec = AGENT.ok(&[
        "sweep",
        "--processor",
        "npu-sim",
        "--shapes",
        "33x64x31",
        "--dtype",
        "f16",
        "--order",
        "transposed",
        "--reps",
        "2",
        "--print-spec",
    ]);
    assert!(spec.contains("\"transposed\""), "{spec}");
    let out = AGENT.cmd().args(["sweep", "--spec", "-"]).stdin(spec).ok();
    let l = json_lines(&out);
    let rows = of_type(&l, "measurement");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["timing"], "simulated");
    assert_eq!(rows[0]["status"], "ok");
    assert_eq!(rows[0]["cv"], 0.0);
    assert!(rows[0]["prepare_us"].as_f64().unwrap() > 0.0);
}

#[test]
fn malformed_specs_exit_2_naming_the_field() {
    let dir = temp_dir("malformed");
    let cases = [
        (
            r#"{"schema_version": 1, "cases": [{"id": "a", "processor": "cpu:0",
  "shape": {"m": 0, "k": 1, "n": 1}, "dtype": "f32"}]}"#,
            "cases[0].shape.m",
        ),
        (
            r#"{"schema_version": 1, "cases": [{"id": "a", "processor": "cpu:0",
  "shape": {"m": 1, "k": 1, "n": 1}, "dtype": "f8"}]}"#,
            "cases[0].dtype",
        ),
        (
            r#"{"schema_version": 1, "run": {"warmups": 1, "repetitions": 0, "timeout_ms": 5}}"#,
            "run.repetitions",
        ),
        (
            r#"{"schema_version": 1, "cases": [{"id": "a", "processor": "gpu:7",
  "shape": {"m": 1, "k": 1, "n": 1}, "dtype": "f32"}]}"#,
            "cases[0].processor",
        ),
        (
            r#"{"schema_version": 1, "microbench": [{"id": "a", "processor": "cpu:0", "bench": "copy_h2d"}]}"#,
            "microbench[0].bytes",
        ),
        (r#"{"schema_version": 9}"#, "schema_version"),
    ];
    for (i, (text, field)) in cases.iter().enumerate() {
        let p = write(dir.path(), &format!("spec{i}.json"), text);
        let err = AGENT.bad_input(&["sweep", "--spec", p.to_str().unwrap()]);
        assert!(err.contains(&format!("`{field}`")), "{field}: {err}");
        assert!(
            err.contains(&format!("spec{i}.json"))
                || field.ends_with("processor")
                || field.ends_with("bytes"),
            "{err}"
        );
    }
    // Parse errors carry line:column.
    let err = AGENT.bad_input(&[
        "sweep",
        "--spec",
        dir.path().join("spec0.json").to_str().unwrap(),
    ]);
    assert!(err.contains("spec0.json:2:"), "{err}");
    // From stdin too.
    let err = AGENT
        .cmd()
        .args(["sweep", "--spec", "-"])
        .stdin("{\"schema_version\": 1, \"cases\": 3}")
        .bad_input();
    assert!(err.contains("<stdin>") && err.contains("`cases`"), "{err}");
    // Missing file, bad flags.
    AGENT.bad_input(&["sweep", "--spec", "/nonexistent/spec.json"]);
    let e = AGENT.bad_input(&["sweep", "--processor", "cpu:0", "--shapes", "1x0x3"]);
    assert!(e.contains("--shapes"), "{e}");
    let e = AGENT.bad_input(&["--cpu-groups", "0-99999", "probe"]);
    assert!(e.contains("--cpu-groups"), "{e}");
    let p = write(dir.path(), "sim.ron", "(rows: 0)");
    let e = AGENT.bad_input(&["--sim-params", p.to_str().unwrap(), "probe"]);
    assert!(e.contains("`rows`"), "{e}");
    AGENT.bad_input(&["sweep", "--processor", "cpu:9", "--shapes", "2x2x2"]);
}

#[test]
fn unsupported_timeout_and_resume() {
    let dir = temp_dir("timeout");
    let spec = write(
        dir.path(),
        "spec.json",
        r#"{"schema_version": 1,
  "run": {"warmups": 0, "repetitions": 1, "timeout_ms": 60000},
  "cases": [
    {"id": "bf16", "processor": "cpu:0", "shape": {"m": 2, "k": 2, "n": 2}, "dtype": "bf16"},
    {"id": "slow", "processor": "cpu:0", "shape": {"m": 1024, "k": 1024, "n": 1024}, "dtype": "f32",
     "run": {"warmups": 0, "repetitions": 1000, "timeout_ms": 1}},
    {"id": "after", "processor": "cpu:0", "shape": {"m": 3, "k": 5, "n": 7}, "dtype": "f32"}
  ]}"#,
    );
    let out = AGENT.ok(&["sweep", "--spec", spec.to_str().unwrap()]);
    let l = json_lines(&out);
    let rows = of_type(&l, "measurement");
    let status: Vec<&str> = rows.iter().map(|r| r["status"].as_str().unwrap()).collect();
    assert_eq!(status, vec!["unsupported", "timeout", "ok"], "{out}");
    assert!(rows[0].get("median_us").is_none());
    assert!(rows[1].get("median_us").is_none());
    assert!(rows[1]["message"].as_str().unwrap().contains("1 ms"));
    // Resume from a partial output: the first two lines only, the second cut.
    let partial: String = out.lines().take(2).collect::<Vec<_>>().join("\n") + "\n{\"type\":\"meas";
    let prev = write(dir.path(), "prev.jsonl", &partial);
    let out = AGENT.ok(&[
        "sweep",
        "--spec",
        spec.to_str().unwrap(),
        "--resume",
        prev.to_str().unwrap(),
    ]);
    let l = json_lines(&out);
    let ids: Vec<&str> = of_type(&l, "measurement")
        .iter()
        .map(|r| r["case_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec!["slow", "after"]);
    assert_eq!(l.last().unwrap()["skipped"], 1);
}

#[test]
fn microbench_emits_rows_for_each_benchmark() {
    let out = AGENT.ok(&[
        "--processors",
        "cpu:0,npu-sim",
        "microbench",
        "--max-copy-bytes",
        "65536",
        "--stream-bytes",
        "1048576",
        "--reps",
        "3",
        "--warmups",
        "1",
    ]);
    let l = json_lines(&out);
    let rows = of_type(&l, "microbench");
    let find = |p: &str, b: &str| -> Vec<&Value> {
        rows.iter()
            .copied()
            .filter(|r| r["processor"] == p && r["bench"] == b)
            .collect()
    };
    let copies = find("cpu:0", "copy_h2d");
    assert_eq!(copies.len(), 3, "4 KiB, 16 KiB, 64 KiB");
    for c in &copies {
        assert_eq!(c["status"], "ok");
        assert!(c["gbps"].as_f64().unwrap() > 0.0);
        assert!(c["note"].as_str().unwrap().contains("memcpy"));
    }
    for b in [
        "submit_empty",
        "submit_busy",
        "sync_block",
        "sync_poll",
        "bandwidth_alone",
    ] {
        let r = find("cpu:0", b);
        assert_eq!(r.len(), 1, "{b}");
        assert_eq!(r[0]["status"], "ok", "{b}: {}", r[0]);
        // Short benchmarks take more samples than the repetitions (up to 64
        // or 20 ms of them); the bandwidth GEMV takes the repetitions.
        let count = r[0]["stats"]["count"].as_u64().unwrap();
        if b == "bandwidth_alone" {
            assert_eq!(count, 3, "{b}");
        } else {
            assert!(count >= 3, "{b}: {count}");
        }
    }
    // One CPU group (when this machine has one): concurrent is unsupported with a reason.
    for r in find("cpu:0", "bandwidth_concurrent") {
        if r["peer"] == "cpu:0" {
            assert_eq!(r["status"], "unsupported");
            assert!(r["message"].as_str().unwrap().contains("--cpu-groups"));
        } else {
            assert_eq!(r["status"], "ok", "{r}");
        }
    }
    let prep = find("npu-sim", "graph_prepare");
    assert_eq!(prep.len(), 3);
    assert!(
        prep.iter()
            .all(|r| r["status"] == "ok" && r["timing"] == "simulated")
    );
    let t: Vec<f64> = prep
        .iter()
        .map(|r| r["stats"]["median_us"].as_f64().unwrap())
        .collect();
    assert!(
        t[0] < t[1] && t[1] < t[2],
        "prepare grows with the graph: {t:?}"
    );
    // The default suite gives the simulator only what it models.
    assert!(find("npu-sim", "sync_poll").is_empty());
    let stream = find("npu-sim", "bandwidth_alone");
    assert_eq!(stream[0]["timing"], "simulated");
}

#[test]
fn two_cpu_groups_stream_concurrently() {
    let cores = hetero_agent::cpu::topology::allowed_cores();
    if cores.len() < 2 {
        skip!("one core, cannot split into two groups");
    }
    let fmt = hetero_agent::cpu::topology::format_list;
    let half = cores.len() / 2;
    let groups = format!("{};{}", fmt(&cores[..half]), fmt(&cores[half..]));
    let out = AGENT.ok(&[
        "--cpu-groups",
        &groups,
        "--processors",
        "cpu:*",
        "microbench",
        "--bench",
        "bandwidth_alone,bandwidth_concurrent",
        "--stream-bytes",
        "4194304",
        "--reps",
        "3",
        "--warmups",
        "1",
    ]);
    let l = json_lines(&out);
    let rows = of_type(&l, "microbench");
    assert_eq!(rows.len(), 4, "{out}");
    for r in &rows {
        assert_eq!(r["status"], "ok", "{r}");
        assert!(r["gbps"].as_f64().unwrap() > 0.0);
    }
    let conc: Vec<_> = rows
        .iter()
        .filter(|r| r["bench"] == "bandwidth_concurrent")
        .collect();
    assert_eq!(conc[0]["peer"], "cpu:1");
    assert!(
        conc[0]["note"]
            .as_str()
            .unwrap()
            .contains("peer `cpu:1` streamed")
    );
}

/// A processor whose times are host-clock times has no host path apart
/// from its kernel: `op_overhead` is refused with the reason. `op_alone`,
/// no longer measured, is refused saying so.
#[test]
fn op_overhead_is_unsupported_without_a_device_timer() {
    let out = AGENT.ok(&[
        "--processors",
        "cpu:0",
        "microbench",
        "--bench",
        "op_alone,op_overhead",
        "--reps",
        "3",
        "--warmups",
        "1",
    ]);
    let l = json_lines(&out);
    let rows = of_type(&l, "microbench");
    assert_eq!(rows.len(), 2, "{rows:?}");
    for (r, why) in rows.iter().zip(["no longer measured", "device timer"]) {
        assert_eq!(r["status"], "unsupported", "{r}");
        assert!(r["message"].as_str().unwrap().contains(why), "{r}");
    }
}
