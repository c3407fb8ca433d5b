//! Keeps a pool's workers polling for work for a while after each run.
//!
//! A rayon worker with nothing to do yields a few dozen times and then
//! sleeps on a futex; the next run wakes it, and the workers a product is
//! split over wake one another in a cascade. On a 2-core x86-64 machine
//! that costs a 1×1536×256 GEMV on two workers 50–80 µs (71 µs back to
//! back, 123–153 µs after 20–3000 µs of idling); on the 15 workers of a
//! Xeon host with one H100 a 1×1536×768 GEMV took 63 µs back to back and
//! 93–137 µs after 0.1–3 ms (`docs/benchmarks.md`, Runtime). An
//! operator of runtime-min that follows operators on other processors pays
//! it every time. So after each run the pool's workers poll the pool for
//! a hold more, as ONNX Runtime's and llama.cpp's thread pools
//! spin before they sleep: a run that comes within the hold finds them
//! awake, and one that comes later wakes them all at once (one broadcast)
//! rather than one after another.
//!
//! The polling is [`rayon::yield_now`], which runs whatever job
//! the pool has, then `sched_yield` when there was none, so a host thread
//! sharing a core with a worker still gets it. Correctness never depends on
//! it: a run that finds no poller is woken by rayon as usual.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long the workers poll after a run when neither
/// [`crate::OpenOptions::cpu_poll_us`] nor `HETERO_CPU_POLL_US` says.
pub const DEFAULT_POLL_US: u64 = 2000;

/// The polling state of one pool.
pub(crate) struct KeepWarm {
    base: Instant,
    /// Polling ends at this time, ns after `base`.
    until_ns: AtomicU64,
    /// Pollers started and not yet ended.
    live: AtomicUsize,
    hold: Duration,
}

impl KeepWarm {
    pub(crate) fn new(hold: Duration) -> Arc<KeepWarm> {
        Arc::new(KeepWarm {
            base: Instant::now(),
            until_ns: AtomicU64::new(0),
            live: AtomicUsize::new(0),
            hold,
        })
    }

    fn now_ns(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }

    /// Moves the end of polling to a hold from now.
    pub(crate) fn extend(&self) {
        let until = self.now_ns() + self.hold.as_nanos() as u64;
        self.until_ns.fetch_max(until, Ordering::AcqRel);
    }

    /// Before a run: extends the polling and starts a poller on every
    /// worker unless they are polling already.
    pub(crate) fn wake_all(self: &Arc<Self>, pool: &rayon::ThreadPool) {
        if self.hold.is_zero() {
            return;
        }
        self.extend();
        let n = pool.current_num_threads();
        if self
            .live
            .compare_exchange(0, n, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            let me = self.clone();
            pool.spawn_broadcast(move |_| me.poll());
        }
    }

    /// One worker's poller: runs the pool's jobs until the hold has passed
    /// since the last run.
    fn poll(&self) {
        while self.now_ns() < self.until_ns.load(Ordering::Acquire) {
            // Runs on a worker of the pool, so this finds the pool's jobs.
            match rayon::yield_now() {
                Some(rayon::Yield::Executed) => {}
                _ => std::thread::yield_now(),
            }
        }
        self.live.fetch_sub(1, Ordering::AcqRel);
    }

    /// Pollers running now (for tests).
    #[cfg(test)]
    pub(crate) fn live(&self) -> usize {
        self.live.load(Ordering::Acquire)
    }
}

/// The hold asked for: `asked` µs, else `HETERO_CPU_POLL_US`, else
/// [`DEFAULT_POLL_US`]. A value that is not a number is an error naming it.
pub fn poll_hold(asked: Option<u64>) -> crate::Result<Duration> {
    let us = match asked {
        Some(us) => us,
        None => match std::env::var("HETERO_CPU_POLL_US") {
            Ok(text) => text.trim().parse().map_err(|_| crate::Error::BadRequest {
                field: "HETERO_CPU_POLL_US".into(),
                message: format!("`{text}` is not a whole number of microseconds"),
            })?,
            Err(_) => DEFAULT_POLL_US,
        },
    };
    Ok(Duration::from_micros(us))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(n: usize) -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .unwrap()
    }

    #[test]
    fn pollers_run_the_pools_jobs_and_end_after_the_hold() {
        let p = pool(2);
        let keep_warm = KeepWarm::new(Duration::from_millis(20));
        keep_warm.wake_all(&p);
        // A job spawned while they poll runs, and on one of them.
        let (tx, rx) = std::sync::mpsc::channel();
        p.spawn(move || tx.send(rayon::current_thread_index()).unwrap());
        let ran_on = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(ran_on.is_some());
        assert_eq!(keep_warm.live(), 2, "both workers poll within the hold");
        let t = Instant::now();
        while keep_warm.live() > 0 {
            assert!(t.elapsed() < Duration::from_secs(5), "pollers never ended");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn no_hold_starts_no_pollers() {
        let p = pool(2);
        let keep_warm = KeepWarm::new(Duration::ZERO);
        keep_warm.wake_all(&p);
        assert_eq!(keep_warm.live(), 0);
        assert_eq!(p.install(|| 1 + 1), 2);
    }

    #[test]
    fn the_hold_comes_from_the_option_then_the_environment() {
        assert_eq!(poll_hold(Some(7)).unwrap(), Duration::from_micros(7));
        // The environment is the process's: only read it, never set it here.
        let env = std::env::var("HETERO_CPU_POLL_US").ok();
        let got = poll_hold(None);
        match env.map(|t| t.trim().parse::<u64>()) {
            None => assert_eq!(got.unwrap(), Duration::from_micros(DEFAULT_POLL_US)),
            Some(Ok(us)) => assert_eq!(got.unwrap(), Duration::from_micros(us)),
            Some(Err(_)) => assert!(got.is_err()),
        }
    }
}
