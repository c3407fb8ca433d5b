//! Evaluating a plan against measurements (the GPU-host evaluation of
//! issue 11): the arithmetic of regret and of a split's speedup against the
//! perfect-overlap bound, and plans rewritten so that one candidate
//! decision, or one forced strategy, can be run and timed by the runtime.
//!
//! The design choice a newcomer would otherwise get wrong: **regret is
//! measured against measured candidates, never predicted ones.** A cell's
//! regret is the measured time of the plan's decision over the fastest
//! *measured* candidate (the decision itself included), so it is ≥ 1 and
//! says what the predictor's mistakes cost at run time; a candidate that was
//! not measured (skipped, failed its check) takes no part.

use hetero_plan::{CostBreakdown, Decision, OpPlan, Phase, Plan, Strategy};

/// The regret of a decision: its measured time over the fastest measured
/// time among `candidates_us` and itself. `None` when `chosen_us` is not a
/// positive finite time.
pub fn regret(chosen_us: f64, candidates_us: &[f64]) -> Option<f64> {
    if !(chosen_us.is_finite() && chosen_us > 0.0) {
        return None;
    }
    let best = candidates_us
        .iter()
        .copied()
        .filter(|t| t.is_finite() && *t > 0.0)
        .fold(chosen_us, f64::min);
    Some(chosen_us / best)
}

/// The perfect-overlap bound of processors working on one operator at once:
/// with `T_i` each processor's time for the whole operator alone, an ideal
/// split (shares in proportion to speed, no sync or merge cost) takes
/// `1 / Σ 1/T_i`; for two processors `Ta·Tb / (Ta + Tb)`.
pub fn overlap_bound_us(singles_us: &[f64]) -> Option<f64> {
    if singles_us.is_empty() || singles_us.iter().any(|t| !(t.is_finite() && *t > 0.0)) {
        return None;
    }
    Some(1.0 / singles_us.iter().map(|t| 1.0 / t).sum::<f64>())
}

/// A split measured against its processors measured alone.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct SplitGain {
    /// The split, µs.
    pub split_us: f64,
    /// The fastest of its processors alone, µs.
    pub best_single_us: f64,
    /// The perfect-overlap bound, µs.
    pub bound_us: f64,
    /// `best_single / split`: > 1 when splitting beats the best processor alone.
    pub speedup: f64,
    /// `best_single / bound`: the most any split could give; for two
    /// processors `(Ta + Tb) / max(Ta, Tb)`, between 1 and 2.
    pub bound_speedup: f64,
    /// `bound / split`: the share of the ideal the split reached (1 = perfect).
    pub efficiency: f64,
}

/// The speedup of a split over its processors alone, and its bound.
pub fn split_gain(split_us: f64, singles_us: &[f64]) -> Option<SplitGain> {
    let bound_us = overlap_bound_us(singles_us)?;
    if !(split_us.is_finite() && split_us > 0.0) {
        return None;
    }
    let best_single_us = singles_us.iter().copied().fold(f64::INFINITY, f64::min);
    Some(SplitGain {
        split_us,
        best_single_us,
        bound_us,
        speedup: best_single_us / split_us,
        bound_speedup: best_single_us / bound_us,
        efficiency: bound_us / split_us,
    })
}

/// Median and worst (largest) of a set of ratios.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Summary {
    /// How many values.
    pub n: usize,
    /// Their median.
    pub median: f64,
    /// The largest.
    pub worst: f64,
}

/// Median and worst of the finite values; `None` when there are none.
pub fn summarize(values: &[f64]) -> Option<Summary> {
    let v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    Some(Summary {
        n: v.len(),
        median: crate::report::median(&v),
        worst: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    })
}

/// A decision at `len` whose rows and instances are `like`'s, with another
/// strategy and its predicted cost.
pub fn decision_like(like: &Decision, strategy: Strategy, cost: CostBreakdown) -> Decision {
    Decision {
        len: like.len,
        m: like.m,
        instances: like.instances,
        strategy,
        cost,
        runner_up: None,
    }
}

/// The plan reduced to one operator table of `phase` holding the single
/// decision `d`: running it runs that decision alone. `None` when the plan
/// has no table for the operator in that phase.
pub fn one_decision_plan(plan: &Plan, op: &str, phase: Phase, d: Decision) -> Option<Plan> {
    let table = plan.op(op, phase)?;
    let mut out = plan.clone();
    out.ops = vec![OpPlan {
        decisions: vec![d],
        ..table.clone()
    }];
    Some(out)
}

/// The plan with every decision of `phase` replaced by `force(table,
/// decision)` (a baseline: the CPU alone, the GPU streaming every weight);
/// `None` from `force` keeps the decision.
pub fn force_phase(
    plan: &Plan,
    phase: Phase,
    force: impl Fn(&OpPlan, &Decision) -> Option<Decision>,
) -> Plan {
    let mut out = plan.clone();
    for t in out.ops.iter_mut().filter(|t| t.phase == phase) {
        let table = t.clone();
        for d in &mut t.decisions {
            if let Some(f) = force(&table, d) {
                *d = f;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{plan_with, row_cut, single};

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn regret_is_the_chosen_over_the_fastest_measured() {
        assert_eq!(regret(100.0, &[100.0, 150.0]), Some(1.0));
        assert!(close(regret(120.0, &[100.0, 150.0]).unwrap(), 1.2));
        // Unmeasured candidates (NaN, 0) take no part; the chosen counts.
        assert_eq!(regret(90.0, &[f64::NAN, 0.0, 150.0]), Some(1.0));
        assert_eq!(regret(f64::NAN, &[1.0]), None);
        assert_eq!(regret(0.0, &[1.0]), None);
    }

    #[test]
    fn overlap_bound_and_split_gain() {
        // Ta = 100, Tb = 300: bound 75; best alone 100; at most 4/3.
        assert!(close(overlap_bound_us(&[100.0, 300.0]).unwrap(), 75.0));
        assert!(close(overlap_bound_us(&[60.0, 60.0, 60.0]).unwrap(), 20.0));
        assert_eq!(overlap_bound_us(&[100.0, f64::NAN]), None);
        assert_eq!(overlap_bound_us(&[]), None);
        let g = split_gain(80.0, &[100.0, 300.0]).unwrap();
        assert!(close(g.speedup, 1.25));
        assert!(close(g.bound_speedup, 400.0 / 300.0));
        assert!(close(g.efficiency, 75.0 / 80.0));
        // A split slower than the best alone: speedup below 1.
        assert!(split_gain(150.0, &[100.0, 300.0]).unwrap().speedup < 1.0);
        assert_eq!(split_gain(f64::NAN, &[1.0, 2.0]), None);
    }

    #[test]
    fn summary_is_median_and_worst_of_finite_values() {
        let s = summarize(&[1.0, 1.5, f64::NAN, 1.1]).unwrap();
        assert_eq!((s.n, s.median, s.worst), (3, 1.1, 1.5));
        assert_eq!(summarize(&[f64::NAN]), None);
    }

    #[test]
    fn one_decision_and_forced_plans() {
        let plan = plan_with(vec![
            (
                "attn_q",
                Phase::Prefill,
                vec![(1, single("cpu:0")), (8, single("npu-sim"))],
            ),
            ("attn_q", Phase::Decode, vec![(1, single("cpu:0"))]),
            ("ffn_up", Phase::Decode, vec![(1, single("npu-sim"))]),
        ]);
        let like = plan.op("attn_q", Phase::Prefill).unwrap().decisions[1].clone();
        let cost = CostBreakdown {
            parts_us: vec![1.0, 2.0],
            sync_us: 0.5,
            sync_block_us: None,
            copy_us: 0.0,
            total_us: 2.5,
        };
        let d = decision_like(&like, row_cut(&[("cpu:0", 512), ("npu-sim", 512)]), cost);
        let one = one_decision_plan(&plan, "attn_q", Phase::Prefill, d.clone()).unwrap();
        assert_eq!(one.ops.len(), 1);
        assert_eq!(one.ops[0].decisions, vec![d]);
        assert_eq!(one.ops[0].phase, Phase::Prefill);
        assert!(one_decision_plan(&plan, "ffn_up", Phase::Prefill, like.clone()).is_none());

        let forced = force_phase(&plan, Phase::Decode, |_, d| {
            Some(decision_like(d, single("cpu:0"), d.cost.clone()))
        });
        for t in &forced.ops {
            for d in &t.decisions {
                let want = if t.phase == Phase::Decode {
                    single("cpu:0")
                } else {
                    plan.op(&t.op, t.phase)
                        .unwrap()
                        .at(d.len)
                        .unwrap()
                        .strategy
                        .clone()
                };
                assert_eq!(d.strategy, want, "{} {}", t.op, t.phase);
            }
        }
    }
}
