//! One GEMM case, measured in the worker thread: checked, warmed up,
//! timed, checked again.

use std::sync::atomic::AtomicBool;

use hetero_plan::{MeasurementRow, Processor, RowStatus, RunParams, Stats, SweepCase};

use super::base_row;
use super::micro::{check_cancel, warm_up};
use crate::{Backend, Error, Gemm, GemmSpec, verify};

/// Measures one case on `backend` (in the worker thread).
pub fn measure(
    backend: &mut dyn Backend,
    case: &SweepCase,
    run: &RunParams,
    cancel: &AtomicBool,
) -> MeasurementRow {
    let proc = backend.processor().clone();
    let mut row = base_row(case, proc.timing(), run);
    let result = measure_into(backend, &proc, case, run, cancel, &mut row);
    if let Err(e) = result {
        row.status = match e {
            Error::Unsupported { .. } => RowStatus::Unsupported,
            Error::Timeout { .. } => RowStatus::Timeout,
            _ => RowStatus::Error,
        };
        row.message = Some(e.to_string());
        row.median_us = None;
        row.min_us = None;
        row.p90_us = None;
        row.cv = None;
        row.mean_us = None;
        row.host_median_us = None;
        row.verified = false;
    }
    row.conditions = backend.conditions();
    row
}

fn measure_into(
    backend: &mut dyn Backend,
    proc: &Processor,
    case: &SweepCase,
    run: &RunParams,
    cancel: &AtomicBool,
    row: &mut MeasurementRow,
) -> Result<(), Error> {
    if !proc.capabilities.dtypes.contains(&case.dtype) {
        let has: Vec<&str> = proc
            .capabilities
            .dtypes
            .iter()
            .map(|d| d.as_str())
            .collect();
        return Err(Error::unsupported(
            &proc.id,
            format!("dtype {} (it runs {})", case.dtype, has.join(", ")),
        ));
    }
    let shape = case.shape;
    let (m, k, n) = shape.mkn();
    let spec = GemmSpec {
        shape,
        dtype: case.dtype,
        order: case.order,
        weights: case.weights,
    };
    let (a, w) = verify::inputs(&shape, 0);
    let mut g = backend.prepare(&spec, &w)?;
    row.prepare_us = g.prepare_us();
    let tolerance = backend.tolerance(case.dtype, k);
    row.tolerance = Some(tolerance);
    let mut c = vec![0f32; m as usize * n as usize];
    g.write_input(&a)?;
    g.execute()?;
    g.read_output(&mut c)?;
    let first = verify::check(&shape, &a, &w, &c);
    row.rel_err = Some(first.rel_err);
    if !first.passes(tolerance) {
        row.status = RowStatus::Failed;
        row.message = Some(wrong(&first, tolerance, "first run"));
        return Ok(());
    }
    // With `rotate_weights`, copies of the case run in turn (the first is
    // the one checked above), unless there would be too many: then evict.
    let mut graphs = vec![g];
    if run.cold_cache && run.rotate_weights {
        let weight_bytes = k as u64 * n as u64 * case.dtype.weight_bits() as u64 / 8;
        let copy_bytes = hetero_plan::predictor::gemm_bytes(shape, case.dtype) as u64;
        let target = crate::evict::rotation_bytes() as u64;
        let copies = rotation_copies(weight_bytes, copy_bytes, target).unwrap_or(1);
        for _ in 1..copies {
            check_cancel(cancel, run)?;
            let mut g = backend.prepare(&spec, &w)?;
            g.write_input(&a)?;
            graphs.push(g);
        }
    }
    let copies = graphs.len();
    let rotate = copies > 1;
    let evict = run.cold_cache && !rotate;
    // Every copy runs before the timed runs, so each timed run finds its
    // copy last run `copies - 1` runs before.
    let warm = RunParams {
        warmups: run.warmups.max(copies as u32),
        ..*run
    };
    let mut next = 0usize;
    warm_up(&warm, proc.simulated, cancel, || {
        let i = next % copies;
        next += 1;
        graphs[i].execute().map(drop)
    })?;
    // The next copy in turn, its input written again (outside the timer)
    // when rotating, as the operator before it leaves its input cached.
    let mut turn = |graphs: &mut [Box<dyn Gemm>]| -> Result<usize, Error> {
        let i = next % copies;
        next += 1;
        if rotate {
            graphs[i].write_input(&a)?;
        }
        Ok(i)
    };
    let mut best = Vec::with_capacity(run.repetitions as usize);
    let mut host = Vec::with_capacity(run.repetitions as usize);
    let mut device_timer = false;
    // With the kernel timer, each timed run is followed by an ordinary one
    // (same caches): the difference of their medians is the launch path
    // the kernel-only times leave out, as the device saw it.
    let mut ordinary = Vec::new();
    let mut last_run = 0;
    for _ in 0..run.repetitions {
        check_cancel(cancel, run)?;
        let i = turn(&mut graphs)?;
        if evict {
            graphs[i].evict_caches()?;
        }
        let kernels = if run.kernel_timer {
            graphs[i].execute_kernel_only()?
        } else {
            None
        };
        last_run = i;
        let t = match kernels {
            Some(k) => {
                let j = if rotate { turn(&mut graphs)? } else { i };
                if evict {
                    graphs[j].evict_caches()?;
                }
                ordinary.push(graphs[j].execute()?.best_us());
                last_run = j;
                k
            }
            None => graphs[i].execute()?,
        };
        device_timer |= t.device_us.is_some();
        best.push(t.best_us());
        host.push(t.host_us);
    }
    let g = &mut graphs[last_run];
    g.read_output(&mut c)?;
    let last = verify::check(&shape, &a, &w, &c);
    row.rel_err = Some(first.rel_err.max(last.rel_err));
    if !last.passes(tolerance) {
        row.status = RowStatus::Failed;
        row.message = Some(wrong(&last, tolerance, "last timed run"));
        return Ok(());
    }
    let stats = Stats::from_samples(&best).ok_or_else(|| Error::BadRequest {
        field: "repetitions".into(),
        message: "must be at least 1".into(),
    })?;
    row.set_stats(&stats);
    if device_timer && !proc.simulated {
        row.host_median_us = Stats::from_samples(&host).map(|s| s.median_us);
    }
    // Only when every timed run left its launch out: a row is kernel-only
    // or ordinary, never both.
    if ordinary.len() == best.len()
        && let Some(o) = Stats::from_samples(&ordinary)
    {
        row.launch_us = Some(o.median_us - stats.median_us);
    }
    row.verified = true;
    row.status = RowStatus::Ok;
    Ok(())
}

/// The most copies [`RunParams::rotate_weights`] prepares of one case.
pub const MAX_ROTATION_COPIES: u64 = 1024;

/// How many copies of a case (`weight_bytes` of weights, `copy_bytes` with
/// its input and output) to run in turn so that between two runs of one
/// copy the others read at least `target` bytes of weights; `None` where
/// that would take more than [`MAX_ROTATION_COPIES`], or more than twice
/// `target` and one copy's weights in all, and the case evicts the caches
/// instead: weights too small to fill the target, or activations that
/// dwarf them (a long prefill, where a GEMM is bound by its arithmetic
/// more than by reading its weights).
pub fn rotation_copies(weight_bytes: u64, copy_bytes: u64, target: u64) -> Option<usize> {
    let copies = (target.div_ceil(weight_bytes.max(1)) + 1).max(2);
    let total = copies.saturating_mul(copy_bytes.max(weight_bytes));
    let most = target.saturating_add(weight_bytes).saturating_mul(2);
    (copies <= MAX_ROTATION_COPIES && total <= most).then_some(copies as usize)
}

pub(super) fn wrong(c: &verify::Check, tolerance: f64, when: &str) -> String {
    format!(
        "wrong result after the {when}: error {:.3e} > tolerance {:.3e} at C[{},{}] ({} outputs checked)",
        c.rel_err, tolerance, c.worst.0, c.worst.1, c.sampled
    )
}
