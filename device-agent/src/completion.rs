//! The completion of a run handed to a worker thread: a flag in host memory
//! that a polling wait spins on, a slot through which the worker hands back
//! what it owned during the run, and a condition variable for blocking
//! waits. The cpu and qnn backends use it for [`Gemm::submit`] and
//! [`Gemm::wait`](crate::Gemm::wait). The "worker" is any thread that ends
//! the run: a pool thread, the qnn worker thread, or a thread of QNN's own
//! that calls `graphExecuteAsync`'s notify callback.
//!
//! [`Gemm::submit`]: crate::Gemm::submit

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::SyncMode;
use crate::backend::SpinThenYield;

/// What the submitting thread and the worker share during one run.
#[derive(Debug)]
pub(crate) struct Completion<T> {
    /// Set to 1 by the worker after it has filled the slot (written last).
    done: AtomicU32,
    /// Nanoseconds from the submit to the end of the run, as the worker saw
    /// it (written before `done`).
    ran_ns: AtomicU64,
    slot: Mutex<Option<T>>,
    cv: Condvar,
    /// When the run was submitted.
    started: Instant,
}

impl<T> Completion<T> {
    /// A fresh completion for a run submitted now.
    pub(crate) fn new() -> Arc<Completion<T>> {
        Arc::new(Completion {
            done: AtomicU32::new(0),
            ran_ns: AtomicU64::new(0),
            slot: Mutex::new(None),
            cv: Condvar::new(),
            started: Instant::now(),
        })
    }

    /// When the run was submitted.
    pub(crate) fn started(&self) -> Instant {
        self.started
    }

    /// Called by the worker at the end of the run: hands `value` back,
    /// records the run's end, raises the flag and wakes a blocking waiter.
    pub(crate) fn finish(&self, value: T) {
        let ran = self.started.elapsed().as_nanos().min(u64::MAX as u128) as u64;
        self.ran_ns.store(ran, Ordering::Relaxed);
        *self.slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(value);
        // The flag is written last: a poller that sees it finds the slot full.
        self.done.store(1, Ordering::Release);
        self.cv.notify_all();
    }

    /// Whether the worker has finished (the completion flag).
    pub(crate) fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire) != 0
    }

    /// Waits for the end of the run as `mode` says and takes what the
    /// worker handed back, with the run's own duration, µs.
    pub(crate) fn wait(&self, mode: SyncMode) -> (T, f64) {
        let value = match mode {
            SyncMode::Block => {
                let mut g = self.slot.lock().unwrap_or_else(|p| p.into_inner());
                while g.is_none() {
                    g = self.cv.wait(g).unwrap_or_else(|p| p.into_inner());
                }
                g.take()
            }
            SyncMode::Poll { predicted_us } => {
                poll_flag(&self.done, predicted_us, self.started);
                self.slot.lock().unwrap_or_else(|p| p.into_inner()).take()
            }
        };
        // Read after the slot was filled, so after the worker's store.
        let ran_us = self.ran_ns.load(Ordering::Relaxed) as f64 * 1e-3;
        (
            value.expect("the flag is raised after the slot is filled"),
            ran_us,
        )
    }
}

/// A polling wait (HeteroLLM §4.2): sleeps through most of the predicted
/// time counted from `started` (less a margin of a tenth, at least 100 µs),
/// then checks `flag` until it is non-zero, spinning briefly and then
/// yielding between checks ([`SpinThenYield`]).
pub(crate) fn poll_flag(flag: &AtomicU32, predicted_us: f64, started: Instant) {
    let margin = (0.1 * predicted_us).max(100.0);
    let sleep_us = predicted_us - margin - started.elapsed().as_secs_f64() * 1e6;
    if sleep_us > 0.0 {
        std::thread::sleep(Duration::from_secs_f64(sleep_us * 1e-6));
    }
    let mut pause = SpinThenYield::default();
    while flag.load(Ordering::Acquire) == 0 {
        pause.pause();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flag is down until the worker finishes, and both waits hand back
    /// what it stored, with a run time no longer than the wait's.
    #[test]
    fn the_flag_rises_when_the_worker_finishes() {
        for mode in [
            SyncMode::Block,
            SyncMode::Poll {
                predicted_us: 2000.0,
            },
        ] {
            let c = Completion::<Vec<u8>>::new();
            assert!(!c.is_done());
            let w = Arc::clone(&c);
            let t = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(3));
                w.finish(vec![7, 8]);
            });
            let (v, ran_us) = c.wait(mode);
            let waited_us = c.started().elapsed().as_secs_f64() * 1e6;
            assert!(c.is_done());
            assert_eq!(v, vec![7, 8], "{mode:?}");
            assert!(
                ran_us >= 3000.0 && ran_us <= waited_us,
                "{ran_us} {waited_us}"
            );
            t.join().unwrap();
        }
    }
}
