//! The bandwidths the floor of a decode step needs, measured by the
//! agent's own benchmarks through the backends of this machine:
//!
//! - the CPU's memory read bandwidth over its core group: `bench-gemv`'s
//!   plain streaming read of copies of the weights in turn (past the
//!   last-level cache), and its one-row product on the same bytes;
//! - the host-to-device copy from page-locked memory (`copy_h2d`);
//! - both at once (`bandwidth_concurrent`, each side timed while the other
//!   streams): the CPU's GEMV beside the GPU's GEMV that copies its
//!   weights from page-locked host memory at every run, and the reverse;
//! - the GPU reading its own memory: a one-row GEMM of resident weights
//!   larger than its cache, the cache evicted before every timed run.

use anyhow::{Context, bail};
use hetero_agent::sweep::Sweeper;
use hetero_agent::{GemmSpec, OpenOptions, Registry};
use hetero_plan::{
    DType, GemmShape, MicrobenchKind, MicrobenchRequest, OperandOrder, RowStatus, RunParams,
    SweepCase, WeightMode,
};
use serde::Serialize;

/// Bytes of the copy that times the host-to-device bandwidth.
const COPY_BYTES: u64 = 256 << 20;
/// The one-row GEMM of the CPU's streaming read: 32 MiB of f16 weights.
const CPU_SIDE: u32 = 4096;
/// The one-row GEMM of the GPU's own memory: 128 MiB of f16 weights, past
/// an H100's 50 MiB L2.
const GPU_SIDE: u32 = 8192;
/// Timed runs of each benchmark.
const REPS: u32 = 10;

/// What the benchmarks measured, GB/s (10⁹ bytes a second).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bandwidths {
    /// The CPU processor and its cores.
    pub cpu: String,
    pub cpu_cores: String,
    /// The GPU processor.
    pub gpu: String,
    /// The CPU's plain streaming read of its group's memory.
    pub cpu_stream_gbps: f64,
    /// The CPU's one-row product on the same bytes, in the same run.
    pub cpu_gemv_gbps: f64,
    /// Host to device from page-locked memory.
    pub h2d_gbps: f64,
    /// The CPU's GEMV while the GPU streams weights from host memory.
    pub cpu_beside_gpu_gbps: f64,
    /// The GPU's weight-copying GEMV while the CPU streams its own.
    pub gpu_beside_cpu_gbps: f64,
    /// The two side by side: what the floor reads host memory at.
    pub host_gbps: f64,
    /// The GPU reading resident weights.
    pub gpu_memory_gbps: f64,
    /// What ran, in the benchmarks' own words.
    pub notes: Vec<String>,
}

/// Measures every bandwidth the floor needs on `cpu` and `gpu`, opened
/// with `open`, in weights of `dtype`.
pub fn measure(
    cpu: &str,
    gpu: &str,
    open: &OpenOptions,
    dtype: DType,
) -> anyhow::Result<Bandwidths> {
    let mut notes = Vec::new();
    let (stream, gemv, cores) = cpu_stream(cpu, open, dtype, &mut notes)?;
    let reg = Registry::open(open, Some(&[cpu.to_string(), gpu.to_string()]));
    for id in [cpu, gpu] {
        if !reg.backends.iter().any(|b| b.processor().id == id) {
            bail!("`{id}` did not open on this machine for the bandwidth benchmarks");
        }
    }
    let mut sw = Sweeper::from_registry(reg);
    let run = RunParams {
        warmups: 1,
        repetitions: REPS,
        timeout_ms: 120_000,
        ..RunParams::default()
    };
    let mut bench = |processor: &str, kind: MicrobenchKind, bytes, peer: Option<&str>| {
        let req = MicrobenchRequest {
            id: format!("{}-{processor}", hetero_agent::protocol::bench_name(kind)),
            processor: processor.into(),
            bench: kind,
            bytes,
            peer: peer.map(String::from),
            shape: None,
        };
        let line = sw.run_microbench(&req, &run);
        if let Some(n) = &line.note {
            notes.push(format!("{}: {n}", req.id));
        }
        match (line.row.status, line.row.gbps) {
            (RowStatus::Ok, Some(g)) => Ok(g),
            (s, _) => Err(anyhow::anyhow!(
                "{} on {processor}: {s:?}: {}",
                req.id,
                line.row.message.unwrap_or_default()
            )),
        }
    };
    // As `hetero profile` asks for them: GB/s of this many bytes a run.
    let streamed = Some(hetero_agent::sweep::DEFAULT_STREAM_BYTES);
    let h2d = bench(gpu, MicrobenchKind::CopyH2d, Some(COPY_BYTES), None)?;
    let gpu_beside = bench(
        gpu,
        MicrobenchKind::BandwidthConcurrent,
        streamed,
        Some(cpu),
    )?;
    let cpu_beside = bench(
        cpu,
        MicrobenchKind::BandwidthConcurrent,
        streamed,
        Some(gpu),
    )?;
    let gpu_memory = gpu_memory(&mut sw, gpu, dtype, &run)?;
    Ok(Bandwidths {
        cpu: cpu.into(),
        cpu_cores: cores,
        gpu: gpu.into(),
        cpu_stream_gbps: stream,
        cpu_gemv_gbps: gemv,
        h2d_gbps: h2d,
        cpu_beside_gpu_gbps: cpu_beside,
        gpu_beside_cpu_gbps: gpu_beside,
        host_gbps: cpu_beside + gpu_beside,
        gpu_memory_gbps: gpu_memory,
        notes,
    })
}

/// `bench-gemv` on `cpu`'s core group: (stream GB/s, GEMV GB/s, cores).
fn cpu_stream(
    cpu: &str,
    open: &OpenOptions,
    dtype: DType,
    notes: &mut Vec<String>,
) -> anyhow::Result<(f64, f64, String)> {
    use hetero_agent::cpu::{gemv, open_groups, topology};
    let groups = open_groups(open).context("opening the CPU's core groups")?;
    let Some(backend) =
        (cpu.strip_prefix("cpu:")).and_then(|i| groups.get(i.parse::<usize>().ok()?))
    else {
        bail!("`{cpu}` is not a CPU core group of this machine");
    };
    let spec = GemmSpec {
        shape: GemmShape::new(1, CPU_SIDE, CPU_SIDE).expect("non-zero"),
        // bench-gemv reads f32, f16 and bf16 weights.
        dtype: if dtype == DType::F32 {
            dtype
        } else {
            DType::F16
        },
        order: OperandOrder::Transposed,
        weights: WeightMode::Static,
    };
    let r = gemv::bench::run(backend, &spec, REPS, false)
        .with_context(|| format!("the streaming read of {cpu}"))?;
    notes.push(format!("bench-gemv on {cpu}: {}", r.summary(&spec)));
    let cores = topology::format_list(backend.cores());
    Ok((r.gbps(&r.stream), r.gbps(&r.gemv), cores))
}

/// GB/s of the GPU's one-row GEMM over resident weights, its cache evicted
/// before every timed run.
fn gpu_memory(sw: &mut Sweeper, gpu: &str, dtype: DType, run: &RunParams) -> anyhow::Result<f64> {
    let shape = GemmShape::new(1, GPU_SIDE, GPU_SIDE).expect("non-zero");
    let case = SweepCase {
        id: format!("gemv-resident-{gpu}"),
        processor: gpu.into(),
        shape,
        dtype,
        order: OperandOrder::Transposed,
        weights: WeightMode::Static,
        run: None,
    };
    let cold = RunParams {
        cold_cache: true,
        ..*run
    };
    let row = sw.run_case(&case, &cold);
    match (row.status, row.median_us) {
        (RowStatus::Ok, Some(us)) => {
            let bytes = GPU_SIDE as f64 * GPU_SIDE as f64 * dtype.weight_bits() as f64 / 8.0;
            Ok(bytes / us / 1e3)
        }
        (s, _) => bail!(
            "{} on {gpu}: {s:?}: {}",
            case.id,
            row.message.unwrap_or_default()
        ),
    }
}
