//! Compaction: a dense decision table (one decision per length) written as
//! [`DecisionRange`]s, in time linear in the decisions.
//!
//! Each range is grown greedily while one rule — M is the length or a
//! constant, the strategy is fixed or follows M ([`Follow`]) — reproduces
//! every decision exactly. Its costs keep the knots a piecewise-linear
//! function needs to stay within the tolerance ([`cost_tolerance`]) at
//! every length: a knot is placed as far on
//! as the cone of slopes through every length before it allows.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Phase;
use crate::plan::{Decision, OpPlan, ProcessorOrder};
use crate::ranges::{
    CostKnot, DecisionRange, Follow, Span, cost_tolerance, follow_of, follows, same_shape,
};

/// The spans of consecutive lengths of a table sorted by length.
pub fn spans_of(decisions: &[Decision]) -> Vec<Span> {
    let mut spans: Vec<Span> = Vec::new();
    for d in decisions {
        match spans.last_mut() {
            Some(s) if s.to.checked_add(1) == Some(d.len) => s.to = d.len,
            _ => spans.push(Span {
                from: d.len,
                to: d.len,
            }),
        }
    }
    spans
}

/// Compacts a decision table whose lengths strictly increase into ranges;
/// [`expand`] gives the same decisions back (costs within the tolerance).
pub fn compact(decisions: &[Decision]) -> Vec<DecisionRange> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < decisions.len() {
        let (end, rule) = grow(decisions, i);
        out.push(range(&decisions[i..end], rule));
        i = end;
    }
    out
}

/// Every decision of `ranges`, in order.
pub fn expand(ranges: &[DecisionRange]) -> Vec<Decision> {
    ranges.iter().flat_map(DecisionRange::expand).collect()
}

/// A range's rule: M a constant (or the length), and the followed parameter.
type Rule = (Option<u32>, Option<Follow>);

/// How far from `i` one rule reproduces the decisions exactly: the end
/// (exclusive) and the first rule that holds up to it.
fn grow(ds: &[Decision], i: usize) -> (usize, Rule) {
    let d0 = &ds[i];
    let m0 = d0.rows_m();
    let mut rules: [Option<Rule>; 3] = [None; 3];
    if d0.m.is_none() {
        rules[0] = follow_of(&d0.strategy, m0).map(|f| (None, Some(f)));
        rules[1] = Some((None, None));
    }
    rules[2] = Some((Some(m0), None));
    let mut j = i + 1;
    while j < ds.len() && ds[j].len == ds[j - 1].len + 1 {
        let fits = |r: &Option<Rule>| r.is_some_and(|r| holds(d0, r, &ds[j]));
        if !rules.iter().any(fits) {
            break;
        }
        for r in &mut rules {
            if !fits(r) {
                *r = None;
            }
        }
        j += 1;
    }
    let rule = if j == i + 1 {
        (d0.m, None)
    } else {
        rules.into_iter().flatten().next().expect("a rule holds")
    };
    (j, rule)
}

/// Whether the range that starts with `d0` under `rule` gives `d`.
fn holds(d0: &Decision, (m, follow): Rule, d: &Decision) -> bool {
    let want_m = m.unwrap_or(d.len);
    if d.instances != d0.instances || d.rows_m() != want_m {
        return false;
    }
    match follow {
        None => d.strategy == d0.strategy,
        Some(f) => follows(&d0.strategy, f, d0.rows_m(), want_m, &d.strategy),
    }
}

fn range(ds: &[Decision], (m, follow): Rule) -> DecisionRange {
    let d0 = &ds[0];
    DecisionRange {
        from: d0.len,
        to: ds[ds.len() - 1].len,
        m,
        instances: d0.instances,
        strategy: d0.strategy.clone(),
        follow,
        costs: knots(ds)
            .into_iter()
            .map(|i| CostKnot {
                len: ds[i].len,
                cost: ds[i].cost.clone(),
                runner_up: ds[i].runner_up.clone(),
            })
            .collect(),
    }
}

/// The interpolated fields of a decision, in a fixed order.
fn values(d: &Decision, out: &mut Vec<f64>) {
    out.clear();
    let c = &d.cost;
    out.extend(&c.parts_us);
    out.extend([c.sync_us, c.copy_us, c.total_us]);
    out.extend(c.sync_block_us);
    if let Some(r) = &d.runner_up {
        out.extend([r.total_us, r.margin_us]);
    }
}

fn shape(d: &Decision) -> (&crate::CostBreakdown, Option<&crate::RunnerUp>) {
    (&d.cost, d.runner_up.as_ref())
}

/// The indices of the knots of consecutive lengths `ds`: the first, the
/// last, and as few between as keep every interpolated field within the
/// tolerance. Each knot goes as far as the slopes through every length
/// before it allow (the cone of slopes narrows with each length).
fn knots(ds: &[Decision]) -> Vec<usize> {
    let mut idx = vec![0];
    let (mut va, mut ve) = (Vec::new(), Vec::new());
    let (mut lo, mut hi) = (Vec::new(), Vec::new());
    let mut a = 0;
    while a + 1 < ds.len() {
        values(&ds[a], &mut va);
        lo.clear();
        lo.resize(va.len(), f64::NEG_INFINITY);
        hi.clear();
        hi.resize(va.len(), f64::INFINITY);
        let mut best = a + 1;
        for e in a + 1..ds.len() {
            if !same_shape(shape(&ds[a]), shape(&ds[e])) {
                break;
            }
            values(&ds[e], &mut ve);
            let dx = (e - a) as f64;
            let within = (0..va.len()).all(|f| {
                let s = (ve[f] - va[f]) / dx;
                s >= lo[f] && s <= hi[f]
            });
            if within {
                best = e;
            }
            // Shrunk a little, for the rounding of the interpolation itself;
            // the runner-up's fields (the last two) by its own total.
            let tol = 0.999 * cost_tolerance(ds[e].cost.total_us);
            let runner = ds[e]
                .runner_up
                .as_ref()
                .map(|r| 0.999 * cost_tolerance(r.total_us));
            let mut open = true;
            for f in 0..va.len() {
                let tol = match runner {
                    Some(t) if f + 2 >= va.len() => t,
                    _ => tol,
                };
                lo[f] = lo[f].max((ve[f] - tol - va[f]) / dx);
                hi[f] = hi[f].min((ve[f] + tol - va[f]) / dx);
                open &= lo[f] <= hi[f];
            }
            if !open {
                break;
            }
        }
        idx.push(best);
        a = best;
    }
    idx
}

/// An operator's table with one decision per length: what the solver
/// produces before it compacts, and what plans of schema version 1 and 2
/// hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DenseOpPlan {
    /// Canonical operator name.
    pub op: String,
    /// The phase.
    pub phase: Phase,
    /// Input features.
    pub k: u32,
    /// Output features.
    pub n: u32,
    /// Layers that run the operator.
    pub layers: u32,
    /// Operand order per processor where it is not `aw`.
    pub orders: Vec<ProcessorOrder>,
    /// One decision per length, lengths strictly increasing.
    pub decisions: Vec<Decision>,
}

impl DenseOpPlan {
    /// The decision at exactly `len`, if the table has one.
    pub fn at(&self, len: u32) -> Option<&Decision> {
        let first = self.decisions.first()?.len;
        // Dense tables answer in O(1); fall back to a search otherwise.
        match self.decisions.get(len.checked_sub(first)? as usize) {
            Some(d) if d.len == len => Some(d),
            _ => self
                .decisions
                .binary_search_by_key(&len, |d| d.len)
                .ok()
                .map(|i| &self.decisions[i]),
        }
    }

    /// The table compacted into ranges ([`OpPlan::from_dense`]).
    pub fn compact(self) -> OpPlan {
        OpPlan::from_dense(self)
    }
}

fn one() -> u32 {
    1
}

/// An operator's table as a file holds it: `spans` and `ranges` (schema
/// version 3), or `decisions`, one per length (versions 1 and 2).
#[derive(Deserialize, JsonSchema)]
#[schemars(rename = "OpPlan")]
pub(crate) struct OpPlanFile {
    /// Canonical operator name.
    op: String,
    /// The phase.
    phase: Phase,
    /// Input features.
    k: u32,
    /// Output features.
    n: u32,
    /// Layers that run the operator (each follows the same decision).
    #[serde(default = "one")]
    layers: u32,
    /// The first layer of the group the table covers.
    #[serde(default)]
    first_layer: u32,
    /// Operand order per processor where it is not `aw`.
    #[serde(default)]
    orders: Vec<ProcessorOrder>,
    /// The lengths the table covers, spans sorted and apart.
    #[serde(default)]
    spans: Vec<Span>,
    /// The decisions: ranges sorted by length that together cover `spans`
    /// exactly.
    #[serde(default)]
    ranges: Vec<DecisionRange>,
    /// Schema versions 1 and 2: one decision per length, lengths strictly
    /// increasing (compacted into `ranges` as the file loads).
    #[serde(default)]
    decisions: Vec<Decision>,
}

impl TryFrom<OpPlanFile> for OpPlan {
    type Error = String;

    fn try_from(f: OpPlanFile) -> Result<OpPlan, String> {
        let (spans, ranges) = match (f.ranges.is_empty(), f.decisions) {
            (true, ds) if !ds.is_empty() => {
                if let Some(j) =
                    (0..ds.len()).find(|&j| ds[j].len == 0 || (j > 0 && ds[j].len <= ds[j - 1].len))
                {
                    return Err(format!(
                        "decisions[{j}].len: lengths must be positive and strictly increasing"
                    ));
                }
                (spans_of(&ds), compact(&ds))
            }
            (false, ds) if !ds.is_empty() => {
                return Err(
                    "give `ranges` (schema version 3) or `decisions` (versions 1 and 2), not both"
                        .into(),
                );
            }
            (false, _) if f.spans.is_empty() => {
                return Err(
                    "missing field `spans`: a table of `ranges` names the lengths it covers".into(),
                );
            }
            _ => (f.spans, f.ranges),
        };
        Ok(OpPlan {
            op: f.op,
            phase: f.phase,
            k: f.k,
            n: f.n,
            layers: f.layers,
            first_layer: f.first_layer,
            orders: f.orders,
            spans,
            ranges,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StrategyKind;
    use crate::plan::{CostBreakdown, RunnerUp, SeqPart, Strategy};

    fn single(p: &str) -> Strategy {
        Strategy::Single {
            processor: p.into(),
            padded_to: None,
            online_prepare: false,
        }
    }

    fn dec(len: u32, strategy: Strategy, total: f64) -> Decision {
        Decision {
            len,
            m: None,
            instances: 1,
            strategy,
            cost: CostBreakdown {
                parts_us: vec![total],
                sync_us: 0.0,
                sync_block_us: None,
                copy_us: 0.0,
                total_us: total,
            },
            runner_up: Some(RunnerUp {
                kind: StrategyKind::Single,
                label: "single cpu".into(),
                total_us: total * 2.0,
                margin_us: total,
            }),
        }
    }

    fn seq(len: u32) -> Strategy {
        Strategy::SeqCut {
            parts: vec![
                SeqPart {
                    processor: "npu".into(),
                    tokens: 256,
                    graphs: vec![256],
                },
                SeqPart {
                    processor: "gpu".into(),
                    tokens: len - 256,
                    graphs: vec![],
                },
            ],
        }
    }

    #[test]
    fn a_sawtooth_and_a_flat_run_become_few_ranges_and_expand_exactly() {
        let mut ds: Vec<Decision> = (1..=256)
            .map(|l| dec(l, single("npu"), 100.0 + l as f64))
            .collect();
        ds.extend((257..=1000).map(|l| dec(l, seq(l), (l as f64).sqrt() * 10.0)));
        ds.extend((1001..=1200).map(|l| dec(l, single("gpu"), 5.0)));
        let ranges = compact(&ds);
        assert_eq!(ranges.len(), 3, "{ranges:#?}");
        assert_eq!(ranges[1].follow, Some(Follow::Rest { part: 1 }));
        // Linear and flat costs need only the two ends.
        assert_eq!(ranges[0].costs.len(), 2);
        assert_eq!(ranges[2].costs.len(), 2);
        let back = expand(&ranges);
        assert_eq!(back.len(), ds.len());
        for (a, b) in back.iter().zip(&ds) {
            assert_eq!(
                (a.len, &a.strategy, a.m, a.instances),
                (b.len, &b.strategy, b.m, b.instances)
            );
            let tol = cost_tolerance(b.cost.total_us);
            assert!(
                (a.cost.total_us - b.cost.total_us).abs() <= tol,
                "{}",
                b.len
            );
            let (ra, rb) = (a.runner_up.as_ref().unwrap(), b.runner_up.as_ref().unwrap());
            let tol = cost_tolerance(rb.total_us);
            assert!((ra.total_us - rb.total_us).abs() <= tol, "{}", b.len);
            assert!(a.agrees_with(b), "{}", b.len);
        }
    }

    #[test]
    fn a_constant_m_and_gaps_split_ranges() {
        // The lm_head in prefill: M = 1 at every length.
        let mut ds: Vec<Decision> = (1..=50)
            .map(|l| Decision {
                m: (l != 1).then_some(1),
                ..dec(l, single("cpu"), 3.0)
            })
            .collect();
        ds.push(Decision {
            m: Some(1),
            ..dec(64, single("cpu"), 3.0)
        });
        let ranges = compact(&ds);
        assert_eq!(ranges.len(), 2);
        assert_eq!(ranges[0].m, Some(1));
        assert_eq!(
            spans_of(&ds),
            vec![Span { from: 1, to: 50 }, Span { from: 64, to: 64 }]
        );
        assert_eq!(expand(&ranges), ds);
    }
}
