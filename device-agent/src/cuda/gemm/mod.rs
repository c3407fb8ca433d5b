//! A GEMM prepared on a CUDA device: weights resident (or kept on the host
//! and staged through the device's ring before every run: [`staged`]),
//! one cuBLASLt matmul ([`super::lt`]), CUDA events for the kernel time, a
//! host-mapped flag for polling.
//!
//! Device layouts (cuBLAS is column-major; both [`Form`]s are one `TN`
//! call over the same buffers, with the operands swapped):
//!
//! | buffer | device layout | bytes |
//! |---|---|---|
//! | weights | `Wᵀ[Nₚ,Kₚ]` row-major (transposed once, in `prepare`), zero past N and K; with host weights, a slot of the device's staging ring instead ([`staged`]) | Nₚ·Kₚ·e |
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
//! the activation left, `transposed` the weight left), as an NPU's order names
//! which operand stays resident. The output is the same either way, and
//! cuBLAS picks different kernels for the two (H100, f16,
//! 1024×8960×1536: 59.8 µs activation left, 42.0 µs weight left; which
//! form is faster changes from shape to shape), so the search below times
//! both forms and keeps the other one where it is faster.
//!
//! Both orders compute R ≥ M rows over zero rows past M, and `read_output`
//! keeps the first M. R is at least ⌈M⌉₈, M rounded up to a multiple of 8:
//! with M itself, cuBLAS picked slower kernels whenever M was not a
//! multiple of 8 (in `aw`, 2.7 times the `transposed` call of the same shape,
//! median over 178 H100 shapes with M ≥ 64, up to 7.8 times), and a
//! leading dimension rounded up alone did not change that. Past that,
//! cuBLAS's choice of kernel still makes the time jump with M (H100, f16,
//! 445×1536×8960: 40 µs; 512×1536×8960: 27 µs; 533×1536×8960 41 µs over
//! 536 rows and 30 µs over 640), so `prepare` times every row count of
//! [`row_candidates`](search::row_candidates) (M rounded up to 8, 64,
//! 128, 256 and 512, at most half as many rows again as M) in both forms,
//! each with the L2 evicted, and keeps the fastest by its median run
//! ([`search`]). Each of those is
//! timed with every algorithm cuBLASLt's heuristic offers for it (up to
//! 8): the heuristic's first guess, which is what `cublasGemmEx` runs, was
//! slow for some shapes (H100, f16, 1024×8960×768: 32.3 µs, against
//! 27.9 µs for its fifth). `docs/benchmarks.md`, Predictors, has the
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
//! copies out on the host ([`launch`]). An operator then costs one round
//! trip to the device instead of three: each synchronous copy was a
//! launch and a wait of its own (on an H100 host, 22 µs of a decode
//! operator's 38 µs went to its two copies; side by side, 21 µs against
//! 37 µs per operator, 0.63–0.65 of the decode step's time). Copy-engine
//! DMAs in the graph instead added about 20 µs of device time to a
//! 1×1536×1536 GEMM, the kernels' loads and stores over PCIe 4.5 µs. That
//! time is in the device time that the GEMM rows measure, so the latency
//! model carries it (the features `log2_in_bytes` and `log2_out_bytes` let
//! a tree find the step), and the staged microbenchmarks of those sizes
//! time the host copies alone
//! ([`Capabilities::launch_copy_max_bytes`](hetero_plan::Capabilities)).
//! Larger copies go from the caller's slice, each a DMA and a wait: one
//! DMA from memory of
//! [`Backend::alloc_host`](crate::Backend::alloc_host), the driver's
//! bounce buffers from ordinary memory. Copied on the host as well, a
//! large activation would cost more than the wait saved (H100: a 1 MiB
//! input 59 µs as a host copy, 38 µs as a DMA and a wait).

mod elem;
mod launch;
mod search;
mod staged;

use std::ffi::c_void;
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{CudaEvent, result, sys};
use hetero_plan::OperandOrder;

use self::elem::{Elem, copy_2d, padded, with_elem};
pub(super) use self::launch::spin_until;
pub(super) use self::search::candidates;
#[cfg(test)]
pub(super) use self::search::row_candidates;
use super::graph::Graph;
use super::lt::{ALGOS, LtMatmul, Problem};
use super::mem::{DeviceBuf, MappedBuf, MappedFlag};
use super::{At, Device};
use crate::convert::{FromF32, transpose_convert};
use crate::{Error, Gemm, GemmSpec, Result, SyncMode, Timed};

/// Inputs and outputs of at most this many f32 bytes cross inside the
/// launch, through the GEMM's own mapped host buffers (the module's
/// docs). It holds a 1.5B model's decode activations but `lm_head`'s
/// output. At 128 KiB (on an H100 host) a prefill of 16 tokens ran no
/// faster and 14-19 % over its prediction: the host copies of 96 KiB took
/// 4-12 µs instead of 13-20 µs staged, but the kernels' loads and stores
/// over PCIe added 11-16 µs of device time to each operator.
pub(super) const LAUNCH_COPY_MAX: u64 = 64 << 10;

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
            OperandOrder::Transposed => Form::WeightLeft,
        }
    }

    fn other(self) -> Form {
        match self {
            Form::ActLeft => Form::WeightLeft,
            Form::WeightLeft => Form::ActLeft,
        }
    }
}

/// A GEMM prepared on one CUDA device.
pub(super) struct CudaGemm {
    spec: GemmSpec,
    elem: Elem,
    dev: Arc<Device>,
    /// `Wᵀ[Nₚ,Kₚ]` on the device; `None` once the weights stay on the host
    /// (`w_host`), which then finds them in a slot of the staging ring.
    w: Option<DeviceBuf>,
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
    /// `Wᵀ[Nₚ,Kₚ]` in page-locked host memory, copied into a slot of the
    /// device's staging ring for every launch ([`Gemm::host_weights`]:
    /// ScheInfer's CG rows; [`staged`]).
    w_host: Option<staged::HostWeights>,
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
    /// Whether launches queue the kernels as one CUDA graph; off while
    /// [`CudaGemm::choose`] searches.
    graphs: bool,
    /// The kernels of the current selection, captured
    /// ([`CudaGemm::launch`]), one graph per weight address they were
    /// captured with (resident weights: one; host weights: one per ring
    /// slot met, the slots' addresses changing only when the ring grows);
    /// dropped when the selection changes.
    captured: Vec<(sys::CUdeviceptr, Graph)>,
    /// The current selection has run once with direct launches, so that
    /// cuBLAS's first call of a problem, which may wait on the stream, is
    /// never captured.
    warm: bool,
}

impl CudaGemm {
    /// Allocates the buffers and uploads the weights `W[K,N]`.
    pub(super) fn new(dev: Arc<Device>, spec: &GemmSpec, weights: &[f32]) -> Result<CudaGemm> {
        let id = dev.id.as_str();
        let elem = Elem::of(spec.dtype)
            .ok_or_else(|| Error::unsupported(id, format!("dtype {} on cuBLAS", spec.dtype)))?;
        let (m, k, n) = spec.shape.mkn();
        let (m, k, n) = (m as usize, k as usize, n as usize);
        spec.check_weights_len(id, weights.len())?;
        let e = elem.size();
        let ctx = &dev.ctx;
        let (kp, np) = (padded(k), padded(n));
        let w = DeviceBuf::new(ctx, kp * np * e, id)?;
        // Small inputs and outputs cross inside the launch, through mapped
        // host buffers of their own (zeroed when allocated, so the input's
        // columns past K are zero). The host only writes the input's:
        // write-combined.
        let staged = |values: usize, len: usize, wc: bool| -> Result<Option<MappedBuf>> {
            if (values * 4) as u64 <= LAUNCH_COPY_MAX {
                Ok(Some(MappedBuf::new(ctx, len * 4, wc, id)?))
            } else {
                Ok(None)
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
            let mut wt = T::zeros(kp * np);
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
            w: Some(w),
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
            captured: Vec::new(),
            warm: false,
        };
        g.choose(&candidates)?;
        g.graphs = true;
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
        self.graphs && !self.captured.is_empty()
    }

    /// Whether the input and the output cross inside the launch.
    #[cfg(test)]
    pub(super) fn launch_copies(&self) -> (bool, bool) {
        (self.in_host.is_some(), self.out_host.is_some())
    }

    /// Launches through a graph (`true`, the default) or directly from now
    /// on.
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
                let mm = LtMatmul::new(&self.dev.lt, problem, ALGOS, &self.dev.id)?;
                self.matmuls.push(mm);
                self.matmuls.len() - 1
            }
        };
        (self.rows, self.form, self.algo) = (rows, form, algo);
        self.captured.clear();
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

    fn id(&self) -> &str {
        &self.dev.id
    }
}

impl Gemm for CudaGemm {
    fn spec(&self) -> &GemmSpec {
        &self.spec
    }

    fn write_input(&mut self, a: &[f32]) -> Result<()> {
        self.spec.check_input_len(&self.dev.id, a.len())?;
        let (m, k, _) = self.spec.shape.mkn();
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
        self.spec.check_output_len(&self.dev.id, c.len())?;
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
        self.keep_weights_on_host(w)
    }

    fn prefetch(&mut self) -> Result<()> {
        self.prefetch_weights()
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
        // Nor the host weights under a queued copy.
        self.leave_ring();
    }
}
