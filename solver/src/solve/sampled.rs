//! Solving without costing every candidate at every length.
//!
//! The distinct M of an operator are cut into blocks at every prepared
//! graph size (a size is a block of its own) and at sixteen points per
//! power of two; M up to [`COSTED_UP_TO`] are each a block of one. In a
//! block, the first length is costed in full, and each next length takes
//! the family of the last one costed in full, carried to it
//! ([`OpCtx::carried`]: the same processors and shares; a sequence cut's
//! dynamic part takes the remaining tokens), if the block's lower bounds
//! ([`OpCtx::bounds`]) prove that no other candidate there is cheaper by
//! more than [`TOLERANCE`]. Where they do not, that length is costed in
//! full and becomes the block's new reference.
//!
//! So at every length the decision costs at most `1 + TOLERANCE` times the
//! exhaustive solve's optimum. Where the kept family is one dynamic
//! processor alone (whose cost at a length is exactly that family's best)
//! and the bounds are at least its cost, the two solves choose the same
//! cost exactly. The runner-up of a length not costed in full is the
//! reference's runner-up family carried likewise, not necessarily the
//! cheapest other family there.

use crate::engine::{Bounds, Cell, OpCtx, Shape};
use crate::settings::TOLERANCE;

/// Lengths up to this M are each costed in full.
pub(super) const COSTED_UP_TO: u32 = 64;
/// Blocks per power of two of M.
const BLOCKS_PER_OCTAVE: u32 = 16;

/// A block's reference: the winner's shape and the runner-up's.
type Reference = (Shape, Option<Shape>);

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
pub(super) fn solve_block(cx: &OpCtx, keys: &[(u32, u32)]) -> (Vec<Cell>, usize) {
    let bounds = match keys {
        [first, .., last] => Some(cx.bounds(first.0, last.0)),
        _ => None,
    };
    let mut reference: Option<Reference> = None;
    let mut out = Vec::with_capacity(keys.len());
    let mut costed = 0;
    for &(m, instances) in keys {
        if let (Some(b), Some(r)) = (&bounds, &reference)
            && let Some(cell) = carried_cell(cx, r, b, m, instances)
        {
            out.push(cell);
            continue;
        }
        let mut cell = cx.cell_at(m, instances);
        costed += 1;
        cell.cands.truncate(2);
        reference = cell.cands.first().map(|w| {
            let runner_up = cell.cands.get(1).map(|r| r.shape.clone());
            (w.shape.clone(), runner_up)
        });
        out.push(cell);
    }
    (out, costed)
}

/// The reference's winner and runner-up carried to `m`, where the bounds
/// prove the winner within [`TOLERANCE`] of every candidate at `m` (and it
/// still beats the runner-up); `None` where the length must be costed in
/// full.
fn carried_cell(
    cx: &OpCtx,
    (winner, runner_up): &Reference,
    bounds: &Bounds,
    m: u32,
    instances: u32,
) -> Option<Cell> {
    let w = cx.carried(winner, m)?;
    let r = match runner_up {
        Some(s) => Some(cx.carried(s, m)?),
        None => None,
    };
    if !w.total.is_finite()
        || r.as_ref()
            .is_some_and(|r| r.total.partial_cmp(&w.total) != Some(std::cmp::Ordering::Greater))
    {
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
