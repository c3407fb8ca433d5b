//! The static-graph processor's candidates: every kind costed, copies
//! charged when it runs alone off unified memory, contention by shape, and
//! the multi-graph pipe with a padded remainder.

use hetero_plan::{Phase, Plan, StrategyKind};

use super::{at, check_plan, fp, line, llama8b, prefill};
use crate::synthetic::{self, SynthModel, Synthetic};
use crate::{explain, solve};

/// The paper-like SoC whose NPU makes a 32-token graph cheap (the
/// multi-sequence example of HeteroLLM).
fn cheap_small_graphs() -> Synthetic {
    let mut dev = synthetic::paper_like_npu_gpu();
    if let Some(SynthModel::Npu { min_m, bw_gbps, .. }) = dev.model_mut("npu") {
        *min_m = 32;
        *bw_gbps = 400.0;
    }
    dev
}

/// The plan's runner-up at `len` is the cheapest family other than the
/// winner's among every candidate the cell has.
fn runner_up_is_second_best(dev: &Synthetic, plan: &Plan, op: &str, len: u32) {
    let d = at(plan, op, Phase::Prefill, len);
    let e = explain(dev, &llama8b(), plan, op, Phase::Prefill, len).unwrap();
    let second = &e.candidates[1];
    let r = d.runner_up.as_ref().expect("a runner-up");
    assert_eq!(
        (r.kind, r.total_us.round()),
        (second.kind, second.total_us.round()),
        "{op} at {len}: runner-up {r:?}, candidates {:#?}",
        e.candidates
    );
}

#[test]
fn sequence_cuts_of_one_graph_and_of_several_are_both_costed() {
    // 600 = 512 + 32 on the NPU and 56 on the GPU wins; 512 + 88 on the GPU
    // is a sequence cut of one graph, costed too. Between 513 and 600 each
    // kind is the other's runner-up (at 552: 512 + 32 and 8 on the GPU,
    // +8 %, where only one kind was costed and 18 chunks of 32, +44 %, was
    // named).
    let dev = cheap_small_graphs();
    let mut s = prefill(513..=640, &[32, 512], &["ffn_up"]);
    s.exhaustive = true;
    let plan = solve(&dev, fp(), &llama8b(), &s).unwrap();
    check_plan(&plan);
    let d = at(&plan, "ffn_up", Phase::Prefill, 600);
    assert_eq!(d.strategy.kind(), StrategyKind::MultiSeq, "{d:?}");
    let e = explain(&dev, &llama8b(), &plan, "ffn_up", Phase::Prefill, 600).unwrap();
    let seq = e
        .candidates
        .iter()
        .find(|c| c.kind == StrategyKind::SeqCut)
        .unwrap_or_else(|| panic!("no one-graph sequence cut in {:#?}", e.candidates));
    assert_eq!(seq.label, "tokens npu [512] + gpu 88");
    for len in 513..=640 {
        runner_up_is_second_best(&dev, &plan, "ffn_up", len);
    }
}

/// The paper-like SoC with an NPU off unified memory (QNN reports
/// `unified_memory: false`) whose copies run at 10 µs + 10 GB/s each way,
/// no online prepare, and bandwidth enough for both processors.
fn npu_off_unified_memory() -> Synthetic {
    let mut dev = synthetic::paper_like_npu_gpu();
    for p in ["npu", "gpu"] {
        dev.overheads_mut(p).unwrap().concurrent_factor = None;
    }
    dev.processor_mut("npu")
        .unwrap()
        .capabilities
        .unified_memory = false;
    let o = dev.overheads_mut("npu").unwrap();
    o.copy_h2d = Some(line(10.0));
    o.copy_d2h = Some(line(10.0));
    o.prepare = None;
    dev
}

#[test]
fn a_static_processor_off_unified_memory_pays_its_copies_alone_too() {
    // ffn_up: K 4096, N 14336; every graph run copies its rows in and its
    // outputs back as f32.
    let (k, n) = (4096.0, 14336.0);
    let run = |rows: u32| {
        let r = rows as f64;
        2.0 * 10.0 + (r * k * 4.0 + r * n * 4.0) / 10e3
    };
    let dev = npu_off_unified_memory();
    let mut s = prefill(1..=400, &[64, 128], &["ffn_up"]);
    s.exhaustive = true;
    let plan = solve(&dev, fp(), &llama8b(), &s).unwrap();
    check_plan(&plan);
    let cases: [(u32, &str, f64); 4] = [
        (100, "npu padded to 128", run(100)),
        (300, "npu 3 chunks of 128", 2.0 * run(128) + run(44)),
        (192, "tokens npu [128+64]", run(128) + run(64)),
        // The GPU is on unified memory: only the NPU's graph copies.
        (150, "tokens npu [128] + gpu 22", run(128)),
    ];
    // Padding 104 tokens to 128 costs 3871 µs with its copies (3084 µs
    // without them won before): 64 on the NPU and 40 on the GPU (3654 µs)
    // and a hybrid on the share made for short lengths (3647 µs) beat it.
    let d = at(&plan, "ffn_up", Phase::Prefill, 104);
    assert_ne!(d.strategy.kind(), StrategyKind::Single, "{d:?}");
    assert!(d.cost.total_us < 3660.0, "{d:?}");
    for (len, label, copy) in cases {
        let e = explain(&dev, &llama8b(), &plan, "ffn_up", Phase::Prefill, len).unwrap();
        let c = e
            .candidates
            .iter()
            .find(|c| c.label == label)
            .unwrap_or_else(|| panic!("no `{label}` at {len} in {:#?}", e.candidates));
        assert!(
            (c.copy_us - copy).abs() < 0.01,
            "{label} at {len}: copy {} µs, expected {copy}",
            c.copy_us
        );
    }
}

#[test]
fn the_same_bandwidth_bound_gemm_contends_in_prefill_as_in_decode() {
    // The prefill lm_head runs one row, as a decode step does: two GPUs
    // sharing memory split it the same way at the same cost in both phases.
    // Compute-bound prefill lengths are not slowed.
    let dev = synthetic::identical_gpus();
    let mut s = prefill(300..=300, &[], &["lm_head", "ffn_up"]);
    s.graphs = crate::GraphChoice::None;
    s.phases = vec![Phase::Prefill, Phase::Decode];
    s.decode_lengths = vec![1];
    let plan = solve(&dev, fp(), &llama8b(), &s).unwrap();
    check_plan(&plan);
    let pre = at(&plan, "lm_head", Phase::Prefill, 300);
    let dec = at(&plan, "lm_head", Phase::Decode, 1);
    assert_eq!(pre.strategy, dec.strategy);
    assert!(
        (pre.cost.total_us - dec.cost.total_us).abs() < 0.01,
        "prefill {:?} against decode {:?}",
        pre.cost,
        dec.cost
    );
    // ffn_up at 300 rows is compute-bound on these GPUs: each half runs at
    // its time alone.
    let up = at(&plan, "ffn_up", Phase::Prefill, 300);
    let half = synthetic::mobile_gpu("g").1.time_us(
        hetero_plan::GemmShape::new(300, 4096, 7168).unwrap(),
        hetero_plan::DType::F16,
        hetero_plan::OperandOrder::Aw,
    );
    assert!(
        (up.cost.parts_us[0] - half).abs() < 0.01,
        "{up:?} against {half}"
    );
}

#[test]
fn a_pipe_runs_prepared_graphs_back_to_back_and_pads_the_last() {
    // At 85 tokens with graphs of 32 and 64: 64 + 32 (21 rows padded to
    // 32) takes 858 µs on this NPU, three chunks of 32 take 980 µs and two
    // of 64 1063 µs.
    let dev = cheap_small_graphs();
    let mut s = prefill(65..=128, &[32, 64], &["ffn_up"]);
    s.processors = vec!["npu".into()];
    s.exhaustive = true;
    let plan = solve(&dev, fp(), &llama8b(), &s).unwrap();
    check_plan(&plan);
    let d = at(&plan, "ffn_up", Phase::Prefill, 85);
    assert_eq!(d.strategy.kind(), StrategyKind::Pipe, "{d:?}");
    match &d.strategy {
        hetero_plan::Strategy::SeqCut { parts } => {
            assert_eq!(parts.len(), 1);
            assert_eq!((parts[0].tokens, &parts[0].graphs[..]), (85, &[64, 32][..]));
        }
        other => panic!("{other:?}"),
    }
    let r = d.runner_up.as_ref().unwrap();
    assert_eq!(r.label, "npu 3 chunks of 32");
    assert!(r.total_us > d.cost.total_us * 1.1, "{d:?}");
    runner_up_is_second_best(&dev, &plan, "ffn_up", 85);
    // Neighbouring pipes of the same graphs share one range, their tokens
    // following the length.
    let op = plan.op("ffn_up", Phase::Prefill).unwrap();
    let r = op
        .ranges
        .iter()
        .find(|r| r.from <= 85 && 85 <= r.to)
        .unwrap();
    assert_eq!(r.follow, Some(hetero_plan::Follow::Tokens), "{r:?}");
    assert!(r.to > r.from, "{r:?}");
    // Only prepared graphs: an exact sum stays a multi-graph sequence.
    let exact = at(&plan, "ffn_up", Phase::Prefill, 96);
    assert_eq!(exact.strategy.kind(), StrategyKind::MultiSeq, "{exact:?}");
}

/// A step-shaped NPU (one 32-row tile at least) at 6x a GPU whose time
/// grows with the tokens from the first, both with bandwidth to spare.
fn step_npu_linear_gpu() -> Synthetic {
    let mut dev = synthetic::paper_like_npu_gpu();
    for p in ["npu", "gpu"] {
        dev.overheads_mut(p).unwrap().concurrent_factor = None;
    }
    if let Some(SynthModel::Npu {
        peak_gflops,
        bw_gbps,
        min_m,
        ..
    }) = dev.model_mut("npu")
    {
        (*peak_gflops, *bw_gbps, *min_m) = (1200.0, 2000.0, 32);
    }
    if let Some(SynthModel::Roofline {
        peak_gflops,
        bw_gbps,
        ..
    }) = dev.model_mut("gpu")
    {
        (*peak_gflops, *bw_gbps) = (200.0, 2000.0);
    }
    dev
}

#[test]
fn a_hybrid_takes_the_share_made_for_short_prompts() {
    // ffn_gate padded to the 32-token graph of a step-shaped NPU about 6x
    // a GPU that scales with the tokens: at 6 tokens the GPU's part shrinks,
    // the NPU's does not, so the share best at 32 leaves the GPU idle. A
    // second share, made for the shortest length the graph serves, is
    // prepared and counted in the graph set; each length takes the
    // cheapest share.
    let dev = step_npu_linear_gpu();
    let mut s = prefill(1..=32, &[32], &["ffn_gate"]);
    s.exhaustive = true;
    let plan = solve(&dev, fp(), &llama8b(), &s).unwrap();
    check_plan(&plan);
    let setup = explain::setup_from_plan(&dev, &plan).unwrap();
    let model = llama8b();
    let op = model.op("ffn_gate").unwrap();
    let cx = crate::engine::OpCtx::new(&setup, op, Phase::Prefill, 32);
    let st = &cx.statics[0];
    let shares: Vec<(u32, f64)> = st.row_share.at(32).collect();
    let gpu = (0..setup.procs.len())
        .find(|&p| !setup.procs[p].static_graphs)
        .unwrap();
    // The best hybrid at 6 tokens, its share chosen for the length.
    let free = cx.row2(6, st.p, gpu, op.n, &[], Some(32)).unwrap().total;
    let at_32 = cx.hybrid_us(6, st.p, 32, shares[0]);
    assert_eq!(shares.len(), 3, "{shares:?}");
    // 2754 µs against 1729: +59 %.
    assert!(
        at_32 > 1.5 * free,
        "share of 32: {at_32} µs, free: {free} µs"
    );
    let d = at(&plan, "ffn_gate", Phase::Prefill, 6);
    // 2027 µs on the share kept for the lengths around it: +17 %.
    assert!(
        d.cost.total_us <= 1.2 * free,
        "{d:?} against {free} µs with a share for 6 tokens"
    );
    // Both shares are in the graph set, each counted.
    let gs = &plan.graph_sets[0];
    let rows: Vec<u32> = (gs.row_graphs.iter())
        .filter(|g| g.op == "ffn_gate" && g.size == 32)
        .map(|g| g.rows)
        .collect();
    assert_eq!(rows.len(), 3, "{:?}", gs.row_graphs);
    let sp = &setup.procs[st.p];
    let want: f64 = (std::iter::once(op.n).chain(rows))
        .map(|r| sp.op_graphs(op, 32, r).0)
        .sum();
    assert!(
        (gs.prepare_us - want).abs() < 1.0,
        "{} against {want}",
        gs.prepare_us
    );
}

#[test]
fn static_weight_graphs_are_prepared_once_per_layer_and_inputs_once() {
    // ffn_up on the paper-like NPU: a graph takes 20 ms + 3 ms per MB of
    // its weights to prepare (117 MB: 372 ms). Static weights need one
    // graph per layer (32), weights as inputs one for all of them, written
    // before each run through the NPU's copy line (10 µs + 10 GB/s).
    let mut dev = synthetic::paper_like_npu_gpu();
    dev.overheads_mut("npu").unwrap().copy_h2d = Some(line(10.0));
    let model = llama8b();
    let op = model.op("ffn_up").unwrap();
    let per_graph = 20e3 + 3e3 * (op.k as f64 * op.n as f64 * 2.0) / 1e6;
    let mut s = prefill(1..=256, &[], &["ffn_up"]);
    s.graphs = crate::GraphChoice::Auto;
    s.prompt_lengths = None;
    let wide = solve(&dev, fp(), &model, &s).unwrap();
    check_plan(&wide);
    let gs = &wide.graph_sets[0];
    assert_eq!(gs.weights, hetero_plan::WeightMode::Static, "{gs:?}");
    let graphs = gs.sizes.len() + gs.row_graphs.len();
    assert!(
        gs.prepare_us >= 32.0 * per_graph * gs.sizes.len() as f64,
        "{} µs for {graphs} graph kinds: not once per layer",
        gs.prepare_us
    );
    // A budget below one static size per layer: weights as inputs, every
    // graph counted once, within the budget.
    s.prepare_budget_us = Some(16.0 * per_graph);
    let tight = solve(&dev, fp(), &model, &s).unwrap();
    check_plan(&tight);
    let gs = &tight.graph_sets[0];
    assert_eq!(gs.weights, hetero_plan::WeightMode::Input, "{gs:?}");
    assert!(
        !gs.sizes.is_empty() && gs.prepare_us <= 16.0 * per_graph,
        "{gs:?}"
    );
    // Each NPU run pays the weights' write: the same sizes with static
    // weights (a budget they fit) cost that much less alone.
    let write = 10.0 + op.k as f64 * op.n as f64 * 2.0 / 10e3;
    let g = gs.sizes[0];
    s.graphs = crate::GraphChoice::Sizes(gs.sizes.clone());
    s.prepare_budget_us = Some(1e12);
    let fixed = solve(&dev, fp(), &model, &s).unwrap();
    assert_eq!(fixed.graph_sets[0].weights, hetero_plan::WeightMode::Static);
    let npu_alone = |plan: &Plan| {
        let e = explain(&dev, &model, plan, "ffn_up", Phase::Prefill, g).unwrap();
        (e.candidates.iter())
            .find(|c| c.kind == StrategyKind::Single && c.processors == ["npu"])
            .unwrap_or_else(|| panic!("no NPU alone at {g} in {:#?}", e.candidates))
            .parts_us[0]
    };
    let extra = npu_alone(&tight) - npu_alone(&fixed);
    assert!((extra - write).abs() < 0.01, "{extra} µs against {write}");
}

#[test]
fn preparing_a_graph_costs_by_the_bytes_it_moves_in_its_dtype() {
    // The paper-like NPU prepares at 20 ms + 3 ms per MB: a graph of
    // ffn_up costs by its activations and weights in the plan's dtype, so
    // the 512-token graph costs more than the 32-token one.
    let dev = synthetic::paper_like_npu_gpu();
    let model = llama8b();
    let op = model.op("ffn_up").unwrap();
    let graph = |m: u32, dtype: hetero_plan::DType| {
        let bytes = hetero_plan::predictor::gemm_bytes(
            hetero_plan::GemmShape::new(m, op.k, op.n).unwrap(),
            dtype,
        );
        32.0 * (20e3 + 3e3 * bytes / 1e6)
    };
    let prepared = |size: u32| {
        let mut s = prefill(size..=size, &[size], &["ffn_up"]);
        s.processors = vec!["npu".into()];
        let plan = solve(&dev, fp(), &model, &s).unwrap();
        let gs = &plan.graph_sets[0];
        assert_eq!(gs.weights, hetero_plan::WeightMode::Static, "{gs:?}");
        gs.prepare_us
    };
    for size in [32, 512] {
        let (got, want) = (prepared(size), graph(size, hetero_plan::DType::F16));
        assert!((got - want).abs() < 1.0, "{size}: {got} against {want}");
    }
    assert!(prepared(512) > prepared(32) * 1.05);
}
