//! Which GEMM with host weights runs next, so that its weight copy starts
//! while the current one computes ([`Gemm::prefetch`]).
//!
//! Offload plans keep some weights on the host (CG rows) and copy them to
//! the GPU for every run ([`Gemm::host_weights`]). Right after the
//! executor submits such a GEMM, it asks [`Prefetch::submitted`] for its
//! successor on the same processor and prefetches that one: the copy then
//! runs on the GPU's copy stream beside the current GEMM and whatever runs
//! between the two (other parts, other operators, the host's work).
//!
//! The successor is learned: each submission records itself as the
//! successor of the one submitted before it on its processor, so after one
//! pass of a model (`Runtime::linear`, called per operator and layer by
//! the decoder) every GEMM knows the next. [`Runtime::run`] knows its pass
//! order and seeds the successors before its warm-up pass
//! ([`Prefetch::seed`]), so even the first submission prefetches. Where a
//! GEMM is followed by different ones at different places of a pass (layers
//! that share weights, the last layer before the lm_head), the successor
//! seen last is kept: a wrong guess costs a copy that was not needed, never
//! a wrong result, since a GEMM whose weights were not prefetched copies
//! them itself ([`Gemm::prefetch`]'s contract).
//!
//! [`Gemm::prefetch`]: hetero_agent::Gemm::prefetch
//! [`Gemm::host_weights`]: hetero_agent::Gemm::host_weights
//! [`Runtime::run`]: super::Runtime::run

use std::collections::HashMap;

/// The successors of GEMMs with host weights (indices into the runtime's
/// GEMM arena), per processor.
#[derive(Debug, Default)]
pub(crate) struct Prefetch {
    /// GEMM → the one with host weights that runs after it on its
    /// processor.
    next: HashMap<usize, usize>,
    /// Per processor, the GEMM with host weights submitted last.
    last: HashMap<usize, usize>,
}

impl Prefetch {
    /// Records that `gemm` (with host weights) was just submitted on
    /// processor `proc`, as the successor of the one submitted before it
    /// there; returns the GEMM to prefetch now, its own successor as known.
    pub(crate) fn submitted(&mut self, proc: usize, gemm: usize) -> Option<usize> {
        if let Some(prev) = self.last.insert(proc, gemm) {
            self.next.insert(prev, gemm);
        }
        self.next.get(&gemm).copied()
    }

    /// Seeds the successors from a known order of submissions, as
    /// (processor, GEMM): each processor's GEMMs follow each other in
    /// that order, its last followed by its first (the next pass).
    pub(crate) fn seed(&mut self, order: &[(usize, usize)]) {
        let mut first: HashMap<usize, usize> = HashMap::new();
        let mut prev: HashMap<usize, usize> = HashMap::new();
        for &(proc, gemm) in order {
            first.entry(proc).or_insert(gemm);
            if let Some(p) = prev.insert(proc, gemm) {
                self.next.insert(p, gemm);
            }
        }
        for (proc, last) in prev {
            self.next.insert(last, first[&proc]);
        }
    }

    /// The successor known for `gemm`.
    #[cfg(test)]
    pub(crate) fn next(&self, gemm: usize) -> Option<usize> {
        self.next.get(&gemm).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn successors_are_learned_in_the_first_pass_and_prefetched_after() {
        let mut p = Prefetch::default();
        let pass = [3, 5, 8, 4];
        // First pass: nothing known yet.
        for &g in &pass {
            assert_eq!(p.submitted(1, g), None);
        }
        // From the second pass on, each submission names the next one,
        // the last the first of the next pass.
        for _ in 0..2 {
            for (i, &g) in pass.iter().enumerate() {
                let want = pass[(i + 1) % pass.len()];
                assert_eq!(p.submitted(1, g), Some(want), "after {g}");
            }
        }
    }

    #[test]
    fn processors_keep_their_own_order() {
        let mut p = Prefetch::default();
        for _ in 0..2 {
            for (proc, g) in [(0, 1), (2, 10), (0, 2), (2, 11)] {
                p.submitted(proc, g);
            }
        }
        assert_eq!(p.next(1), Some(2));
        assert_eq!(p.next(2), Some(1));
        assert_eq!(p.next(10), Some(11));
        assert_eq!(p.next(11), Some(10));
    }

    #[test]
    fn a_seeded_order_prefetches_from_the_first_submission() {
        let mut p = Prefetch::default();
        p.seed(&[(0, 7), (1, 20), (0, 8), (0, 9)]);
        assert_eq!(p.submitted(0, 7), Some(8));
        assert_eq!(p.submitted(0, 8), Some(9));
        assert_eq!(p.submitted(0, 9), Some(7), "the last names the first");
        assert_eq!(p.submitted(1, 20), Some(20), "alone on its processor");
    }

    #[test]
    fn a_changed_order_replaces_the_successor_seen_before() {
        let mut p = Prefetch::default();
        for g in [1, 2, 3, 1, 3] {
            p.submitted(0, g);
        }
        assert_eq!(p.next(1), Some(3));
        assert_eq!(p.next(3), Some(1));
        assert_eq!(p.next(2), Some(3));
    }
}
