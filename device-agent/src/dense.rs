//! Dense buffers in the processor's operand order, and the `gemm` crate call
//! on them. Shared by the cpu backend (which times it) and the NPU
//! simulator (which computes the real product with it so the result can be
//! verified).
//!
//! Layouts, all row-major:
//! - `aw`: activation `A[M,K]`, weights `W[K,N]`, output `C[M,N]`;
//!   the call is `C = A·W`.
//! - `transposed`: activation stored as `Aᵀ[K,M]`, weights as `Wᵀ[N,K]`, output
//!   `Cᵀ[N,M]`; the call is `Cᵀ = Wᵀ·Aᵀ`, with the weights as the left operand.
//!
//! Conversions between the logical f32 layout and these happen in
//! `write_input`/`read_output`, outside the timed call, but the runtime pays
//! them on every operator: the transposes are the `transpose` crate's
//! cache-blocked ones (a row-by-row loop ran a prefill activation's at
//! 0.2–0.8 GB/s on a 2-core x86-64 machine).

use gemm::{Parallelism, f16};
use hetero_plan::{DType, OperandOrder};

use crate::convert::{self, FromF32};
use crate::{Error, GemmSpec, Result};

/// One operand buffer in the compute type.
pub(crate) enum Buf {
    F32(Vec<f32>),
    F16(Vec<f16>),
}

impl Buf {
    fn zeros(dtype: DType, len: usize) -> Option<Buf> {
        match dtype {
            DType::F32 => Some(Buf::F32(FromF32::zeros(len))),
            DType::F16 => Some(Buf::F16(FromF32::zeros(len))),
            _ => None,
        }
    }

    /// Stores weights `src` (row-major `rows × cols`) here, transposed when
    /// asked, on every core ([`crate::convert`]): a model's GEMMs are
    /// prepared from billions of them.
    fn load_weights(&mut self, src: &[f32], rows: usize, cols: usize, transpose: bool) {
        let transpose = transpose && !is_vector(rows, cols);
        match self {
            Buf::F32(d) if transpose => convert::transpose_convert(src, rows, cols, rows, d),
            Buf::F32(d) => convert::convert(src, d),
            Buf::F16(d) if transpose => convert::transpose_convert(src, rows, cols, rows, d),
            Buf::F16(d) => convert::convert(src, d),
        }
    }

    /// Stores `src` (row-major `rows × cols`) here, transposed when asked.
    /// `scratch` holds the 16-bit values before their transpose.
    fn load(
        &mut self,
        src: &[f32],
        rows: usize,
        cols: usize,
        transpose: bool,
        scratch: &mut Vec<f16>,
    ) {
        let transpose = transpose && !is_vector(rows, cols);
        match self {
            Buf::F32(d) if transpose => transpose::transpose(src, d, cols, rows),
            Buf::F32(d) => d.copy_from_slice(src),
            Buf::F16(d) if transpose => {
                scratch.clear();
                scratch.extend(src.iter().map(|&x| f16::from_f32(x)));
                transpose::transpose(scratch, d, cols, rows);
            }
            Buf::F16(d) => {
                for (d, s) in d.iter_mut().zip(src) {
                    *d = f16::from_f32(*s);
                }
            }
        }
    }

    /// Reads this buffer (row-major `rows × cols` in logical terms, stored
    /// `cols × rows` when transposed) into `dst`.
    fn store(
        &self,
        dst: &mut [f32],
        rows: usize,
        cols: usize,
        transpose: bool,
        scratch: &mut Vec<f16>,
    ) {
        let transpose = transpose && !is_vector(rows, cols);
        match self {
            Buf::F32(s) if transpose => transpose::transpose(s, dst, rows, cols),
            Buf::F32(s) => dst.copy_from_slice(s),
            Buf::F16(s) => {
                let s = if transpose {
                    scratch.clear();
                    scratch.resize(s.len(), f16::ZERO);
                    transpose::transpose(s, scratch, rows, cols);
                    &scratch[..]
                } else {
                    &s[..]
                };
                for (d, s) in dst.iter_mut().zip(s) {
                    *d = s.to_f32();
                }
            }
        }
    }
}

/// A prepared dense GEMM: weights resident in the compute type and order,
/// activation and output buffers allocated.
pub(crate) struct Dense {
    pub spec: GemmSpec,
    act: Buf,
    wts: Buf,
    out: Buf,
    /// 16-bit values on their way through a transpose.
    scratch: Vec<f16>,
}

impl Dense {
    /// Converts the weights `W[K,N]` (row-major f32) to the dtype and order.
    pub fn new(id: &str, spec: &GemmSpec, weights: &[f32]) -> Result<Dense> {
        let (m, k, n) = dims(spec);
        spec.check_weights_len(id, weights.len())?;
        let unsupported = || Error::unsupported(id, format!("dtype {}", spec.dtype));
        let mut wts = Buf::zeros(spec.dtype, k * n).ok_or_else(unsupported)?;
        let act = Buf::zeros(spec.dtype, m * k).ok_or_else(unsupported)?;
        let out = Buf::zeros(spec.dtype, m * n).ok_or_else(unsupported)?;
        // transposed keeps Wᵀ[N,K].
        wts.load_weights(weights, k, n, spec.order == OperandOrder::Transposed);
        Ok(Dense {
            spec: *spec,
            act,
            wts,
            out,
            scratch: Vec::new(),
        })
    }

    /// Replaces the weights `W[K,N]` (row-major f32).
    pub fn write_weights(&mut self, id: &str, w: &[f32]) -> Result<()> {
        let (_, k, n) = dims(&self.spec);
        self.spec.check_weights_len(id, w.len())?;
        (self.wts).load_weights(w, k, n, self.spec.order == OperandOrder::Transposed);
        Ok(())
    }

    /// Stores the activation `A[M,K]` (row-major f32).
    pub fn write_input(&mut self, id: &str, a: &[f32]) -> Result<()> {
        let (m, k, _) = dims(&self.spec);
        self.spec.check_input_len(id, a.len())?;
        let transpose = self.spec.order == OperandOrder::Transposed;
        self.act.load(a, m, k, transpose, &mut self.scratch);
        Ok(())
    }

    /// Reads the output `C[M,N]` (row-major f32).
    pub fn read_output(&mut self, id: &str, c: &mut [f32]) -> Result<()> {
        let (m, _, n) = dims(&self.spec);
        self.spec.check_output_len(id, c.len())?;
        let transpose = self.spec.order == OperandOrder::Transposed;
        self.out.store(c, m, n, transpose, &mut self.scratch);
        Ok(())
    }

    /// Runs the product with the `gemm` crate. Call it inside the rayon pool
    /// that should run it.
    pub fn run(&mut self, par: Parallelism) {
        let (m, k, n) = dims(&self.spec);
        let order = self.spec.order;
        match (&mut self.out, &self.act, &self.wts) {
            (Buf::F32(c), Buf::F32(a), Buf::F32(w)) => call(order, m, k, n, c, a, w, 0.0, 1.0, par),
            (Buf::F16(c), Buf::F16(a), Buf::F16(w)) => {
                call(order, m, k, n, c, a, w, f16::ZERO, f16::ONE, par)
            }
            _ => unreachable!("buffers are created with one dtype"),
        }
    }
}

/// Whether a `rows × cols` matrix is a vector, whose transpose is itself
/// in memory: a decode step's input and output (M = 1). The `transpose`
/// crate took 24 µs for a 1×8960 f32 input and 24 µs for a 1×36352 output
/// on an H100 host's CPU (1.5 GB/s), where a copy takes about 1 µs and 3 µs
/// (`docs/benchmarks.md`, Runtime).
fn is_vector(rows: usize, cols: usize) -> bool {
    rows == 1 || cols == 1
}

fn dims(spec: &GemmSpec) -> (usize, usize, usize) {
    let (m, k, n) = spec.shape.mkn();
    (m as usize, k as usize, n as usize)
}

/// `C = A·W` (aw) or `Cᵀ = Wᵀ·Aᵀ` (transposed) on row-major buffers.
///
/// A product of at most [`SPLIT_MAX_M`] rows is split by output columns
/// over `par`'s threads, each band one single-threaded `gemm` call. The
/// crate sends a product with one row down its GEMV path, which runs on the
/// calling thread whatever the parallelism asked (a 15-thread processor
/// streamed a decode GEMV's weights with one core), and its blocked path
/// packs all of `W` for a few rows.
#[allow(clippy::too_many_arguments)]
fn call<T: Copy + Send + Sync + 'static>(
    order: OperandOrder,
    m: usize,
    k: usize,
    n: usize,
    c: &mut [T],
    a: &[T],
    w: &[T],
    zero: T,
    one: T,
    par: Parallelism,
) {
    assert!(c.len() == m * n && a.len() == m * k && w.len() == k * n);
    let threads = match par {
        Parallelism::None => 1,
        Parallelism::Rayon(0) => rayon::current_num_threads(),
        Parallelism::Rayon(t) => t,
    };
    let band = column_band(m, n, threads);
    let out = OutPtr(c.as_mut_ptr());
    // SAFETY (both calls): `c`, `a` and `w` hold exactly the M×N, M×K and
    // K×N elements asserted above, and the bands are disjoint ranges of
    // output columns within 0..N, so no two calls write one element.
    if band >= n {
        unsafe { call_cols(order, m, k, n, 0..n, out, a, w, zero, one, par) };
        return;
    }
    use rayon::prelude::*;
    (0..n.div_ceil(band)).into_par_iter().for_each(|i| {
        let cols = i * band..((i + 1) * band).min(n);
        unsafe {
            call_cols(
                order,
                m,
                k,
                n,
                cols,
                out,
                a,
                w,
                zero,
                one,
                Parallelism::None,
            )
        };
    });
}

/// Rows up to which a product is split by output columns (`call`).
const SPLIT_MAX_M: usize = 8;

/// Output columns per thread of a split product, or `n` when it runs whole:
/// a multiple of 16 elements (a 64-byte cache line of f32).
fn column_band(m: usize, n: usize, threads: usize) -> usize {
    const ALIGN: usize = 16;
    if m > SPLIT_MAX_M || threads < 2 || n < 2 * ALIGN {
        return n;
    }
    n.div_ceil(threads).div_ceil(ALIGN) * ALIGN
}

/// The output buffer, shared by the threads of a split product, each of
/// which writes its own band of columns.
#[derive(Clone, Copy)]
struct OutPtr<T>(*mut T);

// SAFETY: the pointer is only written through by `call_cols`, whose callers
// give every thread a disjoint band of output columns.
unsafe impl<T: Send> Send for OutPtr<T> {}
unsafe impl<T: Send> Sync for OutPtr<T> {}

/// One `gemm` call for output columns `cols` of `C[M,N]`, written into the
/// output `c` (`C[M,N]` in `aw`, `Cᵀ[N,M]` in `transposed`).
///
/// # Safety
/// `a`, `w` and `c` hold `M×K`, `K×N` and `M×N` elements, `cols` lies
/// within `0..N`, and no other thread writes these columns meanwhile.
#[allow(clippy::too_many_arguments)]
unsafe fn call_cols<T: Copy + 'static>(
    order: OperandOrder,
    m: usize,
    k: usize,
    n: usize,
    cols: std::ops::Range<usize>,
    c: OutPtr<T>,
    a: &[T],
    w: &[T],
    zero: T,
    one: T,
    par: Parallelism,
) {
    debug_assert!(cols.end <= n);
    let (c0, nc) = (cols.start, cols.len());
    // The `gemm` crate computes dst[m', n'] = lhs[m', k] · rhs[k, n'] with
    // explicit column (cs) and row (rs) strides.
    let (mm, nn, dst_off, dst_rs, lhs, lhs_rs, rhs, rhs_rs) = match order {
        // C[M,N] = A[M,K] · W[K,N]: columns c0.. of C and of W, their rows
        // N apart.
        OperandOrder::Aw => (m, nc, c0, n, a.as_ptr(), k, w[c0..].as_ptr(), n),
        // Cᵀ[N,M] = Wᵀ[N,K] · Aᵀ[K,M]: rows c0.. of Cᵀ and of Wᵀ.
        OperandOrder::Transposed => (nc, m, c0 * m, m, w[c0 * k..].as_ptr(), k, a.as_ptr(), m),
    };
    // SAFETY: by the caller's contract: lhs is mm × k with row stride
    // lhs_rs and rhs k × nn with row stride rhs_rs, within `a` and `w`; dst
    // is mm × nn with row stride dst_rs from `dst_off`, within `c`, in
    // columns no other thread writes. `read_dst` is false, so the previous
    // contents of dst (and `alpha`) are ignored.
    unsafe {
        gemm::gemm(
            mm,
            nn,
            k,
            c.0.add(dst_off),
            1,
            dst_rs as isize,
            false,
            lhs,
            1,
            lhs_rs as isize,
            rhs,
            1,
            rhs_rs as isize,
            zero,
            one,
            false,
            false,
            false,
            par,
        );
    }
}

#[cfg(test)]
mod tests {
    use hetero_plan::{GemmShape, WeightMode};

    use super::*;
    use crate::verify;

    #[test]
    fn both_orders_and_dtypes_match_the_reference() {
        for dtype in [DType::F32, DType::F16] {
            for order in [OperandOrder::Aw, OperandOrder::Transposed] {
                // Past the gemm crate's blocking and the transposes' tiles
                // too, on two threads.
                for (m, k, n, par) in [
                    (1, 1, 1, Parallelism::None),
                    (3, 17, 5, Parallelism::None),
                    (33, 7, 65, Parallelism::None),
                    (70, 300, 257, Parallelism::Rayon(2)),
                    (1, 513, 1030, Parallelism::Rayon(2)),
                    // Split by output columns over threads, the last
                    // band short: a GEMV, and a few rows.
                    (1, 64, 100, Parallelism::Rayon(3)),
                    (1, 40, 1030, Parallelism::Rayon(0)),
                    (3, 70, 100, Parallelism::Rayon(3)),
                    (8, 33, 257, Parallelism::Rayon(2)),
                    (9, 33, 257, Parallelism::Rayon(2)),
                    // Vectors, copied rather than transposed: one output
                    // column, one input column.
                    (5, 33, 1, Parallelism::None),
                    (4, 1, 9, Parallelism::None),
                ] {
                    let shape = GemmShape::new(m, k, n).unwrap();
                    let spec = GemmSpec {
                        shape,
                        dtype,
                        order,
                        weights: WeightMode::Static,
                    };
                    let (a, w) = verify::inputs(&shape, 0);
                    let mut d = Dense::new("t", &spec, &w).unwrap();
                    d.write_input("t", &a).unwrap();
                    d.run(par);
                    let mut c = vec![0f32; (m * n) as usize];
                    d.read_output("t", &mut c).unwrap();
                    let r = verify::check(&shape, &a, &w, &c);
                    let tol = crate::default_tolerance(dtype, k);
                    assert!(r.passes(tol), "{dtype} {order} {shape}: {r:?}");
                }
            }
        }
    }

    #[test]
    fn a_few_rows_split_their_columns_in_whole_cache_lines() {
        // 1280 columns over 15 threads: 86 each, rounded up to 96.
        assert_eq!(column_band(1, 1280, 15), 96);
        assert_eq!(column_band(SPLIT_MAX_M, 100, 3), 48);
        // Whole: more rows, one thread, or too few columns.
        assert_eq!(column_band(SPLIT_MAX_M + 1, 1280, 15), 1280);
        assert_eq!(column_band(1, 1280, 1), 1280);
        assert_eq!(column_band(1, 31, 4), 31);
    }

    #[test]
    fn wrong_lengths_and_dtypes_are_errors() {
        let shape = GemmShape::new(2, 3, 4).unwrap();
        let mut spec = GemmSpec {
            shape,
            dtype: DType::F32,
            order: OperandOrder::Aw,
            weights: WeightMode::Static,
        };
        assert!(matches!(
            Dense::new("t", &spec, &[0.0; 11]),
            Err(Error::BadRequest { .. })
        ));
        let mut d = Dense::new("t", &spec, &[0.0; 12]).unwrap();
        assert!(d.write_input("t", &[0.0; 5]).is_err());
        assert!(d.read_output("t", &mut [0.0; 7]).is_err());
        spec.dtype = DType::Bf16;
        assert!(matches!(
            Dense::new("t", &spec, &[0.0; 12]),
            Err(Error::Unsupported { .. })
        ));
    }
}
