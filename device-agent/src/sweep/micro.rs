//! A microbenchmark in the worker thread: [`microbench`] dispatches it to
//! its module or to the backend's own, and the rules they share (samples,
//! warm-up, the GEMM they run, the product check) are here.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hetero_plan::{
    DType, GemmShape, MicrobenchKind, MicrobenchRequest, OperandOrder, Processor, ProcessorApi,
    RowStatus, RunParams, Stats, WeightMode,
};

use super::bandwidth::bandwidth;
use super::base_line;
use super::graph_prepare::graph_prepare;
use super::launch_overhead_after_cpu::launch_overhead_after_cpu;
use super::op_overhead::op_overhead;
use super::stage::stage;
use crate::protocol::{MicrobenchLine, bench_name};
use crate::{Backend, Error, GemmSpec, verify};

/// Runs a microbenchmark (in the worker thread). `backends[1]` is the peer
/// of a concurrent-bandwidth run.
pub(super) fn microbench(
    backends: &mut [Box<dyn Backend>],
    req: &MicrobenchRequest,
    run: &RunParams,
    cancel: &AtomicBool,
) -> MicrobenchLine {
    let proc = backends[0].processor().clone();
    let mut line = base_line(req, proc.timing());
    let result = match req.bench {
        MicrobenchKind::GraphPrepare => graph_prepare(&mut *backends[0], req, run, cancel),
        MicrobenchKind::StageIn | MicrobenchKind::StageOut | MicrobenchKind::StageOutAw => {
            stage(&mut *backends[0], req, run, cancel).map(|(s, note)| {
                line.note = Some(note);
                s
            })
        }
        MicrobenchKind::Retired => Err(Error::unsupported(
            &proc.id,
            format!("{} (no longer measured)", bench_name(req.bench)),
        )),
        MicrobenchKind::OpOverhead
        | MicrobenchKind::OpOverheadBlock
        | MicrobenchKind::OpOverheadPoll => op_overhead(&mut *backends[0], req.bench, run, cancel)
            .map(|(s, note)| {
                line.note = Some(note);
                s
            }),
        MicrobenchKind::LaunchOverheadAfterCpu => launch_overhead_after_cpu(backends, run, cancel)
            .map(|(s, note)| {
                line.note = Some(note);
                s
            }),
        MicrobenchKind::BandwidthAlone | MicrobenchKind::BandwidthConcurrent => {
            bandwidth(backends, req, run, cancel).map(|b| {
                line.note = Some(b.note);
                line.row.stream = Some(b.stream);
                line.row.peer_stream = b.peer_stream;
                b.samples
            })
        }
        _ => backend_samples(&mut *backends[0], req, run, cancel),
    };
    match result {
        Ok(samples) => match Stats::from_samples(&samples) {
            Some(stats) => {
                line.row.status = RowStatus::Ok;
                let bytes = match req.bench {
                    k if k.is_transfer() => req.bytes,
                    MicrobenchKind::BandwidthAlone | MicrobenchKind::BandwidthConcurrent => {
                        line.row.bytes
                    }
                    _ => None,
                };
                if let Some(b) = bytes {
                    line.row.gbps = Some(b as f64 / (stats.median_us * 1e3));
                }
                line.row.stats = Some(stats);
            }
            None => {
                line.row.message = Some("no samples".into());
            }
        },
        Err(e) => {
            line.row.status = match e {
                Error::Unsupported { .. } => RowStatus::Unsupported,
                Error::Timeout { .. } => RowStatus::Timeout,
                _ => RowStatus::Error,
            };
            line.row.message = Some(e.to_string());
        }
    }
    if line.note.is_none()
        && proc.api == ProcessorApi::Cpu
        && matches!(req.bench, MicrobenchKind::CopyH2d | MicrobenchKind::CopyD2h)
    {
        line.note = Some(
            "cpu: memcpy between two host buffers on the group's cores (a CPU has no device memory)"
                .into(),
        );
    }
    line.row.conditions = backends[0].conditions();
    line
}

pub(super) fn check_cancel(cancel: &AtomicBool, run: &RunParams) -> Result<(), Error> {
    if cancel.load(Ordering::Relaxed) {
        Err(Error::Timeout { ms: run.timeout_ms })
    } else {
        Ok(())
    }
}

/// The untimed runs before a timed series: `f` at least `run.warmups`
/// times, then again until `run.warmup_ms` has passed since the first call
/// (count only on a simulated processor, whose times do not depend on a
/// clock). Stops with a timeout when the case is cancelled.
pub(super) fn warm_up(
    run: &RunParams,
    simulated: bool,
    cancel: &AtomicBool,
    mut f: impl FnMut() -> Result<(), Error>,
) -> Result<(), Error> {
    let least = Duration::from_millis(if simulated { 0 } else { run.warmup_ms });
    let start = Instant::now();
    let mut runs = 0u32;
    while runs < run.warmups || start.elapsed() < least {
        check_cancel(cancel, run)?;
        f()?;
        runs += 1;
    }
    Ok(())
}

/// The most samples a short microbenchmark takes. A microbenchmark's
/// samples are enough once there are `repetitions` of them and either this
/// many or [`MICRO_MIN_US`] of timed work (count only on a simulated
/// processor). A fixed cost of 10-20 µs scatters by a cv of 5-13 % per
/// sample on a GPU host (an H100's staged 4 KiB output: 14.6-22.1 µs in 7
/// samples), and the solver charges it to every operator of a plan. A
/// median of 7 can move it by several µs; 64 samples of a 20 µs benchmark
/// cost about 1.3 ms.
pub const MICRO_MAX_SAMPLES: usize = 64;

/// A short microbenchmark takes samples until they add up to this much
/// timed work, µs, or it has [`MICRO_MAX_SAMPLES`].
pub const MICRO_MIN_US: f64 = 20_000.0;

/// The rule of [`MICRO_MAX_SAMPLES`] and [`MICRO_MIN_US`].
pub(super) fn enough_samples(samples: &[f64], run: &RunParams, simulated: bool) -> bool {
    let want = run.repetitions.max(1) as usize;
    samples.len() >= want
        && (simulated
            || samples.len() >= MICRO_MAX_SAMPLES
            || samples.iter().sum::<f64>() >= MICRO_MIN_US)
}

/// Calls the backend's own microbenchmark until it has enough samples
/// ([`enough_samples`]); a call that returns several keeps them all.
fn backend_samples(
    b: &mut dyn Backend,
    req: &MicrobenchRequest,
    run: &RunParams,
    cancel: &AtomicBool,
) -> Result<Vec<f64>, Error> {
    let simulated = b.processor().simulated;
    warm_up(run, simulated, cancel, || b.microbench(req).map(drop))?;
    let mut samples = Vec::new();
    while !enough_samples(&samples, run, simulated) {
        check_cancel(cancel, run)?;
        let got = b.microbench(req)?;
        if got.is_empty() {
            return Err(Error::backend(
                &req.processor,
                "microbenchmark returned no sample",
            ));
        }
        samples.extend(got);
    }
    Ok(samples)
}

pub(super) fn preferred_dtype(proc: &Processor, order: &[DType]) -> Result<DType, Error> {
    order
        .iter()
        .copied()
        .find(|d| proc.capabilities.dtypes.contains(d))
        .or_else(|| proc.capabilities.dtypes.first().copied())
        .ok_or_else(|| Error::unsupported(&proc.id, "any dtype"))
}

/// The GEMM a microbenchmark runs on `proc`: static weights, in the type
/// a profile measures it in by default ([`Processor::default_dtype`]: f32
/// on a CPU, the cpu backend or an OpenCL CPU device such as PoCL, else
/// f16 where the processor has it). The staged copies convert to that
/// type, so it must be the one the plan runs.
pub(super) fn bench_spec(
    proc: &Processor,
    shape: GemmShape,
    order: OperandOrder,
) -> Result<GemmSpec, Error> {
    Ok(GemmSpec {
        shape,
        dtype: proc
            .default_dtype()
            .ok_or_else(|| Error::unsupported(&proc.id, "any dtype"))?,
        order,
        weights: WeightMode::Static,
    })
}

/// Checks a microbenchmark GEMM's product `c` against the f64 reference of
/// `a`·`w`, so that a wrong data path is never recorded; `what` names the
/// GEMM in the error.
pub(super) fn check_product(
    b: &dyn Backend,
    spec: &GemmSpec,
    a: &[f32],
    w: &[f32],
    c: &[f32],
    what: &str,
) -> Result<(), Error> {
    let check = verify::check(&spec.shape, a, w, c);
    let tol = b.tolerance(spec.dtype, spec.shape.k.get());
    if check.passes(tol) {
        return Ok(());
    }
    Err(Error::backend(
        &b.processor().id,
        format!(
            "the {what} GEMM's product is wrong: relative error {:.2e} at {:?} (bound {tol:.1e})",
            check.rel_err, check.worst
        ),
    ))
}
