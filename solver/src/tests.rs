//! Solver tests on simulated, paper-like processors (see [`crate::synthetic`]).

use std::path::Path;

use hetero_plan::{
    Fingerprint, ModelSpec, OperandOrder, Phase, Plan, Strategy, StrategyKind, Validate, hf,
};

use crate::synthetic::{self, SynthModel, Synthetic};
use crate::{Error, GraphChoice, Settings, explain, solve};

fn model(name: &str) -> ModelSpec {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let p = [
        root.join("datasets/models").join(name),
        root.join("tests/fixtures/configs").join(name),
    ]
    .into_iter()
    .find(|p| p.exists())
    .unwrap_or_else(|| panic!("no config {name}"));
    hf::load_config(&p).unwrap()
}

fn llama8b() -> ModelSpec {
    model("llama-3.1-8b.json")
}

fn fp() -> Fingerprint {
    Fingerprint::of_bytes("synthetic", b"synthetic")
}

fn prefill(lens: std::ops::RangeInclusive<u32>, graphs: &[u32], ops: &[&str]) -> Settings {
    Settings {
        phases: vec![Phase::Prefill],
        prefill_lengths: lens.collect(),
        graphs: GraphChoice::Sizes(graphs.to_vec()),
        ops: ops.iter().map(|s| s.to_string()).collect(),
        ..Settings::default()
    }
}

fn decode(ops: &[&str]) -> Settings {
    Settings {
        phases: vec![Phase::Decode],
        decode_lengths: vec![1],
        graphs: GraphChoice::None,
        ops: ops.iter().map(|s| s.to_string()).collect(),
        ..Settings::default()
    }
}

fn at<'p>(plan: &'p Plan, op: &str, phase: Phase, len: u32) -> &'p hetero_plan::Decision {
    plan.op(op, phase).unwrap().at(len).unwrap()
}

fn rows_of(s: &Strategy, processor: &str) -> u32 {
    match s {
        Strategy::RowCut { parts } | Strategy::Hybrid { parts, .. } => parts
            .iter()
            .find(|p| p.processor == processor)
            .map_or(0, |p| p.rows),
        other => panic!("not a row split: {other:?}"),
    }
}

fn check_plan(plan: &Plan) {
    plan.validate()
        .unwrap_or_else(|e| panic!("invalid plan: {e:?}"));
    for op in &plan.ops {
        for d in &op.decisions {
            let c = &d.cost;
            let max = c.parts_us.iter().cloned().fold(0.0, f64::max);
            assert!(
                (c.total_us - (max + c.sync_us + c.copy_us)).abs() < 0.05,
                "{} {} {}: total {} != max {} + sync {} + copy {}",
                op.op,
                op.phase,
                d.len,
                c.total_us,
                max,
                c.sync_us,
                c.copy_us
            );
            if let Some(r) = &d.runner_up {
                assert!(
                    r.margin_us >= -0.01,
                    "runner-up cheaper than the winner: {d:?}"
                );
            }
        }
    }
}

#[test]
fn length_300_is_a_sequence_cut_256_on_the_npu_plus_44_on_the_gpu() {
    let dev = synthetic::paper_like_npu_gpu();
    let m = llama8b();
    let s = prefill(
        1..=1024,
        &[128, 256, 512, 1024],
        &["attn_q", "ffn_gate", "ffn_up"],
    );
    let plan = solve(&dev, fp(), &m, &s).unwrap();
    check_plan(&plan);
    for op in ["attn_q", "ffn_gate", "ffn_up"] {
        let d = at(&plan, op, Phase::Prefill, 300);
        match &d.strategy {
            Strategy::SeqCut { parts } => {
                assert_eq!(parts.len(), 2, "{op}: {parts:?}");
                assert_eq!(
                    (
                        parts[0].processor.as_str(),
                        parts[0].tokens,
                        &parts[0].graphs[..]
                    ),
                    ("npu", 256, &[256][..]),
                    "{op}"
                );
                assert_eq!((parts[1].processor.as_str(), parts[1].tokens), ("gpu", 44));
            }
            other => panic!("{op} at 300: expected a sequence cut, got {other:?}"),
        }
        // It beats padding to 512.
        let e = explain(&dev, &m, &plan, op, Phase::Prefill, 300).unwrap();
        let padded = e
            .candidates
            .iter()
            .find(|c| c.label == "npu padded to 512")
            .unwrap_or_else(|| panic!("{op}: no padding candidate in {:#?}", e.candidates));
        assert!(
            padded.total_us > d.cost.total_us * 1.05,
            "{op}: padding {} vs seq cut {}",
            padded.total_us,
            d.cost.total_us
        );
        assert_eq!(e.resolved.as_ref(), Some(d), "{op}: re-solve differs");
    }
}

#[test]
fn ffn_down_projection_is_row_cut() {
    let dev = synthetic::paper_like_npu_gpu();
    let s = prefill(1..=1024, &[128, 256, 512, 1024], &["ffn_down", "ffn_up"]);
    let plan = solve(&dev, fp(), &llama8b(), &s).unwrap();
    check_plan(&plan);
    for len in [256, 512, 1024] {
        let d = at(&plan, "ffn_down", Phase::Prefill, len);
        assert_eq!(d.strategy.kind(), StrategyKind::RowCut, "at {len}: {d:?}");
        let npu = rows_of(&d.strategy, "npu");
        assert!(npu % 256 == 0 && npu > 0 && npu < 4096, "npu rows {npu}");
        // The shape-sensitive NPU is only ~1.5x the GPU here: a real split.
        assert!((1024..=3584).contains(&npu), "npu rows {npu} at {len}");
    }
    // Between graph sizes the NPU never runs it alone: padding wastes more
    // than a hybrid's finer split saves, so sequence cuts and hybrids share
    // the lengths.
    for l in 256..=1024 {
        let d = at(&plan, "ffn_down", Phase::Prefill, l);
        assert!(
            d.strategy.processors().len() == 2,
            "ffn_down at {l} runs on one processor: {d:?}"
        );
    }
    // The up-projection (short K) suits the NPU: at most a sliver of its
    // rows goes to the GPU, against a real share of the down-projection's.
    let up = at(&plan, "ffn_up", Phase::Prefill, 1024);
    let up_share = match up.strategy.kind() {
        StrategyKind::RowCut => rows_of(&up.strategy, "npu") as f64 / 14336.0,
        _ => 1.0,
    };
    let down_share =
        rows_of(&at(&plan, "ffn_down", Phase::Prefill, 1024).strategy, "npu") as f64 / 4096.0;
    assert!(
        up_share > 0.85 && down_share < 0.8,
        "up {up_share}, down {down_share}"
    );
    // Row graphs used by decisions are listed for the runtime to prepare.
    let gs = plan.graph_set("npu").unwrap();
    assert!(
        gs.row_graph("ffn_down", Phase::Prefill, 512).is_some(),
        "{gs:?}"
    );
}

#[test]
fn decode_is_row_cut_by_bandwidth() {
    let dev = synthetic::paper_like_npu_gpu();
    let plan = solve(
        &dev,
        fp(),
        &llama8b(),
        &decode(&["attn_q", "ffn_up", "ffn_down"]),
    )
    .unwrap();
    check_plan(&plan);
    for op in ["attn_q", "ffn_up", "ffn_down"] {
        let o = plan.op(op, Phase::Decode).unwrap();
        let d = o.at(1).unwrap();
        assert_eq!(d.strategy.kind(), StrategyKind::RowCut, "{op}: {d:?}");
        // Both sides are memory-bound: shares follow bandwidth (40 vs 45 GB/s).
        let npu = rows_of(&d.strategy, "npu") as f64;
        let want = o.n as f64 * 40.0 / 85.0;
        assert!(
            (npu - want).abs() <= 256.0,
            "{op}: npu rows {npu}, want about {want}"
        );
        // Faster than the best processor alone, despite contention (0.7).
        let alone = o.n as f64 * o.k as f64 * 2.0 / 45e3;
        assert!(
            d.cost.total_us < alone * 0.9,
            "{op}: {} vs {alone}",
            d.cost.total_us
        );
    }
}

#[test]
fn decode_without_bandwidth_gain_stays_alone() {
    // If running together halves each side's bandwidth, splitting cannot pay.
    let mut dev = synthetic::paper_like_npu_gpu();
    dev.overheads_mut("npu").unwrap().concurrent_factor = Some(0.45);
    dev.overheads_mut("gpu").unwrap().concurrent_factor = Some(0.45);
    let plan = solve(&dev, fp(), &llama8b(), &decode(&["attn_q"])).unwrap();
    let d = at(&plan, "attn_q", Phase::Decode, 1);
    assert_eq!(d.strategy.kind(), StrategyKind::Single, "{d:?}");
}

#[test]
fn two_identical_processors_split_50_50() {
    let dev = synthetic::identical_gpus();
    let s = Settings {
        phases: vec![Phase::Prefill, Phase::Decode],
        prefill_lengths: vec![64, 1024, 2048],
        graphs: GraphChoice::None,
        ops: vec!["attn_q".into(), "ffn_up".into(), "ffn_down".into()],
        ..Settings::default()
    };
    let plan = solve(&dev, fp(), &llama8b(), &s).unwrap();
    check_plan(&plan);
    for op in &plan.ops {
        for d in &op.decisions {
            let (a, b) = (rows_of(&d.strategy, "gpu0"), rows_of(&d.strategy, "gpu1"));
            assert_eq!(a, b, "{} {} {}: {a} / {b}", op.op, op.phase, d.len);
            assert_eq!(a + b, op.n);
        }
    }
}

#[test]
fn three_identical_processors_split_in_thirds() {
    let dev = Synthetic::new(vec![
        synthetic::mobile_gpu("g0"),
        synthetic::mobile_gpu("g1"),
        synthetic::mobile_gpu("g2"),
    ]);
    let s = Settings {
        phases: vec![Phase::Prefill],
        prefill_lengths: vec![2048],
        graphs: GraphChoice::None,
        ops: vec!["ffn_up".into()],
        ..Settings::default()
    };
    let plan = solve(&dev, fp(), &llama8b(), &s).unwrap();
    check_plan(&plan);
    let d = at(&plan, "ffn_up", Phase::Prefill, 2048);
    assert_eq!(d.strategy.kind(), StrategyKind::ThreeWay, "{d:?}");
    for g in ["g0", "g1", "g2"] {
        let r = rows_of(&d.strategy, g) as f64;
        assert!((r - 14336.0 / 3.0).abs() <= 256.0, "{g}: {r}");
    }
}

#[test]
fn npu_runs_in_weight_stationary_order() {
    let dev = synthetic::paper_like_npu_gpu();
    let s = prefill(1..=1024, &[256, 1024], &["attn_q", "ffn_down"]);
    let plan = solve(&dev, fp(), &llama8b(), &s).unwrap();
    for op in &plan.ops {
        assert_eq!(op.order("npu"), OperandOrder::WtAt, "{}", op.op);
        assert_eq!(op.order("gpu"), OperandOrder::Aw, "{}", op.op);
    }
}

#[test]
fn chunked_prefill_when_only_one_graph_and_a_slow_partner() {
    let mut cpu = synthetic::mobile_gpu("cpu");
    cpu.1 = SynthModel::Roofline {
        peak_gflops: 20.0,
        bw_gbps: 10.0,
        launch_us: 5.0,
    };
    // An NPU that cannot prepare graphs online (no prepare cost measured).
    let mut npu = synthetic::mobile_npu("npu");
    npu.2.prepare = None;
    let dev = Synthetic::new(vec![npu, cpu]);
    let s = prefill(1000..=1000, &[128], &["attn_q"]);
    let plan = solve(&dev, fp(), &llama8b(), &s).unwrap();
    check_plan(&plan);
    match &at(&plan, "attn_q", Phase::Prefill, 1000).strategy {
        Strategy::Chunked {
            processor,
            chunk,
            chunks,
        } => assert_eq!((processor.as_str(), *chunk, *chunks), ("npu", 128, 8)),
        other => panic!("expected chunks, got {other:?}"),
    }
}

#[test]
fn multi_sequence_cut_when_the_gpu_is_much_slower() {
    // The paper's example: 600 = 512 + 32 on the NPU, 56 on the GPU.
    // With the default 40 GB/s every small graph is memory-bound and costs
    // as much as a large one; give this NPU the bandwidth to make a
    // 32-token graph cheap, as in the paper's illustration.
    let mut dev = synthetic::paper_like_npu_gpu();
    if let Some(SynthModel::Npu { min_m, bw_gbps, .. }) = dev.model_mut("npu") {
        *min_m = 32;
        *bw_gbps = 400.0;
    }
    let s = prefill(600..=600, &[32, 512], &["ffn_up"]);
    let plan = solve(&dev, fp(), &llama8b(), &s).unwrap();
    check_plan(&plan);
    let d = at(&plan, "ffn_up", Phase::Prefill, 600);
    match &d.strategy {
        Strategy::SeqCut { parts } => {
            assert_eq!(parts[0].graphs, vec![512, 32], "{d:?}");
            assert_eq!(parts[1].tokens, 56);
            assert_eq!(d.strategy.kind(), StrategyKind::MultiSeq);
        }
        other => panic!("expected a multi-sequence cut, got {other:?}"),
    }
}

#[test]
fn auto_graph_set_respects_the_budget_and_beats_powers_of_two() {
    let dev = synthetic::paper_like_npu_gpu();
    let m = llama8b();
    let ops = ["attn_q", "attn_k", "ffn_up", "ffn_down"];
    let mut s = prefill(1..=2048, &[], &ops);
    s.graphs = GraphChoice::Auto;
    s.prepare_budget_us = Some(20e6);
    let auto = solve(&dev, fp(), &m, &s).unwrap();
    check_plan(&auto);
    let gs = auto.graph_set("npu").unwrap();
    assert!(!gs.sizes.is_empty());
    assert!(
        gs.prepare_us <= 20e6,
        "prepare {} over budget",
        gs.prepare_us
    );
    let n = gs.sizes.len();
    // The same number of powers of two, largest first.
    let mut pow2: Vec<u32> = [2048, 1024, 512, 256, 128, 64, 32]
        .into_iter()
        .take(n)
        .collect();
    pow2.sort_unstable();
    s.graphs = GraphChoice::Sizes(pow2.clone());
    let fixed = solve(&dev, fp(), &m, &s).unwrap();
    let (ea, ef) = (
        auto.solver.as_ref().unwrap().expected_prefill_us.unwrap(),
        fixed.solver.as_ref().unwrap().expected_prefill_us.unwrap(),
    );
    assert!(
        ea <= ef * 1.001,
        "auto {:?}: {ea} µs vs powers of two {pow2:?}: {ef} µs",
        gs.sizes
    );
}

#[test]
fn budget_too_small_for_any_graph() {
    let dev = synthetic::paper_like_npu_gpu();
    let mut s = prefill(1..=512, &[], &["attn_q"]);
    s.graphs = GraphChoice::Auto;
    s.prepare_budget_us = Some(1000.0);
    match solve(&dev, fp(), &llama8b(), &s) {
        Err(Error::BudgetTooSmall { what, .. }) => assert_eq!(what, "prepare-time"),
        other => panic!("expected BudgetTooSmall, got {:?}", other.map(|_| ())),
    }
    s.prepare_budget_us = None;
    s.graph_mem_budget = Some(16);
    match solve(&dev, fp(), &llama8b(), &s) {
        Err(Error::BudgetTooSmall { what, .. }) => assert_eq!(what, "memory"),
        other => panic!("expected BudgetTooSmall, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn bad_requests_are_refused() {
    let dev = synthetic::paper_like_npu_gpu();
    let m = llama8b();
    let e = solve(&dev, fp(), &m, &prefill(1..=8, &[32], &["ffn_sideways"])).unwrap_err();
    assert!(matches!(e, Error::UnknownOp { .. }), "{e}");
    assert!(e.to_string().contains("ffn_down"), "{e}");
    let mut empty = prefill(1..=8, &[32], &[]);
    empty.prefill_lengths.clear();
    let e = solve(&dev, fp(), &m, &empty).unwrap_err();
    assert!(matches!(e, Error::EmptyLengths { .. }), "{e}");
    let gpus = synthetic::identical_gpus();
    let e = solve(&gpus, fp(), &m, &prefill(1..=8, &[32], &[])).unwrap_err();
    assert!(matches!(e, Error::MissingProcessor { .. }), "{e}");
    let mut s = decode(&[]);
    s.gpu_mem_budget = Some(1 << 30);
    let e = solve(&dev, fp(), &m, &s).unwrap_err();
    assert!(
        e.to_string().contains("a CPU processor"),
        "offload on a SoC: {e}"
    );
    let mut s = decode(&[]);
    s.dtypes = vec![(Some("gpu".into()), hetero_plan::DType::W4a16)];
    let e = solve(&dev, fp(), &m, &s).unwrap_err();
    assert!(matches!(e, Error::NoModel { .. }), "{e}");
}

#[test]
fn offload_keeps_the_best_weights_resident_within_the_budget() {
    let dev = synthetic::discrete_cpu_gpu();
    let m = llama8b();
    let budget: u64 = 4 << 30;
    let s = Settings {
        phases: vec![Phase::Prefill, Phase::Decode],
        prefill_lengths: vec![1, 16, 256, 2048],
        graphs: GraphChoice::None,
        gpu_mem_budget: Some(budget),
        ..Settings::default()
    };
    let plan = solve(&dev, fp(), &m, &s).unwrap();
    check_plan(&plan);
    let o = plan.solver.as_ref().unwrap().offload.as_ref().unwrap();
    assert!(
        o.resident_bytes <= budget,
        "{} > {budget}",
        o.resident_bytes
    );
    assert!(
        o.resident_bytes > budget / 2,
        "budget barely used: {}",
        o.resident_bytes
    );
    let mut offloaded = 0;
    for op in plan.ops.iter().filter(|o| o.phase == Phase::Decode) {
        let d = op.at(1).unwrap();
        if let Strategy::Offload {
            gg_rows, cc_rows, ..
        } = d.strategy
        {
            assert_eq!(gg_rows, o.rows(&op.op), "{}", op.op);
            // In decode the CPU reads its rows faster than PCIe streams them.
            assert!(cc_rows > 0, "{}: {:?}", op.op, d.strategy);
            offloaded += 1;
        }
    }
    assert!(offloaded > 0);
    // Long prompts stream the weights to the GPU rather than compute on the CPU.
    let d = at(&plan, "ffn_up", Phase::Prefill, 2048);
    let cpu_alone = d.runner_up.as_ref().map_or(f64::INFINITY, |r| r.total_us);
    match d.strategy {
        Strategy::Offload {
            cc_rows, cg_rows, ..
        } => {
            assert!(cg_rows > cc_rows, "{:?}", d.strategy);
            assert!(d.cost.total_us < cpu_alone);
        }
        ref other => panic!("expected offload at 2048, got {other:?}"),
    }
    // With room for every weight, the GPU runs everything alone.
    let s = Settings {
        gpu_mem_budget: Some(64 << 30),
        ..s
    };
    let plan = solve(&dev, fp(), &m, &s).unwrap();
    for op in &plan.ops {
        for d in &op.decisions {
            assert_eq!(
                d.strategy,
                Strategy::Single {
                    processor: "cuda".into(),
                    padded_to: None,
                    online_prepare: false
                },
                "{} {} {}",
                op.op,
                op.phase,
                d.len
            );
        }
    }
}

#[test]
fn token_assignment_improves_on_the_decode_slicing() {
    // ScheInfer keeps the decode slicing in the prompt phase and moves some
    // tokens of the CC rows to the GPU. With a slow PCIe link the CPU keeps
    // rows in decode; in prefill, assigning tokens beats that slicing
    // as it is, and per-length re-slicing does at least as well.
    let mut dev = synthetic::discrete_cpu_gpu();
    let link = hetero_plan::LinearCost {
        alpha_us: 7.0,
        beta_us_per_byte: 1.0 / 4e3,
    };
    let o = dev.overheads_mut("cuda").unwrap();
    o.copy_h2d = Some(link);
    o.copy_d2h = Some(link);
    let m = llama8b();
    let s = Settings {
        phases: vec![Phase::Prefill],
        prefill_lengths: (1..=512).collect(),
        graphs: GraphChoice::None,
        gpu_mem_budget: Some(1 << 30),
        ops: vec!["ffn_up".into()],
        ..Settings::default()
    };
    let plan = solve(&dev, fp(), &m, &s).unwrap();
    check_plan(&plan);
    let mut seen = 0;
    for len in [64, 128, 256, 512] {
        let e = explain(&dev, &m, &plan, "ffn_up", Phase::Prefill, len).unwrap();
        let assigned = e
            .candidates
            .iter()
            .find(|c| matches!(c.strategy, Strategy::Offload { gpu_tokens, .. } if gpu_tokens > 0));
        if let Some(a) = assigned {
            seen += 1;
            assert!(a.label.contains("decode slicing"), "{}", a.label);
            assert!(e.candidates[0].total_us <= a.total_us);
        }
    }
    assert!(
        seen > 0,
        "token assignment never improved on the decode slicing"
    );
}

#[test]
fn moe_and_lm_head_rows_follow_the_model() {
    let dev = synthetic::paper_like_npu_gpu();
    let m = model("qwen1.5-moe-a2.7b.json");
    let s = Settings {
        prefill_lengths: (1..=300).collect(),
        decode_lengths: vec![1, 2],
        graphs: GraphChoice::Sizes(vec![32, 128, 256]),
        ..Settings::default()
    };
    let plan = solve(&dev, fp(), &m, &s).unwrap();
    check_plan(&plan);
    let head = at(&plan, "lm_head", Phase::Prefill, 300);
    assert_eq!((head.m, head.instances), (Some(1), 1));
    let expert = plan
        .ops
        .iter()
        .find(|o| o.phase == Phase::Prefill && o.decisions.iter().any(|d| d.instances > 1))
        .expect("a routed expert op");
    let d = expert.at(300).unwrap();
    assert!(d.instances > 1 && d.m.is_some_and(|m| m < 300), "{d:?}");
}

#[test]
fn every_cell_re_solves_to_the_planned_decision() {
    let dev = synthetic::paper_like_npu_gpu();
    let m = llama8b();
    let mut s = prefill(1..=700, &[], &[]);
    s.graphs = GraphChoice::Auto;
    s.phases = vec![Phase::Prefill, Phase::Decode];
    s.decode_lengths = vec![1, 4];
    let plan = solve(&dev, fp(), &m, &s).unwrap();
    check_plan(&plan);
    for op in &plan.ops {
        for d in op.decisions.iter().step_by(37) {
            let e = explain(&dev, &m, &plan, &op.op, op.phase, d.len).unwrap();
            assert_eq!(
                e.resolved.as_ref(),
                Some(d),
                "{} {} {}",
                op.op,
                op.phase,
                d.len
            );
            assert!(e.candidates.len() >= 3);
            let best = e.candidates[0].total_us;
            assert!(e.candidates.iter().all(|c| c.total_us >= best));
        }
    }
    // And the plan survives a round trip through its file format.
    let text = hetero_plan::to_string(&plan, hetero_plan::Format::Ron).unwrap();
    let back: Plan =
        hetero_plan::load_str(Path::new("plan.ron"), &text, hetero_plan::Format::Ron).unwrap();
    assert_eq!(back, plan);
}

#[test]
fn solving_is_deterministic() {
    let dev = synthetic::paper_like_npu_gpu();
    let m = llama8b();
    let mut s = prefill(1..=400, &[], &[]);
    s.graphs = GraphChoice::Auto;
    let a = solve(&dev, fp(), &m, &s).unwrap();
    let b = solve(&dev, fp(), &m, &s).unwrap();
    assert_eq!(a, b);
}

#[test]
fn fingerprint_check_refuses_other_inputs() {
    let dev = synthetic::paper_like_npu_gpu();
    let m = llama8b();
    let plan = solve(&dev, fp(), &m, &decode(&["attn_q"])).unwrap();
    assert!(
        plan.check_inputs(Some(&fp()), Some(&m.fingerprint()))
            .is_ok()
    );
    let other = model("qwen2.5-1.5b.json");
    let e = plan
        .check_inputs(None, Some(&other.fingerprint()))
        .unwrap_err();
    assert_eq!(e.what, "model");
    // A renamed copy of the same config still matches.
    let renamed = ModelSpec {
        name: "copy".into(),
        ..m.clone()
    };
    assert!(
        plan.check_inputs(None, Some(&renamed.fingerprint()))
            .is_ok()
    );
}
