//! A GEMM prepared on a CUDA device: weights resident, cuBLAS `GemmEx`,
//! CUDA events for the kernel time, a host-mapped flag for polling.
//!
//! Device layouts (cuBLAS is column-major; both orders are one `TN` call
//! over the same buffers, with the operands swapped):
//!
//! | buffer | device layout | bytes |
//! |---|---|---|
//! | weights | `Wᵀ[N,K]` row-major (transposed once, in `prepare`) | N·K·e |
//! | input | `A[M,K]` row-major, as given | M·K·e |
//! | output `aw` | `C[M,N]` column-major (`Cᵀ` row-major) | M·N·e |
//! | output `wt_at` | `C[M,N]` row-major | M·N·e |
//!
//! `aw` runs `gemm(T, N, m=M, n=N, k=K, A, Wᵀ)`: the activation is cuBLAS's
//! left operand. `wt_at` runs `gemm(T, N, m=N, n=M, k=K, Wᵀ, A)`, which is
//! `Cᵀ = Wᵀ·Aᵀ`: the weight is the left operand. `read_output` undoes the
//! column-major output of `aw` on the host, outside the timed part.

use std::ffi::c_void;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::cublas::{result as blas, sys as blas_sys};
use cudarc::driver::{CudaEvent, result, sys};
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use hetero_plan::{DType, OperandOrder};

use super::mem::{DeviceBuf, MappedFlag, PinnedBuf, Pod};
use super::{At, Device};
use crate::{Error, Gemm, GemmSpec, Result, SyncMode, Timed};

/// How long a wait spins before it gives up and reports a timeout.
const WAIT_TIMEOUT: Duration = Duration::from_secs(60);

/// A poll sleeps through the predicted time less this margin, then spins.
/// Linux oversleeps by up to the timer slack (50 µs by default).
const POLL_MARGIN_US: f64 = 80.0;

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

    fn cuda(self) -> blas_sys::cudaDataType {
        match self {
            Elem::F32 => blas_sys::cudaDataType::CUDA_R_32F,
            Elem::F16 => blas_sys::cudaDataType::CUDA_R_16F,
            Elem::Bf16 => blas_sys::cudaDataType::CUDA_R_16BF,
        }
    }
}

/// Conversion between f32 and an element type. The slice forms are what
/// the per-operator data path uses: `half`'s slice conversions use the
/// CPU's F16C instructions where it has them, several times faster than an
/// element loop (the runtime stages every operator's input and output
/// through these).
trait Scalar: Pod + Send {
    fn from_f32(x: f32) -> Self;
    fn from_f32_slice(src: &[f32], dst: &mut [Self]);
    fn to_f32_slice(src: &[Self], dst: &mut [f32]);
}

impl Scalar for f32 {
    fn from_f32(x: f32) -> Self {
        x
    }
    fn from_f32_slice(src: &[f32], dst: &mut [Self]) {
        dst.copy_from_slice(src);
    }
    fn to_f32_slice(src: &[Self], dst: &mut [f32]) {
        dst.copy_from_slice(src);
    }
}

impl Scalar for f16 {
    fn from_f32(x: f32) -> Self {
        f16::from_f32(x)
    }
    fn from_f32_slice(src: &[f32], dst: &mut [Self]) {
        dst.convert_from_f32_slice(src);
    }
    fn to_f32_slice(src: &[Self], dst: &mut [f32]) {
        src.convert_to_f32_slice(dst);
    }
}

impl Scalar for bf16 {
    fn from_f32(x: f32) -> Self {
        bf16::from_f32(x)
    }
    fn from_f32_slice(src: &[f32], dst: &mut [Self]) {
        dst.convert_from_f32_slice(src);
    }
    fn to_f32_slice(src: &[Self], dst: &mut [f32]) {
        src.convert_to_f32_slice(dst);
    }
}

/// `dst[i·cols + j] = src[j·rows + i]`: a column-major `rows × cols`
/// matrix into row-major, in 32 × 32 blocks so both sides stay in cache.
fn transpose_into(src: &[f32], rows: usize, cols: usize, dst: &mut [f32]) {
    const B: usize = 32;
    for j0 in (0..cols).step_by(B) {
        for i0 in (0..rows).step_by(B) {
            for j in j0..(j0 + B).min(cols) {
                let col = &src[j * rows..(j + 1) * rows];
                for i in i0..(i0 + B).min(rows) {
                    dst[i * cols + j] = col[i];
                }
            }
        }
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

/// `dst[j*rows + i] = src[i*cols + j]`: transposes a row-major `rows×cols`
/// matrix while converting, in cache-sized blocks, on all cores (weights of
/// a vocabulary projection are half a billion elements).
fn transpose_convert<T: Scalar + Send>(src: &[f32], rows: usize, cols: usize, dst: &mut [T]) {
    const B: usize = 64;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    // Each thread owns a band of destination rows (source columns).
    let band = cols.div_ceil(threads).div_ceil(B).max(1) * B;
    std::thread::scope(|scope| {
        for (t, chunk) in dst.chunks_mut(band * rows).enumerate() {
            let j_start = t * band;
            scope.spawn(move || {
                let j_end = j_start + chunk.len() / rows;
                for i0 in (0..rows).step_by(B) {
                    for j0 in (j_start..j_end).step_by(B) {
                        for i in i0..(i0 + B).min(rows) {
                            for j in j0..(j0 + B).min(j_end) {
                                chunk[(j - j_start) * rows + i] = T::from_f32(src[i * cols + j]);
                            }
                        }
                    }
                }
            });
        }
    });
}

/// A GEMM prepared on one CUDA device.
pub(super) struct CudaGemm {
    spec: GemmSpec,
    elem: Elem,
    dev: Arc<Device>,
    w: DeviceBuf,
    a: DeviceBuf,
    c: DeviceBuf,
    a_host: PinnedBuf,
    c_host: PinnedBuf,
    start: CudaEvent,
    end: CudaEvent,
    flag: MappedFlag,
    seq: u32,
    submitted: Option<Instant>,
    /// `Wᵀ[N,K]` in page-locked host memory, copied into `w` at the start
    /// of every launch ([`Gemm::host_weights`]: ScheInfer's CG rows).
    w_host: Option<PinnedBuf>,
    /// The converted output before its transpose (`aw` order).
    c_scratch: Vec<f32>,
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
        let w = DeviceBuf::new(ctx, k * n * e, id)?;
        let a = DeviceBuf::new(ctx, m * k * e, id)?;
        let c = DeviceBuf::new(ctx, m * n * e, id)?;
        // Staging for the activation is written by the CPU and only read by
        // the copy engine: write-combined is the fastest for that. The
        // output staging is read by the CPU, so it must be cached.
        let a_host = PinnedBuf::new(ctx, m * k * e, sys::CU_MEMHOSTALLOC_WRITECOMBINED, id)?;
        let c_host = PinnedBuf::new(ctx, m * n * e, 0, id)?;
        // Weights: W[K,N] → Wᵀ[N,K] in the element type, then one upload.
        with_elem!(elem, T => {
            let mut wt = vec![T::from_f32(0.0); k * n];
            transpose_convert::<T>(weights, k, n, &mut wt);
            ctx.bind_to_thread().at(id, "cuCtxSetCurrent")?;
            // SAFETY: `w` holds exactly k·n elements of T; the copy is synchronous.
            unsafe { result::memcpy_htod_sync(w.ptr(), &wt) }.at(id, "cuMemcpyHtoD(weights)")?;
        });
        let timing = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let start = ctx.new_event(timing).at(id, "cuEventCreate")?;
        let end = ctx.new_event(timing).at(id, "cuEventCreate")?;
        let flag = MappedFlag::new(ctx, id)?;
        Ok(CudaGemm {
            spec: *spec,
            elem,
            dev,
            w,
            a,
            c,
            a_host,
            c_host,
            start,
            end,
            flag,
            seq: 0,
            c_scratch: Vec::new(),
            submitted: None,
            w_host: None,
        })
    }

    fn id(&self) -> &str {
        &self.dev.id
    }

    /// Enqueues start event, GEMM, end event and flag write.
    fn launch(&mut self) -> Result<()> {
        let dev = &*self.dev;
        let id = dev.id.as_str();
        let (m, k, n) = self.spec.shape.mkn();
        let (m, k, n) = (m as i32, k as i32, n as i32);
        let stream = dev.stream.cu_stream();
        let cu_type = self.elem.cuda();
        let (alpha, beta) = (1.0f32, 0.0f32);
        let (rows, cols, lhs, rhs, ldc) = match self.spec.order {
            OperandOrder::Aw => (m, n, self.a.ptr(), self.w.ptr(), m),
            OperandOrder::WtAt => (n, m, self.w.ptr(), self.a.ptr(), n),
        };
        dev.ctx.bind_to_thread().at(id, "cuCtxSetCurrent")?;
        self.seq = self.seq.wrapping_add(1).max(1);
        let t0 = Instant::now();
        // SAFETY: every pointer is a live allocation of this context sized
        // for the shape above; alpha and beta are host f32 values, as the
        // 32F compute type requires in the default (host) pointer mode.
        unsafe {
            result::event::record(self.start.cu_event(), stream).at(id, "cuEventRecord")?;
            // Host-resident weights cross PCIe first, inside the timed part
            // (page-locked source: a DMA on the stream, ordered before the GEMM).
            if let Some(h) = &self.w_host {
                result::memcpy_htod_async(
                    self.w.ptr(),
                    &h.as_slice::<u8>()[..self.w.bytes()],
                    stream,
                )
                .at(id, "cuMemcpyHtoDAsync(host weights)")?;
            }
            blas::gemm_ex(
                *dev.blas.handle(),
                blas_sys::cublasOperation_t::CUBLAS_OP_T,
                blas_sys::cublasOperation_t::CUBLAS_OP_N,
                rows,
                cols,
                k,
                &alpha as *const f32 as *const c_void,
                lhs as *const c_void,
                cu_type,
                k,
                rhs as *const c_void,
                cu_type,
                k,
                &beta as *const f32 as *const c_void,
                self.c.ptr() as *mut c_void,
                cu_type,
                ldc,
                blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
            .at(id, "cublasGemmEx")?;
            result::event::record(self.end.cu_event(), stream).at(id, "cuEventRecord")?;
        }
        dev.write_flag(&self.flag, self.seq)?;
        self.submitted = Some(t0);
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
        })
    }
}

/// Spins until `flag` reads `target`, or [`WAIT_TIMEOUT`] after `t0`.
pub(super) fn spin_until(flag: &MappedFlag, target: u32, t0: Instant) -> Result<()> {
    let mut spins: u32 = 0;
    while flag.load() != target {
        std::hint::spin_loop();
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
        with_elem!(self.elem, T => {
            T::from_f32_slice(a, &mut self.a_host.as_mut_slice::<T>()[..want]);
        });
        let id = self.dev.id.clone();
        self.dev.ctx.bind_to_thread().at(&id, "cuCtxSetCurrent")?;
        let bytes = self.a.bytes();
        // SAFETY: both buffers hold `bytes` bytes; the stream is synchronised
        // before the staging buffer is touched again.
        unsafe {
            result::memcpy_htod_async(
                self.a.ptr(),
                &self.a_host.as_slice::<u8>()[..bytes],
                self.dev.stream.cu_stream(),
            )
            .at(&id, "cuMemcpyHtoDAsync(input)")?;
        }
        self.dev.stream.synchronize().at(&id, "cuStreamSynchronize")
    }

    fn execute(&mut self) -> Result<Timed> {
        self.launch()?;
        self.finish(SyncMode::Block)
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
        let bytes = self.c.bytes();
        // SAFETY: both buffers hold `bytes` bytes; synchronised below before
        // the host reads the staging buffer.
        unsafe {
            result::memcpy_dtoh_async(
                &mut self.c_host.as_mut_slice::<u8>()[..bytes],
                self.c.ptr(),
                self.dev.stream.cu_stream(),
            )
            .at(&id, "cuMemcpyDtoHAsync(output)")?;
        }
        self.dev
            .stream
            .synchronize()
            .at(&id, "cuStreamSynchronize")?;
        let order = self.spec.order;
        with_elem!(self.elem, T => {
            let src = &self.c_host.as_slice::<T>()[..m * n];
            match order {
                OperandOrder::WtAt => T::to_f32_slice(src, c),
                // Column-major C[M,N]: element (i, j) at j·M + i.
                OperandOrder::Aw => {
                    self.c_scratch.resize(m * n, 0.0);
                    T::to_f32_slice(src, &mut self.c_scratch);
                    transpose_into(&self.c_scratch, m, n, c);
                }
            }
        });
        Ok(())
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
        with_elem!(self.elem, T => {
            transpose_convert::<T>(w, k, n, &mut h.as_mut_slice::<T>()[..k * n]);
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
        transpose_convert::<f32>(&src, rows, cols, &mut dst);
        for i in 0..rows {
            for j in 0..cols {
                assert_eq!(dst[j * rows + i], src[i * cols + j]);
            }
        }
        let mut h = vec![f16::ZERO; rows * cols];
        transpose_convert::<f16>(&src[..], rows, cols, &mut h);
        assert_eq!(h[rows].to_f32(), 1.0);
    }

    #[test]
    fn output_path_transposes_and_converts_like_the_element_loop() {
        let (rows, cols) = (33, 70); // not multiples of the block
        // Column-major source, as cuBLAS writes C in `aw` order.
        let src: Vec<f32> = (0..rows * cols).map(|i| i as f32 * 0.37 - 5.0).collect();
        let mut dst = vec![f32::NAN; rows * cols];
        transpose_into(&src, rows, cols, &mut dst);
        for i in 0..rows {
            for j in 0..cols {
                assert_eq!(dst[i * cols + j], src[j * rows + i]);
            }
        }
        // The slice conversions round exactly as the scalar ones.
        let mut h = vec![f16::ZERO; src.len()];
        f16::from_f32_slice(&src, &mut h);
        let mut b = vec![bf16::ZERO; src.len()];
        bf16::from_f32_slice(&src, &mut b);
        let (mut hf, mut bf) = (vec![0f32; src.len()], vec![0f32; src.len()]);
        f16::to_f32_slice(&h, &mut hf);
        bf16::to_f32_slice(&b, &mut bf);
        for (i, &x) in src.iter().enumerate() {
            assert_eq!(h[i], f16::from_f32(x));
            assert_eq!(b[i], bf16::from_f32(x));
            assert_eq!(hf[i], f16::from_f32(x).to_f32());
            assert_eq!(bf[i], bf16::from_f32(x).to_f32());
        }
    }
}
