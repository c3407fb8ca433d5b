//! The cpu backend's products of up to [`MAX_M`] rows (a decode step's
//! GEMVs): memory-bound, so the weights are read once, in their own type
//! (f32, f16 or bf16), widened in registers (`kernel`) and split over the
//! group's threads in contiguous parts.
//!
//! The `gemm` crate is shaped for compute: it runs a one-row product on
//! one thread, and has no bf16. Debug builds keep f32 and f16 on it
//! ([`super::SMALL_ROWS_OWN_LOOP`]).
//!
//! Layouts as in `crate::dense`: `aw` keeps `W[K,N]`, `transposed` keeps
//! `Wᵀ[N,K]`. The activation is kept in f32 (rounded to the weight type,
//! as a 16-bit device would hold it) and sums are f32.

pub mod bench;
mod kernel;

use half::{bf16, f16};
use hetero_plan::{DType, OperandOrder};
use rayon::prelude::*;

pub use kernel::simd;
use kernel::{Weight, axpy_rows, dot_rows};

use crate::convert::{FromF32, convert, transpose_convert};
use crate::{Error, GemmSpec, Result};

/// The most rows a product may have to run here.
pub const MAX_M: u32 = 8;

/// Parts per thread a product is split into, so that a thread slowed by
/// another process leaves its share to the others.
const PARTS_PER_THREAD: usize = 4;

/// Widest band of output columns one part of an `aw` product sums: its
/// accumulators (at most 8 × 1024 f32, 32 KiB) stay in L1.
const MAX_AW_BAND: usize = 1024;

/// Weights in their stored type.
#[derive(Clone)]
enum Weights {
    F32(Vec<f32>),
    F16(Vec<f16>),
    Bf16(Vec<bf16>),
}

/// Runs `$body` with `$w` bound to the weights as a slice of their type,
/// and `$t` to that type.
macro_rules! with_weights {
    ($weights:expr, |$w:ident: $t:ident| $body:expr) => {
        match $weights {
            Weights::F32($w) => {
                type $t = f32;
                $body
            }
            Weights::F16($w) => {
                type $t = f16;
                $body
            }
            Weights::Bf16($w) => {
                type $t = bf16;
                $body
            }
        }
    };
}

/// Calls `$f::<$t, M>($args)` with `M` the run-time row count `$m` (1..=8).
macro_rules! by_rows {
    ($m:expr, $f:ident::<$t:ty>($($arg:expr),*)) => {
        match $m {
            1 => $f::<$t, 1>($($arg),*),
            2 => $f::<$t, 2>($($arg),*),
            3 => $f::<$t, 3>($($arg),*),
            4 => $f::<$t, 4>($($arg),*),
            5 => $f::<$t, 5>($($arg),*),
            6 => $f::<$t, 6>($($arg),*),
            7 => $f::<$t, 7>($($arg),*),
            8 => $f::<$t, 8>($($arg),*),
            m => unreachable!("{m} rows: checked at prepare"),
        }
    };
}

/// Whether a product of `spec` runs here rather than through the `gemm`
/// crate: at most [`MAX_M`] rows, in f32, f16 or bf16.
pub fn handles(spec: &GemmSpec) -> bool {
    spec.shape.m.get() <= MAX_M && matches!(spec.dtype, DType::F32 | DType::F16 | DType::Bf16)
}

/// A prepared product of at most [`MAX_M`] rows.
#[derive(Clone)]
pub struct Gemv {
    spec: GemmSpec,
    weights: Weights,
    /// `A[M,K]`, rounded to the weight type.
    act: Vec<f32>,
    /// The output, part after part ([`Gemv::read_output`] reorders it).
    out: Vec<f32>,
    /// Weight rows (`transposed`) or output columns (`aw`) per part.
    part: usize,
}

impl Gemv {
    /// Stores the weights `W[K,N]` (row-major f32) in the type and order of
    /// `spec`, split for `threads` threads.
    pub fn new(id: &str, spec: &GemmSpec, weights: &[f32], threads: usize) -> Result<Gemv> {
        if !handles(spec) {
            return Err(Error::unsupported(
                id,
                format!("the small-row path for {} {}", spec.shape, spec.dtype),
            ));
        }
        let (m, k, n) = dims(spec);
        spec.check_weights_len(id, weights.len())?;
        let stored = match spec.dtype {
            DType::F16 => Weights::F16(FromF32::zeros(k * n)),
            DType::Bf16 => Weights::Bf16(FromF32::zeros(k * n)),
            _ => Weights::F32(FromF32::zeros(k * n)),
        };
        let parts = threads.max(1) * PARTS_PER_THREAD;
        let part = match spec.order {
            OperandOrder::Transposed => n.div_ceil(parts),
            // Whole 64-byte lines of f32 output.
            OperandOrder::Aw => n.div_ceil(parts).div_ceil(16).clamp(1, MAX_AW_BAND / 16) * 16,
        };
        let mut g = Gemv {
            spec: *spec,
            weights: stored,
            act: vec![0.0; m * k],
            out: vec![0.0; m * n],
            part: part.min(n),
        };
        g.write_weights(id, weights)?;
        Ok(g)
    }

    /// Replaces the weights `W[K,N]` (row-major f32).
    pub fn write_weights(&mut self, id: &str, w: &[f32]) -> Result<()> {
        let (_, k, n) = dims(&self.spec);
        self.spec.check_weights_len(id, w.len())?;
        let transposed = self.spec.order == OperandOrder::Transposed;
        with_weights!(&mut self.weights, |d: _T| {
            if transposed {
                transpose_convert(w, k, n, k, d);
            } else {
                convert(w, d);
            }
        });
        Ok(())
    }

    /// Stores the activation `A[M,K]` (row-major f32).
    pub fn write_input(&mut self, id: &str, a: &[f32]) -> Result<()> {
        self.spec.check_input_len(id, a.len())?;
        with_weights!(&self.weights, |_w: T| {
            for (d, &s) in self.act.iter_mut().zip(a) {
                *d = T::from_f32(s).to_f32();
            }
        });
        Ok(())
    }

    /// Reads the output `C[M,N]` (row-major f32).
    pub fn read_output(&self, id: &str, c: &mut [f32]) -> Result<()> {
        let (m, _, n) = dims(&self.spec);
        self.spec.check_output_len(id, c.len())?;
        for (p, chunk) in self.out.chunks(self.part * m).enumerate() {
            let (c0, width) = (p * self.part, chunk.len() / m);
            for (j, col) in (c0..c0 + width).enumerate() {
                for row in 0..m {
                    c[row * n + col] = match self.spec.order {
                        // Part p holds Cᵀ[c0.., M].
                        OperandOrder::Transposed => chunk[j * m + row],
                        // Part p holds C[M, c0..] band by band.
                        OperandOrder::Aw => chunk[row * width + j],
                    };
                }
            }
        }
        Ok(())
    }

    /// Runs the product on the current rayon pool's threads.
    pub fn run(&mut self) {
        let (m, k, n) = dims(&self.spec);
        let (a, part) = (&self.act[..], self.part);
        let parts = self.out.par_chunks_mut(part * m).enumerate();
        match self.spec.order {
            OperandOrder::Transposed => with_weights!(&self.weights, |w: T| {
                parts.for_each(|(p, out)| {
                    let rows = &w[p * part * k..(p * part + out.len() / m) * k];
                    by_rows!(m, dot_rows::<T>(rows, a, k, out));
                })
            }),
            OperandOrder::Aw => with_weights!(&self.weights, |w: T| {
                parts.for_each(|(p, acc)| by_rows!(m, axpy_rows::<T>(w, n, p * part, a, k, acc)))
            }),
        }
    }

    /// The weights as stored, the bytes one run reads.
    pub fn weight_bytes(&self) -> &[u8] {
        with_weights!(&self.weights, |w: T| {
            let bytes = size_of_val(&w[..]);
            debug_assert_eq!(bytes, w.len() * T::BYTES);
            // SAFETY: f32, f16 and bf16 are plain bits, without padding;
            // the slice covers the vector's own elements.
            unsafe { std::slice::from_raw_parts(w.as_ptr().cast::<u8>(), bytes) }
        })
    }

    /// What ran, in words: the loop's instructions and the split.
    pub fn describe(&self) -> String {
        let isa = if simd() { "AVX2+F16C" } else { "portable" };
        format!(
            "{isa} loop, weights read once in {} parts of {} {}",
            self.out
                .len()
                .div_ceil(self.part * self.spec.shape.m.get() as usize),
            self.part,
            match self.spec.order {
                OperandOrder::Transposed => "weight rows",
                OperandOrder::Aw => "output columns",
            }
        )
    }
}

fn dims(spec: &GemmSpec) -> (usize, usize, usize) {
    let (m, k, n) = spec.shape.mkn();
    (m as usize, k as usize, n as usize)
}

#[cfg(test)]
mod tests {
    use hetero_plan::{GemmShape, WeightMode};

    use super::*;
    use crate::verify;

    fn spec(m: u32, k: u32, n: u32, dtype: DType, order: OperandOrder) -> GemmSpec {
        GemmSpec {
            shape: GemmShape::new(m, k, n).unwrap(),
            dtype,
            order,
            weights: WeightMode::Static,
        }
    }

    /// Runs `spec` on a pool of `threads` and checks it against the host
    /// reference, after new weights too.
    fn check(spec: &GemmSpec, threads: usize) {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let shape = spec.shape;
        let (m, k, n) = dims(spec);
        let tol = crate::default_tolerance(spec.dtype, k as u32);
        let (a, w) = verify::inputs(&shape, 0);
        let mut g = Gemv::new("t", spec, &w, threads).unwrap();
        g.write_input("t", &a).unwrap();
        let mut c = vec![0f32; m * n];
        for salt in [0, 1] {
            let (_, w) = verify::inputs(&shape, salt);
            g.write_weights("t", &w).unwrap();
            pool.install(|| g.run());
            g.read_output("t", &mut c).unwrap();
            let r = verify::check(&shape, &a, &w, &c);
            let what = format!("{} {} {shape} on {threads}", spec.dtype, spec.order);
            assert!(r.passes(tol), "{what}: {r:?}");
        }
    }

    #[test]
    fn every_type_order_and_row_count_matches_the_reference() {
        for dtype in [DType::F32, DType::F16, DType::Bf16] {
            for order in [OperandOrder::Transposed, OperandOrder::Aw] {
                for m in 1..=MAX_M {
                    for (k, n, threads) in [(1, 1, 1), (7, 5, 2), (64, 100, 3), (333, 257, 2)] {
                        check(&spec(m, k, n, dtype, order), threads);
                    }
                }
                // Parts of whole and short bands, more parts than columns.
                for (m, k, n, threads) in [(1, 4099, 1030, 4), (8, 513, 2050, 3), (2, 40, 9, 8)] {
                    check(&spec(m, k, n, dtype, order), threads);
                }
            }
        }
    }

    #[test]
    fn aw_bands_are_whole_lines_and_fit_l1() {
        let g = |n, threads| {
            let s = spec(1, 4, n, DType::F16, OperandOrder::Aw);
            Gemv::new("t", &s, &vec![0.0; 4 * n as usize], threads)
                .unwrap()
                .part
        };
        // 14336 columns in 64 parts: 224 each.
        assert_eq!(g(14336, 16), 224);
        // Few threads: at most MAX_AW_BAND columns.
        assert_eq!(g(14336, 1), MAX_AW_BAND);
        assert_eq!(g(100, 2), 16);
        assert_eq!(g(5, 2), 5);
    }

    #[test]
    fn more_rows_and_other_types_are_refused() {
        let w = vec![0.0; 12];
        for s in [
            spec(MAX_M + 1, 3, 4, DType::F16, OperandOrder::Transposed),
            spec(1, 3, 4, DType::W8a16, OperandOrder::Transposed),
        ] {
            assert!(!handles(&s));
            assert!(matches!(
                Gemv::new("t", &s, &w, 1),
                Err(Error::Unsupported { .. })
            ));
        }
        let s = spec(1, 3, 4, DType::Bf16, OperandOrder::Aw);
        assert!(matches!(
            Gemv::new("t", &s, &w[..11], 1),
            Err(Error::BadRequest { .. })
        ));
        assert_eq!(Gemv::new("t", &s, &w, 1).unwrap().weight_bytes().len(), 24);
    }
}
