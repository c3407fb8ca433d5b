//! Solving without costing every candidate at every length.
//!
//! The distinct M of an operator are cut into blocks at every prepared
//! graph size (a size is a block of its own) and at every power of two
//! and the midpoint after it; M up to [`COSTED_UP_TO`] are each a block of
//! one. In a block, the first length is costed in full. Each next length
//! carries the winners and runners-up of the latest lengths costed in full
//! to it ([`OpCtx::carried`]: the same processors and shares; a sequence
//! cut's dynamic part takes the remaining tokens) and keeps the cheapest,
//! if the lower bounds over a window of the block ([`OpCtx::bounds`]) prove that
//! no other candidate there is cheaper by more than [`TOLERANCE`]. Where
//! they do not, that length is costed in full and the window narrows
//! ([`solve_block`]).
//!
//! So at every length the decision costs at most `1 + TOLERANCE` times the
//! exhaustive solve's optimum. Where the kept family is one dynamic
//! processor alone (whose cost at a length is exactly that family's best)
//! and the bounds are at least its cost, the two solves choose the same
//! cost exactly. The runner-up of a length not costed in full is the
//! cheapest other family among those carried, not necessarily the
//! cheapest other family there.

use crate::engine::{Bounds, Cand, Cell, OpCtx, Shape};
use crate::settings::TOLERANCE;

/// Lengths up to this M are each costed in full.
pub(super) const COSTED_UP_TO: u32 = 64;
/// Blocks per power of two of M.
const BLOCKS_PER_OCTAVE: u32 = 2;
/// The fewest lengths a window of bounds spans.
const MIN_WINDOW: usize = 8;

/// Shapes of the winners and runners-up of the latest lengths costed in
/// full, most recent first (an operator whose winner alternates between
/// two families, as unaligned M can make it, keeps both).
type Reference = Vec<Shape>;

/// How many shapes a reference keeps.
const REFERENCE_SHAPES: usize = 4;

/// The blocks of `keys` (distinct `(m, instances)`, sorted by instances,
/// then M), as index ranges.
pub(super) fn blocks(cx: &OpCtx, keys: &[(u32, u32)]) -> Vec<std::ops::Range<usize>> {
    let mut sizes: Vec<u32> = cx.statics.iter().flat_map(|s| s.sizes.clone()).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let block_of = |(m, inst): (u32, u32)| {
        let below = sizes.partition_point(|&g| g < m);
        let is_size = sizes.binary_search(&m).is_ok();
        if m <= COSTED_UP_TO {
            return (inst, below, is_size, 0, m);
        }
        let octave = 31 - m.leading_zeros();
        let step = ((1u32 << octave) / BLOCKS_PER_OCTAVE).max(1);
        (inst, below, is_size, octave, (m - (1 << octave)) / step)
    };
    let mut out = vec![];
    let mut start = 0;
    for i in 1..=keys.len() {
        if i == keys.len() || block_of(keys[i]) != block_of(keys[start]) {
            out.push(start..i);
            start = i;
        }
    }
    out
}

/// The cells of one block, in order (each keeps its winner and runner-up
/// only), and how many of them were costed in full.
///
/// Bounds hold over a window of the block's lengths, at first all of it.
/// Where they prove nothing at a length, that length is costed in full and
/// the next window is half as long (down to [`MIN_WINDOW`], below which
/// every length is costed in full); a window that proves every length lets
/// the next one be twice as long.
pub(super) fn solve_block(cx: &OpCtx, keys: &[(u32, u32)]) -> (Vec<Cell>, usize) {
    let mut reference: Reference = vec![];
    let mut out = Vec::with_capacity(keys.len());
    let mut costed = 0;
    let mut window = keys.len();
    // The bounds, and the end of the window they hold over.
    let mut bounds: Option<(usize, Bounds)> = None;
    for (i, &(m, instances)) in keys.iter().enumerate() {
        if bounds.as_ref().is_some_and(|(end, _)| i >= *end) {
            window = (window * 2).min(keys.len());
            bounds = None;
        }
        if bounds.is_none() && !reference.is_empty() && window >= MIN_WINDOW {
            let end = (i + window).min(keys.len());
            bounds = Some((end, cx.bounds(m, keys[end - 1].0)));
        }
        if let Some((_, b)) = &bounds {
            match carried_cell(cx, &reference, b, m, instances) {
                Some(cell) => {
                    out.push(cell);
                    continue;
                }
                None => {
                    window /= 2;
                    bounds = None;
                }
            }
        }
        let mut cell = cx.cell_at(m, instances);
        costed += 1;
        cell.cands.truncate(2);
        for c in cell.cands.iter().rev() {
            reference.retain(|s| *s != c.shape);
            reference.insert(0, c.shape.clone());
        }
        reference.truncate(REFERENCE_SHAPES);
        out.push(cell);
    }
    (out, costed)
}

/// The reference's shapes carried to `m`: the cheapest is the winner and
/// the cheapest of another family the runner-up, where the bounds prove
/// the winner within [`TOLERANCE`] of every candidate at `m`; `None` where
/// the length must be costed in full.
fn carried_cell(
    cx: &OpCtx,
    reference: &Reference,
    bounds: &Bounds,
    m: u32,
    instances: u32,
) -> Option<Cell> {
    let mut carried: Vec<Cand> = reference
        .iter()
        .filter_map(|s| cx.carried(s, m))
        .filter(|c| c.total.is_finite())
        .collect();
    carried.sort_by(|a, b| a.total.total_cmp(&b.total));
    let mut it = carried.into_iter();
    let w = it.next()?;
    let r = it.find(|c| c.family(m) != w.family(m));
    // A tie with another family is left to the full costing's order.
    if r.as_ref().is_some_and(|r| r.total <= w.total) {
        return None;
    }
    // One dynamic processor alone: `w` is that family's best at `m`.
    let alone = match w.shape {
        Shape::Single {
            p,
            padded_to: None,
            online: false,
        } => Some(p),
        _ => None,
    };
    let mut floor = bounds.floor_without(alone);
    if alone.is_some() {
        floor = floor.min(w.total);
    }
    if w.total > (1.0 + TOLERANCE) * floor {
        return None;
    }
    let scale = instances as f64;
    Some(Cell {
        m,
        instances,
        cands: std::iter::once(w)
            .chain(r)
            .map(|c| c.scale(scale))
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use hetero_plan::{ModelSpec, Phase, hf};

    use super::super::{procs, select_ops};
    use crate::LatencyOracle;
    use crate::engine::OpCtx;
    use crate::settings::{GraphChoice, Settings};
    use crate::synthetic;

    fn model() -> ModelSpec {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/configs/llama-70b-class.json"
        );
        hf::load_config(std::path::Path::new(path)).unwrap()
    }

    /// Every candidate of every family (unpruned) at every length of a
    /// block costs at least the block's floor.
    fn check_bounds<O: LatencyOracle>(dev: &O, graphs: GraphChoice) {
        let model = model();
        let settings = Settings {
            prefill_lengths: (1..=3000).collect(),
            graphs,
            ..Default::default()
        };
        let mut notes = vec![];
        let ps = procs::build_procs(dev, &[], &[], &mut notes).unwrap();
        let ops = select_ops(&model, &[]).unwrap();
        let mut setup = procs::device_setup(ps, None, &ops, &settings, &mut notes).unwrap();
        for g in &mut setup.graphs {
            g.prefill = vec![128, 512, 1024];
        }
        for op in &ops {
            let mut cx = OpCtx::new(&setup, op, Phase::Prefill, 3000);
            cx.prune = false;
            for (lo, hi) in [(65, 80), (100, 103), (500, 530), (1000, 1100), (2049, 2176)] {
                let b = cx.bounds(lo, hi);
                for m in lo..=hi {
                    let cell = cx.cell_at(m, 1);
                    for c in &cell.cands {
                        let slack = 1e-9 * c.total;
                        assert!(
                            c.total + slack >= b.floor_without(None),
                            "{} at {m}: {} costs {} below the floor {:?}",
                            op.name,
                            c.label(&setup.procs, m),
                            c.total,
                            b
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn block_bounds_are_below_every_candidate() {
        check_bounds(&synthetic::discrete_cpu_gpu(), GraphChoice::Auto);
        check_bounds(
            &synthetic::paper_like_npu_gpu(),
            GraphChoice::Sizes(vec![128, 512, 1024]),
        );
        check_bounds(&synthetic::identical_gpus(), GraphChoice::Auto);
    }
}
