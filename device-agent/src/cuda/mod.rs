//! The CUDA backend: cuBLASLt GEMMs on NVIDIA GPUs (feature `cuda`).
//!
//! Everything is loaded at run time through `cudarc`'s dynamic loading, so
//! the agent builds and runs where no CUDA is installed; [`open`] then
//! returns [`Error::Library`] naming the library and the paths tried.
//!
//! One processor per device, `cuda:<ordinal>`. Each has one non-blocking
//! compute stream, one cuBLAS handle (for the output transposition) and
//! one cuBLASLt handle and workspace (for the GEMMs), shared by its GEMMs
//! (a processor is one queue). A GEMM keeps its weights resident, except
//! one whose weights stay in host memory ([`Gemm::host_weights`]): its
//! weights are copied, on a second (copy) stream, into a slot of the
//! device's staging ring before it runs, early where the caller prefetches
//! ([`Gemm::prefetch`]), so that the copy overlaps the GEMMs before it
//! (`ring.rs`). Inputs and
//! outputs cross the bus as f32, the [`Gemm`] interface's type: the input
//! is converted to f16/bf16 on the device, cuBLASLt writes an f32 output,
//! and the activation-left form's output is transposed on the device
//! (`cublasSgeam`, behind the matmul and timed with it), so no host thread
//! converts or transposes. After a GEMM's first run its kernels are one
//! captured CUDA graph (`graph.rs`). From memory of [`Backend::alloc_host`]
//! (page-locked) each copy is one DMA. CUDA events give the kernel time
//! ([`Timed::device_us`](crate::Timed)) and the host clock the time from
//! submit to observed completion.
//!
//! Synchronisation comes two ways. [`SyncMode::Block`](crate::SyncMode) is
//! `cuEventSynchronize`. [`SyncMode::Poll`](crate::SyncMode) spins on a
//! 32-bit flag in page-locked, device-mapped host memory that the stream
//! writes after the GEMM, with `cuStreamWriteValue32` where the driver
//! allows it and else with a one-thread kernel (HeteroLLM §4.2's fast
//! synchronisation, here across PCIe).
//!
//! Libraries: `libcuda.so.1` from the loader path; `libcublas.so.13` (and
//! `libcublasLt.so.13` beside it) from the loader path or a CUDA install
//! folder (`HETERO_CUDA_LIB_DIR`, `CUDA_HOME`, `/usr/local/cuda*`). The
//! bindings are CUDA 13.0's.

mod bench;
mod gemm;
mod graph;
mod kernels;
mod libs;
mod lt;
mod mem;
mod ring;

use std::sync::Arc;

use cudarc::cublas::CudaBlas;
use cudarc::cublas::result::CublasError;
use cudarc::driver::{CudaContext, CudaEvent, CudaStream, DriverError, result, sys};
use hetero_plan::{Capabilities, DType, MicrobenchRequest, Processor, ProcessorApi, ProcessorKind};

use self::kernels::Kernels;
use self::mem::{DeviceBuf, MappedFlag};
use self::ring::{RingDevice, StagingRing};
use crate::{Backend, Error, Gemm, GemmSpec, OpenOptions, Result};

/// Attaches the processor id and the failing call to a CUDA error.
pub(crate) trait At<T> {
    /// `Error::Backend { backend: id, message: "call: error" }`.
    fn at(self, id: &str, call: &str) -> Result<T>;
}

impl<T> At<T> for std::result::Result<T, DriverError> {
    fn at(self, id: &str, call: &str) -> Result<T> {
        self.map_err(|e| Error::backend(id, format!("{call}: {e}")))
    }
}

impl<T> At<T> for std::result::Result<T, CublasError> {
    fn at(self, id: &str, call: &str) -> Result<T> {
        self.map_err(|e| Error::backend(id, format!("{call}: {e}")))
    }
}

/// How the stream writes the completion flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FlagWriter {
    /// `cuStreamWriteValue32` (a stream memory operation, no kernel).
    MemOp,
    /// The one-thread `hetero_write_flag` kernel.
    Kernel,
}

/// What the GEMMs and microbenchmarks of one device share.
pub(crate) struct Device {
    id: String,
    ctx: Arc<CudaContext>,
    /// The compute stream: every GEMM, kernel and microbenchmark.
    stream: Arc<CudaStream>,
    /// The copy stream: host weights into the staging ring (`ring.rs`),
    /// beside the compute stream.
    copy_stream: Arc<CudaStream>,
    /// Where GEMMs with host weights find them on the device.
    ring: std::sync::Mutex<StagingRing>,
    blas: CudaBlas,
    /// cuBLASLt, which runs the GEMMs ([`lt`]).
    lt: lt::Lt,
    kernels: std::result::Result<Kernels, Error>,
    flag_writer: Option<FlagWriter>,
    copy_buffers: std::sync::Mutex<Option<bench::CopyBuffers>>,
    /// Read through before a cold-cache run ([`Device::evict_l2`]), made on
    /// first use.
    evict_buffer: std::sync::Mutex<Option<DeviceBuf>>,
}

impl Device {
    /// Whether the stream writes flags with memory operations, i.e. whether
    /// `cuStreamWaitValue32` and its kin work on this device.
    fn flag_writer_is_memop(&self) -> bool {
        self.flag_writer == Some(FlagWriter::MemOp)
    }

    /// Enqueues the write of `value` into `flag` after the work already on
    /// the stream.
    fn write_flag(&self, flag: &MappedFlag, value: u32) -> Result<()> {
        let stream = self.stream.cu_stream();
        match self.flag_writer {
            Some(FlagWriter::MemOp) => {
                // SAFETY: the flag is device-mapped host memory of this
                // context; the default flags order the write after prior work.
                unsafe {
                    sys::cuStreamWriteValue32_v2(stream, flag.device_ptr(), value, 0)
                        .result()
                        .at(&self.id, "cuStreamWriteValue32")
                }
            }
            Some(FlagWriter::Kernel) => {
                self.kernels()?
                    .write_flag(stream, flag.device_ptr(), value, &self.id)
            }
            // No writer: Poll is refused at wait time; Block does not need it.
            None => Ok(()),
        }
    }

    /// Evicts the device's L2 cache: reads a buffer of twice its size on
    /// the stream (`hetero_touch`) and waits, so the next launch reads its
    /// weights from device memory, as after other operators' GEMMs. A read
    /// leaves clean lines, as other GEMMs' weights would; a write (the
    /// fallback, when the helper kernels did not load) leaves dirty ones
    /// that the next launch pays to write back.
    fn evict_l2(&self) -> Result<()> {
        let id = self.id.as_str();
        let mut slot = self.evict_buffer.lock().unwrap_or_else(|e| e.into_inner());
        let stream = self.stream.cu_stream();
        self.ctx.bind_to_thread().at(id, "cuCtxSetCurrent")?;
        if slot.is_none() {
            let l2 = self
                .ctx
                .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)
                .at(id, "cuDeviceGetAttribute(L2 size)")?;
            // 64 MiB when the driver does not say; a multiple of 16 bytes.
            let bytes = if l2 > 0 { 2 * l2 as usize } else { 64 << 20 }.next_multiple_of(16);
            let buf = DeviceBuf::new(&self.ctx, bytes, id)?;
            // One byte value throughout: what `hetero_touch` expects.
            // SAFETY: a live allocation of this context, `bytes` long.
            unsafe { result::memset_d8_async(buf.ptr(), 0x5a, bytes, stream) }
                .at(id, "cuMemsetD8Async(eviction buffer)")?;
            *slot = Some(buf);
        }
        let buf = slot.as_ref().expect("made above");
        match self.kernels() {
            Ok(k) => k.touch(stream, buf.ptr(), buf.bytes(), id)?,
            // SAFETY: as above; synchronised before returning.
            Err(_) => unsafe { result::memset_d8_async(buf.ptr(), 0x5a, buf.bytes(), stream) }
                .at(id, "cuMemsetD8Async(evict L2)")?,
        }
        self.stream.synchronize().at(id, "cuStreamSynchronize")
    }

    /// The staging ring, locked.
    fn lock_ring(&self) -> std::sync::MutexGuard<'_, StagingRing> {
        self.ring.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The context (made current), both streams and the id, for the
    /// ring's device calls.
    fn ring_device(&self) -> Result<RingDevice<'_>> {
        RingDevice::new(&self.ctx, &self.stream, &self.copy_stream, &self.id)
    }

    fn kernels(&self) -> Result<&Kernels> {
        self.kernels.as_ref().map_err(Clone::clone)
    }

    /// Kernel time between two recorded events, µs.
    fn elapsed_us(&self, start: &CudaEvent, end: &CudaEvent) -> Result<f64> {
        self.ctx.bind_to_thread().at(&self.id, "cuCtxSetCurrent")?;
        // SAFETY: both events were recorded on this context's stream.
        let ms = unsafe {
            match result::event::elapsed(start.cu_event(), end.cu_event()) {
                Err(DriverError(sys::CUresult::CUDA_ERROR_NOT_READY)) => {
                    result::event::synchronize(end.cu_event())
                        .at(&self.id, "cuEventSynchronize")?;
                    result::event::elapsed(start.cu_event(), end.cu_event())
                }
                other => other,
            }
        }
        .at(&self.id, "cuEventElapsedTime")?;
        Ok(ms as f64 * 1e3)
    }

    /// After a poll timed out: the stream's own error, if it has one.
    fn explain_stall(&self, timeout: Error) -> Error {
        // SAFETY: the stream belongs to this context.
        match unsafe { sys::cuStreamQuery(self.stream.cu_stream()) }.result() {
            Ok(()) | Err(DriverError(sys::CUresult::CUDA_ERROR_NOT_READY)) => timeout,
            Err(e) => Error::backend(&self.id, format!("stream failed while polling: {e}")),
        }
    }
}

/// One CUDA device as a [`Backend`].
pub struct CudaBackend {
    processor: Processor,
    dev: Arc<Device>,
}

/// Opens every CUDA device: `cuda:0`, `cuda:1`, ...
///
/// Fails with [`Error::Library`] when `libcuda` or cuBLAS cannot be loaded,
/// and with [`Error::Backend`] when the driver loads but sees no device.
pub fn open(opts: &OpenOptions) -> Result<Vec<Box<dyn Backend>>> {
    let _ = opts;
    libs::load_driver()?;
    result::init().at("cuda", "cuInit")?;
    let count = CudaContext::device_count().at("cuda", "cuDeviceGetCount")?;
    if count <= 0 {
        return Err(Error::backend(
            "cuda",
            "the driver loaded but sees no CUDA device",
        ));
    }
    libs::load_cublas()?;
    let mut list: Vec<Box<dyn Backend>> = Vec::new();
    for ordinal in 0..count as usize {
        list.push(Box::new(CudaBackend::open(ordinal)?));
    }
    Ok(list)
}

impl CudaBackend {
    /// Opens device `ordinal` (the libraries must be loaded: see [`open`]).
    fn open(ordinal: usize) -> Result<CudaBackend> {
        let id = format!("cuda:{ordinal}");
        let ctx = CudaContext::new(ordinal).at(&id, "cuDevicePrimaryCtxRetain")?;
        // The backend synchronises its own work; cudarc's per-buffer event
        // tracking would only add work to timed launches.
        // SAFETY: no cudarc `CudaSlice` is created in this context.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().at(&id, "cuStreamCreate")?;
        let copy_stream = ctx.new_stream().at(&id, "cuStreamCreate(copy)")?;
        let blas = CudaBlas::new(stream.clone()).at(&id, "cublasCreate")?;
        let lt = lt::Lt::new(&ctx, &id)?;
        let kernels = Kernels::load(&ctx, &id);
        let mut dev = Device {
            id: id.clone(),
            ctx,
            stream,
            copy_stream,
            ring: std::sync::Mutex::new(StagingRing::new()),
            blas,
            lt,
            kernels,
            flag_writer: None,
            copy_buffers: std::sync::Mutex::new(None),
            evict_buffer: std::sync::Mutex::new(None),
        };
        dev.flag_writer = choose_flag_writer(&mut dev);
        let processor = describe(&dev)?;
        Ok(CudaBackend {
            processor,
            dev: Arc::new(dev),
        })
    }
}

/// Tries the flag writers (memop, then kernel) and keeps the first whose
/// write the host sees.
fn choose_flag_writer(dev: &mut Device) -> Option<FlagWriter> {
    for writer in [FlagWriter::MemOp, FlagWriter::Kernel] {
        dev.flag_writer = Some(writer);
        match check_flag_writer(dev) {
            Ok(()) => return Some(writer),
            Err(e) => eprintln!("{}: flag writer {writer:?} unusable: {e}", dev.id),
        }
    }
    None
}

fn check_flag_writer(dev: &Device) -> Result<()> {
    let flag = MappedFlag::new(&dev.ctx, &dev.id)?;
    let value = 0x5eed_0001;
    dev.write_flag(&flag, value)?;
    dev.stream
        .synchronize()
        .at(&dev.id, "cuStreamSynchronize")?;
    if flag.load() == value {
        Ok(())
    } else {
        Err(Error::backend(
            &dev.id,
            "the device's flag write did not reach the host",
        ))
    }
}

fn describe(dev: &Device) -> Result<Processor> {
    let id = dev.id.as_str();
    let name = dev.ctx.name().at(id, "cuDeviceGetName")?;
    let (major, minor) = dev
        .ctx
        .compute_capability()
        .at(id, "cuDeviceGetAttribute")?;
    let sms = dev
        .ctx
        .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        .at(id, "cuDeviceGetAttribute")?;
    let memory = dev.ctx.total_mem().at(id, "cuDeviceTotalMem")?;
    let mut driver_version = 0;
    // SAFETY: writes one int.
    unsafe { sys::cuDriverGetVersion(&mut driver_version) }
        .result()
        .at(id, "cuDriverGetVersion")?;
    let mut blas_version = 0;
    // SAFETY: a live handle; writes one int.
    unsafe { cudarc::cublas::sys::cublasGetVersion_v2(*dev.blas.handle(), &mut blas_version) }
        .result()
        .at(id, "cublasGetVersion")?;
    let mut extensions = vec![format!("sm_{major}{minor}")];
    if let Some(w) = dev.flag_writer {
        extensions.push(
            match w {
                FlagWriter::MemOp => "flag:cuStreamWriteValue32",
                FlagWriter::Kernel => "flag:kernel",
            }
            .to_string(),
        );
    }
    Ok(Processor {
        id: id.to_string(),
        kind: ProcessorKind::Gpu,
        api: ProcessorApi::Cuda,
        name,
        driver: format!(
            "CUDA {}.{} driver, cuBLAS {}.{}.{}, cuBLASLt {}, {} algorithms searched",
            driver_version / 1000,
            (driver_version % 1000) / 10,
            blas_version / 10000,
            (blas_version % 10000) / 100,
            blas_version % 100,
            lt::Lt::version(),
            lt::ALGOS
        ),
        capabilities: Capabilities {
            dtypes: vec![DType::F32, DType::F16, DType::Bf16],
            static_graphs: false,
            unified_memory: false,
            device_timer: true,
            host_flag: dev.flag_writer.is_some(),
            // The search times both forms of every GEMM (`gemm::search`).
            order_free: true,
            non_gemm: false,
            tile: None,
            compute_units: Some(sms as u32),
            memory_bytes: Some(memory as u64),
            launch_copy_max_bytes: Some(gemm::LAUNCH_COPY_MAX),
            extensions,
        },
        simulated: false,
        emulated: false,
    })
}

impl Backend for CudaBackend {
    fn processor(&self) -> &Processor {
        &self.processor
    }

    fn prepare(&mut self, spec: &GemmSpec, weights: &[f32]) -> Result<Box<dyn Gemm>> {
        Ok(Box::new(gemm::CudaGemm::new(
            self.dev.clone(),
            spec,
            weights,
        )?))
    }

    fn microbench(&mut self, req: &MicrobenchRequest) -> Result<Vec<f64>> {
        bench::run(&self.dev, req)
    }

    fn staging_slots(&self) -> Option<usize> {
        Some(ring::RING_SLOTS)
    }

    fn staging_bytes(&self) -> Option<u64> {
        let bytes = self.dev.lock_ring().bytes() as u64;
        (bytes > 0).then_some(bytes)
    }

    fn alloc_host(&self, len: usize) -> Result<Box<dyn crate::HostMem>> {
        Ok(Box::new(mem::PinnedHost::new(
            &self.dev.ctx,
            len,
            &self.dev.id,
        )?))
    }
}

#[cfg(test)]
mod tests;
