//! The static-graph processor's candidates: every kind costed, copies
//! charged when it runs alone off unified memory, contention by shape, and
//! the multi-graph pipe with a padded remainder.

use hetero_plan::{Phase, Plan, StrategyKind};

use super::{at, check_plan, fp, llama8b, prefill};
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
