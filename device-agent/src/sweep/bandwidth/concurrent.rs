//! The peer of `bandwidth_concurrent`: its own GEMV streamed in a loop on a
//! thread of its own while the timed GEMV runs.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use hetero_plan::GemvStream;

use crate::sweep::background_stream::{BackgroundStream, gemv_spec, gemv_weight_bytes};
use crate::{Backend, Error};

/// What the peer ran meanwhile.
pub(super) struct Beside {
    /// In words, for the row's note.
    pub note: String,
    /// How its GEMV read its weights, and how many times it ran.
    pub stream: GemvStream,
}

/// Runs `timed` once `peer` streams a GEMV of about `bytes` of weights in a
/// loop, and stops the peer after it.
pub(super) fn with_peer(
    peer: &mut dyn Backend,
    bytes: u64,
    timed: impl FnOnce() -> Result<Vec<f64>, Error>,
) -> Result<(Vec<f64>, Beside), Error> {
    let peer_id = peer.processor().id.clone();
    let peer_spec = gemv_spec(peer.processor(), bytes)?;
    let mut pg = BackgroundStream::new(peer, &peer_spec)?;
    let peer_how = pg.describe(gemv_weight_bytes(&peer_spec));
    let stop = AtomicBool::new(false);
    let peer_runs = AtomicU64::new(0);
    let peer_err: Mutex<Option<Error>> = Mutex::new(None);
    let samples = std::thread::scope(|sc| {
        sc.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                if let Err(e) = pg.run() {
                    *peer_err.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                    break;
                }
                peer_runs.fetch_add(1, Ordering::Relaxed);
            }
        });
        // Start timing once the peer is streaming.
        while peer_runs.load(Ordering::Relaxed) == 0
            && peer_err.lock().map(|e| e.is_none()).unwrap_or(false)
        {
            std::thread::yield_now();
        }
        let s = timed();
        stop.store(true, Ordering::Relaxed);
        s
    })?;
    if let Some(e) = peer_err.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    let runs = peer_runs.load(Ordering::Relaxed);
    let (pk, pn) = (peer_spec.shape.k.get(), peer_spec.shape.n.get());
    Ok((
        samples,
        Beside {
            note: format!(
                "peer `{peer_id}` streamed GEMV 1x{pk}x{pn} {} {runs} times meanwhile, {peer_how}",
                peer_spec.dtype,
            ),
            stream: pg.facts(Some(runs)),
        },
    ))
}
