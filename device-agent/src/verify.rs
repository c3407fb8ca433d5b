//! Inputs and the CPU f64 reference every result is checked against.
//!
//! **The metric.** For each sampled output `C[i,j]` the error is
//!
//! ```text
//! err(i,j) = |C[i,j] − Σ_k A[i,k]·W[k,j]|  /  Σ_k |A[i,k]|·|W[k,j]|
//! ```
//!
//! with both sums in f64 over the f32 inputs the backend was given. The
//! denominator is the natural scale of the rounding error of a dot product
//! (each rounded product and partial sum is bounded by it), so the ratio stays
//! near the unit round-off of the compute type however much the terms
//! cancel. A plain relative error `|C − ref| / |ref|` would blow up on outputs
//! that happen to be near zero and fail correct results. Converting the inputs
//! to a narrower type (f16) adds at most two unit round-offs of that type.
//! The row reports the largest `err` over the samples as `rel_err`.
//!
//! **The inputs** are uniform in `[-1, 1)` from a SplitMix64 generator seeded
//! by the shape, so a case is reproducible and two shapes do not share data.
//!
//! **The samples**: every output when there are at most [`FULL_CHECK_MAX`],
//! otherwise the four corners plus [`SAMPLES`] positions drawn from the same
//! generator. A non-finite output anywhere fails the check.

use hetero_plan::GemmShape;

/// Outputs up to this count are all checked.
pub const FULL_CHECK_MAX: usize = 4096;
/// Random positions checked in larger outputs (besides the four corners).
pub const SAMPLES: usize = 256;

/// SplitMix64's step between states.
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64: a tiny, well-distributed generator with a 64-bit state.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator with the given seed.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GAMMA);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[-1, 1)`, with 24 random bits (exact in f32).
    pub fn next_signed_unit(&mut self) -> f32 {
        let bits = (self.next_u64() >> 40) as u32; // 24 bits
        (bits as f32) / (1u32 << 23) as f32 - 1.0
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// The seed used for a shape's inputs.
pub fn seed_for(shape: &GemmShape, salt: u64) -> u64 {
    let (m, k, n) = shape.mkn();
    (m as u64) << 42 ^ (k as u64) << 21 ^ n as u64 ^ salt.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

/// `len` values uniform in `[-1, 1)` from `seed`: the sequence of one
/// [`SplitMix64`], made on every core for a large one. The generator's
/// state after `i` steps is `seed + i·γ`, so each thread starts its block
/// where one generator would be; a model's weights are billions of values.
pub fn random_vec(len: usize, seed: u64) -> Vec<f32> {
    let mut v = vec![0f32; len];
    let chunk = len.div_ceil(crate::threads_for(len, PARALLEL_MIN)).max(1);
    let fill = |start: usize, block: &mut [f32]| {
        let mut g = SplitMix64::new(seed.wrapping_add((start as u64).wrapping_mul(GAMMA)));
        block.iter_mut().for_each(|x| *x = g.next_signed_unit());
    };
    std::thread::scope(|scope| {
        for (b, block) in v.chunks_mut(chunk).enumerate() {
            scope.spawn(move || fill(b * chunk, block));
        }
    });
    v
}

/// Below this much work (values, or products of the reference) one thread
/// does it: starting threads costs more.
const PARALLEL_MIN: usize = 1 << 20;

/// The activation `A[M,K]` and weights `W[K,N]` (row-major) of a case;
/// `salt` gives a different input for the same shape.
pub fn inputs(shape: &GemmShape, salt: u64) -> (Vec<f32>, Vec<f32>) {
    let (m, k, n) = shape.mkn();
    let (m, k, n) = (m as usize, k as usize, n as usize);
    let a = random_vec(m * k, seed_for(shape, 2 * salt + 1));
    let w = random_vec(k * n, seed_for(shape, 2 * salt + 2));
    (a, w)
}

/// The outcome of a check.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Check {
    /// The largest normalised error over the samples (infinite when an
    /// output is not finite).
    pub rel_err: f64,
    /// Where it was: `(row, column)` of `C`.
    pub worst: (usize, usize),
    /// How many outputs were compared with the reference.
    pub sampled: usize,
}

impl Check {
    /// True when the error is within `tolerance`.
    pub fn passes(&self, tolerance: f64) -> bool {
        self.rel_err.is_finite() && self.rel_err <= tolerance
    }
}

/// The positions of `C[M,N]` that are compared with the reference.
pub fn sample_positions(m: usize, n: usize) -> Vec<(usize, usize)> {
    if m * n <= FULL_CHECK_MAX {
        return (0..m).flat_map(|i| (0..n).map(move |j| (i, j))).collect();
    }
    let mut g = SplitMix64::new(0x5EED ^ ((m as u64) << 32) ^ n as u64);
    let mut pos = vec![(0, 0), (0, n - 1), (m - 1, 0), (m - 1, n - 1)];
    pos.extend((0..SAMPLES).map(|_| (g.below(m), g.below(n))));
    pos
}

/// Checks `C = A·W` (all row-major: `A[M,K]`, `W[K,N]`, `C[M,N]`) on the
/// sampled outputs, in f64. See the module documentation for the metric.
///
/// # Panics
/// When a slice length does not match the shape (a bug in the caller).
pub fn check(shape: &GemmShape, a: &[f32], w: &[f32], c: &[f32]) -> Check {
    let (m, k, n) = shape.mkn();
    let (m, k, n) = (m as usize, k as usize, n as usize);
    assert_eq!(a.len(), m * k, "A has the wrong length");
    assert_eq!(w.len(), k * n, "W has the wrong length");
    assert_eq!(c.len(), m * n, "C has the wrong length");
    let mut out = Check {
        rel_err: 0.0,
        worst: (0, 0),
        sampled: 0,
    };
    if let Some(bad) = c.iter().position(|x| !x.is_finite()) {
        out.rel_err = f64::INFINITY;
        out.worst = (bad / n, bad % n);
        return out;
    }
    let positions = sample_positions(m, n);
    for (&(i, j), &(dot, scale)) in positions.iter().zip(&reference(a, w, k, n, &positions)) {
        let diff = (c[i * n + j] as f64 - dot).abs();
        // An all-zero row or column: the exact answer is 0 and any
        // non-zero output is wrong.
        let err = if scale > 0.0 {
            diff / scale
        } else if diff == 0.0 {
            0.0
        } else {
            f64::INFINITY
        };
        out.sampled += 1;
        if err > out.rel_err || err.is_nan() {
            out.rel_err = if err.is_nan() { f64::INFINITY } else { err };
            out.worst = (i, j);
        }
    }
    out
}

/// Most sampled outputs of one row that one thread of [`reference`] takes.
const COLUMNS_PER_PIECE: usize = 512;

/// `(Σ_k A[i,k]·W[k,j], Σ_k |A[i,k]·W[k,j]|)` in f64 for each position,
/// the terms added in order of k. The positions of one row are computed
/// together, reading `W` a row at a time (column by column it is a strided
/// read of the whole matrix per output, which took a second for one
/// 1×14336×4096 case), in pieces spread over every core.
///
/// # Panics
/// When a position or `k`, `n` lie outside `a` (`M·k` values) or `w`
/// (`k·n` values).
pub fn reference(
    a: &[f32],
    w: &[f32],
    k: usize,
    n: usize,
    positions: &[(usize, usize)],
) -> Vec<(f64, f64)> {
    let mut order: Vec<usize> = (0..positions.len()).collect();
    order.sort_by_key(|&x| positions[x]);
    let pieces: Vec<&[usize]> = order
        .chunk_by(|&x, &y| positions[x].0 == positions[y].0)
        .flat_map(|row| row.chunks(COLUMNS_PER_PIECE))
        .collect();
    let piece = |at: &[usize]| -> Vec<(f64, f64)> {
        let i = positions[at[0]].0;
        let mut sums = vec![(0f64, 0f64); at.len()];
        for (p, &x) in a[i * k..(i + 1) * k].iter().enumerate() {
            let row = &w[p * n..(p + 1) * n];
            for (s, &which) in sums.iter_mut().zip(at) {
                let v = x as f64 * row[positions[which].1] as f64;
                s.0 += v;
                s.1 += v.abs();
            }
        }
        sums
    };
    let threads = crate::threads_for(k * positions.len(), PARALLEL_MIN)
        .min(pieces.len())
        .max(1);
    let per_thread = pieces.len().div_ceil(threads);
    let done: Vec<Vec<(f64, f64)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = pieces
            .chunks(per_thread)
            .map(|share| scope.spawn(move || share.iter().map(|at| piece(at)).collect::<Vec<_>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a reference thread panicked"))
            .collect()
    });
    let mut out = vec![(0.0, 0.0); positions.len()];
    for (at, sums) in pieces.iter().zip(done) {
        for (&x, s) in at.iter().zip(sums) {
            out[x] = s;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(m: usize, k: usize, n: usize, a: &[f32], w: &[f32]) -> Vec<f32> {
        let mut c = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|p| a[i * k + p] * w[p * n + j]).sum();
            }
        }
        c
    }

    #[test]
    fn a_large_random_vec_is_one_generator_s_sequence() {
        let len = 3 * PARALLEL_MIN + 7;
        let mut g = SplitMix64::new(42);
        let one: Vec<f32> = (0..len).map(|_| g.next_signed_unit()).collect();
        assert_eq!(random_vec(len, 42), one);
        assert!(random_vec(0, 42).is_empty());
    }

    #[test]
    fn the_reference_adds_each_output_in_order_of_k_as_a_column_walk_would() {
        // Enough work for threads, rows with more sampled columns than one
        // piece, and a repeated position.
        let (m, k, n) = (3, 700, 1500);
        let a = random_vec(m * k, 1);
        let w = random_vec(k * n, 2);
        let mut positions: Vec<(usize, usize)> = (0..n).map(|j| (1, j)).collect();
        positions.extend([(2, 5), (0, 1499), (2, 5), (0, 0)]);
        let got = reference(&a, &w, k, n, &positions);
        for (&(i, j), &(dot, scale)) in positions.iter().zip(&got) {
            let (mut d, mut s) = (0f64, 0f64);
            for p in 0..k {
                let x = a[i * k + p] as f64 * w[p * n + j] as f64;
                d += x;
                s += x.abs();
            }
            assert_eq!((dot, scale), (d, s), "({i}, {j})");
        }
    }

    #[test]
    fn inputs_are_reproducible_and_in_range() {
        let s = GemmShape::new(3, 5, 7).unwrap();
        let (a1, w1) = inputs(&s, 0);
        let (a2, w2) = inputs(&s, 0);
        let (a3, _) = inputs(&s, 1);
        assert_eq!((a1.clone(), w1.clone()), (a2, w2));
        assert_ne!(a1, a3);
        assert!(a1.iter().chain(&w1).all(|x| (-1.0..1.0).contains(x)));
        assert_ne!(a1, w1[..a1.len()].to_vec());
    }

    #[test]
    fn a_correct_product_passes_and_a_wrong_one_fails() {
        let s = GemmShape::new(9, 33, 11).unwrap();
        let (a, w) = inputs(&s, 0);
        let mut c = naive(9, 33, 11, &a, &w);
        let ok = check(&s, &a, &w, &c);
        assert_eq!(ok.sampled, 99);
        assert!(ok.passes(1e-6), "{ok:?}");
        c[5 * 11 + 4] += 0.5;
        let bad = check(&s, &a, &w, &c);
        assert_eq!(bad.worst, (5, 4));
        assert!(!bad.passes(1e-2), "{bad:?}");
        c[0] = f32::NAN;
        assert_eq!(check(&s, &a, &w, &c).rel_err, f64::INFINITY);
    }

    #[test]
    fn cancellation_does_not_fail_a_correct_result() {
        // Row 0 of A and the columns of W are built so that the exact dot
        // product is 0: a plain relative error would be infinite.
        let s = GemmShape::new(1, 4, 1).unwrap();
        let a = [1.0, 1.0, 1.0, 1.0];
        let w = [0.3, -0.3, 0.7, -0.7];
        let c = [1e-8];
        let r = check(&s, &a, &w, &c);
        assert!(r.passes(1e-6), "{r:?}");
    }

    #[test]
    fn large_outputs_are_sampled_with_corners() {
        let pos = sample_positions(1000, 1000);
        assert_eq!(pos.len(), SAMPLES + 4);
        assert!(pos.contains(&(999, 999)) && pos.contains(&(0, 999)));
        assert!(pos.iter().all(|&(i, j)| i < 1000 && j < 1000));
        assert_eq!(sample_positions(2, 3).len(), 6);
    }
}
