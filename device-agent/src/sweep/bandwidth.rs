//! `bandwidth_alone` and `bandwidth_concurrent`: a memory-bound GEMV
//! (`1×K×N`, weights of `bytes`) timed alone, or while the `peer`
//! processor streams its own GEMV in a loop ([`concurrent`]).

use std::sync::atomic::AtomicBool;

use hetero_plan::{GemvStream, MicrobenchKind, MicrobenchRequest, RunParams};

use super::background_stream::{BackgroundStream, gemv_spec, gemv_weight_bytes};
use super::micro::{check_cancel, warm_up};
use crate::{Backend, Error};

mod concurrent;

/// Weight bytes streamed by the bandwidth GEMV when a request gives none.
pub const DEFAULT_STREAM_BYTES: u64 = 64 << 20;

/// What a bandwidth benchmark measured.
pub(super) struct Bandwidth {
    /// The timed runs, µs.
    pub samples: Vec<f64>,
    /// What ran, in words.
    pub note: String,
    /// How the timed GEMV read its weights.
    pub stream: GemvStream,
    /// How the peer's GEMV read its weights (`bandwidth_concurrent`).
    pub peer_stream: Option<GemvStream>,
}

/// Times the GEMV of `req` on `backends[0]`, alone or (for
/// `bandwidth_concurrent`) beside `backends[1]`'s.
pub(super) fn bandwidth(
    backends: &mut [Box<dyn Backend>],
    req: &MicrobenchRequest,
    run: &RunParams,
    cancel: &AtomicBool,
) -> Result<Bandwidth, Error> {
    let bytes = req.bytes.unwrap_or(DEFAULT_STREAM_BYTES);
    let spec = gemv_spec(backends[0].processor(), bytes)?;
    let simulated = backends[0].processor().simulated;
    let mut g = BackgroundStream::new(&mut *backends[0], &spec)?;
    let (k, n) = (spec.shape.k.get(), spec.shape.n.get());
    let streamed = gemv_weight_bytes(&spec);
    let note = format!(
        "GEMV 1x{k}x{n} {}: {streamed} weight bytes per run, {}",
        spec.dtype,
        g.describe(streamed)
    );
    let stream = g.facts(None);
    let mut timed = || timed_runs(&mut g, run, simulated, cancel);
    match &mut backends[..] {
        [_, peer, ..] if req.bench == MicrobenchKind::BandwidthConcurrent => {
            let (samples, peer_run) = concurrent::with_peer(&mut **peer, bytes, timed)?;
            Ok(Bandwidth {
                samples,
                note: format!("{note}; {}", peer_run.note),
                stream,
                peer_stream: Some(peer_run.stream),
            })
        }
        _ => Ok(Bandwidth {
            samples: timed()?,
            note,
            stream,
            peer_stream: None,
        }),
    }
}

/// Every copy of `g` once more, then `run.repetitions` timed runs.
fn timed_runs(
    g: &mut BackgroundStream,
    run: &RunParams,
    simulated: bool,
    cancel: &AtomicBool,
) -> Result<Vec<f64>, Error> {
    let warm = RunParams {
        warmups: run.warmups.max(g.copies.len() as u32),
        ..*run
    };
    warm_up(&warm, simulated, cancel, || g.run().map(drop))?;
    let mut s = Vec::new();
    for _ in 0..run.repetitions.max(1) {
        check_cancel(cancel, run)?;
        s.push(g.run()?.best_us());
    }
    Ok(s)
}
