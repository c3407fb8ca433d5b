//! The Qualcomm QNN HTP backend (`qnn:htp`), through the QNN C API of
//! `libQnnHtp.so`, loaded at run time only.
//!
//! Nothing is linked at build time: [`open`] finds the library (the
//! `--qnn-lib-dir` option, then [`LIB_DIR_ENV`], then the standard Android
//! folders [`STANDARD_DIRS`]) and opens it by absolute path with
//! `libloading`. The FFI in `ffi.rs` is written by hand from the documented
//! API; Qualcomm's headers are never part of this repository.
//!
//! **On x86-64 the library is the HTP emulator** (from the
//! `onnxruntime-qnn` wheel, `scripts/fetch-qnn.sh`): results are exact
//! HTP arithmetic, but its times are CPU emulation, so the processor is
//! marked `emulated` and every row says `timing: emulated`. They are never
//! NPU latency. On an aarch64 Android phone the same code drives the real
//! HTP (see `docs/phone.md`).
//!
//! Each prepared GEMM is one MatMul graph in its own context, built and
//! finalised in [`Backend::prepare`], whose duration is
//! [`Gemm::prepare_us`]. Graphs can also be compiled ahead of time into
//! context binaries for a target SoC ([`compile`], [`Compiler`]) and loaded
//! later ([`load`], [`ContextLoader`]).
//!
//! The processor runs asynchronously, each part with a fallback that the
//! processor's extensions name (`execution:`, `shared_buffers:`,
//! `device_timer:`):
//! * [`Gemm::submit`] hands a run to `QnnGraph_executeAsync` where the
//!   backend declares it, else to one worker thread per open library;
//!   [`Gemm::wait`] waits on the run's completion flag either way.
//! * Graph inputs and outputs are rpcmem (`libcdsprpc.so`) registered as
//!   memory handles where the library takes them (then `unified_memory`),
//!   else client buffers, which the library copies.
//! * QNN profiling gives each run's accelerator time as `device_us`, else
//!   the run is timed by the host clock.
//!
//! The x86-64 emulator takes the worker thread, client buffers and the
//! profiled (emulated) accelerator time.
//!
//! Options, from [`OpenOptions`] or the environment:
//! * SoC model (`qnn_soc` / `HETERO_QNN_SOC`, e.g. 57 = SM8650,
//!   69 = SM8750, 87 = SM8850): the HTP device custom config. Without it the
//!   emulator assumes SM8350.
//! * Performance (`qnn_perf` / `HETERO_QNN_PERF`: `default` or `burst`):
//!   `burst` votes, through the HTP performance infrastructure, for DCVS off,
//!   performance mode, sleep disabled, bus and core at the maximum voltage
//!   corner, RPC control latency 100 µs and RPC polling 9999 µs, the settings
//!   of `qnn-net-run --perf_profile burst`. It is best effort: what the
//!   library accepted is reported in the processor's extensions
//!   (`perf:...`); the default is `burst` on a phone and no vote on the
//!   emulator.
//! * Activation range of the 16-bit quantised dtypes (`HETERO_QNN_ACT_MAX`,
//!   default 4): static encodings are fixed when the graph is finalised, so
//!   inputs beyond ±this are refused rather than clamped.

mod aot;
mod ffi;
mod gemm;
mod graph;
mod profile;
mod rpcmem;
mod runtime;
mod worker;

use std::path::PathBuf;
use std::sync::Arc;

use hetero_plan::{
    Capabilities, DType, MicrobenchKind, MicrobenchRequest, OperandOrder, Processor, ProcessorApi,
    ProcessorKind, WeightMode,
};

pub use aot::{
    CompileArgs, Compiler, ContextLoader, DEFAULT_SEED, GraphEntry, MANIFEST_FILE, Manifest,
    PlanBinding, PlanGraph, compile, compile_cli, compile_with_weights, load, parse_graph_specs,
    read_manifest, synthetic_weights, weights_sha256,
};
pub use gemm::QnnGemm;
pub use graph::{Element, GraphIo, TensorDesc, effective_weights};
pub use runtime::{LIB_DIR_ENV, LIBRARY, STANDARD_DIRS};

use crate::{Backend, Error, Gemm, GemmSpec, OpenOptions, Result, default_tolerance};

/// The processor id this backend opens.
pub const PROCESSOR_ID: &str = "qnn:htp";

/// Environment variable for the SoC model when `OpenOptions::qnn_soc` is unset.
pub const SOC_ENV: &str = "HETERO_QNN_SOC";
/// Environment variable for the performance setting when `OpenOptions::qnn_perf` is unset.
pub const PERF_ENV: &str = "HETERO_QNN_PERF";
/// Environment variable for the activation range of quantised dtypes.
pub const ACT_MAX_ENV: &str = "HETERO_QNN_ACT_MAX";
/// The default activation range of quantised dtypes: inputs in ±4.
pub const DEFAULT_ACT_MAX: f32 = 4.0;

/// True where the library is the x86 HTP emulator rather than a real HTP.
pub const EMULATED: bool = !cfg!(target_arch = "aarch64");

/// The HTP performance vote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HtpPerf {
    /// No vote: the HTP's own DCVS decides.
    Default,
    /// Maximum clocks, no sleep (see the module docs).
    Burst,
}

impl std::str::FromStr for HtpPerf {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "default" => Ok(HtpPerf::Default),
            "burst" => Ok(HtpPerf::Burst),
            _ => Err(format!(
                "unknown HTP performance setting `{s}`; expected default or burst"
            )),
        }
    }
}

/// The backend's options after reading [`OpenOptions`] and the environment.
#[derive(Debug, Clone, PartialEq)]
pub struct QnnOptions {
    /// Folder with `libQnnHtp.so`, if given explicitly.
    pub lib_dir: Option<PathBuf>,
    /// SoC model for the device config.
    pub soc: Option<u32>,
    /// Performance vote.
    pub perf: HtpPerf,
    /// Activation range for quantised dtypes.
    pub act_abs_max: f32,
}

impl QnnOptions {
    /// Reads the options: [`OpenOptions`] first, then the environment.
    pub fn from_open(opts: &OpenOptions) -> Result<Self> {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let soc = match (opts.qnn_soc, env(SOC_ENV)) {
            (Some(s), _) => Some(s),
            (None, Some(v)) => Some(v.trim().parse::<u32>().map_err(|_| Error::BadRequest {
                field: SOC_ENV.into(),
                message: format!("`{v}` is not a SoC model number (e.g. 57 for SM8650)"),
            })?),
            (None, None) => None,
        };
        let perf = match opts.qnn_perf.clone().or_else(|| env(PERF_ENV)) {
            Some(v) => v
                .trim()
                .parse::<HtpPerf>()
                .map_err(|message| Error::BadRequest {
                    field: "qnn_perf".into(),
                    message,
                })?,
            None if EMULATED => HtpPerf::Default,
            None => HtpPerf::Burst,
        };
        let act_abs_max = match env(ACT_MAX_ENV) {
            Some(v) => match v.trim().parse::<f32>() {
                Ok(x) if x.is_finite() && x > 0.0 => x,
                _ => {
                    return Err(Error::BadRequest {
                        field: ACT_MAX_ENV.into(),
                        message: format!("`{v}` is not a positive number"),
                    });
                }
            },
            None => DEFAULT_ACT_MAX,
        };
        Ok(QnnOptions {
            lib_dir: opts.qnn_lib_dir.clone(),
            soc,
            perf,
            act_abs_max,
        })
    }
}

/// The dtypes this backend prepares.
pub const DTYPES: [DType; 4] = [DType::F32, DType::F16, DType::W8a16, DType::W4a16];

/// The `qnn:htp` processor.
pub struct QnnBackend {
    rt: Arc<runtime::Runtime>,
    processor: Processor,
    act_abs_max: f32,
}

/// Opens the HTP: loads the library, creates the backend and the device
/// (with the SoC model, if any) and applies the performance vote.
///
/// A missing library is [`Error::Library`] naming `libQnnHtp.so` and every
/// path tried.
pub fn open(opts: &OpenOptions) -> Result<Vec<Box<dyn Backend>>> {
    let q = QnnOptions::from_open(opts)?;
    Ok(vec![Box::new(QnnBackend::open(&q)?)])
}

impl QnnBackend {
    /// Opens the processor with explicit options.
    pub fn open(q: &QnnOptions) -> Result<QnnBackend> {
        let lib = runtime::load(q.lib_dir.as_deref())?;
        let rt = Arc::new(runtime::Runtime::open(lib, q.soc, q.perf)?);
        Ok(QnnBackend {
            processor: describe(&rt),
            rt,
            act_abs_max: q.act_abs_max,
        })
    }

    /// Uses `rpc` for shared buffers instead of `libcdsprpc.so` (probed as
    /// at open), and describes the processor again. Before any graph is
    /// prepared.
    #[cfg(test)]
    pub(crate) fn use_rpcmem(&mut self, rpc: &'static rpcmem::RpcMem) {
        let rt = Arc::get_mut(&mut self.rt).expect("no graph prepared yet");
        rt.shared = rt.probe_shared(rpc);
        self.processor = describe(&self.rt);
    }

    /// Where the library was loaded from.
    pub fn library_path(&self) -> &std::path::Path {
        &self.rt.lib.path
    }

    /// Prepares a GEMM and returns the concrete type (with
    /// [`QnnGemm::write_weights`] and [`QnnGemm::io`]).
    pub fn prepare_qnn(&mut self, spec: &GemmSpec, weights: &[f32]) -> Result<QnnGemm> {
        let built = graph::build(&self.rt, spec, weights, self.act_abs_max)?;
        QnnGemm::new(*spec, built, Some(weights))
    }
}

fn describe(rt: &runtime::Runtime) -> Processor {
    let api = rt.lib.api;
    let soc = rt
        .soc
        .map(|s| format!("SoC {s}"))
        .unwrap_or_else(|| "no SoC set (emulator default SM8350)".into());
    let name = if EMULATED {
        format!("Qualcomm HTP, x86-64 emulator ({soc})")
    } else {
        format!("Qualcomm HTP ({soc})")
    };
    let mut extensions = vec![
        format!("library:{}", rt.lib.path.display()),
        format!("perf:{}", rt.perf_note),
        rpcmem::extension(&rt.shared),
        format!("execution:{}", rt.execution_note()),
        format!("device_timer:{}", timer_note(rt)),
    ];
    if let Some(s) = rt.soc {
        extensions.push(format!("soc:{s}"));
    }
    Processor {
        id: PROCESSOR_ID.into(),
        kind: ProcessorKind::Npu,
        api: ProcessorApi::Qnn,
        name,
        driver: format!(
            "QNN {} (core API {}, HTP API {})",
            rt.lib.build_id, api.core, api.backend
        ),
        capabilities: Capabilities {
            dtypes: DTYPES.to_vec(),
            static_graphs: true,
            // Registered rpcmem is read and written by the HTP in place;
            // client buffers are copied each run (`shared_buffers:` says
            // which, and why).
            unified_memory: rt.shared.is_ok(),
            device_timer: rt.profiling.is_ok(),
            // Submitted graphs run on a worker thread that raises a
            // completion flag in host memory, which the host polls.
            host_flag: true,
            order_free: false,
            non_gemm: false,
            // QAIRT's HTP network-design guidelines: activation channels
            // are rounded up to the next multiple of 32.
            tile: Some(32),
            compute_units: None,
            memory_bytes: None,
            launch_copy_max_bytes: None,
            extensions,
        },
        simulated: false,
        emulated: EMULATED,
    }
}

/// What times a run: QNN profiling, or the host clock and why.
fn timer_note(rt: &runtime::Runtime) -> String {
    match &rt.profiling {
        Ok(()) => "QNN profiling (basic level): each run's accelerator (execute) time, \
                   else its on-device time, else the host clock"
            .into(),
        Err(why) => format!("host clock ({why})"),
    }
}

impl Backend for QnnBackend {
    fn processor(&self) -> &Processor {
        &self.processor
    }

    fn prepare(&mut self, spec: &GemmSpec, weights: &[f32]) -> Result<Box<dyn Gemm>> {
        Ok(Box::new(self.prepare_qnn(spec, weights)?))
    }

    /// Bounds against the exact f64 product of the f32 operands (the sweep's
    /// reference), relative to the largest reference value:
    /// * f32 is computed in f16 inside, so it gets the f16 bound;
    /// * w8a16 and w4a16 carry the weight rounding of 8 and 4 bits (per-tensor
    ///   scale): about `step / √12` of the weight RMS, 0.5 % and 7 % for
    ///   uniform weights, so 2·10⁻² and 0.2.
    fn tolerance(&self, dtype: DType, k: u32) -> f64 {
        tolerance(dtype, k)
    }

    /// `graph_prepare`: builds and finalises a fresh f16 static-weight
    /// MatMul graph of `shape` (own context each time) [`GRAPH_PREPARE_SAMPLES`]
    /// times and returns the prepare times, µs. Other benchmarks are
    /// unsupported.
    fn microbench(&mut self, req: &MicrobenchRequest) -> Result<Vec<f64>> {
        if req.bench != MicrobenchKind::GraphPrepare {
            return Err(Error::unsupported(
                PROCESSOR_ID,
                format!("microbenchmark {:?}", req.bench),
            ));
        }
        let shape = req.shape.ok_or_else(|| Error::BadRequest {
            field: format!("microbench `{}`.shape", req.id),
            message: "graph_prepare needs a shape".into(),
        })?;
        let spec = GemmSpec {
            shape,
            dtype: DType::F16,
            order: OperandOrder::Aw,
            weights: WeightMode::Static,
        };
        let w = synthetic_weights(shape, DEFAULT_SEED);
        (0..GRAPH_PREPARE_SAMPLES)
            .map(|_| graph::build(&self.rt, &spec, &w, self.act_abs_max).map(|g| g.prepare_us))
            .collect()
    }
}

/// How many graphs the `graph_prepare` microbenchmark builds.
pub const GRAPH_PREPARE_SAMPLES: usize = 3;

/// The verification bound of [`QnnBackend`]'s [`Backend::tolerance`].
pub fn tolerance(dtype: DType, k: u32) -> f64 {
    {
        match dtype {
            DType::F32 => default_tolerance(DType::F16, k),
            DType::W8a16 => 2e-2,
            DType::W4a16 => 0.2,
            other => default_tolerance(other, k),
        }
    }
}

#[cfg(test)]
mod tests;
