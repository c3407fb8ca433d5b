//! The control-plane decider (HeteroLLM §4.3): which decision of the plan
//! applies to an operator at a length.
//!
//! A plan stores each operator's decisions as ranges of lengths
//! ([`hetero_plan::DecisionRange`]). [`Decider`] keeps the first and last
//! length of every range and finds the one covering a length by binary
//! search, in O(log ranges), without expanding the table at load; the
//! decision at that length is then materialised from its range. With the
//! `tree` feature, [`tree::DistilledTree`] fits a linfa decision tree to the
//! same table and states how often it agrees with it.

use std::collections::HashMap;

use hetero_plan::{Decision, OpPlan, Phase, Plan};

use crate::{Error, Result};

/// One operator's ranges: their first and last lengths, sorted.
#[derive(Debug, Clone)]
struct Table {
    from: Vec<u32>,
    to: Vec<u32>,
}

/// An operator's tables in a phase, one per group of layers: the group's
/// first layer and the table's index in the plan, sorted by first layer.
type Groups = Vec<(u32, usize)>;

/// O(log ranges) lookup of the plan's decision for any operator, phase,
/// layer and length.
#[derive(Debug, Clone)]
pub struct Decider {
    tables: Vec<Table>,
    by_name: HashMap<(String, Phase), Groups>,
}

impl Decider {
    /// Reads the range bounds of every operator of the plan.
    pub fn new(plan: &Plan) -> Decider {
        let mut by_name: HashMap<(String, Phase), Groups> = HashMap::with_capacity(plan.ops.len());
        let tables = (plan.ops.iter().enumerate())
            .map(|(i, op)| {
                by_name
                    .entry((op.op.clone(), op.phase))
                    .or_default()
                    .push((op.first_layer, i));
                Table {
                    from: op.ranges.iter().map(|r| r.from).collect(),
                    to: op.ranges.iter().map(|r| r.to).collect(),
                }
            })
            .collect();
        for groups in by_name.values_mut() {
            groups.sort_unstable();
        }
        Decider { tables, by_name }
    }

    /// The index of an operator's table in the plan (`plan.ops[i]`): the
    /// table of its first layer, where the plan decides per group of layers
    /// ([`Decider::op_index_at`]).
    pub fn op_index(&self, op: &str, phase: Phase) -> Option<usize> {
        self.op_index_at(op, phase, 0)
    }

    /// The index of the table that decides `op` in `phase` in `layer`, in
    /// O(log groups). A layer past the last group's first layer takes the
    /// last group: the plan's validation makes the groups cover every
    /// layer end to end.
    pub fn op_index_at(&self, op: &str, phase: Phase, layer: u32) -> Option<usize> {
        let groups = self.by_name.get(&(op.to_string(), phase))?;
        let g = groups
            .partition_point(|&(first, _)| first <= layer)
            .checked_sub(1)?;
        Some(groups[g].1)
    }

    /// How many groups of layers `op` is decided in, in `phase` (0: none).
    pub fn groups(&self, op: &str, phase: Phase) -> usize {
        self.by_name
            .get(&(op.to_string(), phase))
            .map_or(0, Vec::len)
    }

    /// The index of the range of `plan.ops[op]` covering `len`, in
    /// O(log ranges).
    #[inline]
    pub fn decide(&self, op: usize, len: u32) -> Option<usize> {
        let t = self.tables.get(op)?;
        let i = t.from.partition_point(|&f| f <= len).checked_sub(1)?;
        (t.to[i] >= len).then_some(i)
    }

    /// The decision at `len`, materialised from its range, or an error
    /// naming what the plan covers.
    pub fn decision(&self, plan: &Plan, op: usize, len: u32) -> Result<Decision> {
        let o = &plan.ops[op];
        self.decide(op, len)
            .and_then(|i| o.ranges[i].at(len))
            .ok_or_else(|| Error::NoDecision {
                op: o.op.clone(),
                phase: o.phase,
                len,
                covered: covered(o),
            })
    }
}

/// The lengths an operator's table covers, in words (`1..=2048`, `1, 2, 4`).
pub fn covered(op: &OpPlan) -> String {
    let (first, last) = match (op.spans.first(), op.spans.last()) {
        (Some(a), Some(b)) => (a.from, b.to),
        _ => return "no lengths".into(),
    };
    let count = op.length_count();
    match count {
        1 => format!("length {first}"),
        _ if op.spans.len() == 1 => format!("lengths {first}..={last}"),
        _ if count <= 8 => format!(
            "lengths {}",
            op.lengths()
                .map(|l| l.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        _ => format!("{count} lengths between {first} and {last}"),
    }
}

#[cfg(feature = "tree")]
pub mod tree {
    //! A decision tree distilled from the decision table (linfa-trees).
    //!
    //! The classes are the distinct strategies of one operator's table; the
    //! only feature is the length. The table stays the source of truth: the
    //! tree is a compact stand-in whose [`agreement`](DistilledTree::agreement)
    //! with the table over every length it covers is measured, not assumed.

    use hetero_plan::{Decision, OpPlan, Strategy};
    use linfa::prelude::*;
    use linfa_trees::DecisionTree;
    use ndarray::{Array1, Array2};

    /// One operator's tree.
    pub struct DistilledTree {
        tree: Option<DecisionTree<f64, usize>>,
        /// The distinct strategies, indexed by class.
        pub classes: Vec<Strategy>,
        /// Share of the table's lengths where the tree picks the table's strategy.
        pub agreement: f64,
        /// Leaves of the tree.
        pub leaves: usize,
        /// Depth of the tree.
        pub depth: usize,
    }

    impl DistilledTree {
        /// Fits a tree to the table of `op`; `max_depth: None` grows it fully.
        pub fn fit(op: &OpPlan, max_depth: Option<usize>) -> DistilledTree {
            let decisions: Vec<Decision> = op.decisions().collect();
            let mut classes: Vec<Strategy> = Vec::new();
            let y: Vec<usize> = decisions
                .iter()
                .map(|d| match classes.iter().position(|c| *c == d.strategy) {
                    Some(i) => i,
                    None => {
                        classes.push(d.strategy.clone());
                        classes.len() - 1
                    }
                })
                .collect();
            if classes.len() <= 1 {
                // One strategy everywhere: the tree is a single leaf.
                return DistilledTree {
                    tree: None,
                    agreement: 1.0,
                    leaves: 1,
                    depth: 0,
                    classes,
                };
            }
            let x = Array2::from_shape_vec(
                (y.len(), 1),
                decisions.iter().map(|d| d.len as f64).collect(),
            )
            .expect("one feature per decision");
            let data = Dataset::new(x.clone(), Array1::from(y.clone()));
            let tree = DecisionTree::params()
                .max_depth(max_depth)
                .min_weight_split(2.0)
                .min_weight_leaf(1.0)
                .min_impurity_decrease(1e-12)
                .fit(&data)
                .expect("a tree fits any non-empty table");
            let pred = tree.predict(&x);
            let agree = pred.iter().zip(&y).filter(|(a, b)| a == b).count();
            DistilledTree {
                agreement: agree as f64 / y.len() as f64,
                leaves: tree.num_leaves(),
                depth: tree.max_depth(),
                tree: Some(tree),
                classes,
            }
        }

        /// The strategy the tree picks at `len`.
        pub fn predict(&self, len: u32) -> &Strategy {
            let class = match &self.tree {
                None => 0,
                Some(t) => {
                    let x = Array2::from_shape_vec((1, 1), vec![len as f64]).expect("1x1");
                    t.predict(&x)[0]
                }
            };
            &self.classes[class]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{plan_with, row_cut, single};

    #[test]
    fn dense_and_sparse_tables_answer_exact_lengths_only() {
        let dense: Vec<_> = (1..=300).map(|l| (l, single("cpu:0"))).collect();
        let sparse = vec![
            (1, single("cpu:0")),
            (16, single("cpu:0")),
            (256, single("cpu:0")),
        ];
        let plan = plan_with(vec![
            ("a", Phase::Prefill, dense),
            ("b", Phase::Decode, sparse),
        ]);
        let d = Decider::new(&plan);
        let a = d.op_index("a", Phase::Prefill).unwrap();
        let b = d.op_index("b", Phase::Decode).unwrap();
        assert!(d.op_index("a", Phase::Decode).is_none());
        // One strategy everywhere: one range.
        assert_eq!(plan.ops[a].ranges.len(), 1);
        for len in 1..=300 {
            assert_eq!(d.decide(a, len), Some(0));
            assert_eq!(d.decision(&plan, a, len).unwrap().len, len);
        }
        assert_eq!(d.decide(a, 0), None);
        assert_eq!(d.decide(a, 301), None);
        assert_eq!(d.decide(b, 16), Some(1));
        assert_eq!(d.decide(b, 17), None);
        let e = d.decision(&plan, b, 17).unwrap_err().to_string();
        assert!(e.contains("lengths 1, 16, 256"), "{e}");
        let e = d.decision(&plan, a, 301).unwrap_err().to_string();
        assert!(e.contains("lengths 1..=300"), "{e}");
    }

    #[test]
    fn an_operator_decided_per_group_of_layers_answers_by_layer() {
        let gpu = vec![(1, single("npu-sim"))];
        let cpu = vec![(1, single("cpu:0"))];
        let mut plan = plan_with(vec![
            ("a", Phase::Decode, gpu),
            ("a", Phase::Decode, cpu),
            ("b", Phase::Decode, vec![(1, single("cpu:0"))]),
        ]);
        plan.ops[0].layers = 3;
        plan.ops[1].first_layer = 3;
        plan.ops[1].layers = 5;
        plan.ops[2].layers = 8;
        let d = Decider::new(&plan);
        assert_eq!(
            (d.groups("a", Phase::Decode), d.groups("b", Phase::Decode)),
            (2, 1)
        );
        for (layer, want) in [(0, 0), (2, 0), (3, 1), (7, 1)] {
            assert_eq!(
                d.op_index_at("a", Phase::Decode, layer),
                Some(want),
                "{layer}"
            );
        }
        assert_eq!(d.op_index("a", Phase::Decode), Some(0));
        assert_eq!(d.op_index_at("b", Phase::Decode, 7), Some(2));
        let at = |layer| {
            let i = d.op_index_at("a", Phase::Decode, layer).unwrap();
            d.decision(&plan, i, 1).unwrap().strategy
        };
        assert_eq!((at(2), at(3)), (single("npu-sim"), single("cpu:0")));
    }

    #[cfg(feature = "tree")]
    #[test]
    fn distilled_tree_states_its_agreement_with_the_table() {
        // Three regimes: cpu alone, a row cut, npu alone, with one odd
        // length inside the row-cut range.
        let table: Vec<_> = (1..=512)
            .map(|l| {
                let s = if l < 64 || l == 200 {
                    single("cpu:0")
                } else if l < 300 {
                    row_cut(&[("cpu:0", 256), ("npu-sim", 768)])
                } else {
                    single("npu-sim")
                };
                (l, s)
            })
            .collect();
        let plan = plan_with(vec![("a", Phase::Prefill, table)]);
        let full = tree::DistilledTree::fit(&plan.ops[0], None);
        assert_eq!(full.classes.len(), 3);
        assert_eq!(full.agreement, 1.0, "a full tree reproduces the table");
        for len in [1u32, 63, 64, 200, 299, 300, 512] {
            let want = &plan.ops[0].at(len).unwrap().strategy;
            assert_eq!(full.predict(len), want, "len {len}");
        }
        // A stump cannot isolate three regimes plus an outlier: the stated
        // agreement is below 1 and equals the share it gets right.
        let stump = tree::DistilledTree::fit(&plan.ops[0], Some(1));
        assert!(
            stump.agreement < 1.0 && stump.agreement > 0.5,
            "{}",
            stump.agreement
        );
        let right = (1..=512u32)
            .filter(|&l| stump.predict(l) == &plan.ops[0].at(l).unwrap().strategy)
            .count();
        assert!((stump.agreement - right as f64 / 512.0).abs() < 1e-12);
    }
}
