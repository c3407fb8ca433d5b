//! Microbenchmarks of an OpenCL device. Each returns its timed samples, µs.
//!
//! - `copy_h2d` / `copy_d2h`: host wall time of a blocking
//!   `clEnqueueWriteBuffer` / `clEnqueueReadBuffer` of `bytes` between a
//!   pageable host vector and a device buffer (what a runtime pays to move
//!   an activation; GB/s = bytes / median).
//! - `submit_empty`: host time from `clEnqueueNDRangeKernel` of a one-item
//!   kernel on an idle queue to its event completing (`clWaitForEvents`).
//! - `submit_busy`: the same kernel enqueued behind a ~2 ms `spin` kernel;
//!   the sample is its `END` minus the spin kernel's `END` (profiling
//!   events): what a launch costs once the queue was already busy.
//! - `sync_block` / `sync_poll`: a GEMM (`shape`, default 256³, f32) is
//!   submitted and waited for with `clFinish` or by polling the host-visible
//!   flag; the sample is host time minus kernel time, i.e. launch plus
//!   completion hand-off. The output is checked against the reference.

use std::ptr;
use std::time::Instant;

use hetero_plan::{DType, GemmShape, MicrobenchKind, MicrobenchRequest, OperandOrder, WeightMode};
use opencl3::kernel::Kernel;
use opencl3::memory::{Buffer, CL_MEM_READ_WRITE, ClMem};
use opencl3::types::{CL_BLOCKING, cl_int, cl_uint};

use super::{ClResultExt, OpenClBackend, max_rel_err};
use crate::verify::random_vec;
use crate::{Backend, Error, Gemm, GemmSpec, Result, SyncMode};

/// Target kernel time of the busy kernel for `submit_busy`, µs.
const BUSY_US: f64 = 2000.0;

pub(crate) fn run(be: &mut OpenClBackend, req: &MicrobenchRequest) -> Result<Vec<f64>> {
    match req.bench {
        MicrobenchKind::CopyH2d => copy(be, req, true),
        MicrobenchKind::CopyD2h => copy(be, req, false),
        MicrobenchKind::SubmitEmpty => submit(be, false),
        MicrobenchKind::SubmitBusy => submit(be, true),
        MicrobenchKind::SyncBlock => sync(be, req, false),
        MicrobenchKind::SyncPoll => sync(be, req, true),
        other => Err(Error::unsupported(
            &be.processor().id,
            format!("microbenchmark {other:?}"),
        )),
    }
}

fn copy(be: &mut OpenClBackend, req: &MicrobenchRequest, h2d: bool) -> Result<Vec<f64>> {
    let dev = be.dev().clone();
    let id = &dev.id;
    let bytes = req.bytes.ok_or_else(|| Error::BadRequest {
        field: "microbench.bytes".into(),
        message: format!("{:?} needs a size in bytes", req.bench),
    })?;
    if bytes == 0 {
        return Err(Error::BadRequest {
            field: "microbench.bytes".into(),
            message: "must be at least 1".into(),
        });
    }
    if bytes > dev.max_alloc {
        return Err(Error::unsupported(
            id,
            format!(
                "a {bytes}-byte buffer (CL_DEVICE_MAX_MEM_ALLOC_SIZE is {})",
                dev.max_alloc
            ),
        ));
    }
    let n = bytes as usize;
    // SAFETY: no host pointer; size nonzero.
    let mut buf =
        unsafe { Buffer::<u8>::create(&dev.context, CL_MEM_READ_WRITE, n, ptr::null_mut()) }
            .cl(id, "clCreateBuffer")?;
    let mut host = vec![0x5au8; n];
    let src = vec![0xa5u8; n];
    let reps = if n <= 1 << 20 {
        30
    } else if n <= 16 << 20 {
        12
    } else {
        5
    };
    let mut samples = Vec::with_capacity(reps);
    for i in 0..reps + 2 {
        let t0 = Instant::now();
        // SAFETY: `host` is `n` bytes, the buffer too; blocking, so `host`
        // outlives the transfer.
        unsafe {
            if h2d {
                dev.queue
                    .enqueue_write_buffer(&mut buf, CL_BLOCKING, 0, &src, &[])
                    .cl(id, "clEnqueueWriteBuffer")?;
            } else {
                dev.queue
                    .enqueue_read_buffer(&buf, CL_BLOCKING, 0, &mut host, &[])
                    .cl(id, "clEnqueueReadBuffer")?;
            }
        }
        let us = t0.elapsed().as_secs_f64() * 1e6;
        if i >= 2 {
            samples.push(us);
        }
    }
    Ok(samples)
}

fn submit(be: &mut OpenClBackend, busy: bool) -> Result<Vec<f64>> {
    let dev = be.dev().clone();
    let id = &dev.id;
    let make = |name: &str| Kernel::create(&dev.util, name).cl(id, "clCreateKernel");
    let tiny = make("set_flag")?;
    let spin = make("spin")?;
    let items = (dev.compute_units.max(1) as usize * 64).min(65_536);
    // SAFETY: no host pointer; sizes nonzero.
    let (flag, sink) = unsafe {
        (
            Buffer::<u32>::create(&dev.context, CL_MEM_READ_WRITE, 1, ptr::null_mut())
                .cl(id, "clCreateBuffer")?,
            Buffer::<f32>::create(&dev.context, CL_MEM_READ_WRITE, items, ptr::null_mut())
                .cl(id, "clCreateBuffer")?,
        )
    };
    // SAFETY: argument types match util.cl.
    unsafe {
        tiny.set_arg(0, &flag.get()).cl(id, "clSetKernelArg")?;
        tiny.set_arg(1, &(1 as cl_uint)).cl(id, "clSetKernelArg")?;
        spin.set_arg(0, &sink.get()).cl(id, "clSetKernelArg")?;
    }
    let launch = |k: &Kernel, global: usize| {
        // SAFETY: every argument of `k` is set; 1-D launch, driver-chosen local size.
        unsafe {
            dev.queue.enqueue_nd_range_kernel(
                k.get(),
                1,
                ptr::null(),
                [global].as_ptr(),
                ptr::null(),
                &[],
            )
        }
        .cl(id, "clEnqueueNDRangeKernel")
    };
    let mut iters: cl_int = 1000;
    if busy {
        // Calibrate the spin kernel to about BUSY_US.
        for _ in 0..6 {
            // SAFETY: argument 1 of spin is an int.
            unsafe { spin.set_arg(1, &iters) }.cl(id, "clSetKernelArg")?;
            let ev = launch(&spin, items)?;
            ev.wait().cl(id, "clWaitForEvents")?;
            let us = (ev.profiling_command_end().cl(id, "profiling")?
                - ev.profiling_command_start().cl(id, "profiling")?) as f64
                / 1000.0;
            if us > 0.5 * BUSY_US {
                break;
            }
            let scale = if us > 0.0 { BUSY_US / us } else { 10.0 };
            iters = (f64::from(iters) * scale.clamp(1.5, 50.0)).min(1e9) as cl_int;
        }
    }
    let reps = 40;
    let mut samples = Vec::with_capacity(reps);
    for i in 0..reps + 3 {
        dev.queue.finish().cl(id, "clFinish")?;
        let sample = if busy {
            let s = launch(&spin, items)?;
            let t = launch(&tiny, 1)?;
            dev.queue.flush().cl(id, "clFlush")?;
            t.wait().cl(id, "clWaitForEvents")?;
            let s_end = s.profiling_command_end().cl(id, "profiling")?;
            let t_end = t.profiling_command_end().cl(id, "profiling")?;
            t_end.saturating_sub(s_end) as f64 / 1000.0
        } else {
            let t0 = Instant::now();
            let t = launch(&tiny, 1)?;
            t.wait().cl(id, "clWaitForEvents")?;
            t0.elapsed().as_secs_f64() * 1e6
        };
        if i >= 3 {
            samples.push(sample);
        }
    }
    Ok(samples)
}

fn sync(be: &mut OpenClBackend, req: &MicrobenchRequest, poll: bool) -> Result<Vec<f64>> {
    let shape = req
        .shape
        .unwrap_or_else(|| GemmShape::new(256, 256, 256).expect("nonzero"));
    let (m, k, n) = shape.mkn();
    let (m, k, n) = (m as usize, k as usize, n as usize);
    let spec = GemmSpec {
        shape,
        dtype: DType::F32,
        order: OperandOrder::Aw,
        weights: WeightMode::Static,
    };
    let a = random_vec(m * k, 11);
    let w = random_vec(k * n, 12);
    let mut g = be.prepare_cl(&spec, &w)?;
    g.write_input(&a)?;
    // The prediction Poll sleeps on: the median of a few blocking runs.
    let mut pred: Vec<f64> = (0..5)
        .map(|_| g.execute().map(|t| t.best_us()))
        .collect::<Result<_>>()?;
    pred.sort_by(f64::total_cmp);
    let predicted_us = pred[pred.len() / 2];
    let mode = if poll {
        SyncMode::Poll { predicted_us }
    } else {
        SyncMode::Block
    };
    let reps = 30;
    let mut samples = Vec::with_capacity(reps);
    for i in 0..reps + 3 {
        g.submit()?;
        let t = g.wait(mode)?;
        if i >= 3 {
            samples.push(t.host_us - t.device_us.unwrap_or(0.0));
        }
    }
    let mut c = vec![0f32; m * n];
    g.read_output(&mut c)?;
    let err = max_rel_err(&a, &w, &c, m, k, n, 64);
    let tol = be.tolerance(DType::F32, k as u32);
    if err.is_nan() || err > tol {
        return Err(Error::backend(
            &be.processor().id,
            format!("sync benchmark GEMM wrong: rel err {err:.3e} > {tol:.3e}"),
        ));
    }
    Ok(samples)
}
