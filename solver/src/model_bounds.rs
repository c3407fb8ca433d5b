//! Lower bounds of a fitted latency model over a box of shapes: every M
//! in a range and every N in a range, K and the operand order fixed. The
//! solver uses them to prove, for a block of lengths, that no candidate it
//! did not cost can beat the one it kept.
//!
//! Parametric models (linear, roofline) are bilinear or monotone in M and
//! N, so their least value over the box is at a corner. A tree is walked
//! with every feature as an interval: where the interval lies on one side
//! of a split only that side is followed, else both, and the least (or
//! greatest) leaf reached bounds the tree. A feature that moves with M or
//! N moves monotonically with each, so the corners give its interval,
//! except padding waste and power-of-two alignment, which oscillate and
//! take their whole range as soon as M or N varies.

use std::ops::RangeInclusive;

use hetero_plan::predictor::{ALIGN_CAP, FEATURE_NAMES, N_FEATURES, features};
use hetero_plan::{DType, GemmShape, LatencyModel, OperandOrder, Tree, TreeNode};

/// Feature intervals: `(lows, highs)`.
type FeatureBox = ([f64; N_FEATURES], [f64; N_FEATURES]);

/// A lower bound of `model.predict_us` over the box, µs (0 where the model
/// may answer nothing useful below it); `None` for a malformed tree.
pub(crate) fn lower_bound(
    model: &LatencyModel,
    m: &RangeInclusive<u32>,
    k: u32,
    n: &RangeInclusive<u32>,
    dtype: DType,
    order: OperandOrder,
) -> Option<f64> {
    let corners = || {
        [*m.start(), *m.end()].into_iter().flat_map(move |mm| {
            [*n.start(), *n.end()]
                .into_iter()
                .filter_map(move |nn| GemmShape::new(mm, k, nn))
        })
    };
    let sum_of = |trees: &[Tree], rate: f64, fbox: &FeatureBox| -> Option<f64> {
        // A negative weight turns each tree's greatest leaf into the bound.
        let mut sum = 0.0;
        for t in trees {
            let (lo, hi) = tree_range(t, fbox)?;
            sum += if rate >= 0.0 { lo } else { hi };
        }
        Some(rate * sum)
    };
    let fbox = || feature_box(m, k, n, dtype, order);
    let lb = match model {
        LatencyModel::Linear { .. } | LatencyModel::Roofline { .. } => corners()
            .map(|s| model.predict_us(s, dtype, order).unwrap_or(0.0))
            .fold(f64::INFINITY, f64::min),
        LatencyModel::Tree(t) => tree_range(t, &fbox()?)?.0.exp(),
        LatencyModel::Forest { trees } => {
            (sum_of(trees, 1.0, &fbox()?)? / trees.len().max(1) as f64).exp()
        }
        LatencyModel::Boosted { base, rate, trees } => {
            (base + sum_of(trees, *rate, &fbox()?)?).exp()
        }
        LatencyModel::Residual { base, rate, trees } => {
            let b = lower_bound(base, m, k, n, dtype, order)?;
            if b > 0.0 {
                b * sum_of(trees, *rate, &fbox()?)?.exp()
            } else {
                0.0
            }
        }
    };
    Some(if lb.is_finite() && lb > 0.0 { lb } else { 0.0 })
}

/// The interval of every feature over the box; `None` for a shape the
/// features cannot describe (a zero dimension).
fn feature_box(
    m: &RangeInclusive<u32>,
    k: u32,
    n: &RangeInclusive<u32>,
    dtype: DType,
    order: OperandOrder,
) -> Option<FeatureBox> {
    let mut lo = [f64::INFINITY; N_FEATURES];
    let mut hi = [f64::NEG_INFINITY; N_FEATURES];
    for mm in [*m.start(), *m.end()] {
        for nn in [*n.start(), *n.end()] {
            let f = features(GemmShape::new(mm, k, nn)?, dtype, order);
            for i in 0..N_FEATURES {
                lo[i] = lo[i].min(f[i]);
                hi[i] = hi[i].max(f[i]);
            }
        }
    }
    let varies = m.start() < m.end() || n.start() < n.end();
    for (i, name) in FEATURE_NAMES.iter().enumerate() {
        // K is fixed: its alignment and padding stay what the corners say.
        if !varies || name.ends_with("_k") {
            continue;
        }
        if name.starts_with("pad_waste_") {
            (lo[i], hi[i]) = (0.0, 1.0);
        } else if name.starts_with("align_") {
            (lo[i], hi[i]) = (0.0, ALIGN_CAP as f64);
        }
    }
    // Rounding may put a value between two corners a hair outside them.
    for i in 0..N_FEATURES {
        lo[i] -= lo[i].abs() * 1e-9 + 1e-12;
        hi[i] += hi[i].abs() * 1e-9 + 1e-12;
    }
    Some((lo, hi))
}

/// The least and greatest leaf a tree can reach from the box; `None` for a
/// malformed tree (a bad index, or more visits than nodes: a cycle).
fn tree_range(tree: &Tree, (lo, hi): &FeatureBox) -> Option<(f64, f64)> {
    let mut range = (f64::INFINITY, f64::NEG_INFINITY);
    let mut stack = vec![0u32];
    let mut visits = 0usize;
    while let Some(i) = stack.pop() {
        visits += 1;
        if visits > tree.nodes.len() {
            return None;
        }
        match tree.nodes.get(i as usize)? {
            TreeNode::Leaf { value } => {
                range = (range.0.min(*value), range.1.max(*value));
            }
            TreeNode::Split {
                feature,
                threshold,
                left,
                right,
            } => {
                let f = *feature as usize;
                if *lo.get(f)? <= *threshold {
                    stack.push(*left);
                }
                if *hi.get(f)? > *threshold {
                    stack.push(*right);
                }
            }
        }
    }
    range.0.is_finite().then_some(range)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tree on `align_m` and `log2_m`: slow when M is odd, slower past
    /// M = 1024.
    fn tree() -> Tree {
        let at = |name: &str| FEATURE_NAMES.iter().position(|n| *n == name).unwrap() as u16;
        Tree {
            nodes: vec![
                TreeNode::Split {
                    feature: at("log2_m"),
                    threshold: 10.0,
                    left: 1,
                    right: 4,
                },
                TreeNode::Split {
                    feature: at("align_m"),
                    threshold: 0.5,
                    left: 2,
                    right: 3,
                },
                TreeNode::Leaf { value: 3.0 },
                TreeNode::Leaf { value: 1.0 },
                TreeNode::Leaf { value: 5.0 },
            ],
        }
    }

    #[test]
    fn a_tree_bound_is_its_least_prediction_over_the_box() {
        let model = LatencyModel::Boosted {
            base: 0.0,
            rate: 1.0,
            trees: vec![tree(), tree()],
        };
        let o = OperandOrder::Aw;
        for (lo, hi) in [
            (1, 1),
            (2, 2),
            (1, 8),
            (3, 3),
            (5, 1024),
            (1000, 1100),
            (1025, 4000),
        ] {
            let lb = lower_bound(&model, &(lo..=hi), 64, &(64..=64), DType::F16, o).unwrap();
            let least = (lo..=hi)
                .map(|m| {
                    let s = GemmShape::new(m, 64, 64).unwrap();
                    model.predict_us(s, DType::F16, o).unwrap()
                })
                .fold(f64::INFINITY, f64::min);
            assert!(lb <= least * (1.0 + 1e-12), "{lo}..={hi}: {lb} > {least}");
            // The walk is exact where the box stays in one leaf per tree,
            // and finds the even M inside a wider box.
            assert!(lb >= least * (1.0 - 1e-12), "{lo}..={hi}: {lb} < {least}");
        }
    }

    #[test]
    fn a_residual_bound_scales_its_base_and_a_negative_rate_takes_the_greatest_leaf() {
        let base = LatencyModel::Roofline {
            peak_gflops: 100.0,
            bw_gbps: 10.0,
            launch_us: 2.0,
        };
        let o = OperandOrder::Transposed;
        for rate in [0.5, -0.5] {
            let model = LatencyModel::Residual {
                base: Box::new(base.clone()),
                rate,
                trees: vec![tree()],
            };
            for (lo, hi) in [(1, 64), (900, 2000), (7, 7)] {
                let lb = lower_bound(&model, &(lo..=hi), 256, &(128..=512), DType::F16, o).unwrap();
                for m in lo..=hi {
                    for n in [128, 200, 512] {
                        let s = GemmShape::new(m, 256, n).unwrap();
                        let t = model.predict_us(s, DType::F16, o).unwrap();
                        assert!(
                            lb <= t * (1.0 + 1e-12),
                            "rate {rate} m {m} n {n}: {lb} > {t}"
                        );
                    }
                }
            }
        }
    }
}
