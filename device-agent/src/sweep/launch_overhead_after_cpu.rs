//! `launch_overhead_after_cpu`: the operator overhead of [`op_overhead`] as an
//! offload plan meets it, after a run of a processor on host memory.
//!
//! [`op_overhead`]: super::op_overhead

use std::sync::atomic::AtomicBool;
use std::time::Instant;

use hetero_plan::{GemmShape, MicrobenchKind, OperandOrder, RunParams, Stats};

use super::background_stream::{BackgroundStream, gemv_spec, gemv_weight_bytes};
use super::micro::{bench_spec, check_cancel, check_product, enough_samples, warm_up};
use crate::protocol::bench_name;
use crate::{Backend, Error, verify};

/// GEMMs in [`launch_overhead_after_cpu`]'s rotation, each with its own weights:
/// about as many as a decode step launches (a 1.5B model's 28 layers of 7
/// operators). Each launch finds its own state cold, as in the runtime,
/// where on a host with one H100 the GPU-alone operators cost 3–5 µs more
/// with every layer's GEMMs its own than with one layer's shared by all;
/// 16 in turn measured 0.9 µs more.
const AFTER_GEMMS: usize = 128;

/// How many of them run after each run of the peer (a layer's attention
/// operators follow an FFN step's CPU part).
const AFTER_EACH: usize = 4;

/// Weight bytes of the peer's GEMV: about an FFN step's CPU part of a
/// 1.5B model (11–27 MB at decode).
const AFTER_PEER_BYTES: u64 = 16 << 20;

/// `launch_overhead_after_cpu`: [`op_overhead`](super::op_overhead::op_overhead)
/// as an offload plan meets it. After each run of the peer's GEMV (copies
/// in turn past the last-level cache, as [`BackgroundStream`] runs them), [`AFTER_EACH`] of [`AFTER_GEMMS`]
/// `1×1024×1024` GEMMs, each with its own weights, are submitted and
/// waited for in turn, blocking and polling alternately. Each sample is the
/// host clock from `submit` to the wait's return less that GEMM's median
/// device time alone and warm (measured first): a launch slowed by cold
/// host state also stretches the device timer, which starts before the
/// work arrives. Every GEMM's product is checked before any run is timed.
pub(super) fn launch_overhead_after_cpu(
    backends: &mut [Box<dyn Backend>],
    run: &RunParams,
    cancel: &AtomicBool,
) -> Result<(Vec<f64>, String), Error> {
    let name = bench_name(MicrobenchKind::LaunchOverheadAfterCpu);
    let [b, peer, ..] = backends else {
        return Err(Error::BadRequest {
            field: "peer".into(),
            message: format!("{name} needs a `peer` processor"),
        });
    };
    let (b, peer) = (&mut **b, &mut **peer);
    let peer_id = peer.processor().id.clone();
    let proc = b.processor().clone();
    if !proc.capabilities.device_timer {
        return Err(Error::unsupported(
            &proc.id,
            format!("{name} (the processor has no device timer)"),
        ));
    }
    let shape = GemmShape::new(1, 1024, 1024).expect("non-zero");
    let spec = bench_spec(&proc, shape, OperandOrder::Transposed)?;
    let mut gemms = Vec::with_capacity(AFTER_GEMMS);
    let mut alone_us = Vec::with_capacity(AFTER_GEMMS);
    let mut c = vec![0f32; shape.n.get() as usize];
    for j in 0..AFTER_GEMMS {
        let (a, w) = verify::inputs(&shape, j as u64);
        let mut g = b.prepare(&spec, &w)?;
        g.write_input(&a)?;
        g.execute()?;
        g.read_output(&mut c)?;
        check_product(b, &spec, &a, &w, &c, &name)?;
        let mut dev = Vec::new();
        for _ in 0..run.warmups.max(1) + 5 {
            dev.push(g.execute()?.device_us.ok_or_else(|| {
                Error::unsupported(&proc.id, format!("{name} (no device time came back)"))
            })?);
        }
        alone_us.push(Stats::from_samples(&dev[dev.len() - 5..]).map_or(0.0, |s| s.median_us));
        gemms.push(g);
    }
    let peer_spec = gemv_spec(peer.processor(), AFTER_PEER_BYTES)?;
    let mut background = BackgroundStream::new(peer, &peer_spec)?;
    let flag = proc.capabilities.host_flag;
    let mut i = 0usize;
    let mut round = |samples: &mut Vec<f64>| -> Result<(), Error> {
        background.run()?;
        for _ in 0..AFTER_EACH {
            let j = i % AFTER_GEMMS;
            let mode = if flag && i % 2 == 1 {
                crate::SyncMode::Poll { predicted_us: 0.0 }
            } else {
                crate::SyncMode::Block
            };
            i += 1;
            let t = Instant::now();
            gemms[j].submit()?;
            gemms[j].wait(mode)?;
            samples.push(t.elapsed().as_secs_f64() * 1e6 - alone_us[j]);
        }
        Ok(())
    };
    let mut ignored = Vec::new();
    warm_up(run, proc.simulated, cancel, || round(&mut ignored))?;
    let mut samples = Vec::new();
    while !enough_samples(&samples, run, proc.simulated) {
        check_cancel(cancel, run)?;
        round(&mut samples)?;
    }
    let peer_how = background.describe(gemv_weight_bytes(&peer_spec));
    let (k, n) = (peer_spec.shape.k.get(), peer_spec.shape.n.get());
    // The last product too, after the timed runs.
    let last = (i + AFTER_GEMMS - 1) % AFTER_GEMMS;
    gemms[last].read_output(&mut c)?;
    let (a, w) = verify::inputs(&shape, last as u64);
    check_product(b, &spec, &a, &w, &c, &name)?;
    let waits = if flag {
        "a blocking or a polling (alternately)"
    } else {
        "a blocking"
    };
    let alone = Stats::from_samples(&alone_us).map_or(0.0, |s| s.median_us);
    Ok((
        samples,
        format!(
            "{AFTER_GEMMS} {} {} {} GEMMs in turn, {AFTER_EACH} after each run of peer `{}`'s GEMV 1x{k}x{n} {} ({peer_how}): submit, then {waits} wait, less the GEMM's device time alone ({alone:.1} µs median)",
            spec.shape, spec.dtype, spec.order, peer_id, peer_spec.dtype,
        ),
    ))
}
