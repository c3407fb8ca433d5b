//! The inner loops of the small-row product: weights read once, each
//! 16-bit weight widened to f32 in the register that multiplies it.
//!
//! - [`dot_rows`] (`transposed`, `Wᵀ[N,K]`): each output is a dot product of
//!   a contiguous weight row with the `M` activation rows.
//! - [`axpy_rows`] (`aw`, `W[K,N]`): a band of output columns accumulates
//!   `a[m,k]·W[k, band]` row by row, four weight rows at a time.
//!
//! On x86-64 with AVX2, FMA and F16C (checked once at run time) the loops
//! use those instructions; elsewhere a portable loop over 8-lane arrays,
//! which the compiler vectorises for the target (NEON on aarch64).

use half::{bf16, f16};

use crate::convert::FromF32;

/// A weight element: f32, or a 16-bit float widened to f32 when read.
pub trait Weight: FromF32 + 'static {
    /// Bytes per element.
    const BYTES: usize;
    /// The element's value.
    fn to_f32(self) -> f32;
    /// Eight elements from `p`, widened.
    ///
    /// # Safety
    /// `p` points at 8 readable elements, and the CPU has AVX2, FMA and F16C.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256;
}

impl Weight for f32 {
    const BYTES: usize = 4;
    fn to_f32(self) -> f32 {
        self
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256 {
        // SAFETY: 8 readable f32 by the caller's contract.
        unsafe { std::arch::x86_64::_mm256_loadu_ps(p) }
    }
}

impl Weight for f16 {
    const BYTES: usize = 2;
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        // SAFETY: 8 readable f16 (16 bytes) by the caller's contract.
        _mm256_cvtph_ps(unsafe { _mm_loadu_si128(p.cast()) })
    }
}

impl Weight for bf16 {
    const BYTES: usize = 2;
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        // SAFETY: 8 readable bf16 (16 bytes) by the caller's contract.
        let bits = _mm256_cvtepu16_epi32(unsafe { _mm_loadu_si128(p.cast()) });
        // A bf16 is the top half of the f32 with the same value.
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(bits))
    }
}

/// Whether this CPU runs the AVX2 loops (AVX2, FMA and F16C).
pub fn simd() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::sync::OnceLock;
        static HAS: OnceLock<bool> = OnceLock::new();
        *HAS.get_or_init(|| {
            is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Lanes of the portable loops.
const LANES: usize = 8;

/// Bytes of activation one pass of [`dot_rows`] keeps in L1: the `M` rows'
/// slices of one block of K.
const ACT_BLOCK_BYTES: usize = 16 << 10;

/// Elements of K one pass of [`dot_rows`] covers. Each weight vector is
/// multiplied by `M` activation vectors: with more than one row, the
/// activation block must come from L1 (8×4096 f32 in L2 held the product
/// to a fifth of the memory's speed on 2 cores). One row reads its
/// activation once per weight vector and covers K in one pass.
fn k_block<const M: usize>(k: usize) -> usize {
    if M == 1 {
        k
    } else {
        (ACT_BLOCK_BYTES / 4 / M).min(k)
    }
}

/// `out[r·M + m] = Σₖ w[r·K + k] · a[m·K + k]` for every row `r` of `w`
/// (rows of `k` elements) and `m < M`.
pub fn dot_rows<W: Weight, const M: usize>(w: &[W], a: &[f32], k: usize, out: &mut [f32]) {
    dot_rows_with::<W, M>(w, a, k, out, simd());
}

/// [`dot_rows`], with the AVX2 loop where `simd` (the CPU must have it).
fn dot_rows_with<W: Weight, const M: usize>(
    w: &[W],
    a: &[f32],
    k: usize,
    out: &mut [f32],
    simd: bool,
) {
    let rows = w.len() / k;
    assert!(w.len() == rows * k && a.len() == M * k && out.len() == rows * M);
    let kb = k_block::<M>(k);
    out.fill(0.0);
    let mut k0 = 0;
    while k0 < k {
        let len = kb.min(k - k0);
        for (r, o) in out.chunks_exact_mut(M).enumerate() {
            let seg = &w[r * k + k0..r * k + k0 + len];
            let sums = dot_segment::<W, M>(seg, a, k, k0, simd);
            for (o, s) in o.iter_mut().zip(sums) {
                *o += s;
            }
        }
        k0 += len;
    }
}

/// `Σⱼ w[j] · a[m·K + k0 + j]` for each `m < M`, over `w`'s length.
fn dot_segment<W: Weight, const M: usize>(
    w: &[W],
    a: &[f32],
    k: usize,
    k0: usize,
    simd: bool,
) -> [f32; M] {
    assert!(k0 + w.len() <= k && a.len() == M * k);
    #[cfg(target_arch = "x86_64")]
    if simd {
        // SAFETY: the caller only asks where the CPU has the features;
        // lengths asserted.
        return unsafe { x86::dot_segment::<W, M>(w, a, k, k0) };
    }
    let _ = simd;
    let mut acc = [[0f32; LANES]; M];
    let mut wide = [0f32; LANES];
    let len = w.len() / LANES * LANES;
    for (i, wv) in w[..len].chunks_exact(LANES).enumerate() {
        for (d, s) in wide.iter_mut().zip(wv) {
            *d = s.to_f32();
        }
        for (m, acc) in acc.iter_mut().enumerate() {
            let at = m * k + k0 + i * LANES;
            for (l, a) in a[at..at + LANES].iter().enumerate() {
                acc[l] += wide[l] * a;
            }
        }
    }
    std::array::from_fn(|m| {
        let at = m * k + k0;
        acc[m].iter().sum::<f32>() + tail_dot(&w[len..], &a[at + len..at + w.len()])
    })
}

/// `Σ w[j]·a[j]` for the few elements past the last whole vector.
fn tail_dot<W: Weight>(w: &[W], a: &[f32]) -> f32 {
    w.iter().zip(a).map(|(w, a)| w.to_f32() * a).sum()
}

/// `acc[m·B + j] = Σₖ a[m·K + k] · W[k, c0 + j]` for `j < B` (the band's
/// width `acc.len() / M`), `W[K,N]` being `w` with rows `n` apart.
pub fn axpy_rows<W: Weight, const M: usize>(
    w: &[W],
    n: usize,
    c0: usize,
    a: &[f32],
    k: usize,
    acc: &mut [f32],
) {
    let band = acc.len() / M;
    assert!(w.len() == k * n && c0 + band <= n && a.len() == M * k && acc.len() == M * band);
    acc.fill(0.0);
    #[cfg(target_arch = "x86_64")]
    if simd() {
        // SAFETY: the CPU has the features (just checked); lengths asserted.
        unsafe { x86::axpy_rows::<W, M>(w, n, c0, a, k, acc) };
        return;
    }
    axpy_rows_portable::<W, M>(w, n, c0, a, k, acc);
}

/// [`axpy_rows`] without SIMD intrinsics, on a zeroed `acc`.
fn axpy_rows_portable<W: Weight, const M: usize>(
    w: &[W],
    n: usize,
    c0: usize,
    a: &[f32],
    k: usize,
    acc: &mut [f32],
) {
    let band = acc.len() / M;
    for kk in 0..k {
        let wr = &w[kk * n + c0..kk * n + c0 + band];
        for m in 0..M {
            let am = a[m * k + kk];
            for (c, w) in acc[m * band..(m + 1) * band].iter_mut().zip(wr) {
                *c += am * w.to_f32();
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{Weight, tail_dot};

    /// Horizontal sum of the 8 lanes.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps::<1>(s, s));
        _mm_cvtss_f32(s)
    }

    /// Weight vectors per step of [`dot_segment`] for `m` activation rows:
    /// `m · VECTORS` accumulators, at most 8 of the 16 registers, so that
    /// one row still has 4 sums in flight to cover the FMA's latency.
    const fn vectors(m: usize) -> usize {
        match m {
            1 => 4,
            2..=4 => 2,
            _ => 1,
        }
    }

    /// [`super::dot_segment`]: [`vectors`]`(M)` weight vectors per step,
    /// each widened once and multiplied by every activation row.
    ///
    /// # Safety
    /// The CPU has AVX2, FMA and F16C; `a` holds `M` rows of `k` and
    /// `k0 + w.len() ≤ k`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dot_segment<W: Weight, const M: usize>(
        w: &[W],
        a: &[f32],
        k: usize,
        k0: usize,
    ) -> [f32; M] {
        let (ap, wp) = (a.as_ptr(), w.as_ptr());
        let v = vectors(M);
        let mut acc = [[_mm256_setzero_ps(); 4]; M];
        let mut i = 0;
        while i + 8 * v <= w.len() {
            for u in 0..v {
                // SAFETY: i + 8·v ≤ w.len(), so within `w` and within each
                // activation row's k0..k.
                let wv = unsafe { W::load8(wp.add(i + 8 * u)) };
                for (m, acc) in acc.iter_mut().enumerate() {
                    let av = unsafe { _mm256_loadu_ps(ap.add(m * k + k0 + i + 8 * u)) };
                    acc[u] = _mm256_fmadd_ps(wv, av, acc[u]);
                }
            }
            i += 8 * v;
        }
        let mut sums = [0f32; M];
        for (m, s) in sums.iter_mut().enumerate() {
            let at = m * k + k0;
            let tail = tail_dot(&w[i..], &a[at + i..at + w.len()]);
            let pairs = (
                _mm256_add_ps(acc[m][0], acc[m][1]),
                _mm256_add_ps(acc[m][2], acc[m][3]),
            );
            *s = hsum(_mm256_add_ps(pairs.0, pairs.1)) + tail;
        }
        sums
    }

    /// [`super::axpy_rows`]: four weight rows per pass over the band's
    /// accumulators (which stay in L1), then the remaining rows one by one.
    ///
    /// # Safety
    /// The CPU has AVX2, FMA and F16C; the lengths are those
    /// `super::axpy_rows` asserts, and `acc` is zero.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn axpy_rows<W: Weight, const M: usize>(
        w: &[W],
        n: usize,
        c0: usize,
        a: &[f32],
        k: usize,
        acc: &mut [f32],
    ) {
        let band = acc.len() / M;
        let whole = band / 8 * 8;
        let mut kk = 0;
        while kk + 4 <= k {
            // SAFETY: rows kk..kk+4 < k, columns c0..c0+band ≤ n.
            unsafe { rows_pass::<W, M, 4>(w, n, c0, a, k, kk, whole, acc) };
            kk += 4;
        }
        while kk < k {
            // SAFETY: as above, one row.
            unsafe { rows_pass::<W, M, 1>(w, n, c0, a, k, kk, whole, acc) };
            kk += 1;
        }
        // The columns past the last whole vector.
        for kk in 0..k {
            for m in 0..M {
                let am = a[m * k + kk];
                for j in whole..band {
                    acc[m * band + j] += am * w[kk * n + c0 + j].to_f32();
                }
            }
        }
    }

    /// Adds `a[m, kk+r] · W[kk+r, c0..c0+whole]` for `r < R` to each `m`'s
    /// accumulators, 8 columns at a time.
    ///
    /// # Safety
    /// As [`axpy_rows`], with `kk + R ≤ k` and `whole` a multiple of 8 no
    /// larger than the band.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn rows_pass<W: Weight, const M: usize, const R: usize>(
        w: &[W],
        n: usize,
        c0: usize,
        a: &[f32],
        k: usize,
        kk: usize,
        whole: usize,
        acc: &mut [f32],
    ) {
        let band = acc.len() / M;
        let mut am = [[_mm256_setzero_ps(); R]; M];
        for (m, am) in am.iter_mut().enumerate() {
            for (r, v) in am.iter_mut().enumerate() {
                *v = _mm256_set1_ps(a[m * k + kk + r]);
            }
        }
        let (wp, cp) = (w.as_ptr(), acc.as_mut_ptr());
        let mut j = 0;
        while j < whole {
            let mut wv = [_mm256_setzero_ps(); R];
            for (r, v) in wv.iter_mut().enumerate() {
                // SAFETY: row kk + r < k, columns c0 + j..c0 + j + 8 ≤ n.
                *v = unsafe { W::load8(wp.add((kk + r) * n + c0 + j)) };
            }
            for (m, am) in am.iter().enumerate() {
                // SAFETY: m·band + j + 8 ≤ (m + 1)·band.
                let p = unsafe { cp.add(m * band + j) };
                let mut c = unsafe { _mm256_loadu_ps(p) };
                for r in 0..R {
                    c = _mm256_fmadd_ps(am[r], wv[r], c);
                }
                unsafe { _mm256_storeu_ps(p, c) };
            }
            j += 8;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both loops (the AVX2 one where this CPU has it) against an f64 sum
    /// of the same rounded operands, on lengths around the vector widths,
    /// and past one block of K ([`k_block`]).
    fn both_loops<W: Weight, const M: usize>() {
        for (k, n) in [
            (1, 1),
            (7, 3),
            (8, 9),
            (16, 17),
            (33, 40),
            (100, 31),
            (2100, 5),
        ] {
            let w: Vec<W> = (0..k * n)
                .map(|i| W::from_f32(((i * 7919 % 201) as f32 - 100.0) / 64.0))
                .collect();
            let a: Vec<f32> = (0..M * k)
                .map(|i| ((i * 31 % 17) as f32 - 8.0) / 8.0)
                .collect();
            // `w` as Wᵀ[N,K] (dot) and as W[K,N] (axpy, columns 2.. of it).
            let want_dot = |r: usize, m: usize| -> f64 {
                (0..k)
                    .map(|j| w[r * k + j].to_f32() as f64 * a[m * k + j] as f64)
                    .sum()
            };
            let want_axpy = |m: usize, col: usize| -> f64 {
                (0..k)
                    .map(|j| a[m * k + j] as f64 * w[j * n + col].to_f32() as f64)
                    .sum()
            };
            let close =
                |got: f32, want: f64| (got as f64 - want).abs() <= 1e-4 * (1.0 + want.abs());
            let mut fast = vec![0f32; n * M];
            let mut slow = vec![0f32; n * M];
            dot_rows::<W, M>(&w, &a, k, &mut fast);
            dot_rows_with::<W, M>(&w, &a, k, &mut slow, false);
            for r in 0..n {
                for m in 0..M {
                    let want = want_dot(r, m);
                    assert!(close(fast[r * M + m], want), "dot k={k} n={n} ({r},{m})");
                    assert!(close(slow[r * M + m], want), "portable dot k={k} n={n}");
                }
            }
            let c0 = n.min(2);
            let band = n - c0;
            let mut fast = vec![1f32; band * M];
            let mut slow = vec![0f32; band * M];
            axpy_rows::<W, M>(&w, n, c0, &a, k, &mut fast);
            axpy_rows_portable::<W, M>(&w, n, c0, &a, k, &mut slow);
            for m in 0..M {
                for j in 0..band {
                    let want = want_axpy(m, c0 + j);
                    assert!(
                        close(fast[m * band + j], want),
                        "axpy k={k} n={n} ({m},{j})"
                    );
                    assert!(close(slow[m * band + j], want), "portable axpy k={k} n={n}");
                }
            }
        }
    }

    #[test]
    fn every_type_and_row_count_sums_right() {
        both_loops::<f32, 1>();
        both_loops::<f16, 1>();
        both_loops::<bf16, 1>();
        both_loops::<f16, 3>();
        both_loops::<bf16, 4>();
        both_loops::<f32, 5>();
        both_loops::<f16, 8>();
        both_loops::<bf16, 8>();
    }

    #[test]
    fn widening_is_exact() {
        // Every 16-bit pattern that is a number widens as `half` does.
        let w16: Vec<f16> = (0..=u16::MAX)
            .map(f16::from_bits)
            .filter(|x| x.is_finite())
            .collect();
        let wb: Vec<bf16> = (0..=u16::MAX)
            .map(bf16::from_bits)
            .filter(|x| x.is_finite())
            .collect();
        fn check<W: Weight>(w: &[W]) {
            let mut one = [0f32; 1];
            // 16 elements: one step of the vector loop for one row.
            for (i, c) in w.chunks_exact(16).enumerate() {
                // A dot product with a one-hot activation picks one
                // widened weight.
                for l in 0..16 {
                    let mut a = [0f32; 16];
                    a[l] = 1.0;
                    dot_rows::<W, 1>(c, &a, 16, &mut one);
                    assert_eq!(one[0], c[l].to_f32(), "element {}", i * 16 + l);
                }
            }
        }
        check(&w16[..4096]);
        check(&wb[..4096]);
        check(&w16[w16.len() - 4096..]);
        check(&wb[wb.len() - 4096..]);
    }
}
