//! `stage_in`, `stage_out` and `stage_out_aw`: a prepared GEMM's staged
//! copies, timed as the runtime drives them.

use std::sync::atomic::AtomicBool;
use std::time::Instant;

use hetero_plan::{
    GemmShape, MicrobenchKind, MicrobenchRequest, OperandOrder, Processor, RunParams,
};

use super::micro::{bench_spec, check_cancel, check_product, enough_samples, warm_up};
use crate::protocol::bench_name;
use crate::{Backend, Error, HostBuf, verify};

/// `stage_in` / `stage_out` / `stage_out_aw`: one prepared GEMM's
/// `write_input` or `read_output` of `bytes` of f32 values, from or into
/// host memory of the kind the runtime's pool uses
/// ([`Backend::alloc_host`], else the heap), timed by the host clock around
/// the call alone. The input side is `R×1024×64` and the output side
/// `R×64×1024`, with `R = bytes/4096` rows (at least one), in `transposed`
/// order (`aw` for `stage_out_aw`, whose output a backend may transpose on
/// the way out; CUDA's is transposed behind the kernel instead) and in
/// the processor's 16-bit type where it has one, like the GPU sweeps. Each
/// sample comes from one round of the runtime's sequence (`write_input`,
/// `execute`, `read_output`) with only the staged call timed, for as many
/// rounds as [`enough_samples`] asks. The product
/// of the last round is checked against the f64 reference, so a wrong data
/// path is never recorded. Returns the samples and a note saying which
/// memory was used.
pub(super) fn stage(
    b: &mut dyn Backend,
    req: &MicrobenchRequest,
    run: &RunParams,
    cancel: &AtomicBool,
) -> Result<(Vec<f64>, String), Error> {
    let proc = b.processor().clone();
    let bytes = needs_bytes(req)?;
    const ROW: u32 = 1024;
    const OTHER: u32 = 64;
    let rows = ((bytes / 4 / ROW as u64).max(1)).min(u32::MAX as u64) as u32;
    let input = req.bench == MicrobenchKind::StageIn;
    let shape = if input {
        GemmShape::new(rows, ROW, OTHER)
    } else {
        GemmShape::new(rows, OTHER, ROW)
    }
    .expect("non-zero");
    let order = if req.bench == MicrobenchKind::StageOutAw {
        OperandOrder::Aw
    } else {
        OperandOrder::Transposed
    };
    let spec = bench_spec(&proc, shape, order)?;
    let (a, w) = verify::inputs(&shape, 0);
    let mut g = b.prepare(&spec, &w)?;
    // The staged side lives in the memory the runtime's pool would use; the
    // other side is ordinary memory and untimed.
    let out_len = rows as usize * shape.n.get() as usize;
    let staged_len = if input { a.len() } else { out_len };
    let staged = HostBuf::for_backend(b, staged_len);
    let memory = memory_note(&proc, &staged);
    let note = format!(
        "{} of {staged_len} f32 values ({} bytes) through a {} {} {} GEMM, {memory}",
        if input { "write_input" } else { "read_output" },
        staged_len * 4,
        spec.shape,
        spec.dtype,
        spec.order
    );
    let (mut src, mut dst) = if input {
        (staged, HostBuf::heap(out_len))
    } else {
        (HostBuf::heap(a.len()), staged)
    };
    src.copy_from_slice(&a);
    // Each round is the runtime's sequence, write_input → execute →
    // read_output; only the staged call is timed. Back-to-back copies
    // alone were seen 2-7 % faster than the same copies between GEMMs.
    warm_up(run, proc.simulated, cancel, || {
        g.write_input(&src)?;
        g.execute()?;
        g.read_output(&mut dst)
    })?;
    // With cold caches, each round starts from them, as the sweep's GEMM
    // runs do, on unified memory only: there the copies go through the
    // host caches the eviction empties, and a runtime that runs a layer's
    // other operators in between finds its buffers out of them (a 64-token
    // prefill's copies ran 2-4x the warm rounds' line on a 2-core x86-64
    // machine).
    // An eviction takes milliseconds, so cold rounds stop at the run's
    // repetitions.
    let cold = run.cold_cache && proc.capabilities.unified_memory;
    let done = |s: &[f64]| {
        if cold {
            s.len() >= run.repetitions.max(1) as usize
        } else {
            enough_samples(s, run, proc.simulated)
        }
    };
    let mut samples = Vec::new();
    while !done(&samples) {
        check_cancel(cancel, run)?;
        if cold {
            g.evict_caches()?;
        }
        let t = Instant::now();
        g.write_input(&src)?;
        let t_in = t.elapsed();
        g.execute()?;
        let t = Instant::now();
        g.read_output(&mut dst)?;
        let t_out = t.elapsed();
        samples.push(if input { t_in } else { t_out }.as_secs_f64() * 1e6);
    }
    check_product(b, &spec, &a, &w, &dst, "staged")?;
    Ok((samples, note))
}

/// `bytes` of a microbenchmark that needs it.
fn needs_bytes(req: &MicrobenchRequest) -> Result<u64, Error> {
    req.bytes.ok_or_else(|| Error::BadRequest {
        field: "bytes".into(),
        message: format!("{} needs `bytes`", bench_name(req.bench)),
    })
}

/// Which host memory a microbenchmark's buffer is, for its note.
fn memory_note(proc: &Processor, buf: &HostBuf) -> String {
    if buf.is_backend_memory() {
        format!("{}: host memory of the processor (alloc_host)", proc.id)
    } else {
        "heap memory".to_string()
    }
}
