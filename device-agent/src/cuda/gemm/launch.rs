//! Launching a GEMM and waiting for it: the events, the kernels (captured
//! as one CUDA graph after a selection's first run), the small copies
//! inside the launch, the completion flag and the two ways to wait.

use std::time::{Duration, Instant};

use cudarc::cublas::sys as blas_sys;
use cudarc::driver::{result, sys};

use super::super::graph::Graph;
use super::super::mem::{DeviceBuf, MappedFlag};
use super::super::ring::RING_SLOTS;
use super::staged::HostWeights;
use super::{At, CudaGemm, Form};
use crate::backend::SpinThenYield;
use crate::{Error, Result, SyncMode, Timed};

/// How long a wait spins before it gives up and reports a timeout.
const WAIT_TIMEOUT: Duration = Duration::from_secs(60);

/// A poll sleeps through the predicted time less this margin, then spins.
/// Linux oversleeps by up to the timer slack (50 µs by default).
const POLL_MARGIN_US: f64 = 80.0;

impl CudaGemm {
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
    ///
    /// With host weights ([`super::staged`]) the kernels read a slot of
    /// the staging ring, which a copy on the copy stream fills (queued by
    /// a prefetch, or here); on the compute stream the launch queues, in
    /// order: the start event, a wait for that copy (`cuStreamWaitEvent`),
    /// the kernels (a graph per slot address), the end event, the slot's
    /// release (an event the next copy into the slot waits for), the flag.
    /// The device time, start to end, is therefore the kernels plus
    /// whatever of the copy was still running when the compute stream
    /// reached this GEMM: all of the copy when nothing prefetched it
    /// (queued at this launch, as the GEMM's own copy always was), none of
    /// it when a prefetched copy finished while earlier GEMMs ran. The
    /// ring stays locked from the copy's ticket to the release, so that no
    /// other launch or prefetch reorders the slot's events in between.
    pub(super) fn launch(&mut self) -> Result<()> {
        let dev = self.dev.clone();
        let id = dev.id.as_str();
        debug_assert!(self.rows >= self.spec.shape.m.get() as usize);
        let stream = dev.stream.cu_stream();
        debug_assert_eq!(
            self.matmuls[self.current].problem(),
            self.problem(self.rows, self.form)
        );
        dev.ctx.bind_to_thread().at(id, "cuCtxSetCurrent")?;
        let staged = HostWeights::stage(&mut self.w_host, &dev)?;
        let weights = match (&staged, &self.w) {
            (Some(s), _) => s.ptr(),
            (None, Some(w)) => w.ptr(),
            (None, None) => return Err(Error::backend(id, "no weights on the device or host")),
        };
        let graphed = self.graphs && self.warm;
        let found = self.captured.iter().position(|(p, _)| *p == weights);
        let graph = match found {
            Some(i) => Some(i),
            None if graphed => {
                let graph = Graph::capture(&dev.ctx, stream, id, || self.enqueue_work(weights))
                    .map_err(|e| match e {
                        Error::Backend { backend, message } => Error::Backend {
                            backend,
                            message: format!("{message} (capturing the GEMM as a CUDA graph)"),
                        },
                        e => e,
                    })?;
                // One per slot address and the resident weights at most.
                if self.captured.len() > RING_SLOTS {
                    self.captured.remove(0);
                }
                self.captured.push((weights, graph));
                Some(self.captured.len() - 1)
            }
            None => None,
        };
        self.seq = self.seq.wrapping_add(1).max(1);
        let t0 = Instant::now();
        // SAFETY: the event belongs to this context; recorded on its stream.
        unsafe { result::event::record(self.start.cu_event(), stream) }.at(id, "cuEventRecord")?;
        if let Some(s) = &staged {
            s.wait_copied()?;
        }
        match graph.filter(|_| graphed) {
            Some(i) => self.captured[i].1.launch(stream, id)?,
            None => self.enqueue_work(weights)?,
        }
        // SAFETY: the event belongs to this context; recorded on its stream.
        unsafe { result::event::record(self.end.cu_event(), stream) }.at(id, "cuEventRecord")?;
        if let Some(s) = staged {
            s.release()?;
        }
        dev.write_flag(&self.flag, self.seq)?;
        self.submitted = Some(t0);
        self.warm = true;
        Ok(())
    }

    /// Queues what one run does on the device (or into a capture of the
    /// stream): the small input read in, the kernels, the small output
    /// written out.
    fn enqueue_work(&self, weights: sys::CUdeviceptr) -> Result<()> {
        self.enqueue_input()?;
        self.enqueue_kernels(weights)?;
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

    /// Queues the GEMM's kernels on the stream (or into a capture of it),
    /// reading the weights at `weights`: the matmul, then the
    /// activation-left form's transpose.
    fn enqueue_kernels(&self, weights: sys::CUdeviceptr) -> Result<()> {
        let dev = &*self.dev;
        let (lhs, rhs) = match self.form {
            Form::ActLeft => (self.a.ptr(), weights),
            Form::WeightLeft => (weights, self.a.ptr()),
        };
        // SAFETY: every pointer is a live allocation of this context sized
        // for the problem of the current matmul (rows, Kₚ and Nₚ of this
        // GEMM; a ring slot is at least as large as the largest GEMM that
        // uses it); the device's workspace serves one launch at a time on
        // its one compute stream.
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
    pub(super) fn transposed(&self) -> Result<&DeviceBuf> {
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
    pub(super) fn settle(&self) -> Result<()> {
        if self.submitted.is_some() {
            self.dev
                .stream
                .synchronize()
                .at(&self.dev.id, "cuStreamSynchronize")?;
        }
        Ok(())
    }

    /// Waits for the launched work and reads both clocks.
    pub(super) fn finish(&mut self, mode: SyncMode) -> Result<Timed> {
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
/// spinning, then yielding between checks ([`SpinThenYield`]), so that a CPU
/// part's worker on the host thread's core is not held off it.
pub(in crate::cuda) fn spin_until(flag: &MappedFlag, target: u32, t0: Instant) -> Result<()> {
    let mut spins: u32 = 0;
    let mut pause = SpinThenYield::default();
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
