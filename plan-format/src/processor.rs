use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::DType;

/// The broad class of a processor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ProcessorKind {
    /// A cluster of CPU cores.
    Cpu,
    /// A GPU, integrated or discrete.
    Gpu,
    /// A neural processing unit (static graphs, weight-stationary arrays).
    Npu,
}

/// The API a backend drives the processor through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ProcessorApi {
    /// Host threads running the `gemm` crate.
    Cpu,
    /// OpenCL (Adreno, Mali, NVIDIA, PoCL).
    Opencl,
    /// CUDA with cuBLAS.
    Cuda,
    /// Qualcomm QNN (HTP).
    Qnn,
    /// The NPU simulator of this project: a timing model, not a processor.
    Sim,
}

/// Where the times a processor reports come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Timing {
    /// Measured on the processor itself.
    #[default]
    Real,
    /// Measured on an emulator of the processor (results real, times not the
    /// processor's: QNN HTP on x86).
    Emulated,
    /// Computed by a timing model (the NPU simulator).
    Simulated,
}

/// What a processor can do, as far as the solver and runtime care.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct Capabilities {
    /// Element types it runs GEMMs in.
    pub dtypes: Vec<DType>,
    /// It runs only prepared static graphs (an NPU): every new shape costs a
    /// graph prepare.
    #[serde(default)]
    pub static_graphs: bool,
    /// Host and processor share memory, so handing a buffer over costs no copy.
    #[serde(default)]
    pub unified_memory: bool,
    /// It has device-side timing events.
    #[serde(default)]
    pub device_timer: bool,
    /// It can write a completion flag into host-visible memory that the host
    /// can poll (fast synchronisation).
    #[serde(default)]
    pub host_flag: bool,
    /// Both operand orders of a GEMM (`aw` and `transposed`) run as one kernel
    /// and take one time: the backend computes either order in whichever
    /// form is faster (cuBLAS with the row and form search). The profiler
    /// then measures one order of each shape and spends the rows saved on
    /// more shapes; the predictor answers both orders from it. Left out of
    /// the file when false, so that files written before it existed keep
    /// their fingerprints.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub order_free: bool,
    /// The native tile edge, where known (the stage size of an NPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tile: Option<u32>,
    /// Compute units, cores or threads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_units: Option<u32>,
    /// Device memory in bytes, where it has its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// GEMM inputs and outputs of at most this many f32 bytes cross inside
    /// the launch: `write_input` and `read_output` copy them on the host
    /// into and out of the processor's own host buffers, which the GEMM's
    /// kernels read and write over the bus between the device timer's
    /// events, so that a small
    /// operator costs one round trip to the device instead of three (the
    /// CUDA backend). Their staged cost is fitted apart from the larger
    /// sizes' ([`Overheads::stage_small`](crate::Overheads)). Absent where
    /// every copy is its own round trip.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_copy_max_bytes: Option<u64>,
    /// The runtime runs a decoder layer's non-GEMM operators (attention,
    /// norms, activations) on this processor, so a plan may place them
    /// there. Left out of the file when false (every processor today: they
    /// run on the host CPU).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub non_gemm: bool,
    /// Free-form extensions reported by the API (`cl_khr_fp16`, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<String>,
}

/// One processor of a device, as the agent's `probe` reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Processor {
    /// Stable id used everywhere else: `cpu:0`, `opencl:0:0`, `cuda:0`,
    /// `qnn:htp`, `npu-sim`.
    pub id: String,
    /// cpu, gpu or npu.
    pub kind: ProcessorKind,
    /// The API that drives it.
    pub api: ProcessorApi,
    /// Human-readable name (`NVIDIA H200`, `cores 0-3 @ 2.4 GHz`).
    pub name: String,
    /// Driver or library version, where known.
    #[serde(default)]
    pub driver: String,
    /// What it can do.
    pub capabilities: Capabilities,
    /// True when its times come from a timing model; every row it produces
    /// says so too.
    pub simulated: bool,
    /// True when its times come from an emulator running on another processor.
    #[serde(default)]
    pub emulated: bool,
}

impl Processor {
    /// The element type a profile measures this processor in by default,
    /// and its microbenchmarks' GEMMs with it: f16 on a processor that is
    /// not a CPU and has it, else f32, else its first.
    pub fn default_dtype(&self) -> Option<DType> {
        let caps = &self.capabilities.dtypes;
        if self.kind != ProcessorKind::Cpu && caps.contains(&DType::F16) {
            Some(DType::F16)
        } else if caps.contains(&DType::F32) {
            Some(DType::F32)
        } else {
            caps.first().copied()
        }
    }

    /// Where this processor's times come from.
    pub fn timing(&self) -> Timing {
        if self.simulated {
            Timing::Simulated
        } else if self.emulated {
            Timing::Emulated
        } else {
            Timing::Real
        }
    }
}
