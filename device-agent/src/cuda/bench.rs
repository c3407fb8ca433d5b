//! Microbenchmarks of a CUDA device. Every sample is µs of the host clock
//! unless said otherwise, after untimed warm-ups.
//!
//! | bench | what one sample is |
//! |---|---|
//! | `copy_h2d` | `cuMemcpyHtoDAsync` of `bytes` from page-locked memory, submit to `cuEventSynchronize` return |
//! | `copy_d2h` | the same, device to page-locked host memory |
//! | `submit_empty` | launch of an empty kernel on an idle stream to `cuStreamSynchronize` return |
//! | `submit_busy` | device time (events) from the end of a 50 µs busy kernel to the end of an empty kernel queued behind it: the cost of one more kernel when the queue never drains |
//! | `sync_block` | launch of an empty kernel and an event, to `cuEventSynchronize` return |
//! | `sync_poll` | launch of an empty kernel and a flag write, to the host seeing the flag |
//!
//! Copies are checked: the bytes that arrive are compared with those sent.

use std::time::Instant;

use cudarc::driver::{result, sys};
use hetero_plan::{MicrobenchKind, MicrobenchRequest};

use super::gemm::spin_until;
use super::mem::{DeviceBuf, MappedFlag, PinnedBuf};
use super::{At, Device};
use crate::{Error, Result};

/// Untimed runs before the timed ones, per call.
const WARMUPS: usize = 10;
/// Untimed copies before the timed ones, per call.
const COPY_WARMUPS: usize = 2;
/// Timed runs of the latency benchmarks, per call (the sweep runner calls
/// again until it has the repetitions it wants).
const LATENCY_REPS: usize = 100;
/// How long the busy kernel of `submit_busy` spins, ns.
const BUSY_NS: u64 = 50_000;

/// Runs one microbenchmark and returns its samples, µs.
pub(super) fn run(dev: &Device, req: &MicrobenchRequest) -> Result<Vec<f64>> {
    dev.ctx.bind_to_thread().at(&dev.id, "cuCtxSetCurrent")?;
    match req.bench {
        MicrobenchKind::CopyH2d | MicrobenchKind::CopyD2h => {
            let bytes = req.bytes.ok_or_else(|| Error::BadRequest {
                field: format!("microbench `{}`.bytes", req.id),
                message: "a copy needs a size in bytes".into(),
            })?;
            if bytes == 0 {
                return Err(Error::BadRequest {
                    field: format!("microbench `{}`.bytes", req.id),
                    message: "must be at least 1".into(),
                });
            }
            copy(dev, bytes as usize, req.bench == MicrobenchKind::CopyH2d)
        }
        MicrobenchKind::SubmitEmpty => submit_empty(dev),
        MicrobenchKind::SubmitBusy => submit_busy(dev),
        MicrobenchKind::SyncBlock => sync_block(dev),
        MicrobenchKind::SyncPoll => sync_poll(dev),
        other => Err(Error::unsupported(
            &dev.id,
            format!("microbenchmark {other:?}"),
        )),
    }
}

/// Timed copies of `bytes` per call: at least 10, at most 100, and about
/// 1 GiB in all.
fn copy_reps(bytes: usize) -> usize {
    ((1usize << 30) / bytes).clamp(10, 100)
}

/// A byte pattern that no stale buffer holds by chance.
fn pattern(buf: &mut [u8], seed: u8) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = ((i as u32).wrapping_mul(2_654_435_761) >> 24) as u8 ^ seed;
    }
}

/// The page-locked and device buffers of the copy benchmarks, kept between
/// calls (allocating 256 MiB of page-locked memory takes longer than the
/// copies it times) and grown when a larger copy comes.
pub(super) struct CopyBuffers {
    host: PinnedBuf,
    device: DeviceBuf,
}

fn copy(dev: &Device, bytes: usize, h2d: bool) -> Result<Vec<f64>> {
    let id = dev.id.as_str();
    let stream = dev.stream.cu_stream();
    let mut cache = dev.copy_buffers.lock().unwrap_or_else(|e| e.into_inner());
    if cache.as_ref().is_none_or(|c| c.device.bytes() < bytes) {
        *cache = None; // free the smaller pair first
        *cache = Some(CopyBuffers {
            host: PinnedBuf::new(&dev.ctx, bytes, 0, id)?,
            device: DeviceBuf::new(&dev.ctx, bytes, id)?,
        });
    }
    let CopyBuffers { host, device } = cache.as_mut().expect("just filled");
    let event = dev
        .ctx
        .new_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING))
        .at(id, "cuEventCreate")?;
    let mut sent = vec![0u8; bytes];
    pattern(&mut sent, if h2d { 0x5a } else { 0xa5 });
    if h2d {
        host.as_mut_slice::<u8>()[..bytes].copy_from_slice(&sent);
    } else {
        // SAFETY: `device` holds at least `bytes` bytes; the copy is synchronous.
        unsafe { result::memcpy_htod_sync(device.ptr(), &sent) }.at(id, "cuMemcpyHtoD")?;
    }
    let mut once = || -> Result<f64> {
        let t0 = Instant::now();
        // SAFETY: both buffers hold at least `bytes` bytes and live past the
        // synchronisation below.
        unsafe {
            if h2d {
                result::memcpy_htod_async(device.ptr(), &host.as_slice::<u8>()[..bytes], stream)
                    .at(id, "cuMemcpyHtoDAsync")?;
            } else {
                result::memcpy_dtoh_async(
                    &mut host.as_mut_slice::<u8>()[..bytes],
                    device.ptr(),
                    stream,
                )
                .at(id, "cuMemcpyDtoHAsync")?;
            }
            result::event::record(event.cu_event(), stream).at(id, "cuEventRecord")?;
            result::event::synchronize(event.cu_event()).at(id, "cuEventSynchronize")?;
        }
        Ok(t0.elapsed().as_secs_f64() * 1e6)
    };
    for _ in 0..COPY_WARMUPS {
        once()?;
    }
    let samples = (0..copy_reps(bytes))
        .map(|_| once())
        .collect::<Result<Vec<_>>>()?;
    // Check what arrived.
    let arrived = if h2d {
        let mut back = vec![0u8; bytes];
        // SAFETY: `device` holds at least `bytes` bytes; the copy is synchronous.
        unsafe { result::memcpy_dtoh_sync(&mut back, device.ptr()) }.at(id, "cuMemcpyDtoH")?;
        back
    } else {
        host.as_slice::<u8>()[..bytes].to_vec()
    };
    if arrived != sent {
        let at = arrived
            .iter()
            .zip(&sent)
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        return Err(Error::backend(
            id,
            format!("copy of {bytes} bytes delivered wrong data (first difference at byte {at})"),
        ));
    }
    Ok(samples)
}

/// Runs `once` [`WARMUPS`] times untimed, then [`LATENCY_REPS`] times.
fn repeat(mut once: impl FnMut() -> Result<f64>) -> Result<Vec<f64>> {
    for _ in 0..WARMUPS {
        once()?;
    }
    (0..LATENCY_REPS).map(|_| once()).collect()
}

fn submit_empty(dev: &Device) -> Result<Vec<f64>> {
    let kernels = dev.kernels()?;
    let id = dev.id.as_str();
    let stream = dev.stream.cu_stream();
    repeat(|| {
        let t0 = Instant::now();
        kernels.empty(stream, id)?;
        // SAFETY: a live stream of this context.
        unsafe { result::stream::synchronize(stream) }.at(id, "cuStreamSynchronize")?;
        Ok(t0.elapsed().as_secs_f64() * 1e6)
    })
}

fn submit_busy(dev: &Device) -> Result<Vec<f64>> {
    let kernels = dev.kernels()?;
    let id = dev.id.as_str();
    let stream = dev.stream.cu_stream();
    let timing = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
    let busy_end = dev.ctx.new_event(timing).at(id, "cuEventCreate")?;
    let empty_end = dev.ctx.new_event(timing).at(id, "cuEventCreate")?;
    repeat(|| {
        kernels.spin(stream, BUSY_NS, id)?;
        // SAFETY: events and stream of this context.
        unsafe { result::event::record(busy_end.cu_event(), stream) }.at(id, "cuEventRecord")?;
        kernels.empty(stream, id)?;
        // SAFETY: as above.
        unsafe { result::event::record(empty_end.cu_event(), stream) }.at(id, "cuEventRecord")?;
        dev.elapsed_us(&busy_end, &empty_end)
    })
}

fn sync_block(dev: &Device) -> Result<Vec<f64>> {
    let kernels = dev.kernels()?;
    let id = dev.id.as_str();
    let stream = dev.stream.cu_stream();
    let done = dev
        .ctx
        .new_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING))
        .at(id, "cuEventCreate")?;
    repeat(|| {
        let t0 = Instant::now();
        kernels.empty(stream, id)?;
        // SAFETY: event and stream of this context.
        unsafe {
            result::event::record(done.cu_event(), stream).at(id, "cuEventRecord")?;
            result::event::synchronize(done.cu_event()).at(id, "cuEventSynchronize")?;
        }
        Ok(t0.elapsed().as_secs_f64() * 1e6)
    })
}

fn sync_poll(dev: &Device) -> Result<Vec<f64>> {
    if dev.flag_writer.is_none() {
        return Err(Error::unsupported(&dev.id, "polling a host flag"));
    }
    let kernels = dev.kernels()?;
    let id = dev.id.as_str();
    let stream = dev.stream.cu_stream();
    let flag = MappedFlag::new(&dev.ctx, id)?;
    let mut seq = 0u32;
    let samples = repeat(|| {
        seq = seq.wrapping_add(1).max(1);
        let t0 = Instant::now();
        kernels.empty(stream, id)?;
        dev.write_flag(&flag, seq)?;
        spin_until(&flag, seq, t0).map_err(|e| dev.explain_stall(e))?;
        Ok(t0.elapsed().as_secs_f64() * 1e6)
    })?;
    // Leave the stream drained before the flag is freed.
    dev.stream.synchronize().at(id, "cuStreamSynchronize")?;
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_reps_stay_in_range() {
        assert_eq!(copy_reps(4096), 100);
        assert_eq!(copy_reps(256 << 20), 10);
        assert_eq!(copy_reps(16 << 20), 64);
    }

    #[test]
    fn pattern_differs_by_seed_and_position() {
        let mut a = vec![0u8; 256];
        let mut b = vec![0u8; 256];
        pattern(&mut a, 1);
        pattern(&mut b, 2);
        assert_ne!(a, b);
        assert!(a.windows(2).any(|w| w[0] != w[1]));
    }
}
