//! Solver tests on simulated, paper-like processors (see [`crate::synthetic`]).

use std::path::Path;

mod npu;
mod offload;

use hetero_plan::{
    Fingerprint, ModelSpec, OperandOrder, Phase, Plan, Strategy, StrategyKind, Validate, hf,
};

use crate::synthetic::{self, SynthModel, Synthetic};
use crate::{Error, GraphChoice, LatencyOracle, Settings, explain, explain_layer, solve};

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

/// The decision of `op` at `len` in the last group of its layers (in
/// offload mode the least resident; outside it, every layer).
fn at(plan: &Plan, op: &str, phase: Phase, len: u32) -> hetero_plan::Decision {
    plan.ops
        .iter()
        .filter(|o| o.op == op && o.phase == phase)
        .max_by_key(|o| o.first_layer)
        .unwrap()
        .at(len)
        .unwrap()
}

/// Rows times layers of `ffn_up`'s decode tables that are copied every
/// run (CG), and that the CPU computes (CC).
fn streamed(plan: &Plan) -> u64 {
    offload_rows(plan).0
}

fn on_cpu(plan: &Plan) -> u64 {
    offload_rows(plan).1
}

fn offload_rows(plan: &Plan) -> (u64, u64) {
    let mut out = (0, 0);
    for o in plan.ops.iter().filter(|o| o.phase == Phase::Decode) {
        if let Strategy::Offload {
            cg_rows, cc_rows, ..
        } = o.at(1).unwrap().strategy
        {
            out.0 += cg_rows as u64 * o.layers as u64;
            out.1 += cc_rows as u64 * o.layers as u64;
        }
    }
    out
}

/// A plan's predicted decode step at context 1, GEMMs only, µs: every
/// table's decision times its layers.
fn decode_step(plan: &Plan) -> f64 {
    plan.forecast_decode(1).unwrap().gemm_us
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

/// A copy line of `alpha_us` fixed cost at 10 GB/s.
fn line(alpha_us: f64) -> hetero_plan::LinearCost {
    hetero_plan::LinearCost {
        alpha_us,
        beta_us_per_byte: 1.0 / 10e3,
    }
}

fn check_plan(plan: &Plan) {
    plan.validate()
        .unwrap_or_else(|e| panic!("invalid plan: {e:?}"));
    for op in &plan.ops {
        // The knots hold the solve's costs as they were.
        for d in op.ranges.iter().flat_map(|r| &r.costs) {
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
            if let Some(b) = c.sync_block_us {
                assert!(b.is_finite() && b >= 0.0 && b != c.sync_us, "{c:?}");
            }
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
    // The paper's processors are compute-bound in this prefill; at 40 GB/s
    // this NPU streams weights at 256 rows, so it is given bandwidth enough
    // for both (no concurrent slow-down) to keep to the paper's example.
    let mut dev = synthetic::paper_like_npu_gpu();
    for p in ["npu", "gpu"] {
        dev.overheads_mut(p).unwrap().concurrent_factor = None;
    }
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
        assert!(
            e.resolved.as_ref().is_some_and(|r| d.agrees_with(r)),
            "{op}: re-solve differs"
        );
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
        for d in op.decisions() {
            let (a, b) = (rows_of(&d.strategy, "gpu0"), rows_of(&d.strategy, "gpu1"));
            assert_eq!(a, b, "{} {} {}: {a} / {b}", op.op, op.phase, d.len);
            assert_eq!(a + b, op.n);
        }
    }
}

#[test]
fn processors_on_the_host_cores_contend_in_prefill_too() {
    // Two identical processors whose bandwidth beside each other is 0.9
    // of their own.
    let mut dev = synthetic::identical_gpus();
    for id in ["gpu0", "gpu1"] {
        dev.overheads_mut(id).unwrap().concurrent_factor = Some(0.9);
    }
    let s = Settings {
        phases: vec![Phase::Prefill],
        prefill_lengths: vec![1024, 2048],
        graphs: GraphChoice::None,
        ops: vec!["ffn_up".into()],
        ..Settings::default()
    };
    // GPUs share bandwidth, which prefill does not run short of: it splits.
    let plan = solve(&dev, fp(), &llama8b(), &s).unwrap();
    for d in plan.ops[0].decisions() {
        assert_eq!(d.strategy.kind(), StrategyKind::RowCut, "{d:?}");
    }
    // Two cpu-backend core groups (cpu:0, cpu:1) own their cores: prefill
    // still splits.
    for id in ["gpu0", "gpu1"] {
        let p = dev.processor_mut(id).unwrap();
        p.kind = hetero_plan::ProcessorKind::Cpu;
        p.api = hetero_plan::ProcessorApi::Cpu;
    }
    let plan = solve(&dev, fp(), &llama8b(), &s).unwrap();
    for d in plan.ops[0].decisions() {
        assert_eq!(d.strategy.kind(), StrategyKind::RowCut, "{d:?}");
    }
    // A cpu backend beside an OpenCL CPU device (PoCL, on every core):
    // each half runs at half speed at best, so no split pays.
    dev.processor_mut("gpu1").unwrap().api = hetero_plan::ProcessorApi::Opencl;
    let plan = solve(&dev, fp(), &llama8b(), &s).unwrap();
    for d in plan.ops[0].decisions() {
        assert_eq!(d.strategy.kind(), StrategyKind::Single, "{d:?}");
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
        assert_eq!(op.order("npu"), OperandOrder::Transposed, "{}", op.op);
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
        e.to_string().contains("a discrete GPU"),
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
            assert_eq!(gg_rows, o.rows_at(&op.op, op.first_layer), "{}", op.op);
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
    // With room for every weight, no CG rows are streamed: the GPU runs an
    // operator alone, or beside the CPU on rows of its own (runtime-min
    // keeps activations in host memory, so a CPU part costs no activation
    // round trip and can end before the GPU's; in prefill some of the CPU
    // rows' tokens may go to the GPU, ScheInfer's token assignment).
    let s = Settings {
        gpu_mem_budget: Some(16 << 30),
        ..s
    };
    let plan = solve(&dev, fp(), &m, &s).unwrap();
    let mut alone = 0;
    for op in &plan.ops {
        for d in op.decisions() {
            match &d.strategy {
                Strategy::Single { processor, .. } => {
                    assert_eq!(processor, "cuda", "{} {} {}", op.op, op.phase, d.len);
                    alone += 1;
                }
                Strategy::Offload { cg_rows, .. } => assert!(
                    *cg_rows == 0,
                    "{} {} {}: {:?}",
                    op.op,
                    op.phase,
                    d.len,
                    d.strategy
                ),
                other => panic!("{} {} {}: {other:?}", op.op, op.phase, d.len),
            }
        }
    }
    // Long prompts are the GPU's alone.
    assert!(alone > 0);
    assert!(matches!(
        at(&plan, "ffn_up", Phase::Prefill, 2048).strategy,
        Strategy::Single { .. }
    ));
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
        let e = explain_layer(&dev, &m, &plan, "ffn_up", Phase::Prefill, 31, len).unwrap();
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
        .find(|o| o.phase == Phase::Prefill && o.ranges.iter().any(|r| r.instances > 1))
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
        for d in op.decisions().step_by(37) {
            let e = explain(&dev, &m, &plan, &op.op, op.phase, d.len).unwrap();
            assert!(
                e.resolved.as_ref().is_some_and(|r| d.agrees_with(r)),
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

#[test]
fn pruned_solve_matches_the_full_enumeration_with_four_processors() {
    // Pruning skips splits that can be neither winner nor runner-up; explain
    // enumerates everything. They must agree on winner and runner-up.
    let cpu = roofline_cpu(200.0, 30.0);
    let mut slow = synthetic::mobile_gpu("slow");
    slow.1 = SynthModel::Roofline {
        peak_gflops: 20.0,
        bw_gbps: 5.0,
        launch_us: 60.0,
    };
    let dev = Synthetic::new(vec![
        synthetic::mobile_npu("npu"),
        synthetic::mobile_gpu("gpu"),
        cpu,
        slow,
    ]);
    pruning_agrees_with_explain(&dev);
}

#[test]
fn pruned_solve_matches_the_full_enumeration_with_copies() {
    // As above, with two discrete processors that copy their activations
    // in and out (the copy floor of the pruning bound is then non-zero),
    // one of them fast enough that splits with it are close calls.
    let copy = hetero_plan::LinearCost {
        alpha_us: 7.0,
        beta_us_per_byte: 1.0 / 25e3,
    };
    let discrete = |id: &str, peak_gflops: f64, bw_gbps: f64| {
        let mut g = synthetic::mobile_gpu(id);
        g.0.capabilities.unified_memory = false;
        g.1 = SynthModel::Roofline {
            peak_gflops,
            bw_gbps,
            launch_us: 10.0,
        };
        g.2.copy_h2d = Some(copy);
        g.2.copy_d2h = Some(copy);
        g
    };
    let dev = Synthetic::new(vec![
        synthetic::mobile_npu("npu"),
        discrete("big", 20_000.0, 900.0),
        discrete("small", 3_000.0, 200.0),
        roofline_cpu(400.0, 40.0),
    ]);
    pruning_agrees_with_explain(&dev);
}

/// A simulated CPU `cpu` on unified memory with a roofline model.
fn roofline_cpu(
    peak_gflops: f64,
    bw_gbps: f64,
) -> (hetero_plan::Processor, SynthModel, hetero_plan::Overheads) {
    let mut cpu = synthetic::mobile_gpu("cpu");
    cpu.0.kind = hetero_plan::ProcessorKind::Cpu;
    cpu.1 = SynthModel::Roofline {
        peak_gflops,
        bw_gbps,
        launch_us: 5.0,
    };
    cpu
}

/// Solves prefill 1..600 and decode for two operators, and checks every
/// 23rd decision against `explain`, which enumerates without pruning.
fn pruning_agrees_with_explain(dev: &Synthetic) {
    let m = llama8b();
    let s = Settings {
        phases: vec![Phase::Prefill, Phase::Decode],
        prefill_lengths: (1..=600).collect(),
        decode_lengths: vec![1, 2],
        graphs: GraphChoice::Sizes(vec![64, 256, 512]),
        ops: vec!["attn_k".into(), "ffn_down".into()],
        ..Settings::default()
    };
    let plan = solve(dev, fp(), &m, &s).unwrap();
    check_plan(&plan);
    for op in &plan.ops {
        for d in op.decisions().step_by(23) {
            let e = explain(dev, &m, &plan, &op.op, op.phase, d.len).unwrap();
            assert!(
                e.resolved.as_ref().is_some_and(|r| d.agrees_with(r)),
                "{} {} {}",
                op.op,
                op.phase,
                d.len
            );
        }
    }
}

#[test]
fn offload_pairs_the_fastest_cpu_and_gpu() {
    let base = synthetic::discrete_cpu_gpu();
    let mut parts = vec![];
    for p in base.processors() {
        let model = match p.id.as_str() {
            "cpu" => SynthModel::Roofline {
                peak_gflops: 1500.0,
                bw_gbps: 80.0,
                launch_us: 5.0,
            },
            _ => SynthModel::Roofline {
                peak_gflops: 100_000.0,
                bw_gbps: 900.0,
                launch_us: 10.0,
            },
        };
        parts.push((p.clone(), model, base.overheads(&p.id)));
    }
    // A slower discrete GPU listed first.
    let mut weak = parts[1].clone();
    weak.0.id = "weak".into();
    weak.1 = SynthModel::Roofline {
        peak_gflops: 5_000.0,
        bw_gbps: 200.0,
        launch_us: 10.0,
    };
    weak.2.processor = "weak".into();
    parts.insert(0, weak);
    let dev = Synthetic::new(parts);
    let mut s = decode(&["attn_q"]);
    s.gpu_mem_budget = Some(1 << 30);
    let plan = solve(&dev, fp(), &llama8b(), &s).unwrap();
    let o = plan.solver.unwrap().offload.unwrap();
    assert_eq!((o.cpu.as_str(), o.gpu.as_str()), ("cpu", "cuda"));
}

/// A predictor's models evaluated as they are: no compiled form (the plain
/// path the compiled one must reproduce).
struct Plain {
    predictor: hetero_plan::Predictor,
    models: Vec<PlainModel>,
}

struct PlainModel(hetero_plan::ProcessorModel);

impl crate::GemmModel for PlainModel {
    fn predict_us(&self, shape: hetero_plan::GemmShape, order: OperandOrder) -> Option<f64> {
        self.0
            .model
            .predict_us(shape, self.0.dtype, self.0.model_order(order))
    }
}

impl LatencyOracle for Plain {
    fn processors(&self) -> &[hetero_plan::Processor] {
        &self.predictor.processors
    }
    fn gemm_model(
        &self,
        processor: &str,
        dtype: hetero_plan::DType,
    ) -> Option<&dyn crate::GemmModel> {
        self.models
            .iter()
            .find(|m| m.0.processor == processor && m.0.dtype == dtype)
            .map(|m| m as &dyn crate::GemmModel)
    }
    fn dtypes(&self, processor: &str) -> Vec<hetero_plan::DType> {
        LatencyOracle::dtypes(&self.predictor, processor)
    }
    fn overheads(&self, processor: &str) -> hetero_plan::Overheads {
        self.predictor.overheads(processor)
    }
}

/// A regression tree over log2 M, K, N and a few tile features whose leaves
/// hold ln(µs) of `like` at a shape inside their box: a stand-in for a
/// fitted tree model, so plans built on it are sensible and every kind of
/// split is walked.
fn tree_like(
    like: &hetero_plan::LatencyModel,
    dtype: hetero_plan::DType,
    seed: &mut u64,
    depth: u32,
) -> hetero_plan::Tree {
    use hetero_plan::predictor::{FEATURE_NAMES, features};
    use hetero_plan::{GemmShape, TreeNode};
    fn rnd(seed: &mut u64) -> f64 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (*seed >> 11) as f64 / (1u64 << 53) as f64
    }
    let feat = |name: &str| FEATURE_NAMES.iter().position(|n| *n == name).unwrap() as u16;
    let log2 = [feat("log2_m"), feat("log2_k"), feat("log2_n")];
    let extra = [feat("tiles_m_256"), feat("pad_waste_32"), feat("m_over_n")];
    #[allow(clippy::too_many_arguments)]
    fn build(
        nodes: &mut Vec<TreeNode>,
        like: &hetero_plan::LatencyModel,
        dtype: hetero_plan::DType,
        seed: &mut u64,
        depth: u32,
        lo: [f64; 3],
        hi: [f64; 3],
        log2: [u16; 3],
        extra: [u16; 3],
    ) -> u32 {
        let me = nodes.len() as u32;
        let centre = |i: usize| 2f64.powf((lo[i] + hi[i]) / 2.0).round().max(1.0) as u32;
        let s = GemmShape::new(centre(0), centre(1), centre(2)).unwrap();
        if depth == 0 {
            let t = like.predict_us(s, dtype, OperandOrder::Aw).unwrap();
            nodes.push(TreeNode::Leaf { value: t.ln() });
            return me;
        }
        nodes.push(TreeNode::Leaf { value: 0.0 });
        let (mut lhi, mut rlo) = (hi, lo);
        let (feature, threshold) = if rnd(seed) < 0.2 {
            // A split on another feature, at its value at the centre.
            let f = extra[(rnd(seed) * 3.0) as usize % 3];
            (f, features(s, dtype, OperandOrder::Aw)[f as usize])
        } else {
            let i = (rnd(seed) * 3.0) as usize % 3;
            let th = lo[i] + (hi[i] - lo[i]) * (0.3 + 0.4 * rnd(seed));
            lhi[i] = th;
            rlo[i] = th;
            (log2[i], th)
        };
        let left = build(nodes, like, dtype, seed, depth - 1, lo, lhi, log2, extra);
        let right = build(nodes, like, dtype, seed, depth - 1, rlo, hi, log2, extra);
        nodes[me as usize] = TreeNode::Split {
            feature,
            threshold,
            left,
            right,
        };
        me
    }
    let mut nodes = vec![];
    build(
        &mut nodes,
        like,
        dtype,
        seed,
        depth,
        [0.0; 3],
        [14.0, 15.0, 17.0],
        log2,
        extra,
    );
    hetero_plan::Tree { nodes }
}

/// A fixture predictor whose parametric models are replaced by tree models
/// of every kind (tree, forest, boosted, in turn per processor).
pub(crate) fn tree_predictor(fixture: &str) -> hetero_plan::Predictor {
    use hetero_plan::LatencyModel;
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/predictors")
        .join(fixture);
    let mut p: hetero_plan::Predictor = hetero_plan::load(&path).unwrap();
    let mut seed = 11;
    for (i, m) in p.models.iter_mut().enumerate() {
        let like = m.model.clone();
        let mut trees = |n: usize, depth: u32| -> Vec<hetero_plan::Tree> {
            (0..n)
                .map(|_| tree_like(&like, m.dtype, &mut seed, depth))
                .collect()
        };
        m.model = match i % 3 {
            0 => LatencyModel::Boosted {
                base: 0.0,
                rate: 1.0 / 24.0,
                trees: trees(24, 6),
            },
            1 => LatencyModel::Forest {
                trees: trees(12, 9),
            },
            _ => LatencyModel::Tree(trees(1, 12).remove(0)),
        };
    }
    p
}

#[test]
fn compiled_models_give_the_plan_of_the_plain_models() {
    let m = model("qwen2.5-1.5b.json");
    // (fixture, GPU memory budget for offload mode, whether it splits: on
    // the discrete host the GPU alone pays for copying the lm_head's 151 936
    // outputs back, as a split's GPU share does, so the lm_head is row-cut)
    for (fixture, budget, splits) in [
        ("soc-npu-gpu.ron", None, true),
        ("discrete-cpu-gpu.ron", None, true),
        ("discrete-cpu-gpu.ron", Some(1u64 << 29), true),
    ] {
        let fast = tree_predictor(fixture);
        let plain = Plain {
            models: fast.models.iter().cloned().map(PlainModel).collect(),
            predictor: fast.clone(),
        };
        let s = Settings {
            phases: vec![Phase::Prefill, Phase::Decode],
            prefill_lengths: (1..=700).collect(),
            decode_lengths: vec![1, 2, 4],
            graphs: GraphChoice::Auto,
            prepare_budget_us: Some(600e6),
            gpu_mem_budget: budget,
            ..Settings::default()
        };
        let a = solve(&plain, fp(), &m, &s).unwrap();
        let b = solve(&fast, fp(), &m, &s).unwrap();
        check_plan(&b);
        let split = b.ops.iter().any(|o| {
            o.ranges
                .iter()
                .any(|r| r.strategy.kind() != StrategyKind::Single)
        });
        assert_eq!(split, splits, "{fixture} (budget {budget:?}): splits");
        assert_eq!(a, b, "{fixture} (budget {budget:?})");
    }
}

#[test]
fn twin_operators_get_the_decisions_they_get_alone() {
    // attn_q and attn_o of llama-3.1-8b have the same K × N, as have
    // ffn_gate and ffn_up: the solver solves one of each pair and copies.
    let dev = synthetic::paper_like_npu_gpu();
    let m = llama8b();
    let mut s = prefill(1..=300, &[], &[]);
    s.graphs = GraphChoice::Auto;
    s.phases = vec![Phase::Prefill, Phase::Decode];
    let all = solve(&dev, fp(), &m, &s).unwrap();
    for op in ["attn_o", "ffn_up"] {
        let twin = &m.ops[m.ops.iter().position(|o| o.name == op).unwrap()];
        assert!(
            m.ops
                .iter()
                .any(|o| o.name != op && o.k == twin.k && o.n == twin.n),
            "{op} has no twin in the model"
        );
        // Alone, with the graph set the full solve chose.
        let mut alone_s = s.clone();
        alone_s.ops = vec![op.into()];
        alone_s.graphs = GraphChoice::Sizes(all.graph_sets[0].sizes.clone());
        let alone = solve(&dev, fp(), &m, &alone_s).unwrap();
        for phase in [Phase::Prefill, Phase::Decode] {
            assert_eq!(
                all.op(op, phase).unwrap(),
                alone.op(op, phase).unwrap(),
                "{op} {phase}"
            );
        }
    }
}

#[test]
fn a_discrete_processor_alone_pays_its_staging_and_host_overheads() {
    // runtime-min keeps activations in host memory between operators, as
    // f32: a discrete GPU running an operator alone copies its input in and
    // its output back (4 bytes a value, whatever it computes in), and where
    // its times are device-timer times one launch-to-completion round trip
    // comes on top.
    let m = llama8b();
    let mut s = prefill(16..=16, &[], &["ffn_up"]);
    s.graphs = GraphChoice::None;
    s.processors = vec!["cuda".into()];
    let (k, n) = (4096.0, 14336.0);
    let copy = 2.0 * 7.0 + (16.0 * k * 4.0 + 16.0 * n * 4.0) / 25e3;
    for (device_timer, overhead) in [
        (false, None),
        (true, None),
        (false, Some(7.5)),
        (true, Some(7.5)),
    ] {
        let mut dev = synthetic::discrete_cpu_gpu();
        let p = dev.processor_mut("cuda").unwrap();
        p.capabilities.device_timer = device_timer;
        p.simulated = false;
        // Submit and sync each time a whole round trip: the larger is paid
        // once, not their sum, unless the host's overhead around the device
        // time was measured as such (`op_overhead`).
        let ov = dev.overheads_mut("cuda").unwrap();
        ov.submit_empty_us = Some(12.0);
        ov.op_overhead_us = overhead;
        let plan = solve(&dev, fp(), &m, &s).unwrap();
        let d = at(&plan, "ffn_up", Phase::Prefill, 16);
        assert_eq!(d.strategy.kind(), StrategyKind::Single);
        assert!((d.cost.copy_us - copy).abs() < 0.01, "{:?}", d.cost);
        // op_overhead, else max(submit 12 µs, blocking sync 9 µs); nothing
        // for host-clock times.
        let host = match (device_timer, overhead) {
            (false, _) => 0.0,
            (true, Some(o)) => o,
            (true, None) => 12.0,
        };
        assert!((d.cost.sync_us - host).abs() < 0.01, "{:?}", d.cost);
        let sum = d.cost.parts_us[0] + d.cost.sync_us + d.cost.copy_us;
        assert!((d.cost.total_us - sum).abs() < 0.02, "{:?}", d.cost);
    }
}

#[test]
fn staged_costs_replace_the_dma_copies_in_the_planned_order() {
    let mut dev = synthetic::discrete_cpu_gpu();
    let mut s = prefill(128..=128, &[], &["attn_q"]);
    s.graphs = GraphChoice::None;
    s.processors = vec!["cuda".into()];
    let (m, k, n) = (128.0, 4096.0, 4096.0);
    // The staged costs replace the DMA copies: write_input, and
    // read_output in the order the plan runs.
    {
        let o = dev.overheads_mut("cuda").unwrap();
        o.stage_in = Some(line(15.0));
        o.stage_out = Some(line(16.0));
        o.stage_out_aw = Some(line(21.0));
    }
    let plan = solve(&dev, fp(), &llama8b(), &s).unwrap();
    let out = match plan.op("attn_q", Phase::Prefill).unwrap().order("cuda") {
        OperandOrder::Aw => line(21.0),
        OperandOrder::Transposed => line(16.0),
    };
    let want = line(15.0).at(m * k * 4.0) + out.at(m * n * 4.0);
    // Plans round costs to 0.01 µs; the orders differ by 5 µs.
    let got = at(&plan, "attn_q", Phase::Prefill, 128).cost.copy_us;
    assert!((got - want).abs() < 0.01, "{got} vs {want}");
}

#[test]
fn sizes_that_cross_inside_the_launch_take_their_own_staged_lines() {
    let mut dev = synthetic::discrete_cpu_gpu();
    {
        let o = dev.overheads_mut("cuda").unwrap();
        o.stage_in = Some(line(15.0));
        o.stage_out = Some(line(16.0));
        o.stage_out_aw = Some(line(16.0));
        o.stage_small = Some(hetero_plan::StageSmall {
            max_bytes: 64 << 10,
            stage_in: Some(line(1.0)),
            stage_out: Some(line(2.0)),
            stage_out_aw: Some(line(2.0)),
        });
    }
    let k = 4096.0;
    // Decode: 16 KiB in and out, both inside the launch. Prefill 128:
    // 2 MiB each way, both on the larger sizes' lines.
    for (phase, m, want) in [
        (
            Phase::Decode,
            1.0,
            line(1.0).at(k * 4.0) + line(2.0).at(k * 4.0),
        ),
        (
            Phase::Prefill,
            128.0,
            line(15.0).at(128.0 * k * 4.0) + line(16.0).at(128.0 * k * 4.0),
        ),
    ] {
        let mut s = match phase {
            Phase::Prefill => prefill(128..=128, &[], &["attn_q"]),
            Phase::Decode => decode(&["attn_q"]),
        };
        s.graphs = GraphChoice::None;
        s.processors = vec!["cuda".into()];
        let plan = solve(&dev, fp(), &llama8b(), &s).unwrap();
        let got = at(&plan, "attn_q", phase, m as u32).cost.copy_us;
        assert!((got - want).abs() < 0.01, "{phase:?}: {got} vs {want}");
    }
}

#[test]
fn a_unified_processor_pays_the_staged_copies_it_measured_and_no_dma() {
    // The synthetic cpu is on unified memory: with no staged line its
    // copies cost nothing, as before profiles measured them; with its
    // staged lines (runtime-min copies into the cpu backend's buffers) a
    // run alone pays them; a DMA line alone is never charged there.
    let k = 4096.0;
    let (bytes_in, bytes_out) = (128.0 * k * 4.0, 128.0 * k * 4.0);
    let copy_at = |dev: &Synthetic| {
        let mut s = prefill(128..=128, &[], &["attn_q"]);
        s.graphs = GraphChoice::None;
        s.processors = vec!["cpu".into()];
        let plan = solve(dev, fp(), &llama8b(), &s).unwrap();
        let d = at(&plan, "attn_q", Phase::Prefill, 128);
        (d.cost.copy_us, d.strategy.clone())
    };
    let mut dev = synthetic::discrete_cpu_gpu();
    dev.overheads_mut("cpu").unwrap().copy_h2d = Some(line(3.0));
    assert_eq!(copy_at(&dev).0, 0.0, "a DMA line alone on unified memory");
    {
        let o = dev.overheads_mut("cpu").unwrap();
        o.stage_in = Some(line(1.0));
        o.stage_out = Some(line(2.0));
        o.stage_out_aw = Some(line(2.0));
    }
    let (got, strategy) = copy_at(&dev);
    let want = line(1.0).at(bytes_in) + line(2.0).at(bytes_out);
    assert!((got - want).abs() < 0.01, "{got} vs {want} ({strategy:?})");
    // An output line alone: the input side costs nothing.
    {
        let o = dev.overheads_mut("cpu").unwrap();
        o.stage_in = None;
    }
    let got = copy_at(&dev).0;
    let want = line(2.0).at(bytes_out);
    assert!((got - want).abs() < 0.01, "{got} vs {want}");
}

#[test]
fn the_order_with_the_cheaper_read_back_wins_when_the_gemms_tie() {
    // The synthetic GPU's GEMM takes as long in either order, so only the
    // staged read-back tells the orders apart.
    for (aw, transposed, want) in [
        (21.0, 16.0, OperandOrder::Transposed),
        (16.0, 21.0, OperandOrder::Aw),
    ] {
        let mut dev = synthetic::discrete_cpu_gpu();
        {
            let o = dev.overheads_mut("cuda").unwrap();
            o.stage_in = Some(line(15.0));
            o.stage_out = Some(line(transposed));
            o.stage_out_aw = Some(line(aw));
        }
        for phase in [Phase::Prefill, Phase::Decode] {
            let mut s = match phase {
                Phase::Prefill => prefill(1..=256, &[], &["attn_q", "lm_head"]),
                Phase::Decode => decode(&["attn_q", "lm_head"]),
            };
            s.graphs = GraphChoice::None;
            s.processors = vec!["cuda".into()];
            let plan = solve(&dev, fp(), &llama8b(), &s).unwrap();
            for op in ["attn_q", "lm_head"] {
                let got = plan.op(op, phase).unwrap().order("cuda");
                assert_eq!(
                    got, want,
                    "{op} {phase:?}, read-back aw {aw} µs, transposed {transposed} µs"
                );
            }
        }
    }
}

/// A CPU whose `aw` GEMMs take 4× its `transposed` ones up to 32 rows, as long
/// at 128 and 0.91× from 512 (`ffn_down` on a 2-core x86-64 machine).
struct OrderTradeOff(Synthetic);

struct TradeOffModel;

impl crate::GemmModel for TradeOffModel {
    fn predict_us(&self, shape: hetero_plan::GemmShape, order: OperandOrder) -> Option<f64> {
        let m = shape.m.get();
        let factor = match (order, m) {
            (OperandOrder::Transposed, _) => 1.0,
            (OperandOrder::Aw, 0..=32) => 4.0,
            (OperandOrder::Aw, 33..=128) => 1.0,
            (OperandOrder::Aw, _) => 0.91,
        };
        Some(100.0 * m as f64 * factor)
    }
}

impl LatencyOracle for OrderTradeOff {
    fn processors(&self) -> &[hetero_plan::Processor] {
        self.0.processors()
    }
    fn gemm_model(
        &self,
        processor: &str,
        dtype: hetero_plan::DType,
    ) -> Option<&dyn crate::GemmModel> {
        match processor {
            "cpu" => Some(&TradeOffModel),
            _ => self.0.gemm_model(processor, dtype),
        }
    }
    fn dtypes(&self, processor: &str) -> Vec<hetero_plan::DType> {
        self.0.dtypes(processor)
    }
    fn overheads(&self, processor: &str) -> hetero_plan::Overheads {
        self.0.overheads(processor)
    }
}

#[test]
fn the_order_is_the_faster_at_most_lengths_not_in_summed_time() {
    // Over the representative 1, 32, 128, 512 and 1024 rows, `aw` takes
    // less time summed (165 776 µs against 169 700), all of it gained at
    // the two longest; `transposed` is 4× faster at two lengths and as fast at
    // a third, and the plan takes it.
    let mut s = prefill(1..=1024, &[], &["ffn_down"]);
    s.graphs = GraphChoice::None;
    s.processors = vec!["cpu".into()];
    let dev = OrderTradeOff(synthetic::discrete_cpu_gpu());
    let plan = solve(&dev, fp(), &llama8b(), &s).unwrap();
    assert_eq!(
        plan.op("ffn_down", Phase::Prefill).unwrap().order("cpu"),
        OperandOrder::Transposed
    );
}

#[test]
fn first_crossing_finds_the_step_of_a_monotone_test_from_any_start() {
    use crate::engine::first_crossing;
    for j_max in 1..40u32 {
        for step in 1..=j_max + 1 {
            for j0 in 0..=j_max + 2 {
                let mut probes = 0;
                let got = first_crossing(j0, j_max, |j| {
                    assert!((1..=j_max).contains(&j), "probe {j} outside 1..={j_max}");
                    probes += 1;
                    j >= step
                });
                assert_eq!(got, step, "j_max {j_max}, j0 {j0}");
                // Starting next to the answer costs at most two probes.
                if j0 == step && step <= j_max || j0 + 1 == step && j0 >= 1 {
                    assert!(probes <= 2, "{probes} probes from {j0} for {step}");
                }
            }
        }
    }
}

#[test]
fn first_crossing_returns_a_crossing_of_any_test() {
    use crate::engine::first_crossing;
    // Deterministic pseudo-random tests that switch back and forth.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..2000 {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let j_max = (state >> 33) as u32 % 60 + 1;
        let bits = state.rotate_left(17);
        let crossed = |j: u32| bits >> (j % 64) & 1 == 1;
        let got = first_crossing((state >> 40) as u32 % (j_max + 2), j_max, crossed);
        assert!((1..=j_max + 1).contains(&got));
        if got <= j_max {
            assert!(crossed(got), "{got} is not crossed");
        }
        if got > 1 {
            assert!(!crossed(got - 1), "{} is crossed too", got - 1);
        }
    }
}

#[test]
fn a_blocking_wait_is_costed_alongside_the_polling_one() {
    // A split: the side that ends last is waited for, by polling where it
    // has a host flag (the plan's total), by blocking where the runtime
    // is asked to (`sync_block_us`, the synthetic NPU's and GPU's 100 and
    // 120 µs against 10 µs polled).
    let dev = synthetic::paper_like_npu_gpu();
    let plan = solve(
        &dev,
        fp(),
        &llama8b(),
        &prefill(300..=300, &[256], &["ffn_up"]),
    )
    .unwrap();
    check_plan(&plan);
    let d = at(&plan, "ffn_up", Phase::Prefill, 300);
    assert_ne!(d.strategy.kind(), StrategyKind::Single, "{d:?}");
    let block = d.cost.sync_block_us.expect("a blocking cost");
    assert!(block - d.cost.sync_us >= 90.0 - 0.01, "{:?}", d.cost);
    let c = &d.cost;
    assert_eq!(c.total_with(false), c.total_us);
    assert!((c.total_with(true) - (c.total_us - c.sync_us + block)).abs() < 1e-9);
    assert_eq!((c.sync_with(false), c.sync_with(true)), (c.sync_us, block));

    // Alone on a device-timed GPU: the operator overhead measured per
    // wait. A profile with the blocking one apart gives both; an older one
    // (both waits in one row) gives one figure for both.
    let m = llama8b();
    let mut s = prefill(16..=16, &[], &["ffn_up"]);
    s.graphs = GraphChoice::None;
    s.processors = vec!["cuda".into()];
    for (block, expect) in [(Some(8.25), Some(8.25)), (None, None)] {
        let mut dev = synthetic::discrete_cpu_gpu();
        let p = dev.processor_mut("cuda").unwrap();
        p.capabilities.device_timer = true;
        p.capabilities.host_flag = true;
        p.simulated = false;
        let ov = dev.overheads_mut("cuda").unwrap();
        ov.sync_poll_us = Some(7.0);
        ov.op_overhead_us = Some(6.5);
        ov.op_overhead_block_us = block;
        let plan = solve(&dev, fp(), &m, &s).unwrap();
        check_plan(&plan);
        let d = at(&plan, "ffn_up", Phase::Prefill, 16);
        assert_eq!(d.strategy.kind(), StrategyKind::Single);
        assert!((d.cost.sync_us - 6.5).abs() < 0.01, "{:?}", d.cost);
        assert_eq!(d.cost.sync_block_us, expect, "{:?}", d.cost);
        let extra = expect.map_or(0.0, |b| b - 6.5);
        assert!((d.cost.total_with(true) - d.cost.total_us - extra).abs() < 0.01);
    }
}

#[test]
fn offload_mode_charges_the_gpus_launches_after_the_cpus_runs() {
    // In offload mode every token streams weights through host memory and
    // the CPU's pool polls for work after its parts: the GPU's operators
    // alone pay what `launch_overhead_after_cpu` measured beyond `op_overhead` (the
    // mean of the two waits, as it alternates them), with either wait.
    // Outside offload mode, and without the row, they pay nothing more.
    let m = llama8b();
    let base = Settings {
        phases: vec![Phase::Prefill],
        prefill_lengths: vec![16],
        graphs: GraphChoice::None,
        ops: vec!["ffn_up".into()],
        ..Settings::default()
    };
    let roomy = Settings {
        gpu_mem_budget: Some(16 << 30),
        ..base.clone()
    };
    let device = |after: Option<f64>| {
        let mut dev = synthetic::discrete_cpu_gpu();
        let p = dev.processor_mut("cuda").unwrap();
        p.capabilities.device_timer = true;
        p.capabilities.host_flag = true;
        p.simulated = false;
        let ov = dev.overheads_mut("cuda").unwrap();
        ov.op_overhead_us = Some(6.5);
        ov.op_overhead_block_us = Some(8.5);
        ov.launch_overhead_after_cpu_us = after;
        // A slow CPU, so that the GPU runs the operator alone.
        *dev.model_mut("cpu").unwrap() = SynthModel::Roofline {
            peak_gflops: 15.0,
            bw_gbps: 1.0,
            launch_us: 5.0,
        };
        dev
    };
    let cost = |dev: &Synthetic, s: &Settings| {
        let plan = solve(dev, fp(), &m, s).unwrap();
        check_plan(&plan);
        let d = at(&plan, "ffn_up", Phase::Prefill, 16).clone();
        assert!(
            matches!(&d.strategy, Strategy::Single { processor, .. } if processor == "cuda"),
            "{:?}",
            d.strategy
        );
        (d.cost, plan.notes)
    };
    // 11.0 after, against (6.5 + 8.5) / 2 = 7.5 with nothing before: 3.5 more.
    let dev = device(Some(11.0));
    let (free, _) = cost(&dev, &base);
    let (off, notes) = cost(&dev, &roomy);
    assert!((free.sync_us - 6.5).abs() < 1e-9, "{free:?}");
    assert!((off.sync_us - 10.0).abs() < 1e-9, "{off:?}");
    assert_eq!(off.sync_block_us, Some(12.0), "{off:?}");
    assert!((off.total_us - free.total_us - 3.5).abs() < 1e-9);
    assert!(
        notes
            .iter()
            .any(|n| n.contains("cost 3.50 µs more per launch in offload mode")),
        "{notes:?}"
    );
    // Measured faster after than alone: noise, no discount.
    let (off, _) = cost(&device(Some(5.0)), &roomy);
    assert!((off.sync_us - 6.5).abs() < 1e-9, "{off:?}");
    // Not measured: launched as with nothing before, and the plan says so.
    let (off, notes) = cost(&device(None), &roomy);
    assert!((off.sync_us - 6.5).abs() < 1e-9, "{off:?}");
    assert!(
        notes
            .iter()
            .any(|n| n.contains("no launch_overhead_after_cpu measured")),
        "{notes:?}"
    );
}

#[test]
fn offload_alone_costs_what_it_costs_outside_offload_mode() {
    // runtime-min keeps activations in host memory whatever the mode: a GPU
    // running an operator alone copies its input in and its output back
    // and pays its launch, with or without a memory budget.
    let dev = synthetic::discrete_cpu_gpu();
    let m = llama8b();
    let base = Settings {
        phases: vec![Phase::Prefill],
        prefill_lengths: vec![2048],
        graphs: GraphChoice::None,
        ops: vec!["ffn_up".into()],
        ..Settings::default()
    };
    let roomy = Settings {
        gpu_mem_budget: Some(16 << 30),
        ..base.clone()
    };
    let free = solve(&dev, fp(), &m, &base).unwrap();
    let offload = solve(&dev, fp(), &m, &roomy).unwrap();
    let (a, b) = (
        at(&free, "ffn_up", Phase::Prefill, 2048),
        at(&offload, "ffn_up", Phase::Prefill, 2048),
    );
    assert_eq!(a.strategy, b.strategy);
    assert!(b.cost.copy_us > 0.0, "{:?}", b.cost);
    assert!(
        (a.cost.total_us - b.cost.total_us).abs() < 1e-9 * a.cost.total_us,
        "{:?} against {:?}",
        a.cost,
        b.cost
    );
}

#[test]
fn a_part_of_some_columns_pays_the_host_scatter() {
    // runtime-min scatters a part's rows into the merged output with a host
    // copy: costed on the CPU processor's copy line, nothing without one.
    let mut dev = synthetic::discrete_cpu_gpu();
    let m = llama8b();
    let s = Settings {
        gpu_mem_budget: Some(1 << 30),
        ..decode(&["ffn_up"])
    };
    let plan = solve(&dev, fp(), &m, &s).unwrap();
    assert_eq!(
        explain::setup_from_plan(&dev, &plan)
            .unwrap()
            .scatter_us(1e6),
        0.0
    );
    let line = hetero_plan::LinearCost {
        alpha_us: 0.5,
        beta_us_per_byte: 1.0 / 16e3,
    };
    dev.overheads_mut("cpu").unwrap().copy_h2d = Some(line);
    let setup = explain::setup_from_plan(&dev, &plan).unwrap();
    assert!((setup.scatter_us(1e6) - line.at(1e6)).abs() < 1e-9);
    let with = solve(&dev, fp(), &m, &s).unwrap();
    let b = at(&with, "ffn_up", Phase::Decode, 1);
    assert!(
        matches!(b.strategy, Strategy::Offload { .. }),
        "{:?}",
        b.strategy
    );
    assert!(
        decode_step(&with) > decode_step(&plan),
        "{} {}",
        decode_step(&plan),
        decode_step(&with)
    );
}

#[test]
fn a_cpu_part_concurrent_with_weight_copies_runs_at_its_concurrent_factor() {
    use crate::offload::concurrent_cpu_and_copies;
    let close = |a: (f64, f64), b: (f64, f64)| (a.0 - b.0).abs() < 1e-9 && (a.1 - b.1).abs() < 1e-9;
    // No copy, or the part done before the copies start: both alone.
    assert_eq!(
        concurrent_cpu_and_copies(100.0, 0.0, 0.0, 0.5, 0.5),
        (100.0, 0.0)
    );
    assert_eq!(
        concurrent_cpu_and_copies(100.0, 150.0, 500.0, 0.5, 0.5),
        (100.0, 500.0)
    );
    // Wholly inside copies that keep their speed: alone / factor.
    assert!(close(
        concurrent_cpu_and_copies(100.0, 0.0, 500.0, 0.5, 1.0),
        (200.0, 500.0)
    ));
    // 20 µs before them, 50 µs of work during 100 µs of copies, the last
    // 30 µs after: 20 + 100 + 30.
    assert!(close(
        concurrent_cpu_and_copies(100.0, 20.0, 100.0, 0.5, 1.0),
        (150.0, 100.0)
    ));
    // Both slowed: the CPU's 100 µs at 0.8 end after 125 µs, in which the
    // copies at 0.5 did 62.5 of their 200; the other 137.5 alone.
    assert!(close(
        concurrent_cpu_and_copies(100.0, 0.0, 200.0, 0.8, 0.5),
        (125.0, 262.5)
    ));
    // The copies' 50 µs at 0.5 end after 100 µs, in which the CPU at 0.8
    // did 80 of its 300; the other 220 alone.
    assert!(close(
        concurrent_cpu_and_copies(300.0, 0.0, 50.0, 0.8, 0.5),
        (320.0, 100.0)
    ));

    // In offload mode the CPU part of a slicing with CG rows is costed so:
    // at half its speed beside the copies, the solver streams fewer rows
    // (or none) beside a CPU part, and the step costs more than at full
    // speed. Outside offload mode, beside a discrete GPU whose weights are
    // resident, the CPU keeps its speed in decode.
    let mut dev = synthetic::discrete_cpu_gpu();
    dev.overheads_mut("cuda").unwrap().concurrent_factor = Some(1.0);
    let m = llama8b();
    let s = Settings {
        gpu_mem_budget: Some(1 << 30),
        ..decode(&["ffn_up"])
    };
    let cpu_time = |dev: &mut Synthetic, rows: u32| {
        let shape = hetero_plan::GemmShape::new(1, 4096, rows).unwrap();
        dev.model_mut("cpu")
            .unwrap()
            .time_us(shape, hetero_plan::DType::F16, OperandOrder::Aw)
    };
    let mut solved = vec![];
    for factor in [1.0, 0.5] {
        dev.overheads_mut("cpu").unwrap().concurrent_factor = Some(factor);
        let plan = solve(&dev, fp(), &m, &s).unwrap();
        check_plan(&plan);
        let d = at(&plan, "ffn_up", Phase::Decode, 1).clone();
        let (cc_rows, cg_rows) = match d.strategy {
            Strategy::Offload {
                cc_rows, cg_rows, ..
            } => (cc_rows, cg_rows),
            // Slowed, the CPU alone beats streaming beside it.
            Strategy::Single { .. } if factor < 1.0 => (0, 0),
            ref other => panic!("{other:?}"),
        };
        let alone = if cc_rows > 0 {
            cpu_time(&mut dev, cc_rows)
        } else {
            0.0
        };
        if factor == 1.0 {
            assert!(cc_rows > 0 && cg_rows > 0, "{:?}", d.strategy);
            assert!((d.cost.parts_us[0] - alone).abs() < 0.01, "{alone} {d:?}");
        } else if cg_rows > 0 {
            assert!(d.cost.parts_us[0] > 1.5 * alone, "{d:?}");
        }
        solved.push((streamed(&plan), decode_step(&plan)));
    }
    assert!(solved[1].0 < solved[0].0, "{solved:?}");
    assert!(solved[1].1 >= solved[0].1, "{solved:?}");

    let free = Settings {
        gpu_mem_budget: None,
        ..s.clone()
    };
    let plan = solve(&dev, fp(), &m, &free).unwrap();
    check_plan(&plan);
    let d = at(&plan, "ffn_up", Phase::Decode, 1);
    let Strategy::RowCut { parts } = &d.strategy else {
        panic!("{:?}", d.strategy)
    };
    let i = parts.iter().position(|p| p.processor == "cpu").unwrap();
    let alone = cpu_time(&mut dev, parts[i].rows);
    assert!((d.cost.parts_us[i] - alone).abs() < 0.01, "{alone} {d:?}");

    // The GPU's factor slows its weight copies beside the CPU part: the
    // slicing costs more, and no fewer rows stay on the CPU. Its resident
    // rows in a row cut keep their speed whatever the factor.
    dev.overheads_mut("cpu").unwrap().concurrent_factor = Some(1.0);
    let mut sliced = vec![];
    for factor in [1.0, 0.5] {
        dev.overheads_mut("cuda").unwrap().concurrent_factor = Some(factor);
        let plan = solve(&dev, fp(), &m, &s).unwrap();
        check_plan(&plan);
        sliced.push((on_cpu(&plan), decode_step(&plan)));
        let plan = solve(&dev, fp(), &m, &free).unwrap();
        let d = at(&plan, "ffn_up", Phase::Decode, 1).clone();
        let plan_parts = d.cost.parts_us.clone();
        let Strategy::RowCut { parts } = d.strategy else {
            panic!("{:?}", d.strategy)
        };
        let g = parts.iter().position(|p| p.processor == "cuda").unwrap();
        let shape = hetero_plan::GemmShape::new(1, 4096, parts[g].rows).unwrap();
        let gpu_alone = dev.model_mut("cuda").unwrap().time_us(
            shape,
            hetero_plan::DType::F16,
            OperandOrder::Aw,
        );
        assert!(
            (plan_parts[g] - gpu_alone).abs() < 0.01,
            "{gpu_alone} {plan_parts:?}"
        );
    }
    assert!(sliced[1].0 >= sliced[0].0, "{sliced:?}");
    assert!(sliced[1].1 > sliced[0].1, "{sliced:?}");
}
