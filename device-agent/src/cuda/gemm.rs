//! A GEMM prepared on a CUDA device: weights resident, one cuBLASLt
//! matmul ([`super::lt`]), CUDA events for the kernel time, a host-mapped
//! flag for polling.
//!
//! Device layouts (cuBLAS is column-major; both [`Form`]s are one `TN`
//! call over the same buffers, with the operands swapped):
//!
//! | buffer | device layout | bytes |
//! |---|---|---|
//! | weights | `Wᵀ[Nₚ,Kₚ]` row-major (transposed once, in `prepare`), zero past N and K | Nₚ·Kₚ·e |
//! | input as sent | `A[M,Kₚ]` row-major f32 (only when e < 4 and the input is copied on its own) | M·Kₚ·4 |
//! | input | `A[R,Kₚ]` row-major, converted on the device; zero past M and K | R·Kₚ·e |
//! | output | activation left: `C[R,Nₚ]` column-major; weight left: `C[R,Nₚ]` row-major; f32 | R·Nₚ·4 |
//! | output, activation left, transposed | `C[M,N]` row-major f32 (unless the output is mapped host memory) | M·N·4 |
//!
//! [`Form::ActLeft`] runs `gemm(T, N, m=M, n=N, k=K, A, Wᵀ)`: the
//! activation is cuBLAS's left operand. [`Form::WeightLeft`] runs
//! `gemm(T, N, m=N, n=M, k=K, Wᵀ, A)`, which is `Cᵀ = Wᵀ·Aᵀ`: the weight
//! is the left operand. Both accumulate in f32 and write f32 (a 32F
//! output layout), so the output needs no conversion. The
//! activation-left form's column-major output is turned row-major by
//! `cublasSgeam` on the device, queued right behind the matmul and inside
//! the timed part, so that the search weighs each form with what it costs
//! and `read_output` is one copy in both forms. (Done in `read_output`
//! before, the transpose added about 13 µs to every readback of that form,
//! which the copy costs the solver charges did not follow: H200, prefill
//! 16, copies 7.4 ms measured against 6.25 ms predicted.)
//!
//! The operand order of the spec names the form a GEMM starts from (`aw`
//! the activation left, `wt_at` the weight left), as an NPU's order names
//! which operand stays resident. The output is the same either way, and
//! cuBLAS picks different kernels for the two (H100, f16,
//! 1024×8960×1536: 59.8 µs activation left, 42.0 µs weight left; which
//! form is faster changes from shape to shape), so the search below times
//! both forms and keeps the other one where it is faster.
//!
//! Both orders compute R ≥ M rows over zero rows past M, and `read_output`
//! keeps the first M. R is at least ⌈M⌉₈, M rounded up to a multiple of 8:
//! with M itself, cuBLAS picked slower kernels whenever M was not a
//! multiple of 8 (in `aw`, 2.7 times the `wt_at` call of the same shape,
//! median over 178 H100 shapes with M ≥ 64, up to 7.8 times), and a
//! leading dimension rounded up alone did not change that. Past that,
//! cuBLAS's choice of kernel still makes the time jump with M (H100, f16,
//! 445×1536×8960: 40 µs; 512×1536×8960: 27 µs; 533×1536×8960 41 µs over
//! 536 rows and 30 µs over 640), so `prepare` times every row count of
//! [`row_candidates`] (M rounded up to 8, 64, 128, 256 and 512, at most
//! half as many rows again as M) in both forms, each with the L2 evicted,
//! and keeps the fastest by its median run
//! ([`CudaGemm::choose`]; `HETERO_CUDA_ROWS=8` keeps ⌈M⌉₈ and
//! `HETERO_CUDA_FORM=order` the order's own form, for comparisons). Each
//! of those is timed with every algorithm cuBLASLt's heuristic offers for
//! it (up to 8): the heuristic's first guess, which is what `cublasGemmEx`
//! runs, was slow for some shapes (H100, f16, 1024×8960×768: 32.3 µs,
//! against 27.9 µs for its fifth; `HETERO_CUDA_ALGOS=1` keeps the first,
//! for comparisons). `docs/benchmarks.md`, Predictors, has the
//! measurements.
//!
//! Kₚ and Nₚ are K and N rounded up to a multiple of 8 ([`padded`]): the
//! zero columns of A and W add nothing to the product, and the output's
//! columns past N are never read back.
//!
//! Inputs and outputs of at most [`LAUNCH_COPY_MAX`] f32 bytes (a decode
//! step's, for a 1.5B model) cross inside the launch, through host memory
//! mapped for the device: `write_input` copies the input on the host into
//! this GEMM's own mapped buffer; in the launch, between the timing events
//! and inside the CUDA graph, the conversion kernel (or a `cublasSgeam`
//! copy, f32) reads it from there into the device input, and the output's
//! last kernel (the transpose, or a `cublasSgeam` copy weight left) writes
//! `C[M,N]` straight into a second mapped buffer, which `read_output`
//! copies out on the host. An operator then costs one round trip to the
//! device instead of three: each synchronous copy was a launch and a wait
//! of its own (H100, session 30: 22 µs of a decode operator's 38 µs went
//! to its two copies; session 31, side by side: 21 µs against 37 µs per
//! operator, 0.63–0.65 of the decode step's time). Copy-engine DMAs in
//! the graph instead added about 20 µs of device time to a 1×1536×1536
//! GEMM, the kernels' loads and stores over PCIe 4.5 µs. That time is in
//! the device time that the GEMM rows measure, so the latency model
//! carries it (the features `log2_in_bytes` and `log2_out_bytes` let a
//! tree find the step), and the staged microbenchmarks of those sizes time
//! the host copies alone
//! ([`Capabilities::launch_copy_max_bytes`](hetero_plan::Capabilities)).
//! `HETERO_CUDA_LAUNCH_COPY=0` copies every size on its own, and
//! `HETERO_CUDA_LAUNCH_COPY_MAX=BYTES` moves the bound, for comparisons.
//! Larger copies go from the caller's slice, each a DMA and a wait: one
//! DMA from memory of
//! [`Backend::alloc_host`](crate::Backend::alloc_host), the driver's
//! bounce buffers from ordinary memory. Copied on the host as well, a
//! large activation would cost more than the wait saved (H100: a 1 MiB
//! input 59 µs as a host copy, 38 µs as a DMA and a wait).

use std::ffi::c_void;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::cublas::sys as blas_sys;
use cudarc::driver::{CudaEvent, result, sys};
use half::{bf16, f16};
use hetero_plan::{DType, OperandOrder, Stats};

use super::graph::Graph;
use super::kernels::Half;
use super::lt::{LtMatmul, Problem, algos_wanted};
use super::mem::{DeviceBuf, MappedBuf, MappedFlag, PinnedBuf, Pod};
use super::{At, Device};
use crate::backend::PollPause;
use crate::{Error, Gemm, GemmSpec, Result, SyncMode, Timed};

/// How long a wait spins before it gives up and reports a timeout.
const WAIT_TIMEOUT: Duration = Duration::from_secs(60);

/// A poll sleeps through the predicted time less this margin, then spins.
/// Linux oversleeps by up to the timer slack (50 µs by default).
const POLL_MARGIN_US: f64 = 80.0;

/// Inputs and outputs of at most this many f32 bytes cross inside the
/// launch, through the GEMM's own mapped host buffers (the module's
/// docs). It holds a 1.5B model's decode activations but `lm_head`'s
/// output. At 128 KiB (H100, session 34) a prefill of 16 tokens ran no
/// faster and 14-19 % over its prediction: the host copies of 96 KiB took
/// 4-12 µs instead of 13-20 µs staged, but the kernels' loads and stores
/// over PCIe added 11-16 µs of device time to each operator.
pub(super) const LAUNCH_COPY_MAX: u64 = 64 << 10;

/// [`LAUNCH_COPY_MAX`], or `HETERO_CUDA_LAUNCH_COPY_MAX` bytes where set
/// (for comparisons), or none with `HETERO_CUDA_LAUNCH_COPY=0` (every copy
/// its own DMA and wait, the path of sessions 17–30).
pub(super) fn launch_copy_max_bytes() -> Option<u64> {
    if std::env::var("HETERO_CUDA_LAUNCH_COPY").as_deref() == Ok("0") {
        return None;
    }
    let set = std::env::var("HETERO_CUDA_LAUNCH_COPY_MAX").ok();
    Some(match set.as_deref().map(str::parse::<u64>) {
        Some(Ok(bytes)) => bytes,
        Some(Err(_)) => {
            eprintln!(
                "HETERO_CUDA_LAUNCH_COPY_MAX={:?} is not a number of bytes; using {LAUNCH_COPY_MAX}",
                set.unwrap_or_default()
            );
            LAUNCH_COPY_MAX
        }
        None => LAUNCH_COPY_MAX,
    })
}

/// The most rows [`row_candidates`] computes, as a multiple of M.
/// Sessions 22 to 25 allowed 1.25; at 1.5 a GEMM of M rows takes the time
/// of a faster row count up to half again as large (H100, f16,
/// 300×1536×8960: 27.3 µs over 304 or 320 rows; the design measured 384
/// rows at 21.7 µs), so its time comes closer to the lower envelope of the
/// times past M, which is monotone in M. `HETERO_CUDA_ROWS_MOST` sets
/// another, for comparisons.
pub(super) const ROWS_MOST: f64 = 1.5;

/// [`ROWS_MOST`], or `HETERO_CUDA_ROWS_MOST` where that is a number ≥ 1.
pub(super) fn rows_most() -> f64 {
    super::env_at_least("HETERO_CUDA_ROWS_MOST", 1.0).unwrap_or(ROWS_MOST)
}

/// Row counts a GEMM of M rows may compute, over zero rows past M: M
/// rounded up to a multiple of 8 (always: cuBLAS takes slower kernels for
/// other lengths), then of 64, 128, 256 and 512 where that is at most
/// `most` times M. Ascending, without repeats.
pub(super) fn row_candidates(m: usize, most: f64) -> Vec<usize> {
    let mut rows = vec![m.next_multiple_of(8)];
    for tile in [64, 128, 256, 512] {
        let r = m.next_multiple_of(tile);
        if r > rows[rows.len() - 1] && r as f64 <= most * m as f64 {
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

/// Which operand is cuBLAS's left one (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Form {
    /// The activation: `C[R,Nₚ]` comes out column-major.
    ActLeft,
    /// The weight: `C[R,Nₚ]` comes out row-major.
    WeightLeft,
}

impl Form {
    /// The form an operand order starts from.
    pub(super) fn of(order: OperandOrder) -> Form {
        match order {
            OperandOrder::Aw => Form::ActLeft,
            OperandOrder::WtAt => Form::WeightLeft,
        }
    }

    fn other(self) -> Form {
        match self {
            Form::ActLeft => Form::WeightLeft,
            Form::WeightLeft => Form::ActLeft,
        }
    }
}

/// Whether the row search times both forms: unless `HETERO_CUDA_FORM=order`
/// keeps each order to its own. With both, the two orders of a shape end on
/// one kernel (H100, 32 pairs: `aw` over `wt_at` 0.99–1.03), so the
/// processor is [`order_free`](hetero_plan::Capabilities::order_free).
pub(super) fn both_forms() -> bool {
    std::env::var("HETERO_CUDA_FORM").as_deref() != Ok("order")
}

/// The (rows, form) pairs [`CudaGemm::choose`] times, in the order it
/// prefers them on a tie: each row count of [`row_candidates`] (or ⌈M⌉₈
/// alone with `HETERO_CUDA_ROWS=8`), first in the order's own form, then
/// in the other (left out with `HETERO_CUDA_FORM=order`).
pub(super) fn candidates(m: usize, order: OperandOrder) -> Vec<(usize, Form)> {
    let rows = match std::env::var("HETERO_CUDA_ROWS").as_deref() {
        Ok("8") => vec![m.next_multiple_of(8)],
        _ => row_candidates(m, rows_most()),
    };
    let own = Form::of(order);
    let both = both_forms();
    rows.into_iter()
        .flat_map(|r| {
            let mut c = vec![(r, own)];
            if both {
                c.push((r, own.other()));
            }
            c
        })
        .collect()
}

/// Element types the backend computes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Elem {
    F32,
    F16,
    Bf16,
}

impl Elem {
    /// The element for a dtype, if cuBLAS runs it here.
    pub(super) fn of(dtype: DType) -> Option<Elem> {
        match dtype {
            DType::F32 => Some(Elem::F32),
            DType::F16 => Some(Elem::F16),
            DType::Bf16 => Some(Elem::Bf16),
            _ => None,
        }
    }

    /// Bytes per element.
    pub(super) fn size(self) -> usize {
        match self {
            Elem::F32 => 4,
            Elem::F16 | Elem::Bf16 => 2,
        }
    }

    /// The type as cuBLASLt names it.
    fn lt(self) -> cudarc::cublaslt::sys::cudaDataType {
        use cudarc::cublaslt::sys::cudaDataType as T;
        match self {
            Elem::F32 => T::CUDA_R_32F,
            Elem::F16 => T::CUDA_R_16F,
            Elem::Bf16 => T::CUDA_R_16BF,
        }
    }

    /// The conversion kernel that writes this type, if it is not f32.
    fn half(self) -> Option<Half> {
        match self {
            Elem::F32 => None,
            Elem::F16 => Some(Half::F16),
            Elem::Bf16 => Some(Half::Bf16),
        }
    }
}

/// Conversion from f32 to an element type, for the weights (converted
/// once, on the host, when a GEMM is prepared).
trait Scalar: Pod + Send {
    fn from_f32(x: f32) -> Self;
}

impl Scalar for f32 {
    fn from_f32(x: f32) -> Self {
        x
    }
}

impl Scalar for f16 {
    fn from_f32(x: f32) -> Self {
        f16::from_f32(x)
    }
}

impl Scalar for bf16 {
    fn from_f32(x: f32) -> Self {
        bf16::from_f32(x)
    }
}

/// Runs `$body` with `$t` bound to the Rust type of `$elem`.
macro_rules! with_elem {
    ($elem:expr, $t:ident => $body:expr) => {
        match $elem {
            Elem::F32 => {
                type $t = f32;
                $body
            }
            Elem::F16 => {
                type $t = f16;
                $body
            }
            Elem::Bf16 => {
                type $t = bf16;
                $body
            }
        }
    };
}

/// `dst[j*pitch + i] = src[i*cols + j]`: transposes a row-major `rows×cols`
/// matrix while converting, in cache-sized blocks, on all cores (weights of
/// a vocabulary projection are half a billion elements). `pitch` ≥ `rows`;
/// the elements of `dst` past `rows` in each row, and the rows past `cols`,
/// are left as they are (the zero padding of [`padded`]).
fn transpose_convert<T: Scalar + Send>(
    src: &[f32],
    rows: usize,
    cols: usize,
    pitch: usize,
    dst: &mut [T],
) {
    const B: usize = 64;
    debug_assert!(pitch >= rows && dst.len() >= cols * pitch);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    // Each thread owns a band of destination rows (source columns).
    let band = cols.div_ceil(threads).div_ceil(B).max(1) * B;
    std::thread::scope(|scope| {
        for (t, chunk) in dst.chunks_mut(band * pitch).enumerate() {
            let j_start = t * band;
            scope.spawn(move || {
                let j_end = (j_start + chunk.len() / pitch).min(cols);
                for i0 in (0..rows).step_by(B) {
                    for j0 in (j_start..j_end).step_by(B) {
                        for i in i0..(i0 + B).min(rows) {
                            for j in j0..(j0 + B).min(j_end) {
                                chunk[(j - j_start) * pitch + i] = T::from_f32(src[i * cols + j]);
                            }
                        }
                    }
                }
            });
        }
    });
}

/// A dimension as the GEMM computes it: K and N are rounded up to a
/// multiple of 8 over zeros, which leave the product as it is. cuBLAS
/// needs 16-byte aligned rows for its tensor-core kernels: with K = 8148 an
/// H100 took 308 µs for 256×8148×16384 `aw`, against 115 µs at K = 8104,
/// and `wt_at` with N = 4148 took 2.2 times `aw`. `HETERO_CUDA_PAD=none`
/// computes K and N as they are, for comparisons.
fn padded(d: usize) -> usize {
    match std::env::var("HETERO_CUDA_PAD").as_deref() {
        Ok("none") => d,
        _ => d.next_multiple_of(8),
    }
}

/// A 2D copy with every field zero, for `..copy_2d()` after the fields a
/// copy sets.
fn copy_2d() -> sys::CUDA_MEMCPY2D {
    sys::CUDA_MEMCPY2D {
        srcXInBytes: 0,
        srcY: 0,
        srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_HOST,
        srcHost: std::ptr::null(),
        srcDevice: 0,
        srcArray: std::ptr::null_mut(),
        srcPitch: 0,
        dstXInBytes: 0,
        dstY: 0,
        dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_HOST,
        dstHost: std::ptr::null_mut(),
        dstDevice: 0,
        dstArray: std::ptr::null_mut(),
        dstPitch: 0,
        WidthInBytes: 0,
        Height: 0,
    }
}

/// A GEMM prepared on one CUDA device.
pub(super) struct CudaGemm {
    spec: GemmSpec,
    elem: Elem,
    dev: Arc<Device>,
    w: DeviceBuf,
    /// The input as the host sent it (f32), when the GEMM runs in a
    /// 16-bit type, converts it on the device and copies it on its own
    /// (not through `in_host`).
    a32: Option<DeviceBuf>,
    a: DeviceBuf,
    /// The f32 output as cuBLAS writes it.
    c: DeviceBuf,
    /// The activation-left output transposed to row-major (allocated when
    /// that form is chosen).
    ct: Option<DeviceBuf>,
    start: CudaEvent,
    end: CudaEvent,
    flag: MappedFlag,
    /// Holds the stream until a launch is queued
    /// ([`Gemm::execute_kernel_only`]); allocated on its first use, since
    /// only studies time that way.
    gate: Option<MappedFlag>,
    seq: u32,
    submitted: Option<Instant>,
    /// `Wᵀ[N,K]` in page-locked host memory, copied into `w` at the start
    /// of every launch ([`Gemm::host_weights`]: ScheInfer's CG rows).
    w_host: Option<PinnedBuf>,
    /// `A[M,Kₚ]` f32 in host memory mapped for the device, where the input
    /// crosses inside the launch ([`LAUNCH_COPY_MAX`]); its columns past K
    /// stay zero.
    in_host: Option<MappedBuf>,
    /// `C[M,N]` f32 in host memory mapped for the device, where the output
    /// crosses inside the launch.
    out_host: Option<MappedBuf>,
    /// The rows computed: M and zero rows past it ([`CudaGemm::choose`]).
    rows: usize,
    /// cuBLAS's left operand ([`CudaGemm::choose`]).
    form: Form,
    /// The cuBLASLt problems of the (rows, form) pairs met so far; `current`
    /// is that of `rows` and `form`.
    matmuls: Vec<LtMatmul>,
    current: usize,
    /// The algorithm of `matmuls[current]` that runs ([`CudaGemm::choose`]).
    algo: usize,
    /// K and N as computed: each rounded up to a multiple of 8 over zero
    /// columns and rows ([`padded`]).
    kp: usize,
    np: usize,
    /// Whether launches queue the kernels as one CUDA graph
    /// ([`graphs_wanted`]); off while [`CudaGemm::choose`] searches.
    graphs: bool,
    /// The kernels of the current selection, captured
    /// ([`CudaGemm::launch`]); dropped when the selection changes.
    graph: Option<Graph>,
    /// The current selection has run once with direct launches, so that
    /// cuBLAS's first call of a problem, which may wait on the stream, is
    /// never captured.
    warm: bool,
}

/// Whether launches go through a CUDA graph: unless `HETERO_CUDA_GRAPH=0`
/// (direct launches, the path of sessions 17–29, for comparisons).
pub(super) fn graphs_wanted() -> bool {
    std::env::var("HETERO_CUDA_GRAPH").as_deref() != Ok("0")
}

impl CudaGemm {
    /// Allocates the buffers and uploads the weights `W[K,N]`.
    pub(super) fn new(dev: Arc<Device>, spec: &GemmSpec, weights: &[f32]) -> Result<CudaGemm> {
        let id = dev.id.as_str();
        let elem = Elem::of(spec.dtype)
            .ok_or_else(|| Error::unsupported(id, format!("dtype {} on cuBLAS", spec.dtype)))?;
        let (m, k, n) = spec.shape.mkn();
        let (m, k, n) = (m as usize, k as usize, n as usize);
        if weights.len() != k * n {
            return Err(Error::BadRequest {
                field: "weights".into(),
                message: format!(
                    "{} values for W[{k},{n}] of {}; expected {}",
                    weights.len(),
                    spec.shape,
                    k * n
                ),
            });
        }
        let e = elem.size();
        let ctx = &dev.ctx;
        let (kp, np) = (padded(k), padded(n));
        let w = DeviceBuf::new(ctx, kp * np * e, id)?;
        // Small inputs and outputs cross inside the launch, through mapped
        // host buffers of their own (zeroed when allocated, so the input's
        // columns past K are zero). The host only writes the input's:
        // write-combined.
        let small = launch_copy_max_bytes();
        let staged = |values: usize, len: usize, wc: bool| -> Result<Option<MappedBuf>> {
            match small {
                Some(max) if (values * 4) as u64 <= max => {
                    Ok(Some(MappedBuf::new(ctx, len * 4, wc, id)?))
                }
                _ => Ok(None),
            }
        };
        let in_host = staged(m * k, m * kp, true)?;
        let out_host = staged(m * n, m * n, false)?;
        // The f32 input as sent, for a 16-bit GEMM whose input is copied on
        // its own (the launch converts a mapped input straight from host
        // memory).
        let a32 = match (elem.half(), &in_host) {
            (Some(_), None) => Some(DeviceBuf::new(ctx, m * kp * 4, id)?),
            _ => None,
        };
        let candidates = candidates(m, spec.order);
        let most = candidates.iter().map(|&(r, _)| r).max().unwrap_or(m);
        let a = DeviceBuf::new(ctx, most * kp * e, id)?;
        ctx.bind_to_thread().at(id, "cuCtxSetCurrent")?;
        // SAFETY: `a` holds most·kp elements of e bytes. All of it is zeroed:
        // the rows past M and the columns past K are never written (they
        // stay zero), and the row search below runs before any input is
        // written.
        unsafe { result::memset_d8_sync(a.ptr(), 0, most * kp * e) }.at(id, "cuMemsetD8(input)")?;
        if let Some(a32) = a32.as_ref().filter(|_| kp > k) {
            // SAFETY: `a32` holds m·kp f32 values; its columns past K are
            // never written, so they convert to the zeros of `a`.
            unsafe { result::memset_d8_sync(a32.ptr(), 0, m * kp * 4) }
                .at(id, "cuMemsetD8(input as sent)")?;
        }
        let c = DeviceBuf::new(ctx, most * np * 4, id)?;
        if elem.half().is_some() {
            // Fail at prepare, not at the first input, without the kernels.
            dev.kernels()?;
        }
        // Weights: W[K,N] → Wᵀ[Np,Kp] in the element type, zero past N and
        // K, then one upload.
        with_elem!(elem, T => {
            let mut wt = vec![T::from_f32(0.0); kp * np];
            transpose_convert::<T>(weights, k, n, kp, &mut wt);
            ctx.bind_to_thread().at(id, "cuCtxSetCurrent")?;
            // SAFETY: `w` holds exactly kp·np elements of T; the copy is synchronous.
            unsafe { result::memcpy_htod_sync(w.ptr(), &wt) }.at(id, "cuMemcpyHtoD(weights)")?;
        });
        let timing = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let start = ctx.new_event(timing).at(id, "cuEventCreate")?;
        let end = ctx.new_event(timing).at(id, "cuEventCreate")?;
        let flag = MappedFlag::new(ctx, id)?;
        let mut g = CudaGemm {
            spec: *spec,
            elem,
            dev,
            w,
            a32,
            a,
            c,
            ct: None,
            start,
            end,
            flag,
            gate: None,
            seq: 0,
            submitted: None,
            w_host: None,
            in_host,
            out_host,
            rows: candidates[0].0,
            form: candidates[0].1,
            matmuls: Vec::new(),
            current: 0,
            algo: 0,
            kp,
            np,
            graphs: false,
            graph: None,
            warm: false,
        };
        g.choose(&candidates)?;
        g.graphs = graphs_wanted();
        Ok(g)
    }

    /// The rows this GEMM computes (M and the zero rows past it).
    #[cfg(test)]
    pub(super) fn rows(&self) -> usize {
        self.rows
    }

    /// K and N as computed (Kₚ, Nₚ).
    #[cfg(test)]
    pub(super) fn padded_kn(&self) -> (usize, usize) {
        (self.kp, self.np)
    }

    /// The form chosen.
    #[cfg(test)]
    pub(super) fn form(&self) -> Form {
        self.form
    }

    /// Whether the kernels currently run as a captured graph.
    #[cfg(test)]
    pub(super) fn graphed(&self) -> bool {
        self.graphs && self.graph.is_some()
    }

    /// Whether the input and the output cross inside the launch.
    #[cfg(test)]
    pub(super) fn launch_copies(&self) -> (bool, bool) {
        (self.in_host.is_some(), self.out_host.is_some())
    }

    /// Launches through a graph (`true`, the default unless
    /// `HETERO_CUDA_GRAPH=0`) or directly from now on.
    #[cfg(test)]
    pub(super) fn set_graphs(&mut self, on: bool) {
        self.graphs = on;
    }

    /// The algorithm chosen, and how many cuBLASLt offered for the chosen
    /// rows and form.
    #[cfg(test)]
    pub(super) fn algo(&self) -> (usize, usize) {
        (self.algo, self.matmuls[self.current].algos())
    }

    /// Computes `rows` rows in `form` with algorithm `algo` from now on;
    /// `rows` ≥ M and within the allocation, `algo` below what cuBLASLt
    /// offers for them (tests try every candidate). Returns how many
    /// algorithms it offers.
    #[cfg(test)]
    pub(super) fn set_candidate(&mut self, rows: usize, form: Form, algo: usize) -> Result<usize> {
        let m = self.spec.shape.m.get();
        let capacity = self.a.bytes() / (self.kp * self.elem.size());
        assert!(
            (m as usize..=capacity).contains(&rows),
            "{rows} rows for M = {m}, {capacity} allocated"
        );
        self.select(rows, form, algo)?;
        let offered = self.matmuls[self.current].algos();
        assert!(algo < offered, "algorithm {algo} of {offered}");
        Ok(offered)
    }

    /// The cuBLASLt problem of `rows` rows in `form`.
    fn problem(&self, rows: usize, form: Form) -> Problem {
        let (m, n, ldd) = match form {
            Form::ActLeft => (rows, self.np, rows),
            Form::WeightLeft => (self.np, rows, self.np),
        };
        Problem {
            input: self.elem.lt(),
            m,
            n,
            k: self.kp,
            ldd,
        }
    }

    /// Makes (rows, form, algo) the one that runs, describing the problem
    /// and asking cuBLASLt for its algorithms on the first meeting.
    fn select(&mut self, rows: usize, form: Form, algo: usize) -> Result<()> {
        let problem = self.problem(rows, form);
        let found = self.matmuls.iter().position(|mm| mm.problem() == problem);
        self.current = match found {
            Some(i) => i,
            None => {
                let wanted = algos_wanted();
                let mm = LtMatmul::new(&self.dev.lt, problem, wanted, &self.dev.id)?;
                self.matmuls.push(mm);
                self.matmuls.len() - 1
            }
        };
        (self.rows, self.form, self.algo) = (rows, form, algo);
        self.graph = None;
        self.warm = false;
        self.transpose_buffer()
    }

    /// Allocates the buffer of the transposed output if the form needs it
    /// (on the first selection of that form, search included), unless the
    /// transpose writes into the mapped output.
    fn transpose_buffer(&mut self) -> Result<()> {
        if self.form == Form::ActLeft && self.ct.is_none() && self.out_host.is_none() {
            let (m, _, n) = self.spec.shape.mkn();
            let bytes = m as usize * n as usize * 4;
            self.ct = Some(DeviceBuf::new(&self.dev.ctx, bytes, &self.dev.id)?);
        }
        Ok(())
    }

    /// Chooses what runs: times every (rows, form) of `candidates`
    /// ([`candidates`]) with every algorithm cuBLASLt offers for it
    /// ([`algos_wanted`]; `HETERO_CUDA_ALGOS=1` keeps each pair's first),
    /// listed each pair's first algorithm first, then the others pair by
    /// pair. The search times them over the zeroed input in [`ROWS_ROUNDS`]
    /// rounds and keeps the fastest by the median of its counted runs: a
    /// later candidate replaces an earlier one only when faster by
    /// [`ROWS_MARGIN`] (`HETERO_CUDA_ROWS_PICK=min` compares the fastest
    /// runs instead, the rule of session 23, for comparisons). Every
    /// counted run starts with the L2 evicted and times the kernels alone
    /// where the device allows ([`Gemm::execute_kernel_only`]): the weights
    /// come from device memory, as a layer's operators meet them, and the
    /// host's launch path adds no noise to the comparison.
    /// `HETERO_CUDA_ROWS=warm` times ordinary runs over a warm L2 instead
    /// (the search of session 22); `HETERO_CUDA_SEARCH=staged` searches
    /// the pairs with their first algorithms, then the algorithms of the
    /// pair kept (fewer runs; session 28's first search);
    /// `HETERO_CUDA_ROWS_LOG` set prints each choice on stderr. A search of
    /// one candidate takes it as it is.
    fn choose(&mut self, candidates: &[(usize, Form)]) -> Result<()> {
        let pairs: Vec<(usize, Form, usize)> = candidates.iter().map(|&(r, f)| (r, f, 0)).collect();
        if std::env::var("HETERO_CUDA_SEARCH").as_deref() == Ok("staged") {
            let (rows, form, _) = self.pick(&pairs)?;
            let offered = self.matmuls[self.current].algos();
            let algos: Vec<(usize, Form, usize)> = (0..offered).map(|a| (rows, form, a)).collect();
            self.pick(&algos)?;
            return Ok(());
        }
        let mut all = pairs.clone();
        for &(r, f, _) in &pairs {
            self.select(r, f, 0)?;
            let offered = self.matmuls[self.current].algos();
            all.extend((1..offered).map(|a| (r, f, a)));
        }
        self.pick(&all)?;
        Ok(())
    }

    /// Times `candidates` (rows, form, algorithm) and selects the fastest
    /// by the rule of [`CudaGemm::choose`]; one candidate is selected as it
    /// is.
    fn pick(&mut self, candidates: &[(usize, Form, usize)]) -> Result<(usize, Form, usize)> {
        let mut pick = 0;
        if candidates.len() > 1 {
            let best = self.time_candidates(candidates)?;
            for i in 1..candidates.len() {
                if best[i] < (1.0 - ROWS_MARGIN) * best[pick] {
                    pick = i;
                }
            }
            if std::env::var_os("HETERO_CUDA_ROWS_LOG").is_some() {
                let mut times = Vec::with_capacity(candidates.len());
                for (&(r, f, a), t) in candidates.iter().zip(&best) {
                    self.select(r, f, a)?;
                    let algo = self.matmuls[self.current].describe(a);
                    times.push(format!("{r} {f:?} {algo}: {t:.1} µs"));
                }
                let (r, f, a) = candidates[pick];
                eprintln!(
                    "{} {} {}: {r} rows {f:?} algorithm {a} of [{}]",
                    self.dev.id,
                    self.spec.shape,
                    self.spec.order,
                    times.join(", ")
                );
            }
        }
        let (r, f, a) = candidates[pick];
        self.select(r, f, a)?;
        Ok(candidates[pick])
    }

    /// Each candidate's median (or fastest, `HETERO_CUDA_ROWS_PICK=min`)
    /// counted run, µs ([`CudaGemm::choose`]).
    fn time_candidates(&mut self, candidates: &[(usize, Form, usize)]) -> Result<Vec<f64>> {
        let cold = std::env::var("HETERO_CUDA_ROWS").as_deref() != Ok("warm");
        let mut runs = vec![Vec::with_capacity(ROWS_ROUNDS - 1); candidates.len()];
        for round in 0..ROWS_ROUNDS {
            for (i, &(rows, form, algo)) in candidates.iter().enumerate() {
                self.select(rows, form, algo)?;
                // Round 0 runs ordinarily: cuBLAS's first call of a shape
                // may wait on the stream, which a kernel-only run holds
                // shut until the launch returns (a deadlock).
                let t = if cold && round > 0 {
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
        let by_min = std::env::var("HETERO_CUDA_ROWS_PICK").as_deref() == Ok("min");
        Ok(runs
            .iter()
            .map(|r| {
                Stats::from_samples(r).map_or(f64::INFINITY, |s| {
                    if by_min { s.min_us } else { s.median_us }
                })
            })
            .collect())
    }

    fn id(&self) -> &str {
        &self.dev.id
    }

    /// Enqueues start event, GEMM, end event and flag write. The GEMM's
    /// work (the small input read from mapped memory, the matmul, the
    /// transpose of the activation-left form, the small output written to
    /// mapped memory: [`CudaGemm::enqueue_work`]) goes as one CUDA graph,
    /// captured on the second launch of a selection and reused after it:
    /// one `cuGraphLaunch` costs the host less than
    /// queueing them one by one (`cublasLtMatmul` does host work on every
    /// call), and the kernels follow each other on the device without
    /// waiting for the host between them. The events, the host weights'
    /// copy and the flag write stay outside the graph: their values and
    /// sources change from launch to launch.
    fn launch(&mut self) -> Result<()> {
        let dev = &*self.dev;
        let id = dev.id.as_str();
        debug_assert!(self.rows >= self.spec.shape.m.get() as usize);
        let stream = dev.stream.cu_stream();
        debug_assert_eq!(
            self.matmuls[self.current].problem(),
            self.problem(self.rows, self.form)
        );
        dev.ctx.bind_to_thread().at(id, "cuCtxSetCurrent")?;
        let graphed = self.graphs && self.warm;
        if graphed && self.graph.is_none() {
            let graph = Graph::capture(&dev.ctx, stream, id, || self.enqueue_work()).map_err(
                |e| match e {
                    Error::Backend { backend, message } => Error::Backend {
                        backend,
                        message: format!(
                            "{message} (capturing the GEMM as a CUDA graph; \
                             HETERO_CUDA_GRAPH=0 launches its kernels directly)"
                        ),
                    },
                    e => e,
                },
            )?;
            self.graph = Some(graph);
        }
        self.seq = self.seq.wrapping_add(1).max(1);
        let t0 = Instant::now();
        // SAFETY: the event belongs to this context; recorded on its stream.
        unsafe { result::event::record(self.start.cu_event(), stream) }.at(id, "cuEventRecord")?;
        // Host-resident weights cross PCIe first, inside the timed part
        // (page-locked source: a DMA on the stream, ordered before the GEMM).
        if let Some(h) = &self.w_host {
            // SAFETY: `w` holds `w.bytes()` and the page-locked `h` at least
            // as many; the GEMM reading `w` is queued behind the copy.
            unsafe {
                result::memcpy_htod_async(
                    self.w.ptr(),
                    &h.as_slice::<u8>()[..self.w.bytes()],
                    stream,
                )
            }
            .at(id, "cuMemcpyHtoDAsync(host weights)")?;
        }
        match self.graph.as_ref().filter(|_| graphed) {
            Some(graph) => graph.launch(stream, id)?,
            None => self.enqueue_work()?,
        }
        // SAFETY: the event belongs to this context; recorded on its stream.
        unsafe { result::event::record(self.end.cu_event(), stream) }.at(id, "cuEventRecord")?;
        dev.write_flag(&self.flag, self.seq)?;
        self.submitted = Some(t0);
        self.warm = true;
        Ok(())
    }

    /// Queues what one run does on the device (or into a capture of the
    /// stream): the small input read in, the kernels, the small output
    /// written out.
    fn enqueue_work(&self) -> Result<()> {
        self.enqueue_input()?;
        self.enqueue_kernels()?;
        self.enqueue_output()
    }

    /// Where the input crosses inside the launch: a kernel reads the mapped
    /// `A[M,Kₚ]` from host memory (zero columns included) into the device
    /// input, converting it to the 16-bit type (or copying it, f32).
    fn enqueue_input(&self) -> Result<()> {
        let Some(h) = &self.in_host else {
            return Ok(());
        };
        let m = self.spec.shape.m.get() as usize;
        match self.elem.half() {
            Some(half) => self.dev.kernels()?.convert(
                self.dev.stream.cu_stream(),
                h.device_ptr(),
                self.a.ptr(),
                m * self.kp,
                half,
                &self.dev.id,
            ),
            // Column-major Kₚ×M, ld Kₚ, both sides.
            None => self.geam(
                Op::Copy,
                self.kp,
                m,
                h.device_ptr(),
                self.kp,
                self.a.ptr(),
                self.kp,
            ),
        }
    }

    /// Where the output crosses inside the launch, weight left: the first
    /// M rows of row-major `C[R,Nₚ]` (column-major Nₚ×R) written by a
    /// kernel into the mapped row-major `C[M,N]`. Activation left, the
    /// transpose writes there itself ([`CudaGemm::transpose_output`]).
    fn enqueue_output(&self) -> Result<()> {
        match (&self.out_host, self.form) {
            (Some(h), Form::WeightLeft) => {
                let (m, _, n) = self.spec.shape.mkn();
                let (m, n) = (m as usize, n as usize);
                self.geam(Op::Copy, n, m, self.c.ptr(), self.np, h.device_ptr(), n)
            }
            _ => Ok(()),
        }
    }

    /// Queues the GEMM's kernels on the stream (or into a capture of it):
    /// the matmul, then the activation-left form's transpose.
    fn enqueue_kernels(&self) -> Result<()> {
        let dev = &*self.dev;
        let (lhs, rhs) = match self.form {
            Form::ActLeft => (self.a.ptr(), self.w.ptr()),
            Form::WeightLeft => (self.w.ptr(), self.a.ptr()),
        };
        // SAFETY: every pointer is a live allocation of this context sized
        // for the problem of the current matmul (rows, Kₚ and Nₚ of this
        // GEMM); the device's workspace serves one launch at a time on its
        // one stream.
        unsafe {
            self.matmuls[self.current].enqueue(
                &dev.lt,
                self.algo,
                [lhs, rhs, self.c.ptr()],
                dev.stream.cu_stream(),
                &dev.id,
            )?;
        }
        if self.form == Form::ActLeft {
            self.transpose_output()?;
        }
        Ok(())
    }

    /// The buffer of the transposed output ([`CudaGemm::transpose_buffer`]).
    fn transposed(&self) -> Result<&DeviceBuf> {
        self.ct
            .as_ref()
            .ok_or_else(|| Error::backend(&self.dev.id, "no buffer for the transposed output"))
    }

    /// Queues the activation-left output's transpose on the stream: the
    /// first M rows of column-major `C[R,Nₚ]` into row-major `C[M,N]`
    /// (column-major `Cᵀ[N,M]`, ld N), on the device or, where the output
    /// crosses inside the launch, straight into the mapped host buffer.
    fn transpose_output(&self) -> Result<()> {
        let (m, _, n) = self.spec.shape.mkn();
        let dst = match &self.out_host {
            Some(h) => h.device_ptr(),
            None => self.transposed()?.ptr(),
        };
        self.geam(
            Op::Transpose,
            n as usize,
            m as usize,
            self.c.ptr(),
            self.rows,
            dst,
            n as usize,
        )
    }

    /// Queues `D = 1·op(S) + 0·D` (`cublasSgeam`) on the stream: D is
    /// column-major `rows×cols` with leading dimension `ldd`; S is
    /// `rows×cols` (copy) or `cols×rows` (transpose) with `lds`.
    #[allow(clippy::too_many_arguments)]
    fn geam(
        &self,
        op: Op,
        rows: usize,
        cols: usize,
        src: sys::CUdeviceptr,
        lds: usize,
        dst: sys::CUdeviceptr,
        ldd: usize,
    ) -> Result<()> {
        let (one, zero) = (1.0f32, 0.0f32);
        let (op_s, what) = match op {
            Op::Copy => (
                blas_sys::cublasOperation_t::CUBLAS_OP_N,
                "cublasSgeam(copy)",
            ),
            Op::Transpose => (
                blas_sys::cublasOperation_t::CUBLAS_OP_T,
                "cublasSgeam(transpose)",
            ),
        };
        // SAFETY: the callers pass live allocations of this context (device
        // memory, or host memory mapped for the device) holding the
        // matrices as described, which do not overlap; B aliases the output
        // with no transpose, which cuBLAS allows, and is not read with
        // beta = 0. The handle runs on the device's one stream.
        unsafe {
            blas_sys::cublasSgeam(
                *self.dev.blas.handle(),
                op_s,
                blas_sys::cublasOperation_t::CUBLAS_OP_N,
                rows as i32,
                cols as i32,
                &one,
                src as *const f32,
                lds as i32,
                &zero,
                dst as *const f32,
                ldd as i32,
                dst as *mut f32,
                ldd as i32,
            )
            .result()
            .at(&self.dev.id, what)
        }
    }

    /// Waits for a run that was submitted and not yet waited for, so that
    /// the host may touch the mapped buffers; the wait still reports it.
    fn settle(&self) -> Result<()> {
        if self.submitted.is_some() {
            self.dev
                .stream
                .synchronize()
                .at(&self.dev.id, "cuStreamSynchronize")?;
        }
        Ok(())
    }

    /// Waits for the launched work and reads both clocks.
    fn finish(&mut self, mode: SyncMode) -> Result<Timed> {
        let id = self.dev.id.clone();
        let t0 = self
            .submitted
            .take()
            .ok_or_else(|| Error::backend(&id, "wait without a submitted execution"))?;
        match mode {
            SyncMode::Block => {
                self.dev.ctx.bind_to_thread().at(&id, "cuCtxSetCurrent")?;
                // SAFETY: the event was recorded on this context's stream.
                unsafe { result::event::synchronize(self.end.cu_event()) }
                    .at(&id, "cuEventSynchronize")?;
            }
            SyncMode::Poll { predicted_us } => {
                if self.dev.flag_writer.is_none() {
                    return Err(Error::unsupported(&id, "polling a host flag"));
                }
                let sleep_us = predicted_us - POLL_MARGIN_US.max(0.1 * predicted_us);
                if sleep_us > POLL_MARGIN_US {
                    let left =
                        Duration::from_secs_f64(sleep_us * 1e-6).saturating_sub(t0.elapsed());
                    std::thread::sleep(left);
                }
                spin_until(&self.flag, self.seq, t0).map_err(|e| self.dev.explain_stall(e))?;
            }
        }
        let host_us = t0.elapsed().as_secs_f64() * 1e6;
        let device_us = self.dev.elapsed_us(&self.start, &self.end)?;
        Ok(Timed {
            device_us: Some(device_us),
            host_us,
            ran_us: None,
        })
    }
}

/// The operand of [`CudaGemm::geam`].
#[derive(Debug, Clone, Copy)]
enum Op {
    Copy,
    Transpose,
}

/// Polls until `flag` reads `target`, or [`WAIT_TIMEOUT`] after `t0`:
/// spinning, then yielding between checks ([`PollPause`]), so that a CPU
/// part's worker on the host thread's core is not held off it.
pub(super) fn spin_until(flag: &MappedFlag, target: u32, t0: Instant) -> Result<()> {
    let mut spins: u32 = 0;
    let mut pause = PollPause::default();
    while flag.load() != target {
        pause.pause();
        spins = spins.wrapping_add(1);
        if spins % 4096 == 0 && t0.elapsed() > WAIT_TIMEOUT {
            return Err(Error::Timeout {
                ms: WAIT_TIMEOUT.as_millis() as u64,
            });
        }
    }
    Ok(())
}

impl Gemm for CudaGemm {
    fn spec(&self) -> &GemmSpec {
        &self.spec
    }

    fn write_input(&mut self, a: &[f32]) -> Result<()> {
        let (m, k, _) = self.spec.shape.mkn();
        let want = m as usize * k as usize;
        if a.len() != want {
            return Err(Error::BadRequest {
                field: "a".into(),
                message: format!("{} values for A[{m},{k}]; expected {want}", a.len()),
            });
        }
        let id = self.dev.id.clone();
        self.dev.ctx.bind_to_thread().at(&id, "cuCtxSetCurrent")?;
        let (m, k, kp) = (m as usize, k as usize, self.kp);
        if self.in_host.is_some() {
            // A run in flight may still be reading the buffer.
            self.settle()?;
        }
        if let Some(h) = &mut self.in_host {
            let dst = &mut h.as_mut_slice::<f32>()[..m * kp];
            if kp == k {
                dst.copy_from_slice(a);
            } else {
                // The columns past K stay zero.
                for (row, src) in dst.chunks_exact_mut(kp).zip(a.chunks_exact(k)) {
                    row[..k].copy_from_slice(src);
                }
            }
            return Ok(());
        }
        let stream = self.dev.stream.cu_stream();
        let sent = self.a32.as_ref().unwrap_or(&self.a);
        if kp == k {
            // SAFETY: `sent` holds at least `want` f32 values; the stream is
            // synchronised below, before the caller may touch `a` again.
            unsafe { result::memcpy_htod_async(sent.ptr(), a, stream) }
                .at(&id, "cuMemcpyHtoDAsync(input)")?;
        } else {
            // Rows of K values into rows of Kp; the columns past K stay zero.
            let copy = sys::CUDA_MEMCPY2D {
                srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_HOST,
                srcHost: a.as_ptr() as *const c_void,
                srcPitch: k * 4,
                dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
                dstDevice: sent.ptr(),
                dstPitch: kp * 4,
                WidthInBytes: k * 4,
                Height: m,
                ..copy_2d()
            };
            // SAFETY: `a` holds M·K f32 values and `sent` at least M·Kp; the
            // stream is synchronised below, before the caller may touch `a`.
            unsafe { sys::cuMemcpy2DAsync_v2(&copy, stream).result() }
                .at(&id, "cuMemcpy2DAsync(input)")?;
        }
        if let (Some(half), Some(a32)) = (self.elem.half(), &self.a32) {
            self.dev
                .kernels()?
                .convert(stream, a32.ptr(), self.a.ptr(), m * kp, half, &id)?;
        }
        self.dev.stream.synchronize().at(&id, "cuStreamSynchronize")
    }

    /// The host's caches are not what this GEMM reads through: its weights
    /// sit in device memory behind the GPU's L2, which is evicted instead.
    fn evict_caches(&mut self) -> Result<()> {
        self.dev.evict_l2()
    }

    fn execute(&mut self) -> Result<Timed> {
        self.launch()?;
        self.finish(SyncMode::Block)
    }

    /// The stream first waits on a host-written gate (`cuStreamWaitValue32`),
    /// the GEMM and its two events are queued behind it, then the host
    /// opens the gate: the device timer covers the kernels alone, not the
    /// host's `cublasLtMatmul` call between the events. `None` where stream
    /// memory operations are missing.
    fn execute_kernel_only(&mut self) -> Result<Option<Timed>> {
        if self.dev.flag_writer_is_memop() {
            let id = self.dev.id.clone();
            let target = self.seq.wrapping_add(1).max(1);
            self.dev.ctx.bind_to_thread().at(&id, "cuCtxSetCurrent")?;
            let gate = match self.gate.take() {
                Some(g) => g,
                None => MappedFlag::new(&self.dev.ctx, &id)?,
            };
            // SAFETY: the gate is device-mapped host memory of this context,
            // stream memory operations work here (the flag writer uses them),
            // and the gate is opened below whatever `launch` returns.
            unsafe {
                sys::cuStreamWaitValue32_v2(
                    self.dev.stream.cu_stream(),
                    gate.device_ptr(),
                    target,
                    sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_EQ as u32,
                )
                .result()
                .at(&id, "cuStreamWaitValue32")?;
            }
            let launched = self.launch();
            gate.store(target);
            self.gate = Some(gate);
            launched?;
            debug_assert_eq!(self.seq, target);
            Ok(Some(self.finish(SyncMode::Block)?))
        } else {
            Ok(None)
        }
    }

    fn read_output(&mut self, c: &mut [f32]) -> Result<()> {
        let (m, _, n) = self.spec.shape.mkn();
        let (m, n) = (m as usize, n as usize);
        if c.len() != m * n {
            return Err(Error::BadRequest {
                field: "c".into(),
                message: format!("{} values for C[{m},{n}]; expected {}", c.len(), m * n),
            });
        }
        let id = self.dev.id.clone();
        self.dev.ctx.bind_to_thread().at(&id, "cuCtxSetCurrent")?;
        if let Some(h) = &self.out_host {
            // Not waited for yet: the run may still be writing `h`.
            self.settle()?;
            c.copy_from_slice(&h.as_slice::<f32>()[..m * n]);
            return Ok(());
        }
        let stream = self.dev.stream.cu_stream();
        let out = match self.form {
            // Transposed to row-major C[M,N] in `launch`.
            Form::ActLeft => self.transposed()?,
            Form::WeightLeft => &self.c,
        };
        if self.form == Form::ActLeft || self.np == n {
            // SAFETY: `out` holds at least M·N f32 values (weight left: its
            // first M rows are C); synchronised below before the caller
            // reads `c`.
            unsafe { result::memcpy_dtoh_async(c, out.ptr(), stream) }
                .at(&id, "cuMemcpyDtoHAsync(output)")?;
        } else {
            // Weight left with N padded: the first N of every row of Np.
            let copy = sys::CUDA_MEMCPY2D {
                srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
                srcDevice: out.ptr(),
                srcPitch: self.np * 4,
                dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_HOST,
                dstHost: c.as_mut_ptr() as *mut c_void,
                dstPitch: n * 4,
                WidthInBytes: n * 4,
                Height: m,
                ..copy_2d()
            };
            // SAFETY: `out` holds R·Np f32 (R ≥ M) and `c` M·N; synchronised
            // below before the caller reads `c`.
            unsafe { sys::cuMemcpy2DAsync_v2(&copy, stream).result() }
                .at(&id, "cuMemcpy2DAsync(output)")?;
        }
        self.dev.stream.synchronize().at(&id, "cuStreamSynchronize")
    }

    fn submit(&mut self) -> Result<()> {
        if self.submitted.is_some() {
            return Err(Error::backend(
                self.id(),
                "submit while the previous execution was not waited for",
            ));
        }
        self.launch()
    }

    fn wait(&mut self, mode: SyncMode) -> Result<Timed> {
        self.finish(mode)
    }

    fn host_weights(&mut self, w: &[f32]) -> Result<()> {
        let (_, k, n) = self.spec.shape.mkn();
        let (k, n) = (k as usize, n as usize);
        if w.len() != k * n {
            return Err(Error::BadRequest {
                field: "weights".into(),
                message: format!("{} values for W[{k},{n}]; expected {}", w.len(), k * n),
            });
        }
        if self.submitted.is_some() {
            return Err(Error::backend(
                self.id(),
                "host weights set while an execution is in flight",
            ));
        }
        let id = self.dev.id.clone();
        // Cached page-locked memory: the transposing writes below are
        // strided, which write-combined memory makes very slow.
        let mut h = PinnedBuf::new(&self.dev.ctx, self.w.bytes(), 0, &id)?;
        let (kp, np) = (self.kp, self.np);
        with_elem!(self.elem, T => {
            let wt = &mut h.as_mut_slice::<T>()[..kp * np];
            if (kp, np) != (k, n) {
                wt.fill(T::from_f32(0.0));
            }
            transpose_convert::<T>(w, k, n, kp, wt);
        });
        self.w_host = Some(h);
        Ok(())
    }

    fn backend_id(&self) -> String {
        self.dev.id.clone()
    }
}

impl Drop for CudaGemm {
    fn drop(&mut self) {
        // Buffers must not be freed under a running kernel.
        if self.submitted.is_some() {
            let _ = self.dev.stream.synchronize();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transpose_convert_moves_every_element() {
        let (rows, cols) = (70, 130); // not multiples of the block
        let src: Vec<f32> = (0..rows * cols).map(|i| i as f32).collect();
        let mut dst = vec![0f32; rows * cols];
        transpose_convert::<f32>(&src, rows, cols, rows, &mut dst);
        // Into rows of a longer pitch, with rows to spare: the padding is
        // left as it was.
        let pitch = rows + 6;
        let mut wide = vec![-1f32; (cols + 3) * pitch];
        transpose_convert::<f32>(&src, rows, cols, pitch, &mut wide);
        for j in 0..cols + 3 {
            for i in 0..pitch {
                let want = if i < rows && j < cols {
                    src[i * cols + j]
                } else {
                    -1.0
                };
                assert_eq!(wide[j * pitch + i], want, "({j}, {i})");
            }
        }
        for i in 0..rows {
            for j in 0..cols {
                assert_eq!(dst[j * rows + i], src[i * cols + j]);
            }
        }
        let mut h = vec![f16::ZERO; rows * cols];
        transpose_convert::<f16>(&src[..], rows, cols, rows, &mut h);
        assert_eq!(h[rows].to_f32(), 1.0);
    }

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
            assert_eq!(row_candidates(m, ROWS_MOST), rows, "M = {m}");
        }
        // Session 22's rule: at most a quarter more rows.
        assert_eq!(row_candidates(533, 1.25), [536, 576, 640]);
        assert_eq!(row_candidates(300, 1.25), [304, 320]);
        for m in 1..5000 {
            let r = row_candidates(m, ROWS_MOST);
            assert_eq!(r[0], m.next_multiple_of(8));
            assert!(
                r.windows(2).all(|w| w[0] < w[1] && 2 * w[1] <= 3 * m),
                "M = {m}: {r:?}"
            );
        }
    }
}
