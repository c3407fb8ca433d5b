//! The search that `prepare` runs: which row count, form and cuBLASLt
//! algorithm a GEMM computes with (the module docs of [`super`] say why).

use hetero_plan::{OperandOrder, Stats};

use super::{CudaGemm, Form};
use crate::{Gemm, Result};

/// The most rows [`row_candidates`] computes, as a multiple of M. At 1.5
/// (rather than 1.25) a GEMM of M rows takes the time of a faster row
/// count up to half again as large (H100, f16, 300×1536×8960: 27.3 µs
/// over 304 or 320 rows; the design measured 384 rows at 21.7 µs), so its
/// time comes closer to the lower envelope of the times past M, which is
/// monotone in M.
const ROWS_MOST: f64 = 1.5;

/// Row counts a GEMM of M rows may compute, over zero rows past M: M
/// rounded up to a multiple of 8 (always: cuBLAS takes slower kernels for
/// other lengths), then of 64, 128, 256 and 512 where that is at most
/// [`ROWS_MOST`] times M. Ascending, without repeats.
pub(in crate::cuda) fn row_candidates(m: usize) -> Vec<usize> {
    let mut rows = vec![m.next_multiple_of(8)];
    for tile in [64, 128, 256, 512] {
        let r = m.next_multiple_of(tile);
        if r > rows[rows.len() - 1] && r as f64 <= ROWS_MOST * m as f64 {
            rows.push(r);
        }
    }
    rows
}

/// A later candidate of [`CudaGemm::choose`] (more rows, or the other
/// form) is kept only when its median run beats the earlier one's by this
/// share: two kernels within timing noise keep the fewer rows and the
/// order's own form, so that the choice does not flip between runs.
const ROWS_MARGIN: f64 = 0.03;

/// Rounds of [`CudaGemm::choose`]: the first warms every candidate up
/// and is not counted; each candidate's median counted run decides. The
/// median, not the fastest run: some kernels swing between two speeds
/// from run to run (H100, 424×8960×1536 f16: best of three 24.6 µs in one
/// search, 27.8 µs in the next), and the one a plan meets is the typical
/// run, which a sweep's median measures.
const ROWS_ROUNDS: usize = 8;

/// The (rows, form) pairs [`CudaGemm::choose`] times, in the order it
/// prefers them on a tie: each row count of [`row_candidates`], first in
/// the order's own form, then in the other. With both forms searched, the
/// two orders of a shape end on one kernel (H100, 32 pairs: `aw` over
/// `transposed` 0.99–1.03), so the processor is
/// [`order_free`](hetero_plan::Capabilities::order_free).
pub(in crate::cuda) fn candidates(m: usize, order: OperandOrder) -> Vec<(usize, Form)> {
    let own = Form::of(order);
    row_candidates(m)
        .into_iter()
        .flat_map(|r| [(r, own), (r, own.other())])
        .collect()
}

impl CudaGemm {
    /// Chooses what runs: times every (rows, form) of `candidates`
    /// ([`candidates`]) with every algorithm cuBLASLt offers for it (up to
    /// [`ALGOS`](crate::cuda::lt::ALGOS)), listed each pair's first
    /// algorithm first, then the others pair by pair. The search times
    /// them over the zeroed input in [`ROWS_ROUNDS`] rounds and keeps the
    /// fastest by the median of its counted runs: a later candidate
    /// replaces an earlier one only when faster by [`ROWS_MARGIN`]. Every
    /// counted run starts with the L2 evicted and times the kernels alone
    /// where the device allows ([`Gemm::execute_kernel_only`]): the weights
    /// come from device memory, as a layer's operators meet them, and the
    /// host's launch path adds no noise to the comparison. A search of one
    /// candidate takes it as it is.
    pub(super) fn choose(&mut self, candidates: &[(usize, Form)]) -> Result<()> {
        let mut all: Vec<(usize, Form, usize)> =
            candidates.iter().map(|&(r, f)| (r, f, 0)).collect();
        for &(r, f) in candidates {
            self.select(r, f, 0)?;
            let offered = self.matmuls[self.current].algos();
            all.extend((1..offered).map(|a| (r, f, a)));
        }
        let mut pick = 0;
        if all.len() > 1 {
            let median = self.time_candidates(&all)?;
            for i in 1..all.len() {
                if median[i] < (1.0 - ROWS_MARGIN) * median[pick] {
                    pick = i;
                }
            }
        }
        let (r, f, a) = all[pick];
        self.select(r, f, a)
    }

    /// Each candidate's median counted run, µs ([`CudaGemm::choose`]).
    fn time_candidates(&mut self, candidates: &[(usize, Form, usize)]) -> Result<Vec<f64>> {
        let mut runs = vec![Vec::with_capacity(ROWS_ROUNDS - 1); candidates.len()];
        for round in 0..ROWS_ROUNDS {
            for (i, &(rows, form, algo)) in candidates.iter().enumerate() {
                self.select(rows, form, algo)?;
                // Round 0 runs ordinarily: cuBLAS's first call of a shape
                // may wait on the stream, which a kernel-only run holds
                // shut until the launch returns (a deadlock).
                let t = if round > 0 {
                    self.dev.evict_l2()?;
                    match self.execute_kernel_only()? {
                        Some(t) => t,
                        None => self.execute()?,
                    }
                } else {
                    self.execute()?
                };
                if round > 0 {
                    runs[i].push(t.device_us.unwrap_or(t.host_us));
                }
            }
        }
        Ok(runs
            .iter()
            .map(|r| Stats::from_samples(r).map_or(f64::INFINITY, |s| s.median_us))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_candidates_round_up_to_eight_then_to_tiles_within_half_again() {
        let cases: [(usize, &[usize]); 12] = [
            (1, &[8]),
            (7, &[8]),
            (9, &[16]),
            (158, &[160, 192]),
            (300, &[304, 320, 384]),
            (445, &[448, 512]),
            (533, &[536, 576, 640, 768]),
            (670, &[672, 704, 768]),
            (1000, &[1000, 1024]),
            (1025, &[1032, 1088, 1152, 1280, 1536]),
            (2045, &[2048]),
            (2048, &[2048]),
        ];
        for (m, rows) in cases {
            assert_eq!(row_candidates(m), rows, "M = {m}");
        }
        for m in 1..5000 {
            let r = row_candidates(m);
            assert_eq!(r[0], m.next_multiple_of(8));
            assert!(
                r.windows(2).all(|w| w[0] < w[1] && 2 * w[1] <= 3 * m),
                "M = {m}: {r:?}"
            );
        }
    }
}
