//! End-to-end tests of `hetero solve`, `hetero plan show` and `hetero plan
//! explain`, on the hand-written synthetic predictors in
//! `tests/fixtures/predictors/` (simulated processors, not measurements).

mod common;

use std::path::Path;

use common::*;
use hetero_plan::{Format, Phase, Plan, Predictor, Strategy, StrategyKind};

const SOC: &str = "tests/fixtures/predictors/soc-npu-gpu.ron";
const DISCRETE: &str = "tests/fixtures/predictors/discrete-cpu-gpu.ron";
const LLAMA: &str = "datasets/models/llama-3.1-8b.json";

fn solve(t: &TempDir, name: &str, extra: &[&str]) -> (String, Plan) {
    let out = t.path().join(name);
    let mut args = vec![
        "solve",
        "--predictor",
        SOC,
        "--model",
        LLAMA,
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let stdout = HETERO.ok(&args);
    let plan: Plan = hetero_plan::load(&out).unwrap_or_else(|e| panic!("{e}"));
    (stdout, plan)
}

fn assert_empty(dir: &Path) {
    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "files were written: {left:?}");
}

#[test]
fn every_subcommand_help_has_an_example() {
    for args in [
        &["solve", "--help"][..],
        &["plan", "--help"][..],
        &["plan", "show", "--help"][..],
        &["plan", "explain", "--help"][..],
    ] {
        let h = HETERO.ok(args);
        assert!(
            h.contains("Example"),
            "{args:?} --help has no example:\n{h}"
        );
    }
    let top = HETERO.ok(&["--help"]);
    assert!(top.contains("solve") && top.contains("plan"), "{top}");
}

#[test]
fn solve_writes_a_plan_with_fingerprints_graphs_and_decisions() {
    let t = temp_dir("solve");
    let (stdout, plan) = solve(
        &t,
        "plan.ron",
        &["--lengths", "1..512", "--decode-lengths", "1..2"],
    );
    assert!(
        stdout.contains("wrote") && stdout.contains("graphs on npu-sim"),
        "{stdout}"
    );
    assert!(stdout.contains("simulated processor"), "{stdout}");
    // Fingerprints of the files given.
    let pred: Predictor = hetero_plan::load(&root().join(SOC)).unwrap();
    assert!(plan.predictor.matches(&pred.fingerprint("x")));
    assert_eq!(plan.predictor.name, "soc-npu-gpu.ron");
    let model = hetero_plan::hf::load_config(&root().join(LLAMA)).unwrap();
    assert!(plan.model.matches(&model.fingerprint()));
    // Every operator, both phases, every length.
    assert_eq!(plan.ops.len(), 2 * model.ops.len());
    for op in &plan.ops {
        let want = if op.phase == Phase::Prefill { 512 } else { 2 };
        assert_eq!(op.length_count(), want, "{} {}", op.op, op.phase);
    }
    let gs = plan.graph_set("npu-sim").expect("a graph set");
    assert!(!gs.sizes.is_empty() && gs.decode_sizes == vec![1, 2]);
    assert!(gs.prepare_us <= 30e6, "{}", gs.prepare_us);
    let info = plan.solver.as_ref().unwrap();
    assert_eq!(info.prompt_lengths, "uniform 1..=512");
    assert!(info.expected_prefill_us.unwrap() > 0.0);
    // The NPU is used, alone or split, somewhere.
    let kinds: Vec<StrategyKind> = plan
        .ops
        .iter()
        .flat_map(|o| o.ranges.iter().map(|r| r.strategy.kind()))
        .collect();
    assert!(kinds.contains(&StrategyKind::SeqCut) || kinds.contains(&StrategyKind::Hybrid));
    assert!(kinds.contains(&StrategyKind::RowCut));
    // One range per line, far fewer than the decisions they hold.
    let text = std::fs::read_to_string(t.path().join("plan.ron")).unwrap();
    let lines = text
        .lines()
        .filter(|l| l.trim_start().starts_with("(from:"))
        .count();
    let ranges: usize = plan.ops.iter().map(|o| o.ranges.len()).sum();
    assert_eq!(
        lines,
        ranges + plan.ops.len(),
        "a line per range and per span list"
    );
    assert!(ranges * 4 < 16 * 512 / 2 + 8 * 2, "{ranges} ranges");
}

#[test]
fn json_plans_and_their_checks() {
    let t = temp_dir("json");
    let (_, from_json) = solve(&t, "plan.json", &["--lengths", "1..64", "--json"]);
    let (_, from_ron) = solve(&t, "plan.ron", &["--lengths", "1..64"]);
    assert_eq!(from_json, from_ron);
    let text = std::fs::read_to_string(t.path().join("plan.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["schema_version"], hetero_plan::SCHEMA_VERSION);
    // --json with a .ron name is refused before anything is solved.
    let out = t.path().join("other.ron");
    let e = HETERO.bad_input(&[
        "solve",
        "--predictor",
        SOC,
        "--model",
        LLAMA,
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert!(e.contains(".json"), "{e}");
    assert!(!out.exists());
}

#[test]
fn plan_show_summarises_and_matches_its_golden() {
    let t = temp_dir("show");
    let out = t.path().join("plan.ron");
    solve(
        &t,
        "plan.ron",
        &[
            "--lengths",
            "1..300",
            "--npu-graphs",
            "128,256,512",
            "--ops",
            "attn_q,ffn_down,lm_head",
        ],
    );
    let show = HETERO.ok(&["plan", "show", out.to_str().unwrap()]);
    assert!(
        show.contains("graphs on npu-sim: prefill [128, 256, 512]"),
        "{show}"
    );
    assert!(
        show.contains("ffn_down") && show.contains("decode"),
        "{show}"
    );
    golden("plan-show-llama8b-soc.txt", &show);
    let json = HETERO.ok(&["plan", "show", out.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["ops"].as_array().unwrap().len(), 6);
    assert!(v["prefill_us_at"]["300"].as_f64().unwrap() > 0.0);
}

#[test]
fn explain_lists_every_candidate_with_the_predictor() {
    let t = temp_dir("explain");
    let out = t.path().join("plan.ron");
    solve(
        &t,
        "plan.ron",
        &[
            "--lengths",
            "1..1024",
            "--npu-graphs",
            "128,256,512,1024",
            "--phase",
            "prefill",
        ],
    );
    let p = out.to_str().unwrap();
    // From the plan alone: the stored decision and how to see more.
    let alone = HETERO.ok(&["plan", "explain", p, "--op", "ffn_down", "--len", "300"]);
    assert!(
        alone.contains("decision:") && alone.contains("runner-up:"),
        "{alone}"
    );
    assert!(alone.contains("--predictor"), "{alone}");
    // With the predictor and model: every family, the winner first.
    let full = HETERO.ok(&[
        "plan",
        "explain",
        p,
        "--op",
        "ffn_down",
        "--len",
        "300",
        "--predictor",
        SOC,
        "--model",
        LLAMA,
    ]);
    assert!(full.contains("candidates"), "{full}");
    assert!(full.contains("npu-sim padded to 512"), "{full}");
    assert!(!full.contains("warning"), "{full}");
    let json = HETERO.ok(&[
        "plan",
        "explain",
        p,
        "--op",
        "attn_q",
        "--len",
        "300",
        "--predictor",
        SOC,
        "--model",
        LLAMA,
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["resolved_matches_plan"], true);
    let cands = v["candidates"].as_array().unwrap();
    assert!(cands.len() >= 4, "{json}");
    let totals: Vec<f64> = cands
        .iter()
        .map(|c| c["total_us"].as_f64().unwrap())
        .collect();
    assert!(totals.windows(2).all(|w| w[0] <= w[1]), "{totals:?}");
    assert!(
        (v["decision"]["cost"]["total_us"].as_f64().unwrap() - totals[0]).abs() < 0.01,
        "{json}"
    );
}

#[test]
fn a_plan_is_refused_with_another_model_or_predictor() {
    let t = temp_dir("mismatch");
    let out = t.path().join("plan.ron");
    solve(
        &t,
        "plan.ron",
        &["--lengths", "1..64", "--phase", "prefill"],
    );
    let p = out.to_str().unwrap();
    let e = HETERO.bad_input(&[
        "plan",
        "explain",
        p,
        "--op",
        "attn_q",
        "--len",
        "8",
        "--predictor",
        SOC,
        "--model",
        "datasets/models/qwen2.5-1.5b.json",
    ]);
    assert!(e.contains("solved for model"), "{e}");
    // The same predictor with one constant changed is another predictor.
    let text = std::fs::read_to_string(root().join(SOC)).unwrap();
    let other = t.path().join("other.ron");
    std::fs::write(&other, text.replace("launch_us: 30.0", "launch_us: 31.0")).unwrap();
    let e = HETERO.bad_input(&[
        "plan",
        "explain",
        p,
        "--op",
        "attn_q",
        "--len",
        "8",
        "--predictor",
        other.to_str().unwrap(),
        "--model",
        LLAMA,
    ]);
    assert!(
        e.contains("solved for predictor") && e.contains("other.ron"),
        "{e}"
    );
    // A renamed copy of the same predictor is the same predictor.
    let copy = t.path().join("copy.ron");
    std::fs::write(&copy, &text).unwrap();
    HETERO.ok(&[
        "plan",
        "explain",
        p,
        "--op",
        "attn_q",
        "--len",
        "8",
        "--predictor",
        copy.to_str().unwrap(),
        "--model",
        LLAMA,
    ]);
}

#[test]
fn bad_input_exits_2_and_writes_nothing() {
    let t = temp_dir("bad");
    let out = t.path().join("plan.ron");
    let o = out.to_str().unwrap();
    let base = ["solve", "--predictor", SOC, "--model", LLAMA, "--out", o];
    let run = |extra: &[&str], want: &str| {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        let e = HETERO.bad_input(&args);
        assert!(e.contains(want), "{extra:?}: expected `{want}` in: {e}");
        assert_empty(t.path());
    };
    run(
        &["--ops", "ffn_sideways"],
        "unknown operator `ffn_sideways`",
    );
    run(&["--lengths", "10..5"], "no lengths");
    run(&["--lengths", "0..5"], "start at 1");
    run(&["--buckets", "32,x"], "--buckets");
    run(&["--prepare-budget", "1ms"], "too small for any graph");
    run(&["--graph-mem-budget", "1KiB"], "too small for any graph");
    run(&["--gpu-mem-budget", "8GiB"], "needs a discrete GPU");
    run(
        &["--offload-strategy", "gpu-stream"],
        "--offload-strategy gpu-stream needs --gpu-mem-budget",
    );
    run(&["--processors", "tpu:0"], "processor `tpu:0`");
    run(
        &["--dtype", "npu-sim=w4a16"],
        "no latency model for dtype w4a16",
    );
    run(&["--npu-graphs", "12,x"], "--npu-graphs");
    run(&["--prepare-budget", "soon"], "--prepare-budget");
    let hist = t.path().join("hist.csv");
    std::fs::write(&hist, "length,count\n100,3\n5000,1\n").unwrap();
    let e = HETERO.bad_input(&[&base[..], &["--prompt-lengths", hist.to_str().unwrap()]].concat());
    assert!(e.contains("beyond the longest solved length"), "{e}");
    std::fs::write(&hist, "length,count\n100,3\n-4,1\n").unwrap();
    let e = HETERO.bad_input(&[&base[..], &["--prompt-lengths", hist.to_str().unwrap()]].concat());
    assert!(e.contains("hist.csv:3"), "{e}");
    std::fs::remove_file(&hist).unwrap();
    // A static-graph size list on a device without an NPU.
    let e = HETERO.bad_input(&[
        "solve",
        "--predictor",
        DISCRETE,
        "--model",
        LLAMA,
        "--out",
        o,
        "--npu-graphs",
        "128",
    ]);
    assert!(e.contains("static-graph processor"), "{e}");
    // Missing and malformed inputs.
    let e = HETERO.bad_input(&[
        "solve",
        "--predictor",
        "/nonexistent/p.ron",
        "--model",
        LLAMA,
        "--out",
        o,
    ]);
    assert!(e.contains("/nonexistent/p.ron"), "{e}");
    let e = HETERO.bad_input(&[
        "solve",
        "--predictor",
        SOC,
        "--model",
        "/nonexistent/c.json",
        "--out",
        o,
    ]);
    assert!(e.contains("/nonexistent/c.json"), "{e}");
    assert_empty(t.path());
}

#[test]
fn explain_bad_input_exits_2() {
    let t = temp_dir("explain-bad");
    let out = t.path().join("plan.ron");
    solve(
        &t,
        "plan.ron",
        &["--lengths", "1..64", "--phase", "prefill"],
    );
    let p = out.to_str().unwrap();
    let e = HETERO.bad_input(&["plan", "explain", p, "--op", "ffn_sideways", "--len", "8"]);
    assert!(
        e.contains("unknown operator") && e.contains("ffn_down"),
        "{e}"
    );
    let e = HETERO.bad_input(&["plan", "explain", p, "--op", "ffn_down", "--len", "65"]);
    assert!(e.contains("1..=64"), "{e}");
    let e = HETERO.bad_input(&[
        "plan", "explain", p, "--op", "ffn_down", "--len", "1", "--phase", "decode",
    ]);
    assert!(e.contains("no decode table"), "{e}");
    let e = HETERO.bad_input(&[
        "plan",
        "explain",
        p,
        "--op",
        "ffn_down",
        "--len",
        "8",
        "--predictor",
        SOC,
    ]);
    assert!(e.contains("--model"), "{e}");
    let e = HETERO.bad_input(&["plan", "show", "/nonexistent/plan.ron"]);
    assert!(e.contains("/nonexistent/plan.ron"), "{e}");
}

#[test]
fn offload_mode_on_a_discrete_gpu_host() {
    let t = temp_dir("offload");
    let out = t.path().join("plan.ron");
    let stdout = HETERO.ok(&[
        "solve",
        "--predictor",
        DISCRETE,
        "--model",
        LLAMA,
        "--out",
        out.to_str().unwrap(),
        "--gpu-mem-budget",
        "4GiB",
        "--lengths",
        "1..256",
    ]);
    assert!(stdout.contains("offload:"), "{stdout}");
    let plan: Plan = hetero_plan::load(&out).unwrap();
    let o = plan.solver.as_ref().unwrap().offload.as_ref().unwrap();
    assert!(
        o.resident_bytes <= 4 << 30 && !o.resident.is_empty(),
        "{o:?}"
    );
    assert!(plan.ops.iter().any(|op| {
        op.ranges
            .iter()
            .any(|r| r.strategy.kind() == StrategyKind::Offload)
    }));
    let show = HETERO.ok(&["plan", "show", out.to_str().unwrap()]);
    assert!(
        show.contains("offload:") && show.contains("resident on cuda-sim"),
        "{show}"
    );
    let op = plan
        .ops
        .iter()
        .find(|o| o.phase == Phase::Decode && o.ranges[0].strategy.kind() == StrategyKind::Offload)
        .expect("an offloaded decode operator");
    let ex = HETERO.ok(&[
        "plan",
        "explain",
        out.to_str().unwrap(),
        "--op",
        &op.op,
        "--len",
        "1",
        "--phase",
        "decode",
        "--predictor",
        DISCRETE,
        "--model",
        LLAMA,
    ]);
    assert!(
        ex.contains("decision: offload") && ex.contains("cpu-sim alone"),
        "{ex}"
    );
}

/// The GPU alone streams the weights that are not resident, with no CPU
/// processor named; budgets offload mode cannot use exit 2 with the sizes.
#[test]
fn offload_strategies_from_the_command_line() {
    let t = temp_dir("offload-strategies");
    let out = t.path().join("plan.ron");
    let o = out.to_str().unwrap();
    let base = [
        "solve",
        "--predictor",
        DISCRETE,
        "--model",
        LLAMA,
        "--out",
        o,
        "--lengths",
        "1..64",
    ];
    fn with<'a>(base: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
        [base, extra].concat()
    }
    let stdout = HETERO.ok(&with(
        &base,
        &[
            "--processors",
            "cuda-sim",
            "--gpu-mem-budget",
            "4GiB",
            "--offload-strategy",
            "gpu-stream",
        ],
    ));
    assert!(stdout.contains("offload strategy gpu-stream"), "{stdout}");
    let plan: Plan = hetero_plan::load(&out).unwrap();
    assert_eq!(plan.processors, vec!["cuda-sim".to_string()]);
    for op in &plan.ops {
        for d in op.decisions() {
            match d.strategy {
                Strategy::Offload {
                    cc_rows, ref cpu, ..
                } => assert!(cc_rows == 0 && cpu.is_empty(), "{:?}", d.strategy),
                Strategy::Single { ref processor, .. } => assert_eq!(processor, "cuda-sim"),
                ref other => panic!("{other:?}"),
            }
        }
    }
    let ex = HETERO.ok(&[
        "plan", "explain", o, "--op", "ffn_down", "--len", "1", "--phase", "decode",
    ]);
    assert!(
        ex.contains("decision: offload — offload: ") && !ex.contains("rows on ,"),
        "{ex}"
    );
    // Layer split: two groups of layers per decoder operator, shown so.
    HETERO.ok(&with(
        &base,
        &[
            "--gpu-mem-budget",
            "4GiB",
            "--offload-strategy",
            "layer-split",
        ],
    ));
    let plan: Plan = hetero_plan::load(&out).unwrap();
    let groups = plan
        .ops
        .iter()
        .filter(|t| t.op == "ffn_up" && t.phase == Phase::Decode)
        .count();
    assert_eq!(groups, 2);
    let show = HETERO.ok(&["plan", "show", o]);
    assert!(show.contains("layers 0..9"), "{show}");
    assert!(show.contains("ffn_up L9..32"), "{show}");
    let ex = HETERO.ok(&[
        "plan", "explain", o, "--op", "ffn_up", "--len", "1", "--phase", "decode", "--layer", "20",
    ]);
    assert!(
        ex.contains("23 layers from layer 9") && ex.contains("cpu-sim alone"),
        "{ex}"
    );
    std::fs::remove_file(&out).unwrap();
    for (extra, want) in [
        (
            ["--gpu-mem-budget", "100MiB"],
            "--gpu-mem-budget 100.0 MiB is smaller than one layer's weights on `cuda-sim` (416.0 MiB",
        ),
        (
            ["--gpu-mem-budget", "17GiB"],
            "--gpu-mem-budget 17.00 GiB is larger than the memory of `cuda-sim` (16.00 GiB",
        ),
        (
            ["--offload-strategy", "ngl"],
            "--offload-strategy ngl: expected one of best, sliced, gpu-stream, layer-split, cpu",
        ),
    ] {
        let e = HETERO.bad_input(&with(&base, &extra));
        assert!(e.contains(want), "{extra:?}: expected `{want}` in: {e}");
        assert_empty(t.path());
    }
}

#[test]
fn prompt_length_histogram_drives_the_graph_set() {
    let t = temp_dir("hist");
    let hist = t.path().join("prompts.csv");
    // Every prompt is 300 tokens long.
    std::fs::write(&hist, "length,count\n300,10\n").unwrap();
    let (_, plan) = solve(
        &t,
        "plan.ron",
        &[
            "--lengths",
            "1..512",
            "--phase",
            "prefill",
            "--prompt-lengths",
            hist.to_str().unwrap(),
            "--ops",
            "attn_q,ffn_up",
        ],
    );
    let info = plan.solver.as_ref().unwrap();
    assert!(
        info.prompt_lengths.ends_with("prompts.csv"),
        "{}",
        info.prompt_lengths
    );
    let gs = plan.graph_set("npu-sim").unwrap();
    // Expected latency is the latency at 300, summed over operators and layers.
    let at300: f64 = plan
        .ops
        .iter()
        .map(|o| o.at(300).unwrap().cost.total_us * o.layers as f64)
        .sum();
    let e = info.expected_prefill_us.unwrap();
    assert!((e - at300).abs() < 0.01 * at300, "{e} vs {at300}");
    // A graph near 300 serves it (exactly, padded, or with a sequence cut).
    assert!(
        gs.sizes.iter().any(|&g| (256..=352).contains(&g)),
        "{:?}",
        gs.sizes
    );
}

/// `plan show` refuses a plan whose cost is not a number, negative or too
/// large for a float, in RON and JSON alike, naming the file, the field and
/// the line; a plan without operators and a file that is not UTF-8 are
/// refused with words that say so.
#[test]
fn plan_show_refuses_bad_costs_empty_plans_and_non_utf8() {
    let t = temp_dir("show-bad");
    let (_, plan) = solve(&t, "plan.ron", &["--lengths", "1..8", "--ops", "ffn_down"]);
    let cost = plan.ops[0].ranges[0].costs[0].cost.total_us;
    let field = "ops[0].ranges[0].costs[0].cost.total_us";
    for (name, from) in [
        ("bad.ron", format!("total_us: {cost:?})")),
        ("bad.json", format!("\"total_us\": {cost:?}}}")),
    ] {
        let path = t.path().join(name);
        let good = plan.to_text(Format::of_path(&path).unwrap()).unwrap();
        assert!(good.contains(&from), "{from}");
        let bads: &[&str] = if name.ends_with("ron") {
            &["NaN", "-405.4", "1e400"]
        } else {
            &["-405.4", "1e400"]
        };
        for bad in bads {
            let key = from.split(':').next().unwrap();
            let tail = if name.ends_with("ron") { ")" } else { "}" };
            let text = good.replacen(&from, &format!("{key}: {bad}{tail}"), 1);
            std::fs::write(&path, text).unwrap();
            let e = HETERO.bad_input(&["plan", "show", path.to_str().unwrap()]);
            // serde_json places the error just after the value.
            let line = good.lines().position(|l| l.contains(&from)).unwrap() + 1;
            let at = |l: usize| e.contains(&format!("{}:{l}:", path.display()));
            assert!(
                (at(line) || at(line + 1)) && e.contains(field),
                "{name} {bad}: {e}"
            );
            assert!(!e.contains("NaN s") && !e.contains("inf s"), "{e}");
        }
    }
    let mut empty = plan.clone();
    empty.ops.clear();
    let path = t.path().join("empty.ron");
    hetero_plan::save(&path, &empty).unwrap();
    let e = HETERO.bad_input(&["plan", "show", path.to_str().unwrap()]);
    assert!(
        e.contains("field `ops`: the plan has no operators") && !e.contains("it covers"),
        "{e}"
    );
    let path = t.path().join("latin1.ron");
    let mut bytes = plan.to_text(Format::Ron).unwrap().into_bytes();
    bytes.insert(10, 0xe9);
    std::fs::write(&path, bytes).unwrap();
    let e = HETERO.bad_input(&["plan", "show", path.to_str().unwrap()]);
    assert!(
        e.contains("not UTF-8") && e.contains("byte offset 10"),
        "{e}"
    );
}

/// A plan whose ranges overlap, leave a gap or give a part a remainder
/// that is not positive is refused with exit 2, naming the file and the
/// range.
#[test]
fn plan_show_refuses_malformed_ranges_naming_the_range() {
    let t = temp_dir("show-ranges");
    let (_, plan) = solve(
        &t,
        "plan.ron",
        &["--lengths", "1..300", "--ops", "ffn_down"],
    );
    let op = &plan.ops[0];
    assert!(op.ranges.len() >= 2, "{:?}", op.ranges);
    let show = HETERO.ok(&["plan", "show", t.path().join("plan.ron").to_str().unwrap()]);
    assert!(show.contains(" ranges holding 301 decisions"), "{show}");
    // Overlap: the first range runs one length into the second.
    let mut overlap = plan.clone();
    let r = &mut overlap.ops[0].ranges[0];
    r.to += 1;
    r.costs.last_mut().unwrap().len += 1;
    // Gap: the first range stops one length short (its knots kept valid,
    // so that only the gap is wrong).
    let mut gap = plan.clone();
    let r = &mut gap.ops[0].ranges[0];
    assert!(r.from < r.to, "{r:?}");
    r.to -= 1;
    let d = plan.ops[0].at(r.to).unwrap();
    r.costs.retain(|k| k.len < d.len);
    r.costs.push(hetero_plan::CostKnot {
        len: d.len,
        cost: d.cost,
        runner_up: d.runner_up,
    });
    for (name, bad, want) in [
        ("overlap.ron", overlap, "also in ranges[0]"),
        ("gap.json", gap, "have no decision"),
    ] {
        let path = t.path().join(name);
        hetero_plan::save(&path, &bad).unwrap();
        let e = HETERO.bad_input(&["plan", "show", path.to_str().unwrap()]);
        assert!(
            e.contains(&path.display().to_string()) && e.contains("ops[0].ranges[1]"),
            "{name}: {e}"
        );
        assert!(e.contains(want), "{name}: {e}");
    }
}

/// `plan explain --op attention`: where each range of layers runs it, its
/// cost there and on the GPU that holds the activation, and the pass it
/// belongs to, from the plan alone.
#[test]
fn explain_shows_the_non_gemm_operators_placement_and_costs() {
    let t = temp_dir("explain-non-gemm");
    let out = t.path().join("plan.ron");
    let p = out.to_str().unwrap();
    HETERO.ok(&[
        "solve",
        "--predictor",
        DISCRETE,
        "--model",
        LLAMA,
        "--out",
        p,
        "--lengths",
        "1..512",
    ]);
    let plan: Plan = hetero_plan::load(&out).unwrap();
    let text = HETERO.ok(&["plan", "explain", p, "--op", "attention", "--len", "300"]);
    for want in [
        "attention (prefill) at a 300-token prompt:",
        "layers 0-31: host (the host CPU",
        "alternative cuda-sim (the runtime cannot run non-GEMM operators there)",
        "time to first token at this length: GEMMs",
        "ffn_down",
        "activation",
    ] {
        assert!(text.contains(want), "{want}: {text}");
    }
    let json = |len: &str| -> serde_json::Value {
        let args = [
            "plan",
            "explain",
            p,
            "--op",
            "attention",
            "--phase",
            "decode",
        ];
        let out = HETERO.ok(&[&args[..], &["--len", len, "--json"]].concat());
        serde_json::from_str(&out).unwrap()
    };
    let (near, far) = (json("100"), json("4000"));
    let cost = |v: &serde_json::Value| v["placements"][0]["cost"]["compute_us"].as_f64().unwrap();
    assert!(cost(&far) > cost(&near), "{near} {far}");
    assert_eq!(near["placements"][0]["at"], "host");
    assert_eq!(near["placements"][0]["alternative"]["executable"], false);
    let alt = &near["placements"][0]["alternative"]["cost"];
    let sum: f64 = ["compute_us", "sync_us", "copy_us"]
        .iter()
        .map(|k| alt[k].as_f64().unwrap())
        .sum();
    assert!(
        (alt["total_us"].as_f64().unwrap() - sum).abs() < 1e-9,
        "{alt}"
    );
    assert!(
        alt["copy_us"].as_f64().unwrap() > 0.0,
        "the GPU is behind PCIe: {alt}"
    );
    let step = plan.forecast_decode(4000).unwrap().total_us;
    assert_eq!(far["pass"]["total_us"].as_f64().unwrap(), step);
    // `plan show` gives the placement and the predicted passes.
    let show = HETERO.ok(&["plan", "show", p]);
    assert!(
        show.contains("non-GEMM operators in decode: layers 0-31 on host"),
        "{show}"
    );
    assert!(
        show.contains("time per decode step (every operator) at context 128:"),
        "{show}"
    );
    // A plan written before the placement existed is refused by name.
    let mut old = plan.clone();
    old.non_gemm = None;
    let old_path = t.path().join("old.ron");
    hetero_plan::save(&old_path, &old).unwrap();
    let e = HETERO.bad_input(&[
        "plan",
        "explain",
        old_path.to_str().unwrap(),
        "--op",
        "norm",
        "--len",
        "8",
    ]);
    assert!(e.contains("places no non-GEMM operators"), "{e}");
}
