//! The OpenCL backend: every OpenCL platform/device becomes a processor
//! `opencl:<platform>:<device>`.
//!
//! - **Loading.** libOpenCL is loaded at run time by `opencl3` (feature
//!   `dynamic`), never linked; a small loader finds it first so that a missing
//!   library is an [`Error::Library`] naming the paths tried.
//! - **Kernels.** One tiled GEMM kernel of our own (`kernels.cl`),
//!   `C[R,S] = X[R,K]·Y[K,S]`, bounds-checked so any shape runs. Operand
//!   order `aw` runs it as `A·W`; `transposed` as `Wᵀ·Aᵀ` (the processor holds
//!   `Wᵀ` and `Aᵀ` and computes `Cᵀ`); inputs and outputs are converted in
//!   [`Gemm::write_input`] / [`Gemm::read_output`], outside the timed part.
//!   f32, and f16 storage with f32 accumulation where `cl_khr_fp16` exists.
//! - **Tiles.** A handful of tilings ([`CANDIDATES`]) are checked for
//!   correctness and timed on [`TUNE_SHAPE`] (a larger cube on fast
//!   devices, see [`tune::ESCALATE_BELOW_US`]) the first time a dtype is
//!   prepared; the winner is cached per platform, device, driver and kernel
//!   source in `opencl-tune.json` (see [`tune::cache_dir`]).
//! - **Buffers.** Inputs and outputs are `CL_MEM_ALLOC_HOST_PTR` buffers
//!   written and read through map/unmap (zero-copy on unified memory);
//!   weights are copied once at prepare and stay resident.
//! - **Timing.** The queue has `CL_QUEUE_PROFILING_ENABLE`: kernel time
//!   comes from the event's `START`/`END` ([`Timed::device_us`](crate::Timed::device_us)), plus the
//!   host clock from submit to observed completion ([`Timed::host_us`](crate::Timed::host_us)).
//! - **Sync.** [`SyncMode::Block`](crate::SyncMode::Block) is `clFinish`; [`SyncMode::Poll`](crate::SyncMode::Poll) sleeps
//!   for the predicted time less a margin, then spins on a flag in a mapped
//!   `CL_MEM_ALLOC_HOST_PTR` buffer that a one-item kernel, enqueued after
//!   the GEMM on the same in-order queue, writes last. A CPU device (PoCL)
//!   computes on the host's own cores, where a spinning host thread takes a
//!   core from the kernel: there Poll sleeps the same way, then waits in
//!   `clFinish`.

mod bench;
mod gemm;
mod loader;
pub mod tune;

use std::collections::HashMap;
use std::sync::Arc;

use hetero_plan::{
    Capabilities, DType, MicrobenchRequest, OperandOrder, Processor, ProcessorApi, ProcessorKind,
    WeightMode,
};
use opencl3::command_queue::{CL_QUEUE_PROFILING_ENABLE, CommandQueue};
use opencl3::context::Context;
use opencl3::device::{
    CL_DEVICE_TYPE_ACCELERATOR, CL_DEVICE_TYPE_ALL, CL_DEVICE_TYPE_CPU, CL_DEVICE_TYPE_GPU, Device,
};
use opencl3::error_codes::{
    CL_DEVICE_NOT_FOUND, CL_PLATFORM_NOT_FOUND_KHR, ClError, DLOPEN_FUNCTION_NOT_AVAILABLE,
    DLOPEN_RUNTIME_LOAD_FAILED,
};
use opencl3::program::Program;

pub use gemm::{ClGemm, EVENT_CHECK_EVERY, PollStats};
pub use tune::{CANDIDATES, CHECK_SHAPE, Family, TUNE_SHAPE, Tile, Trial, TuneReport};

use crate::verify::random_vec;
use crate::{Backend, Error, Gemm, GemmSpec, OpenOptions, Result};

/// The GEMM kernel source; tiles and dtype are `-D` build options.
pub(crate) const GEMM_SOURCE: &str = include_str!("kernels.cl");
/// The flag and spin kernels.
pub(crate) const UTIL_SOURCE: &str = include_str!("util.cl");

/// Opens every OpenCL device of every platform as a processor.
///
/// Fails with [`Error::Library`] when libOpenCL cannot be loaded, and with
/// [`Error::Backend`] when it loads but finds no platform or no usable
/// device. A device that fails to open is skipped with a line on stderr as
/// long as another one opens.
pub fn open(opts: &OpenOptions) -> Result<Vec<Box<dyn Backend>>> {
    Ok(open_devices(opts)?
        .into_iter()
        .map(|b| Box::new(b) as Box<dyn Backend>)
        .collect())
}

/// [`open`], returning the concrete backends (for tests and benchmarks that
/// need [`OpenClBackend`]'s own methods).
pub fn open_devices(opts: &OpenOptions) -> Result<Vec<OpenClBackend>> {
    // PoCL 3.1 answered CL_DEVICE_NOT_FOUND to one of several threads
    // enumerating at once (seen in the parallel tests); enumerate one at a time.
    static OPEN_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = OPEN_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let lib = loader::ensure_loaded()?;
    let platforms = opencl3::platform::get_platforms().map_err(|e| match e.0 {
        DLOPEN_RUNTIME_LOAD_FAILED | DLOPEN_FUNCTION_NOT_AVAILABLE => Error::Library {
            library: loader::DEFAULT_LIBRARY.into(),
            tried: vec![lib.clone()],
            reason: format!("{lib} loads, but opencl3 could not use it ({e})"),
        },
        CL_PLATFORM_NOT_FOUND_KHR => no_platform(&lib),
        _ => Error::backend("opencl", format!("clGetPlatformIDs: {e}")),
    })?;
    if platforms.is_empty() {
        return Err(no_platform(&lib));
    }
    let mut out = Vec::new();
    let mut first_err = None;
    for (pi, platform) in platforms.iter().enumerate() {
        let ids = match platform.get_devices(CL_DEVICE_TYPE_ALL) {
            Ok(ids) => ids,
            Err(ClError(CL_DEVICE_NOT_FOUND)) => Vec::new(),
            Err(e) => {
                let err = Error::backend(format!("opencl:{pi}"), format!("clGetDeviceIDs: {e}"));
                eprintln!("opencl: skipping platform {pi}: {err}");
                first_err.get_or_insert(err);
                continue;
            }
        };
        for (di, id) in ids.into_iter().enumerate() {
            match OpenClBackend::new(pi, di, platform, Device::new(id), opts) {
                Ok(b) => out.push(b),
                Err(err) => {
                    eprintln!("opencl: skipping opencl:{pi}:{di}: {err}");
                    first_err.get_or_insert(err);
                }
            }
        }
    }
    if out.is_empty() {
        return Err(first_err.unwrap_or_else(|| {
            Error::backend(
                "opencl",
                format!(
                    "{} platform(s) found by {lib}, but no device",
                    platforms.len()
                ),
            )
        }));
    }
    Ok(out)
}

fn no_platform(lib: &str) -> Error {
    Error::backend(
        "opencl",
        format!(
            "{lib} loaded but found no OpenCL platform: no vendor driver is registered \
             (on Linux, /etc/OpenCL/vendors/*.icd; install e.g. pocl-opencl-icd)"
        ),
    )
}

/// Maps an OpenCL error to [`Error::Backend`] naming the call.
pub(crate) trait ClResultExt<T> {
    fn cl(self, id: &str, call: &str) -> Result<T>;
}

impl<T> ClResultExt<T> for std::result::Result<T, ClError> {
    fn cl(self, id: &str, call: &str) -> Result<T> {
        self.map_err(|e| Error::backend(id, format!("{call}: {e}")))
    }
}

/// What every prepared GEMM of one device shares.
pub(crate) struct DeviceCtx {
    pub(crate) id: String,
    pub(crate) context: Context,
    /// In-order, with profiling.
    pub(crate) queue: CommandQueue,
    /// `set_flag` and `spin`.
    pub(crate) util: Program,
    pub(crate) max_work_group: usize,
    pub(crate) max_item_sizes: Vec<usize>,
    pub(crate) local_mem: u64,
    pub(crate) max_alloc: u64,
    pub(crate) compute_units: u32,
    /// The device computes on the host's own cores (a CPU device such as
    /// PoCL): a host thread spinning on its completion flag takes a core
    /// from its kernels, so Poll sleeps through the prediction and then
    /// waits in `clFinish` instead.
    pub(crate) on_host_cores: bool,
    /// Whether the host has seen the poll flag written by a kernel:
    /// [`FLAG_UNKNOWN`], [`FLAG_SEEN`] or [`FLAG_UNSEEN`].
    pub(crate) flag_state: std::sync::atomic::AtomicU8,
    /// Bytes the cache eviction reads ([`DeviceCtx::evict_caches`]).
    evict_bytes: usize,
    /// The eviction's buffer and kernel, made on first use.
    evictor: std::sync::Mutex<Option<Evictor>>,
}

/// What [`DeviceCtx::evict_caches`] runs: `evict` of util.cl over `buf`.
struct Evictor {
    kernel: opencl3::kernel::Kernel,
    _buf: opencl3::memory::Buffer<u32>,
    _sink: opencl3::memory::Buffer<u32>,
    lines: usize,
}

/// The value the eviction buffer is filled with.
const EVICT_FILL: u32 = 0x5a5a_5a5a;

/// How many bytes the eviction reads: on a device that computes on the
/// host's cores, the host eviction's size (several last-level caches); on
/// a GPU, twice its global memory cache, at least 64 MiB; within the
/// largest allocation, a whole number of 64-byte lines.
fn evict_bytes(on_host_cores: bool, cache: u64, max_alloc: u64) -> usize {
    let want = if on_host_cores {
        crate::evict::host_buffer_bytes()
    } else {
        (2 * cache as usize).max(64 << 20)
    };
    want.min(max_alloc as usize) / 64 * 64
}

impl DeviceCtx {
    /// Evicts the caches the next GEMM reads through: a kernel on this
    /// device's queue reads one word of every line of a buffer larger than
    /// them (`evict` in util.cl), and the host waits for it. On PoCL the
    /// reads run on PoCL's own threads, so the timed run finds them awake,
    /// as the cpu backend's eviction does for its pool (`crate::evict`); on
    /// a GPU they reach its L2, which the host eviction cannot.
    pub(crate) fn evict_caches(&self) -> Result<()> {
        use opencl3::memory::{CL_MEM_READ_ONLY, CL_MEM_WRITE_ONLY, ClMem};
        let id = self.id.as_str();
        let mut slot = self.evictor.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            let words = self.evict_bytes / 4;
            // SAFETY: no host pointer; the sizes are in elements.
            let mut buf = unsafe {
                opencl3::memory::Buffer::<u32>::create(
                    &self.context,
                    CL_MEM_READ_ONLY,
                    words,
                    std::ptr::null_mut(),
                )
            }
            .cl(id, "clCreateBuffer(eviction)")?;
            // SAFETY: as above.
            let sink = unsafe {
                opencl3::memory::Buffer::<u32>::create(
                    &self.context,
                    CL_MEM_WRITE_ONLY,
                    1,
                    std::ptr::null_mut(),
                )
            }
            .cl(id, "clCreateBuffer(eviction sink)")?;
            // Written once, so that every page is backed (not a shared zero
            // page) and no line holds `never`.
            // SAFETY: fills the whole buffer, `words` elements.
            unsafe {
                self.queue
                    .enqueue_fill_buffer(&mut buf, &[EVICT_FILL], 0, words * 4, &[])
            }
            .cl(id, "clEnqueueFillBuffer(eviction)")?
            .wait()
            .cl(id, "clWaitForEvents(fill)")?;
            let kernel = opencl3::kernel::Kernel::create(&self.util, "evict")
                .cl(id, "clCreateKernel(evict)")?;
            // SAFETY: argument indices and types match `evict` in util.cl.
            unsafe {
                kernel
                    .set_arg(0, &buf.get())
                    .cl(id, "clSetKernelArg(buf)")?;
                kernel
                    .set_arg(1, &sink.get())
                    .cl(id, "clSetKernelArg(sink)")?;
                kernel
                    .set_arg(2, &(!EVICT_FILL as opencl3::types::cl_uint))
                    .cl(id, "clSetKernelArg(never)")?;
            }
            *slot = Some(Evictor {
                kernel,
                _buf: buf,
                _sink: sink,
                lines: self.evict_bytes / 64,
            });
        }
        let e = slot.as_ref().expect("made above");
        let global = [e.lines];
        // SAFETY: the arguments were set above; one work-item per line.
        unsafe {
            self.queue.enqueue_nd_range_kernel(
                e.kernel.get(),
                1,
                std::ptr::null(),
                global.as_ptr(),
                std::ptr::null(),
                &[],
            )
        }
        .cl(id, "clEnqueueNDRangeKernel(evict)")?
        .wait()
        .cl(id, "clWaitForEvents(evict)")
    }
}

/// No poll has finished yet on this device.
pub(crate) const FLAG_UNKNOWN: u8 = 0;
/// A poll saw the flag: it is host-visible here.
pub(crate) const FLAG_SEEN: u8 = 1;
/// Polls ended on the event status without seeing the flag (a discrete GPU
/// where the kernel's write stays in device memory until unmap).
pub(crate) const FLAG_UNSEEN: u8 = 2;

/// One OpenCL device opened as a processor.
pub struct OpenClBackend {
    processor: Processor,
    dev: Arc<DeviceCtx>,
    platform_name: String,
    driver_version: String,
    cache_file: Option<std::path::PathBuf>,
    /// f16 kernels may run (`cl_khr_fp16`, or forced for tests).
    f16: bool,
    tiles: HashMap<DType, TuneReport>,
    programs: HashMap<(DType, Tile), Program>,
}

impl OpenClBackend {
    fn new(
        pi: usize,
        di: usize,
        platform: &opencl3::platform::Platform,
        device: Device,
        opts: &OpenOptions,
    ) -> Result<OpenClBackend> {
        let id = format!("opencl:{pi}:{di}");
        let q = |call: &str, r: std::result::Result<String, ClError>| -> Result<String> {
            r.map(|s| s.trim_end_matches('\0').trim().to_string())
                .cl(&id, call)
        };
        let platform_name = q("clGetPlatformInfo(NAME)", platform.name())?;
        let platform_version = q("clGetPlatformInfo(VERSION)", platform.version())?;
        let name = q("clGetDeviceInfo(NAME)", device.name())?;
        let driver_version = q("clGetDeviceInfo(DRIVER_VERSION)", device.driver_version())?;
        let extensions: Vec<String> = q("clGetDeviceInfo(EXTENSIONS)", device.extensions())?
            .split_whitespace()
            .map(str::to_string)
            .collect();
        let dev_type = device.dev_type().cl(&id, "clGetDeviceInfo(TYPE)")?;
        let kind = if dev_type & CL_DEVICE_TYPE_GPU != 0 {
            ProcessorKind::Gpu
        } else if dev_type & CL_DEVICE_TYPE_CPU != 0 {
            ProcessorKind::Cpu
        } else if dev_type & CL_DEVICE_TYPE_ACCELERATOR != 0 {
            ProcessorKind::Npu
        } else {
            ProcessorKind::Gpu
        };
        let f16 = extensions.iter().any(|e| e == "cl_khr_fp16");
        // Deprecated since OpenCL 2.0 but still answered by the drivers we
        // know; a CPU device shares host memory whatever it says.
        let unified = device
            .host_unified_memory()
            .unwrap_or(kind == ProcessorKind::Cpu);
        let compute_units = device
            .max_compute_units()
            .cl(&id, "clGetDeviceInfo(MAX_COMPUTE_UNITS)")?;
        let memory = device
            .global_mem_size()
            .cl(&id, "clGetDeviceInfo(GLOBAL_MEM_SIZE)")?;

        let context = Context::from_device(&device).cl(&id, "clCreateContext")?;
        let queue = make_queue(&context, &device).cl(&id, "clCreateCommandQueue")?;
        let util = Program::create_and_build_from_source(&context, UTIL_SOURCE, "-cl-std=CL1.2")
            .map_err(|log| Error::backend(&id, format!("building util.cl: {log}")))?;
        let dev = DeviceCtx {
            id: id.clone(),
            context,
            queue,
            util,
            max_work_group: device
                .max_work_group_size()
                .cl(&id, "clGetDeviceInfo(MAX_WORK_GROUP_SIZE)")?,
            max_item_sizes: device
                .max_work_item_sizes()
                .cl(&id, "clGetDeviceInfo(MAX_WORK_ITEM_SIZES)")?,
            local_mem: device
                .local_mem_size()
                .cl(&id, "clGetDeviceInfo(LOCAL_MEM_SIZE)")?,
            max_alloc: device
                .max_mem_alloc_size()
                .cl(&id, "clGetDeviceInfo(MAX_MEM_ALLOC_SIZE)")?,
            compute_units,
            on_host_cores: kind == ProcessorKind::Cpu,
            flag_state: std::sync::atomic::AtomicU8::new(FLAG_UNKNOWN),
            evict_bytes: evict_bytes(
                kind == ProcessorKind::Cpu,
                device.global_mem_cache_size().unwrap_or(0),
                device
                    .max_mem_alloc_size()
                    .cl(&id, "clGetDeviceInfo(MAX_MEM_ALLOC_SIZE)")?,
            ),
            evictor: std::sync::Mutex::new(None),
        };
        let mut dtypes = vec![DType::F32];
        if f16 {
            dtypes.push(DType::F16);
        }
        let processor = Processor {
            id: id.clone(),
            kind,
            api: ProcessorApi::Opencl,
            name,
            driver: format!("{platform_version}; driver {driver_version}"),
            capabilities: Capabilities {
                dtypes,
                static_graphs: false,
                unified_memory: unified,
                device_timer: true,
                // A kernel's write to a mapped ALLOC_HOST_PTR buffer is seen
                // by the host only where memory is shared (seen on PoCL; not
                // on NVIDIA, where Poll falls back to the event status).
                host_flag: unified,
                order_free: false,
                non_gemm: false,
                tile: None,
                compute_units: Some(compute_units),
                memory_bytes: Some(memory),
                launch_copy_max_bytes: None,
                extensions,
            },
            simulated: false,
            emulated: false,
        };
        let cache_file =
            tune::cache_dir(opts.cache_dir.as_deref()).map(|d| d.join(tune::CACHE_FILE));
        Ok(OpenClBackend {
            processor,
            dev: Arc::new(dev),
            platform_name,
            driver_version,
            cache_file,
            f16,
            tiles: HashMap::new(),
            programs: HashMap::new(),
        })
    }

    /// Lets f16 GEMMs run on a device without `cl_khr_fp16`. The kernels
    /// only store f16 (`vload_half` / `vstore_half` are core OpenCL C) and
    /// accumulate in f32, so they run anywhere; the processor still does not
    /// advertise f16, because without the extension the device has no f16
    /// arithmetic worth planning for. For tests of the f16 path on PoCL.
    pub fn force_f16_storage(&mut self) {
        self.f16 = true;
    }

    /// The tile used for `dtype`, autotuning (or reading the cache) on first use.
    pub fn tile(&mut self, dtype: DType) -> Result<Tile> {
        Ok(self.tune(dtype)?.tile)
    }

    /// How the tile for `dtype` was chosen, autotuning on first use.
    pub fn tune(&mut self, dtype: DType) -> Result<&TuneReport> {
        self.check_dtype(dtype)?;
        if !self.tiles.contains_key(&dtype) {
            let report = self.run_tune(dtype)?;
            self.tiles.insert(dtype, report);
        }
        Ok(&self.tiles[&dtype])
    }

    /// Uses `tile` for `dtype` from now on, without tuning.
    pub fn set_tile(&mut self, dtype: DType, tile: Tile) -> Result<()> {
        self.check_dtype(dtype)?;
        if let Some(why) = tile.unfit_reason(&self.dev) {
            return Err(Error::unsupported(
                &self.dev.id,
                format!("tile {tile}: {why}"),
            ));
        }
        self.tiles.insert(
            dtype,
            TuneReport {
                dtype,
                tile,
                shape: TUNE_SHAPE,
                from_cache: false,
                cache_file: None,
                trials: Vec::new(),
            },
        );
        Ok(())
    }

    /// The tune cache file this backend reads and writes, if any.
    pub fn cache_file(&self) -> Option<&std::path::Path> {
        self.cache_file.as_deref()
    }

    /// The key of this device's cache entry for `dtype`.
    pub fn cache_key(&self, dtype: DType) -> String {
        tune::cache_key(
            &self.platform_name,
            &self.processor.name,
            &self.driver_version,
            dtype,
        )
    }

    /// Prepares a GEMM with an explicit tile (the concrete type, for tests
    /// and benchmarks that inspect poll statistics).
    pub fn prepare_with_tile(
        &mut self,
        spec: &GemmSpec,
        weights: &[f32],
        tile: Tile,
    ) -> Result<ClGemm> {
        self.check_dtype(spec.dtype)?;
        if let Some(why) = tile.unfit_reason(&self.dev) {
            return Err(Error::unsupported(
                &self.dev.id,
                format!("tile {tile}: {why}"),
            ));
        }
        self.check_size(spec)?;
        let dev = self.dev.clone();
        let program = self.program(spec.dtype, tile)?;
        ClGemm::new(dev, program, tile, *spec, weights)
    }

    /// Prepares a GEMM with the tuned tile (the concrete type).
    pub fn prepare_cl(&mut self, spec: &GemmSpec, weights: &[f32]) -> Result<ClGemm> {
        let tile = self.tile(spec.dtype)?;
        self.prepare_with_tile(spec, weights, tile)
    }

    fn check_dtype(&self, dtype: DType) -> Result<()> {
        match dtype {
            DType::F32 => Ok(()),
            DType::F16 if self.f16 => Ok(()),
            DType::F16 => Err(Error::unsupported(
                &self.dev.id,
                "dtype f16 (the device lacks cl_khr_fp16)",
            )),
            other => Err(Error::unsupported(
                &self.dev.id,
                format!("dtype {}", other.as_str()),
            )),
        }
    }

    fn check_size(&self, spec: &GemmSpec) -> Result<()> {
        let (m, k, n) = spec.shape.mkn();
        let elem = if spec.dtype == DType::F16 { 2 } else { 4 };
        for (what, count) in [
            ("A", u64::from(m) * u64::from(k)),
            ("W", u64::from(k) * u64::from(n)),
            ("C", u64::from(m) * u64::from(n)),
        ] {
            if count > i32::MAX as u64 {
                return Err(Error::unsupported(
                    &self.dev.id,
                    format!("{m}x{k}x{n}: {what} has more than 2^31 elements"),
                ));
            }
            if count * elem > self.dev.max_alloc {
                return Err(Error::unsupported(
                    &self.dev.id,
                    format!(
                        "{m}x{k}x{n}: {what} needs {} bytes, above CL_DEVICE_MAX_MEM_ALLOC_SIZE {}",
                        count * elem,
                        self.dev.max_alloc
                    ),
                ));
            }
        }
        Ok(())
    }

    fn program(&mut self, dtype: DType, tile: Tile) -> Result<&Program> {
        if !self.programs.contains_key(&(dtype, tile)) {
            let opts = tile.build_options(dtype);
            let p = Program::create_and_build_from_source(&self.dev.context, GEMM_SOURCE, &opts)
                .map_err(|log| {
                    Error::backend(
                        &self.dev.id,
                        format!("building the gemm kernel ({opts}): {log}"),
                    )
                })?;
            self.programs.insert((dtype, tile), p);
        }
        Ok(&self.programs[&(dtype, tile)])
    }

    fn run_tune(&mut self, dtype: DType) -> Result<TuneReport> {
        let key = self.cache_key(dtype);
        if let Some(file) = &self.cache_file {
            if let Some(e) = tune::cache_lookup(file, &key) {
                if e.tile.unfit_reason(&self.dev).is_none() {
                    let [m, k, n] = e.shape;
                    return Ok(TuneReport {
                        dtype,
                        tile: e.tile,
                        shape: (m, k, n),
                        from_cache: true,
                        cache_file: Some(file.clone()),
                        trials: Vec::new(),
                    });
                }
            }
        }
        // Every candidate is checked in full on CHECK_SHAPE and timed on
        // TUNE_SHAPE; while the best takes under ESCALATE_BELOW_US (a fast
        // GPU, where 512³ is launch-bound and favours small tiles), the
        // survivors are timed again on twice the edge, up to MAX_TUNE_EDGE.
        let mut shape = TUNE_SHAPE;
        let mut trials = Vec::new();
        for &tile in CANDIDATES {
            let outcome = match tile.unfit_reason(&self.dev) {
                Some(why) => Err(why),
                None => self
                    .check_tile(dtype, tile)
                    .and_then(|()| self.time_tile(dtype, tile, shape))
                    .map_err(|e| e.to_string()),
            };
            trials.push(Trial {
                tile,
                best_us: outcome.as_ref().ok().copied(),
                error: outcome.err(),
            });
        }
        let best = |trials: &[Trial]| {
            trials
                .iter()
                .filter_map(|t| t.best_us.map(|us| (t.tile, us)))
                .min_by(|a, b| a.1.total_cmp(&b.1))
        };
        while let Some((_, us)) = best(&trials) {
            if us >= tune::ESCALATE_BELOW_US || shape.0 >= tune::MAX_TUNE_EDGE {
                break;
            }
            shape = (shape.0 * 2, shape.1 * 2, shape.2 * 2);
            for t in trials.iter_mut().filter(|t| t.best_us.is_some()) {
                match self.time_tile(dtype, t.tile, shape) {
                    Ok(us) => t.best_us = Some(us),
                    Err(e) => {
                        t.best_us = None;
                        t.error = Some(format!("at {}³: {e}", shape.0));
                    }
                }
            }
        }
        let Some((tile, best_us)) = best(&trials) else {
            let why: Vec<String> = trials
                .iter()
                .map(|t| format!("{}: {}", t.tile, t.error.as_deref().unwrap_or("?")))
                .collect();
            return Err(Error::backend(
                &self.dev.id,
                format!(
                    "no GEMM tile works for {}: {}",
                    dtype.as_str(),
                    why.join("; ")
                ),
            ));
        };
        if let Some(file) = &self.cache_file {
            let entry = tune::CacheEntry {
                tile,
                best_us,
                shape: [shape.0, shape.1, shape.2],
                tuned_ms: now_ms(),
            };
            if let Err(e) = tune::cache_store(file, &key, entry) {
                eprintln!("{}: tune result not cached: {e}", self.dev.id);
            }
        }
        Ok(TuneReport {
            dtype,
            tile,
            shape,
            from_cache: false,
            cache_file: self.cache_file.clone(),
            trials,
        })
    }

    /// Runs `tile` once on [`CHECK_SHAPE`] and checks every output.
    fn check_tile(&mut self, dtype: DType, tile: Tile) -> Result<()> {
        self.run_tile(dtype, tile, CHECK_SHAPE, 1).map(|_| ())
    }

    /// Fastest kernel time of `tile` on `shape`, µs (one warm-up, five runs;
    /// the output is checked on sampled entries).
    fn time_tile(&mut self, dtype: DType, tile: Tile, shape: (u32, u32, u32)) -> Result<f64> {
        self.run_tile(dtype, tile, shape, 6)
    }

    /// Runs `tile` `runs` times on `shape` `aw` (the first untimed when
    /// there are several), checks the output; returns the fastest time, µs.
    fn run_tile(
        &mut self,
        dtype: DType,
        tile: Tile,
        (m, k, n): (u32, u32, u32),
        runs: usize,
    ) -> Result<f64> {
        let tol = self.tolerance(dtype, k);
        let spec = GemmSpec {
            shape: hetero_plan::GemmShape::new(m, k, n).expect("nonzero"),
            dtype,
            order: OperandOrder::Aw,
            weights: WeightMode::Static,
        };
        let a = random_vec(m as usize * k as usize, 1);
        let w = random_vec(k as usize * n as usize, 2);
        let mut g = self.prepare_with_tile(&spec, &w, tile)?;
        g.write_input(&a)?;
        let mut times = Vec::new();
        for i in 0..runs {
            let t = g.execute()?;
            if i > 0 || runs == 1 {
                times.push(t.best_us());
            }
        }
        let mut c = vec![0f32; m as usize * n as usize];
        g.read_output(&mut c)?;
        let err = max_rel_err(&a, &w, &c, m as usize, k as usize, n as usize, 97);
        if err.is_nan() || err > tol {
            return Err(Error::backend(
                &self.dev.id,
                format!("tile {tile} wrong on {m}x{k}x{n}: rel err {err:.3e} > {tol:.3e}"),
            ));
        }
        Ok(times.into_iter().fold(f64::INFINITY, f64::min))
    }

    pub(crate) fn dev(&self) -> &Arc<DeviceCtx> {
        &self.dev
    }
}

fn make_queue(context: &Context, device: &Device) -> std::result::Result<CommandQueue, ClError> {
    // clCreateCommandQueueWithProperties (2.0+), else the 1.x call.
    // SAFETY: `device` is the context's only device.
    match unsafe {
        CommandQueue::create_with_properties(context, device.id(), CL_QUEUE_PROFILING_ENABLE, 0)
    } {
        Ok(q) => Ok(q),
        // SAFETY: as above.
        Err(_) => unsafe { CommandQueue::create(context, device.id(), CL_QUEUE_PROFILING_ENABLE) },
    }
}

impl Backend for OpenClBackend {
    fn processor(&self) -> &Processor {
        &self.processor
    }

    fn prepare(&mut self, spec: &GemmSpec, weights: &[f32]) -> Result<Box<dyn Gemm>> {
        Ok(Box::new(self.prepare_cl(spec, weights)?))
    }

    fn microbench(&mut self, req: &MicrobenchRequest) -> Result<Vec<f64>> {
        bench::run(self, req)
    }
}

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Largest error of `c = a·w` against an f64 reference, relative to
/// `Σ|a_ik·w_kj|` (the scale a dot product's rounding error grows with),
/// over every output when there are few, else over `samples` pseudo-random
/// outputs plus the four corners.
pub(crate) fn max_rel_err(
    a: &[f32],
    w: &[f32],
    c: &[f32],
    m: usize,
    k: usize,
    n: usize,
    samples: usize,
) -> f64 {
    let check = |i: usize, j: usize| {
        let (mut dot, mut abs) = (0f64, 0f64);
        for p in 0..k {
            let x = f64::from(a[i * k + p]) * f64::from(w[p * n + j]);
            dot += x;
            abs += x.abs();
        }
        let err = (f64::from(c[i * n + j]) - dot).abs();
        if err == 0.0 {
            0.0
        } else {
            err / abs.max(f64::MIN_POSITIVE)
        }
    };
    let mut worst = 0f64;
    let mut note = |e: f64| {
        // NaN must fail the check, so it wins.
        if e.is_nan() || e > worst {
            worst = e;
        }
    };
    if m * n <= 16_384 {
        for i in 0..m {
            for j in 0..n {
                note(check(i, j));
            }
        }
    } else {
        for (i, j) in [(0, 0), (0, n - 1), (m - 1, 0), (m - 1, n - 1)] {
            note(check(i, j));
        }
        let mut s = 0x2545_F491_4F6C_DD1Du64;
        for _ in 0..samples {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            note(check(
                (s % m as u64) as usize,
                ((s >> 32) % n as u64) as usize,
            ));
        }
    }
    worst
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_check_catches_a_wrong_output() {
        let (m, k, n) = (3, 4, 5);
        let a = random_vec(m * k, 1);
        let w = random_vec(k * n, 2);
        let mut c = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|p| a[i * k + p] * w[p * n + j]).sum();
            }
        }
        assert!(max_rel_err(&a, &w, &c, m, k, n, 0) < 1e-6);
        c[7] += 0.5;
        assert!(max_rel_err(&a, &w, &c, m, k, n, 0) > 1e-2);
        c[7] = f32::NAN;
        assert!(max_rel_err(&a, &w, &c, m, k, n, 0).is_nan());
    }

    #[test]
    fn the_eviction_exceeds_the_cache_it_empties() {
        let host = crate::evict::host_buffer_bytes();
        // A CPU device reads as much as the host eviction writes.
        assert_eq!(evict_bytes(true, 1 << 20, u64::MAX), host / 64 * 64);
        // A GPU: twice its cache, at least 64 MiB.
        assert_eq!(evict_bytes(false, 50 << 20, u64::MAX), 100 << 20);
        assert_eq!(evict_bytes(false, 0, u64::MAX), 64 << 20);
        // Within the largest allocation, in whole lines.
        assert_eq!(evict_bytes(false, 50 << 20, (32 << 20) + 5), 32 << 20);
    }
}
