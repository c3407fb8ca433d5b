//! `graph_prepare`: the time a static-graph processor takes to prepare
//! (build and finalise) a graph of the request's shape.

use std::sync::atomic::AtomicBool;

use hetero_plan::{MicrobenchRequest, OperandOrder, RunParams};

use super::micro::{bench_spec, check_cancel};
use crate::{Backend, Error, verify};

/// The prepare times of `warmups + repetitions` graphs of `req.shape`, the
/// warm-up ones left out.
pub(super) fn graph_prepare(
    b: &mut dyn Backend,
    req: &MicrobenchRequest,
    run: &RunParams,
    cancel: &AtomicBool,
) -> Result<Vec<f64>, Error> {
    let proc = b.processor().clone();
    if !proc.capabilities.static_graphs {
        return Err(Error::unsupported(
            &proc.id,
            "graph prepare (not a static-graph processor)",
        ));
    }
    let shape = req.shape.ok_or_else(|| Error::BadRequest {
        field: "shape".into(),
        message: "graph_prepare needs `shape`".into(),
    })?;
    let spec = bench_spec(&proc, shape, OperandOrder::Transposed)?;
    let (_, w) = verify::inputs(&shape, 0);
    let mut samples = Vec::new();
    for i in 0..run.warmups + run.repetitions.max(1) {
        check_cancel(cancel, run)?;
        let g = b.prepare(&spec, &w)?;
        let us = g.prepare_us().ok_or_else(|| {
            Error::backend(
                &proc.id,
                "a static-graph processor reported no prepare time",
            )
        })?;
        if i >= run.warmups {
            samples.push(us);
        }
    }
    Ok(samples)
}
