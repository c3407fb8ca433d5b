//! `op_overhead`, `op_overhead_block` and `op_overhead_poll`: what the
//! host adds around one operator's device time.

use std::sync::atomic::AtomicBool;
use std::time::Instant;

use hetero_plan::{GemmShape, MicrobenchKind, OperandOrder, RunParams};

use super::micro::{bench_spec, check_cancel, check_product, enough_samples, warm_up};
use crate::protocol::bench_name;
use crate::{Backend, Error, Gemm, verify};

/// `op_overhead`: what the host adds around the device-timed part of one
/// operator, through the backend's own launch path (a CUDA graph, a queued
/// kernel). A `1×1024×1024` GEMM in `transposed` order (the processor's 16-bit
/// type where it has one) is written once, then submitted and waited for
/// round after round: by a blocking wait (`op_overhead_block`), by polling
/// the host flag (`op_overhead_poll`, processors with one), or by both
/// alternately (`op_overhead`, both waits in one row). Each sample is the
/// host clock from `submit` to the wait's return less that run's
/// device time: the launch before the device timer starts, the notice
/// after it ends and the calls between. This is what runtime-min pays per
/// operator beyond the device time and the staged copies, where
/// `submit_empty` and the sync benchmarks each time a whole round trip of
/// another (directly launched, empty) kernel. The product of the last
/// round is checked against the f64 reference.
pub(super) fn op_overhead(
    b: &mut dyn Backend,
    kind: MicrobenchKind,
    run: &RunParams,
    cancel: &AtomicBool,
) -> Result<(Vec<f64>, String), Error> {
    let proc = b.processor().clone();
    let name = bench_name(kind);
    let no_timer = || {
        Error::unsupported(
            &proc.id,
            format!("{name} (the processor has no device timer)"),
        )
    };
    if !proc.capabilities.device_timer {
        return Err(no_timer());
    }
    let flag = proc.capabilities.host_flag;
    // Whether round `i` polls: every one, every other one, or none.
    let (polls, waits): (fn(usize) -> bool, &str) = match kind {
        MicrobenchKind::OpOverheadPoll if !flag => {
            return Err(Error::unsupported(
                &proc.id,
                format!("{name} (the processor has no host flag to poll)"),
            ));
        }
        MicrobenchKind::OpOverheadPoll => (|_| true, "a polling"),
        MicrobenchKind::OpOverhead if flag => {
            (|i| i % 2 == 1, "a blocking or a polling (alternately)")
        }
        _ => (|_| false, "a blocking"),
    };
    let shape = GemmShape::new(1, 1024, 1024).expect("non-zero");
    let spec = bench_spec(&proc, shape, OperandOrder::Transposed)?;
    let (a, w) = verify::inputs(&shape, 0);
    let mut g = b.prepare(&spec, &w)?;
    g.write_input(&a)?;
    let mut i = 0usize;
    let mut round = |g: &mut Box<dyn Gemm>| -> Result<f64, Error> {
        let mode = if polls(i) {
            crate::SyncMode::Poll { predicted_us: 0.0 }
        } else {
            crate::SyncMode::Block
        };
        i += 1;
        let t = Instant::now();
        g.submit()?;
        let timed = g.wait(mode)?;
        let host = t.elapsed().as_secs_f64() * 1e6;
        Ok(host - timed.device_us.ok_or_else(no_timer)?)
    };
    warm_up(run, proc.simulated, cancel, || round(&mut g).map(|_| ()))?;
    let mut samples = Vec::new();
    while !enough_samples(&samples, run, proc.simulated) {
        check_cancel(cancel, run)?;
        samples.push(round(&mut g)?);
    }
    let mut c = vec![0f32; shape.n.get() as usize];
    g.read_output(&mut c)?;
    check_product(b, &spec, &a, &w, &c, &name)?;
    let note = format!(
        "submit, then {waits} wait, of a {} {} {} GEMM, less each run's device time",
        spec.shape, spec.dtype, spec.order,
    );
    Ok((samples, note))
}
