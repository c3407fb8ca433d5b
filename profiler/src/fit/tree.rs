//! A CART regression tree, grown into plan-format's [`Tree`] so that the
//! fitted model serialises as it is and predicts without this crate.
//!
//! linfa 0.8's `linfa-trees` only classifies; this tree plugs into linfa
//! through its `Fit` / `PredictInplace` traits (see [`TreeParams`]), and the
//! choice against smartcore's regressor is recorded in `docs/decisions.md`.

use hetero_plan::predictor::N_FEATURES;
use hetero_plan::{Tree, TreeNode};
use linfa::dataset::AsSingleTargets;
use linfa::prelude::*;
use ndarray::{Array1, ArrayBase, Data, Ix2};
use rand::Rng;
use rand::seq::SliceRandom;

/// One row of features.
pub type Features = [f64; N_FEATURES];

/// Hyper-parameters of a tree; checked by [`TreeParams::check`] before fitting.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TreeParams {
    /// Deepest level (the root is level 0).
    pub max_depth: usize,
    /// Fewest rows in a leaf.
    pub min_samples_leaf: usize,
    /// Features tried per split (random subset); all when `None`.
    pub max_features: Option<usize>,
    /// Extremely randomised splits (Geurts et al. 2006, "extra trees"):
    /// one threshold per feature, drawn uniformly between the node's
    /// smallest and largest value, instead of the best of every cut. The
    /// best of those random cuts is taken. Averaged over many trees this
    /// smooths the steps of a single tree.
    pub random_thresholds: bool,
}

impl Default for TreeParams {
    fn default() -> Self {
        TreeParams {
            max_depth: 14,
            min_samples_leaf: 2,
            max_features: None,
            random_thresholds: false,
        }
    }
}

/// Why a tree could not be fitted.
#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    /// Bad hyper-parameters.
    #[error("invalid tree parameters: {0}")]
    Params(String),
    /// Fewer rows than a leaf needs, or mismatched lengths.
    #[error("cannot fit a tree: {0}")]
    Data(String),
    /// Errors from linfa itself.
    #[error(transparent)]
    Linfa(#[from] Error),
}

impl TreeParams {
    /// Checks the parameters (linfa's `ParamGuard` idea).
    pub fn check(&self) -> Result<(), TreeError> {
        if self.min_samples_leaf == 0 {
            return Err(TreeError::Params(
                "min_samples_leaf must be at least 1".into(),
            ));
        }
        if self.max_features == Some(0) || self.max_features.is_some_and(|m| m > N_FEATURES) {
            return Err(TreeError::Params(format!(
                "max_features must be between 1 and {N_FEATURES}"
            )));
        }
        Ok(())
    }

    /// Grows a tree on `x[idx]`, `y[idx]`.
    pub fn grow<R: Rng>(
        &self,
        x: &[Features],
        y: &[f64],
        idx: &[usize],
        rng: &mut R,
    ) -> Result<Tree, TreeError> {
        self.check()?;
        if x.len() != y.len() {
            return Err(TreeError::Data(format!(
                "{} feature rows but {} targets",
                x.len(),
                y.len()
            )));
        }
        if idx.is_empty() {
            return Err(TreeError::Data("no rows".into()));
        }
        let mut idx = idx.to_vec();
        let mut nodes = Vec::new();
        let mut grower = Grower {
            x,
            y,
            p: *self,
            nodes: &mut nodes,
            order: Vec::new(),
        };
        grower.build(&mut idx, 0, rng);
        Ok(Tree { nodes })
    }
}

struct Grower<'a> {
    x: &'a [Features],
    y: &'a [f64],
    p: TreeParams,
    nodes: &'a mut Vec<TreeNode>,
    order: Vec<usize>,
}

struct Split {
    feature: usize,
    threshold: f64,
    gain: f64,
}

/// Count, sum and sum of squares of a node's targets.
#[derive(Clone, Copy)]
struct Sums {
    n: usize,
    s: f64,
    sq: f64,
}

impl Sums {
    const EMPTY: Sums = Sums {
        n: 0,
        s: 0.0,
        sq: 0.0,
    };

    fn add(&mut self, y: f64) {
        self.n += 1;
        self.s += y;
        self.sq += y * y;
    }

    /// Squared error about the mean.
    fn sse(&self) -> f64 {
        self.sq - self.s * self.s / self.n as f64
    }

    /// The squared error of a cut that sends `left` (a part of `self`) to
    /// one side and the rest to the other.
    fn split_sse(&self, left: Sums) -> f64 {
        let right = Sums {
            n: self.n - left.n,
            s: self.s - left.s,
            sq: self.sq - left.sq,
        };
        left.sse() + right.sse()
    }
}

/// Keeps `cand` if it gains more than `best` (and more than nothing).
fn keep_better(best: &mut Option<Split>, cand: Split) {
    if cand.gain > best.as_ref().map_or(1e-12, |b| b.gain) {
        *best = Some(cand);
    }
}

impl Grower<'_> {
    fn build<R: Rng>(&mut self, idx: &mut [usize], depth: usize, rng: &mut R) -> u32 {
        let id = self.nodes.len();
        let n = idx.len() as f64;
        let mean = idx.iter().map(|&i| self.y[i]).sum::<f64>() / n;
        self.nodes.push(TreeNode::Leaf { value: mean });
        if depth >= self.p.max_depth || idx.len() < 2 * self.p.min_samples_leaf {
            return id as u32;
        }
        let Some(split) = self.best_split(idx, rng) else {
            return id as u32;
        };
        // Partition in place: rows at or below the threshold first.
        let mut lo = 0;
        for j in 0..idx.len() {
            if self.x[idx[j]][split.feature] <= split.threshold {
                idx.swap(lo, j);
                lo += 1;
            }
        }
        let (left, right) = idx.split_at_mut(lo);
        let l = self.build(left, depth + 1, rng);
        let r = self.build(right, depth + 1, rng);
        self.nodes[id] = TreeNode::Split {
            feature: split.feature as u16,
            threshold: split.threshold,
            left: l,
            right: r,
        };
        id as u32
    }

    fn best_split<R: Rng>(&mut self, idx: &[usize], rng: &mut R) -> Option<Split> {
        let mut feats: Vec<usize> = (0..N_FEATURES).collect();
        if let Some(m) = self.p.max_features {
            feats.shuffle(rng);
            feats.truncate(m);
        }
        let n = idx.len();
        let node = Sums {
            n,
            s: idx.iter().map(|&i| self.y[i]).sum(),
            sq: idx.iter().map(|&i| self.y[i] * self.y[i]).sum(),
        };
        let sse_parent = node.sse();
        if sse_parent <= 1e-12 {
            return None;
        }
        if self.p.random_thresholds {
            return self.random_split(idx, &feats, node, rng);
        }
        let min_leaf = self.p.min_samples_leaf;
        let mut best: Option<Split> = None;
        for f in feats {
            self.order.clear();
            self.order.extend_from_slice(idx);
            let x = self.x;
            self.order
                .sort_unstable_by(|&a, &b| x[a][f].total_cmp(&x[b][f]));
            let (mut s, mut sq) = (0.0, 0.0);
            for j in 0..n - 1 {
                let yi = self.y[self.order[j]];
                s += yi;
                sq += yi * yi;
                let left_n = j + 1;
                if left_n < min_leaf || n - left_n < min_leaf {
                    continue;
                }
                let (xa, xb) = (x[self.order[j]][f], x[self.order[j + 1]][f]);
                if xa == xb {
                    continue;
                }
                let left = Sums { n: left_n, s, sq };
                keep_better(
                    &mut best,
                    Split {
                        feature: f,
                        threshold: xa + 0.5 * (xb - xa),
                        gain: sse_parent - node.split_sse(left),
                    },
                );
            }
        }
        best
    }

    /// The best of one uniformly drawn threshold per feature in `feats`
    /// (see [`TreeParams::random_thresholds`]); `node` holds the sums of
    /// `idx`'s targets.
    fn random_split<R: Rng>(
        &self,
        idx: &[usize],
        feats: &[usize],
        node: Sums,
        rng: &mut R,
    ) -> Option<Split> {
        let min_leaf = self.p.min_samples_leaf;
        let sse_parent = node.sse();
        let mut best: Option<Split> = None;
        for &f in feats {
            let (lo, hi) = idx
                .iter()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &i| {
                    (lo.min(self.x[i][f]), hi.max(self.x[i][f]))
                });
            if lo >= hi {
                continue;
            }
            // In [lo, hi): rows at lo always go left, rows at hi right.
            let threshold = rng.gen_range(lo..hi);
            // Both sides summed directly (not the right side as the node
            // less the left, which rounds differently).
            let (mut left, mut right) = (Sums::EMPTY, Sums::EMPTY);
            for &i in idx {
                let side = if self.x[i][f] <= threshold {
                    &mut left
                } else {
                    &mut right
                };
                side.add(self.y[i]);
            }
            if left.n < min_leaf || right.n < min_leaf {
                continue;
            }
            keep_better(
                &mut best,
                Split {
                    feature: f,
                    threshold,
                    gain: sse_parent - (left.sse() + right.sse()),
                },
            );
        }
        best
    }
}

/// A fitted tree, usable through linfa's `Predict`.
#[derive(Debug, Clone, PartialEq)]
pub struct FittedTree(pub Tree);

impl<D: Data<Elem = f64>, T> Fit<ArrayBase<D, Ix2>, T, TreeError> for TreeParams
where
    T: AsSingleTargets<Elem = f64>,
{
    type Object = FittedTree;

    fn fit(&self, dataset: &DatasetBase<ArrayBase<D, Ix2>, T>) -> Result<FittedTree, TreeError> {
        let records = dataset.records();
        if records.ncols() != N_FEATURES {
            return Err(TreeError::Data(format!(
                "expected {N_FEATURES} feature columns, got {}",
                records.ncols()
            )));
        }
        let x: Vec<Features> = records
            .rows()
            .into_iter()
            .map(|r| std::array::from_fn(|j| r[j]))
            .collect();
        let y: Vec<f64> = dataset.as_single_targets().iter().copied().collect();
        let idx: Vec<usize> = (0..x.len()).collect();
        let mut rng = rand::rngs::mock::StepRng::new(0, 1);
        Ok(FittedTree(self.grow(&x, &y, &idx, &mut rng)?))
    }
}

impl<D: Data<Elem = f64>> PredictInplace<ArrayBase<D, Ix2>, Array1<f64>> for FittedTree {
    fn predict_inplace(&self, x: &ArrayBase<D, Ix2>, y: &mut Array1<f64>) {
        for (row, out) in x.rows().into_iter().zip(y.iter_mut()) {
            let v: Vec<f64> = row.iter().copied().collect();
            *out = self.0.eval(&v).unwrap_or(f64::NAN);
        }
    }

    fn default_target(&self, x: &ArrayBase<D, Ix2>) -> Array1<f64> {
        Array1::zeros(x.nrows())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array2;

    fn row(v: f64) -> Features {
        let mut f = [0.0; N_FEATURES];
        f[0] = v;
        f
    }

    #[test]
    fn learns_a_step_function_exactly() {
        let x: Vec<Features> = (0..64).map(|i| row(i as f64)).collect();
        let y: Vec<f64> = (0..64).map(|i| if i < 32 { 1.0 } else { 5.0 }).collect();
        let idx: Vec<usize> = (0..64).collect();
        let mut rng = rand::rngs::mock::StepRng::new(0, 1);
        let t = TreeParams::default().grow(&x, &y, &idx, &mut rng).unwrap();
        assert_eq!(t.eval(&row(3.0)), Some(1.0));
        assert_eq!(t.eval(&row(40.0)), Some(5.0));
        // One split suffices: root plus two leaves.
        assert_eq!(t.nodes.len(), 3);
        match t.nodes[0] {
            TreeNode::Split { threshold, .. } => assert_eq!(threshold, 31.5),
            _ => panic!("root is not a split"),
        }
    }

    #[test]
    fn respects_min_leaf_and_depth() {
        let x: Vec<Features> = (0..10).map(|i| row(i as f64)).collect();
        let y: Vec<f64> = (0..10).map(|i| i as f64).collect();
        let idx: Vec<usize> = (0..10).collect();
        let mut rng = rand::rngs::mock::StepRng::new(0, 1);
        let p = TreeParams {
            max_depth: 1,
            min_samples_leaf: 5,
            max_features: None,
            random_thresholds: false,
        };
        let t = p.grow(&x, &y, &idx, &mut rng).unwrap();
        assert_eq!(t.nodes.len(), 3);
        assert!(
            TreeParams {
                min_samples_leaf: 0,
                ..p
            }
            .check()
            .is_err()
        );
    }

    #[test]
    fn random_thresholds_cut_inside_the_node_and_fit_every_row() {
        use rand::SeedableRng;
        // Two informative features and distinct rows: a tree grown to
        // leaves of one row reproduces every target whatever its cuts.
        let x: Vec<Features> = (0..50)
            .map(|i| {
                let mut f = row(i as f64);
                f[1] = ((i * 7) % 50) as f64;
                f
            })
            .collect();
        let y: Vec<f64> = (0..50).map(|i| ((i * 13) % 17) as f64).collect();
        let idx: Vec<usize> = (0..50).collect();
        let p = TreeParams {
            max_depth: 64,
            min_samples_leaf: 1,
            max_features: None,
            random_thresholds: true,
        };
        let grow = |seed| {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            p.grow(&x, &y, &idx, &mut rng).unwrap()
        };
        let (a, b) = (grow(1), grow(2));
        for (row, want) in x.iter().zip(&y) {
            assert_eq!(a.eval(row), Some(*want));
            assert_eq!(b.eval(row), Some(*want));
        }
        // Random cuts: not the midpoints a best-cut tree picks, and
        // different trees for different seeds; the same tree for one seed.
        assert_ne!(a, b);
        assert_eq!(a, grow(1));
        for node in &a.nodes {
            if let TreeNode::Split {
                feature, threshold, ..
            } = node
            {
                assert!(*feature <= 1, "split on a constant feature {feature}");
                assert!(
                    (0.0..49.0).contains(threshold),
                    "cut {threshold} outside the rows"
                );
            }
        }
    }

    #[test]
    fn fits_through_linfa_traits() {
        let x = Array2::from_shape_fn(
            (40, N_FEATURES),
            |(i, j)| if j == 2 { i as f64 } else { 0.0 },
        );
        let y = Array1::from_shape_fn(40, |i| if i < 20 { -1.0 } else { 2.0 });
        let ds = Dataset::new(x.clone(), y);
        let model = TreeParams::default().fit(&ds).unwrap();
        let pred = model.predict(&x);
        assert_eq!(pred[0], -1.0);
        assert_eq!(pred[39], 2.0);
    }
}
