//! The memory-bound GEMV that the bandwidth benchmarks time, and that
//! [`launch_overhead_after_cpu`](super::launch_overhead_after_cpu) runs on its peer: copies
//! run in turn past the host's caches ([`BackgroundStream`]).

use hetero_plan::{DType, GemmShape, GemvStream, OperandOrder, Processor, WeightMode};

#[cfg(doc)]
use super::case::MAX_ROTATION_COPIES;
use super::case::{rotation_copies, wrong};
use super::micro::preferred_dtype;
use crate::{Backend, Error, Gemm, GemmSpec, verify};

/// The memory-bound GEMV of the bandwidth benchmarks: `1×K×N` with weights
/// of about `bytes`, in `transposed` order, the one decode plans run GEMVs in
/// (each output a dot product over a contiguous row of `Wᵀ`). On an H100
/// host's 15 cores `aw` streamed 49.5 GB/s and the plan's `transposed` GEMVs
/// about 90: beside the GPU's weight copies, the slower one left memory
/// room that the runtime's did not.
pub(super) fn gemv_spec(proc: &Processor, bytes: u64) -> Result<GemmSpec, Error> {
    let dtype = preferred_dtype(proc, &[DType::F32, DType::F16])?;
    let elem = (dtype.weight_bits() as u64).div_ceil(8);
    let side = (((bytes / elem) as f64).sqrt() as u32 / 64 * 64).max(64);
    Ok(GemmSpec {
        shape: GemmShape::new(1, side, side).expect("non-zero"),
        dtype,
        order: OperandOrder::Transposed,
        weights: WeightMode::Static,
    })
}

/// What a bandwidth row's note says of a GEMV that copies its weights from
/// page-locked host memory at every run. The row says it in
/// [`GemvStream::host_weights`] too; `hetero fit` looks for these words
/// only in the notes of older rows, which lack that field.
pub const HOST_WEIGHTS_NOTE: &str =
    "each run copying its weights from page-locked host memory first";

/// The weight bytes one run of the bandwidth GEMV `spec` reads.
pub(super) fn gemv_weight_bytes(spec: &GemmSpec) -> u64 {
    spec.shape.k.get() as u64
        * spec.shape.n.get() as u64
        * (spec.dtype.weight_bits() as u64).div_ceil(8)
}

/// Whether `p`'s GEMVs read host memory themselves: a CPU, or a processor
/// on unified memory.
fn reads_host_memory(p: &Processor) -> bool {
    p.kind == hetero_plan::ProcessorKind::Cpu || p.capabilities.unified_memory
}

/// A GPU with memory of its own.
fn discrete_gpu(p: &Processor) -> bool {
    p.kind == hetero_plan::ProcessorKind::Gpu && !p.capabilities.unified_memory && !p.simulated
}

/// How many copies of a bandwidth GEMV of `weight_bytes` run in turn:
/// enough for `target` bytes between two runs of one ([`rotation_copies`])
/// where `rotate`, else one, as for weights too small to fill the target
/// in [`MAX_ROTATION_COPIES`] copies.
pub(super) fn stream_copies(rotate: bool, weight_bytes: u64, target: u64) -> usize {
    if rotate {
        rotation_copies(weight_bytes, weight_bytes, target).unwrap_or(1)
    } else {
        1
    }
}

/// Copies of a bandwidth GEMV, run in turn so that each finds its weights
/// gone from the host's caches, every one checked against the reference
/// once before any run is timed.
pub(super) struct BackgroundStream {
    pub(super) copies: Vec<Box<dyn Gemm>>,
    next: usize,
    /// Whether the copies keep their weights in page-locked host memory
    /// and copy them in at every run.
    copies_host_weights: bool,
}

impl BackgroundStream {
    /// The GEMV of `spec` on `b`. A processor on host memory runs copies of
    /// it whose weights add up to [`crate::evict::host_buffer_bytes`], more
    /// than the last-level cache: a server's cache (300 MiB on an H100
    /// host) holds one 64 MiB GEMV's weights whole, and its benchmark then
    /// measured the cache, not memory, and no contention beside a GPU's
    /// weight copies that slowed the runtime's CPU parts by 12–25 %. A
    /// discrete GPU keeps the weights in page-locked host memory and copies
    /// them in at every run ([`Gemm::host_weights`]), in as many copies:
    /// that copy is the
    /// traffic it puts on, and meets on, the memory that processors on the
    /// host read (offload's CG rows). A GPU without host weights streams
    /// its own memory, one copy.
    pub(super) fn new(b: &mut dyn Backend, spec: &GemmSpec) -> Result<Self, Error> {
        let proc = b.processor().clone();
        let (a, w) = verify::inputs(&spec.shape, 0);
        let host = discrete_gpu(&proc);
        let rotate = !proc.simulated && (reads_host_memory(&proc) || host);
        let wanted = stream_copies(
            rotate,
            gemv_weight_bytes(spec),
            crate::evict::host_buffer_bytes() as u64,
        );
        let mut out = BackgroundStream {
            copies: Vec::with_capacity(wanted),
            next: 0,
            copies_host_weights: false,
        };
        let tol = b.tolerance(spec.dtype, spec.shape.k.get());
        let mut c = vec![0f32; spec.shape.n.get() as usize];
        for _ in 0..wanted {
            let mut g = b.prepare(spec, &w)?;
            // A GPU that cannot keep them on the host says so on the first
            // copy, and the loop ends below.
            if host {
                match g.host_weights(&w) {
                    Ok(()) => out.copies_host_weights = true,
                    Err(Error::Unsupported { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            g.write_input(&a)?;
            g.execute()?;
            g.read_output(&mut c)?;
            let r = verify::check(&spec.shape, &a, &w, &c);
            if !r.passes(tol) {
                return Err(Error::backend(
                    &proc.id,
                    format!(
                        "the bandwidth GEMV gave a wrong result: {}",
                        wrong(&r, tol, "first run")
                    ),
                ));
            }
            out.copies.push(g);
            // Its own memory: one copy is the stream.
            if host && !out.copies_host_weights {
                break;
            }
        }
        Ok(out)
    }

    /// Runs the next copy.
    pub(super) fn run(&mut self) -> Result<crate::Timed, Error> {
        let i = self.next % self.copies.len();
        self.next += 1;
        self.copies[i].execute()
    }

    /// How the weights are read, for the row's note.
    pub(super) fn describe(&self, weight_bytes: u64) -> String {
        let n = self.copies.len() as u64;
        let mut s = if n > 1 {
            format!(
                "{n} copies in turn ({} MiB of weights)",
                (n * weight_bytes) >> 20
            )
        } else {
            "one copy".to_string()
        };
        if self.copies_host_weights {
            s.push_str(", ");
            s.push_str(HOST_WEIGHTS_NOTE);
        }
        s
    }

    /// How the weights are read, for the row's fields; `runs` while the
    /// other side was timed, for a peer.
    pub(super) fn facts(&self, runs: Option<u64>) -> GemvStream {
        GemvStream {
            copies: self.copies.len() as u32,
            host_weights: self.copies_host_weights,
            runs,
        }
    }
}
