//! Fast evaluation of latency models: the trees of a [`LatencyModel`]
//! flattened into one contiguous node array.
//!
//! The solver asks a fitted predictor for about a million GEMM latencies
//! (every processor × operator × length, plus the row shares of every split
//! it searches). The file form of a tree ([`TreeNode`], an enum per node in
//! a `Vec` per tree) is what serde reads and writes; walking it costs an
//! enum match, a fallible bounds check and an unpredictable branch per
//! step, and the trees of a boosted model lie in as many allocations.
//! [`CompiledModel`] is built once from a model and gives **the same `f64`
//! results** as [`LatencyModel::predict_us`], bit for bit:
//!
//! * every tree of the model is copied into one array of 16-byte nodes
//!   (threshold, feature, index of the left child; the right child is next
//!   to it), so a step is one load, one comparison and one add;
//! * a leaf is a node that points to itself through a constant feature
//!   slot, so trees walk in groups of [`LANES`] in lockstep for a fixed
//!   number of steps (the group's deepest tree), which keeps several
//!   independent loads in flight instead of one chain of dependent ones;
//!   trees are grouped by depth so shallow ones do not wait for deep ones;
//! * leaf values are summed in the file's tree order with the same
//!   operations as `predict_us`, so the sum rounds identically.
//!
//! A residual model's trees are flattened the same way and its parametric
//! base is evaluated as it is.
//!
//! Parametric models (linear, roofline), malformed trees and any model kind
//! this module does not know are kept as they are and evaluated with
//! [`LatencyModel::predict_us`]: compiling never changes a prediction.

use crate::predictor::{LatencyModel, N_FEATURES, Tree, TreeNode, features};
use crate::{DType, GemmShape, OperandOrder};

/// Index of the extra feature slot leaves read: always 0.0, so
/// `0.0 <= +inf` sends a leaf to its own index.
const CONST_SLOT: u32 = N_FEATURES as u32;

/// Trees walked together in lockstep.
const LANES: usize = 8;

/// A feature vector with the constant slot leaves read.
type X = [f64; N_FEATURES + 1];

/// One node of a flattened tree.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Node {
    /// Split point; `+inf` for a leaf.
    threshold: f64,
    /// Feature index; [`CONST_SLOT`] for a leaf.
    feature: u32,
    /// Left child (`x[feature] <= threshold`); the right child is
    /// `left + 1`. A leaf's `left` is its own index.
    left: u32,
}

/// Every tree of one model, flattened.
#[derive(Debug, Clone, PartialEq)]
struct Forest {
    nodes: Vec<Node>,
    /// Leaf values by node index (0 for splits).
    values: Vec<f64>,
    /// Root of each tree, in the file's order.
    roots: Vec<u32>,
    /// Tree indices in walking order (by depth), in groups of [`LANES`].
    walk: Vec<u32>,
    /// Per group of `walk`: steps from every root of the group to its leaf.
    group_depth: Vec<u32>,
    /// Some tree has a split (else the features are not needed).
    splits: bool,
}

/// How the trees' leaf values become ln(µs).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Combine {
    /// One tree: its value.
    Tree,
    /// The mean of the trees.
    Mean,
    /// `base + rate · Σ`.
    Boosted { base: f64, rate: f64 },
    /// `ln(base(shape)) + rate · Σ`, with the parametric base kept in
    /// [`Kind::Trees::base`].
    Residual { rate: f64 },
}

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Trees {
        forest: Forest,
        combine: Combine,
        /// The parametric base of a residual model.
        base: Option<Box<LatencyModel>>,
    },
    /// Evaluated by [`LatencyModel::predict_us`].
    AsIs(LatencyModel),
}

/// A latency model prepared for fast evaluation; see the module docs.
///
/// ```
/// # use hetero_plan::{DType, GemmShape, OperandOrder, LatencyModel, Work};
/// let model = LatencyModel::Linear { alpha_us: 5.0, beta_us: 1e-6, work: Work::Flops };
/// let fast = model.compile();
/// let s = GemmShape::new(64, 4096, 4096).unwrap();
/// assert_eq!(
///     fast.predict_us(s, DType::F16, OperandOrder::Aw),
///     model.predict_us(s, DType::F16, OperandOrder::Aw),
/// );
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct CompiledModel {
    kind: Kind,
}

impl LatencyModel {
    /// Builds the fast evaluator of this model (see [`CompiledModel`]).
    pub fn compile(&self) -> CompiledModel {
        let trees = match self {
            LatencyModel::Tree(t) => Some((std::slice::from_ref(t), Combine::Tree)),
            LatencyModel::Forest { trees } => Some((trees.as_slice(), Combine::Mean)),
            LatencyModel::Boosted { base, rate, trees } => Some((
                trees.as_slice(),
                Combine::Boosted {
                    base: *base,
                    rate: *rate,
                },
            )),
            LatencyModel::Residual { rate, trees, .. } => {
                Some((trees.as_slice(), Combine::Residual { rate: *rate }))
            }
            // Parametric models are a few operations already; model kinds
            // added later are evaluated as they are until taught here.
            _ => None,
        };
        let base = match self {
            LatencyModel::Residual { base, .. } => Some(base.clone()),
            _ => None,
        };
        let kind = match trees.and_then(|(t, c)| Some((flatten(t)?, c))) {
            Some((forest, combine)) => Kind::Trees {
                forest,
                combine,
                base,
            },
            None => Kind::AsIs(self.clone()),
        };
        CompiledModel { kind }
    }
}

impl Kind {
    fn predict_us(&self, shape: GemmShape, dtype: DType, order: OperandOrder) -> Option<f64> {
        let (forest, combine, base) = match self {
            Kind::AsIs(m) => return m.predict_us(shape, dtype, order),
            Kind::Trees {
                forest,
                combine,
                base,
            } => (forest, *combine, base),
        };
        // A residual model's base first, as `predict_us` evaluates it.
        let b = match base {
            Some(base) => Some(base.predict_us(shape, dtype, order)?),
            None => None,
        };
        let mut x: X = [0.0; N_FEATURES + 1];
        if forest.splits {
            x[..N_FEATURES].copy_from_slice(&features(shape, dtype, order));
        }
        let sum = forest.sum(&x);
        // The formulas of `LatencyModel::predict_us`.
        let t = match combine {
            Combine::Tree => sum.exp(),
            Combine::Mean => (sum / forest.roots.len().max(1) as f64).exp(),
            Combine::Boosted { base, rate } => (base + rate * sum).exp(),
            Combine::Residual { rate } => b? * (rate * sum).exp(),
        };
        (t.is_finite() && t > 0.0).then_some(t)
    }

    fn nodes(&self) -> usize {
        match self {
            Kind::Trees { forest, .. } => forest.nodes.len(),
            Kind::AsIs(_) => 0,
        }
    }
}

impl CompiledModel {
    /// Predicted latency in µs, equal to [`LatencyModel::predict_us`] of the
    /// model it was compiled from.
    pub fn predict_us(&self, shape: GemmShape, dtype: DType, order: OperandOrder) -> Option<f64> {
        self.kind.predict_us(shape, dtype, order)
    }

    /// Whether the model's trees were flattened (false: it is evaluated by
    /// [`LatencyModel::predict_us`]).
    pub fn is_flattened(&self) -> bool {
        matches!(self.kind, Kind::Trees { .. })
    }

    /// Nodes in the flattened trees (0 when not flattened).
    pub fn nodes(&self) -> usize {
        self.kind.nodes()
    }
}

impl Forest {
    /// The leaf values of every tree at `x`, summed in tree order exactly
    /// as `predict_us` sums them (`Iterator::sum` over the trees).
    fn sum(&self, x: &X) -> f64 {
        let trees = self.roots.len();
        if trees <= 256 {
            let mut out = [0.0; 256];
            self.leaves(x, &mut out[..trees]);
            sum_in_order(&out[..trees])
        } else {
            let mut out = vec![0.0; trees];
            self.leaves(x, &mut out);
            sum_in_order(&out)
        }
    }

    /// Each tree's leaf value at `x`, by tree index.
    fn leaves(&self, x: &X, out: &mut [f64]) {
        let nodes = &self.nodes[..];
        for (group, &depth) in self.walk.chunks(LANES).zip(&self.group_depth) {
            // Spare lanes of the last group walk tree 0's root and are not read.
            let mut at = [self.roots[0]; LANES];
            for (a, &t) in at.iter_mut().zip(group) {
                *a = self.roots[t as usize];
            }
            for _ in 0..depth {
                for l in &mut at {
                    let n = &nodes[*l as usize];
                    // Left when `x <= threshold` (false for NaN, as in `Tree::eval`).
                    *l = n.left + 1 - u32::from(x[n.feature as usize] <= n.threshold);
                }
            }
            for (&t, &leaf) in group.iter().zip(&at) {
                out[t as usize] = self.values[leaf as usize];
            }
        }
    }
}

/// Sums in order, as `Iterator::sum::<f64>` does (a fold from `-0.0`).
fn sum_in_order(v: &[f64]) -> f64 {
    let mut s = -0.0;
    for &x in v {
        s += x;
    }
    s
}

/// What a node of a source tree is.
enum Step {
    Leaf(f64),
    Split {
        feature: u32,
        threshold: f64,
        left: usize,
        right: usize,
    },
}

/// Builds a [`Forest`] tree by tree, depth first from each root.
struct Builder {
    /// Most nodes the copy may have.
    limit: usize,
    nodes: Vec<Node>,
    values: Vec<f64>,
    roots: Vec<u32>,
    depths: Vec<u32>,
    splits: bool,
}

impl Builder {
    fn new(limit: usize) -> Builder {
        Builder {
            limit,
            nodes: vec![],
            values: vec![],
            roots: vec![],
            depths: vec![],
            splits: false,
        }
    }

    /// Copies the tree reached from `root` through `step` (which reads a
    /// source node); `None` when it refers to something missing or the
    /// copy outgrows `u32` indices.
    fn tree(&mut self, root: usize, mut step: impl FnMut(usize) -> Option<Step>) -> Option<()> {
        let slot = self.push();
        self.roots.push(u32::try_from(slot).ok()?);
        let mut depth_max = 0;
        // (source node, slot in `nodes`, depth)
        let mut stack = vec![(root, slot, 0u32)];
        while let Some((i, slot, depth)) = stack.pop() {
            match step(i)? {
                Step::Leaf(value) => {
                    self.nodes[slot] = Node {
                        threshold: f64::INFINITY,
                        feature: CONST_SLOT,
                        left: u32::try_from(slot).ok()?,
                    };
                    self.values[slot] = value;
                    depth_max = depth_max.max(depth);
                }
                Step::Split {
                    feature,
                    threshold,
                    left,
                    right,
                } => {
                    self.splits = true;
                    if self.nodes.len() + 2 > self.limit {
                        return None;
                    }
                    let c = self.push();
                    self.push();
                    self.nodes[slot] = Node {
                        threshold,
                        feature,
                        left: u32::try_from(c).ok()?,
                    };
                    stack.push((left, c, depth + 1));
                    stack.push((right, c + 1, depth + 1));
                }
            }
        }
        self.depths.push(depth_max);
        Some(())
    }

    fn push(&mut self) -> usize {
        self.nodes.push(Node {
            threshold: f64::INFINITY,
            feature: CONST_SLOT,
            left: 0,
        });
        self.values.push(0.0);
        self.nodes.len() - 1
    }

    fn finish(self) -> Forest {
        let mut walk: Vec<u32> = (0..self.roots.len() as u32).collect();
        walk.sort_by_key(|&t| self.depths[t as usize]);
        let group_depth = walk
            .chunks(LANES)
            .map(|g| {
                g.iter()
                    .map(|&t| self.depths[t as usize])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        Forest {
            nodes: self.nodes,
            values: self.values,
            roots: self.roots,
            walk,
            group_depth,
            splits: self.splits,
        }
    }
}

/// Flattens trees into one node array; `None` when a tree is malformed (a
/// missing node or feature, a child not after its parent) or the copy is
/// too large, so the caller keeps the model as it is.
fn flatten(trees: &[Tree]) -> Option<Forest> {
    let total: usize = trees.iter().map(|t| t.nodes.len()).sum();
    // A tree whose nodes share children (a DAG) is copied out per path;
    // refuse pathological blow-ups.
    let mut b = Builder::new(4 * total + 64);
    for t in trees {
        b.tree(0, |i| match t.nodes.get(i)? {
            TreeNode::Leaf { value } => Some(Step::Leaf(*value)),
            TreeNode::Split {
                feature,
                threshold,
                left,
                right,
            } => {
                let (l, r) = (*left as usize, *right as usize);
                // Children after their parent: no cycles, a finite walk
                // (the rule `Predictor::validate` enforces).
                let ok =
                    (*feature as usize) < N_FEATURES && i < l.min(r) && l.max(r) < t.nodes.len();
                ok.then_some(Step::Split {
                    feature: u32::from(*feature),
                    threshold: *threshold,
                    left: l,
                    right: r,
                })
            }
        })?;
    }
    Some(b.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predictor::Work;

    /// A deterministic generator (tests only; no rand dependency here).
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            self.0 >> 11
        }
        fn unit(&mut self) -> f64 {
            self.next() as f64 / (1u64 << 53) as f64
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// A random tree on random features with thresholds drawn from the
    /// feature values of random shapes, of uneven depth.
    fn random_tree(r: &mut Lcg, max_depth: u32) -> Tree {
        fn build(r: &mut Lcg, nodes: &mut Vec<TreeNode>, depth: u32) -> u32 {
            let me = nodes.len() as u32;
            if depth == 0 || (depth < 6 && r.below(4) == 0) {
                nodes.push(TreeNode::Leaf {
                    value: r.unit() * 8.0 - 1.0,
                });
                return me;
            }
            let feature = r.below(N_FEATURES as u64) as u16;
            let x = features(random_shape(r), DType::F16, OperandOrder::Aw);
            nodes.push(TreeNode::Leaf { value: 0.0 });
            let left = build(r, nodes, depth - 1);
            let right = build(r, nodes, depth - 1);
            nodes[me as usize] = TreeNode::Split {
                feature,
                threshold: x[feature as usize],
                left,
                right,
            };
            me
        }
        let mut nodes = vec![];
        build(r, &mut nodes, max_depth);
        Tree { nodes }
    }

    fn random_shape(r: &mut Lcg) -> GemmShape {
        let mut d = |max_log2: u32| {
            let v = (r.unit() * max_log2 as f64).exp2() as u32;
            // Tile edges and their neighbours, where features step.
            match r.below(3) {
                0 => v.max(1),
                1 => (v / 32 * 32).max(32),
                _ => (v / 256 * 256 + 1).max(1),
            }
        };
        GemmShape::new(d(14), d(15), d(17)).unwrap()
    }

    fn all_variants(r: &mut Lcg) -> Vec<LatencyModel> {
        let mut trees =
            |n: usize, depth: u32| -> Vec<Tree> { (0..n).map(|_| random_tree(r, depth)).collect() };
        vec![
            LatencyModel::Linear {
                alpha_us: 3.5,
                beta_us: 2e-7,
                work: Work::Flops,
            },
            LatencyModel::Linear {
                alpha_us: 1.0,
                beta_us: 1e-4,
                work: Work::Bytes,
            },
            LatencyModel::Roofline {
                peak_gflops: 900.0,
                bw_gbps: 120.0,
                launch_us: 4.0,
            },
            LatencyModel::Tree(trees(1, 10).remove(0)),
            LatencyModel::Forest {
                trees: trees(37, 8),
            },
            LatencyModel::Forest { trees: vec![] },
            LatencyModel::Boosted {
                base: 4.2,
                rate: 0.1,
                trees: trees(203, 6),
            },
            LatencyModel::Boosted {
                base: 1.0,
                rate: 0.3,
                trees: trees(3, 1),
            },
            LatencyModel::Residual {
                base: Box::new(LatencyModel::Roofline {
                    peak_gflops: 900.0,
                    bw_gbps: 120.0,
                    launch_us: 4.0,
                }),
                rate: 0.1,
                trees: trees(120, 5),
            },
            LatencyModel::Residual {
                base: Box::new(LatencyModel::Linear {
                    alpha_us: -50.0,
                    beta_us: 1e-7,
                    work: Work::Flops,
                }),
                rate: 0.2,
                trees: trees(9, 3),
            },
        ]
    }

    #[test]
    fn compiled_equals_predict_us_on_random_shapes_for_every_variant() {
        let mut r = Lcg(7);
        let models = all_variants(&mut r);
        let orders = [OperandOrder::Aw, OperandOrder::Transposed];
        for model in &models {
            let fast = model.compile();
            let trees = !matches!(
                model,
                LatencyModel::Linear { .. } | LatencyModel::Roofline { .. }
            );
            assert_eq!(fast.is_flattened(), trees, "{}", model.family());
            for i in 0..3000 {
                let s = random_shape(&mut r);
                let dtype = DType::ALL[i % DType::ALL.len()];
                let order = orders[i % 2];
                let want = model.predict_us(s, dtype, order);
                let got = fast.predict_us(s, dtype, order);
                // Bit for bit: the solver's decisions must not move.
                assert_eq!(
                    got.map(f64::to_bits),
                    want.map(f64::to_bits),
                    "{} at {s:?} {dtype} {order:?}: {got:?} != {want:?}",
                    model.family()
                );
                // A residual model's base may refuse a shape (the linear one
                // above goes negative on small shapes); trees alone never do.
                let base = matches!(model, LatencyModel::Residual { .. });
                assert!(
                    want.is_some() || !trees || base,
                    "{}: {s:?}",
                    model.family()
                );
            }
        }
    }

    #[test]
    fn malformed_trees_are_kept_and_still_refused() {
        let leaf = |v: f64| TreeNode::Leaf { value: v };
        let split = |feature: u16, left: u32, right: u32| TreeNode::Split {
            feature,
            threshold: 1.0,
            left,
            right,
        };
        let bad = [
            vec![split(0, 0, 0)],                        // a cycle
            vec![split(0, 1, 5), leaf(1.0)],             // a missing node
            vec![split(99, 1, 2), leaf(1.0), leaf(2.0)], // a missing feature
            vec![],                                      // no root
        ];
        let s = GemmShape::new(8, 8, 8).unwrap();
        for nodes in bad {
            let model = LatencyModel::Boosted {
                base: 0.0,
                rate: 1.0,
                trees: vec![Tree { nodes }],
            };
            let fast = model.compile();
            assert!(!fast.is_flattened());
            assert_eq!(fast.predict_us(s, DType::F32, OperandOrder::Aw), None);
            assert_eq!(model.predict_us(s, DType::F32, OperandOrder::Aw), None);
        }
    }

    #[test]
    fn a_shared_child_is_copied_per_path() {
        // Node 3 is reached from both sides of node 1: valid for
        // `Tree::eval`, so the compiled walk must agree.
        let t = Tree {
            nodes: vec![
                TreeNode::Split {
                    feature: 0,
                    threshold: 10.0,
                    left: 1,
                    right: 2,
                },
                TreeNode::Split {
                    feature: 2,
                    threshold: 100.0,
                    left: 3,
                    right: 3,
                },
                TreeNode::Leaf { value: 2.0 },
                TreeNode::Leaf { value: 1.0 },
            ],
        };
        let model = LatencyModel::Tree(t);
        let fast = model.compile();
        assert!(fast.is_flattened());
        for m in [1, 10, 11, 500] {
            let s = GemmShape::new(m, 64, 64).unwrap();
            assert_eq!(
                fast.predict_us(s, DType::F16, OperandOrder::Aw),
                model.predict_us(s, DType::F16, OperandOrder::Aw)
            );
        }
    }
}
