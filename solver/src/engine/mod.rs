//! The cost model: processors as the solver sees them, per-operator
//! prediction tables, and candidate generation with the HeteroLLM cost
//! model, one module per family of candidates.

mod bounds;
mod cand;
mod context;
mod dynamic;
mod proc;
mod row_cut;
mod static_graphs;
mod tables;

use hetero_plan::{GemmShape, LinearOp, OperandOrder, Phase};

pub(crate) use bounds::Bounds;
pub(crate) use cand::{Cand, Shape};
pub(crate) use context::{Cell, OpCtx, StaticCtx};
pub(crate) use proc::{GroupMode, LayerGroup, OffloadSetup, Proc, Setup, StaticGraphs, groups_of};
#[cfg(test)]
pub(crate) use row_cut::first_crossing;
pub(crate) use tables::{Tables, table_top};

pub(crate) const INF: f64 = f64::INFINITY;

/// A vector of at most `N` items stored inline (candidates have at most
/// three parts; the hot loop makes millions of them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Small<T: Copy + Default, const N: usize> {
    len: u8,
    items: [T; N],
}

impl<T: Copy + Default, const N: usize> Small<T, N> {
    pub fn new() -> Self {
        Small {
            len: 0,
            items: [T::default(); N],
        }
    }

    pub fn from_slice(s: &[T]) -> Self {
        let mut v = Self::new();
        for &x in s {
            v.push(x);
        }
        v
    }

    pub fn push(&mut self, x: T) {
        assert!((self.len as usize) < N, "more than {N} parts");
        self.items[self.len as usize] = x;
        self.len += 1;
    }
}

impl<T: Copy + Default, const N: usize> std::ops::Deref for Small<T, N> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.items[..self.len as usize]
    }
}

impl<T: Copy + Default, const N: usize> std::ops::DerefMut for Small<T, N> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.items[..self.len as usize]
    }
}

/// Bytes of one activation value in host memory: runtime-min keeps
/// activations as f32 between operators (the type of the agent's `Gemm`
/// interface), so every copy to and from a processor moves f32.
pub(crate) const HOST_BYTES: f64 = 4.0;
/// Parts of a candidate: processor index and rows.
pub(crate) type RowParts = Small<(usize, u32), 3>;
/// Per-part times.
pub(crate) type Times = Small<f64, 3>;

/// The operator sees one row whatever the length (the lm_head in prefill):
/// its static graph is the M = 1 one, not the prefill sizes.
pub(crate) fn last_token_only(op: &LinearOp, phase: Phase) -> bool {
    phase == Phase::Prefill && op.prefill_m == hetero_plan::MRule::LastToken
}

pub(crate) fn predict(p: &Proc, m: u32, k: u32, n: u32, order: OperandOrder) -> f64 {
    match GemmShape::new(m, k, n) {
        Some(s) => p.model.predict_us(s, order).unwrap_or(INF),
        None => INF,
    }
}
