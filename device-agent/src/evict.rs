//! Cold caches for timed runs (`RunParams::cold_cache`).
//!
//! The sweep repeats one GEMM back to back, so a small GEMM's weights stay
//! in the CPU caches between runs; runtime-min runs a layer's operators in
//! turn, so each finds its weights evicted by the others. With
//! `cold_cache`, every timed run is preceded (outside the timer) by writes
//! to a buffer several times the last-level cache (at most 512 MiB where
//! the cache is smaller), from one thread per core, so that private and
//! shared caches lose what the last run left. It reaches the host's caches
//! only, not a GPU's own.

use std::sync::{Mutex, OnceLock};

/// The last-level cache of CPU 0 in bytes, from sysfs; 32 MiB when unknown.
fn llc_bytes() -> usize {
    let base = "/sys/devices/system/cpu/cpu0/cache";
    let mut best = 0;
    for i in 0..8 {
        let Ok(s) = std::fs::read_to_string(format!("{base}/index{i}/size")) else {
            continue;
        };
        let s = s.trim();
        let (num, mult) = match s.strip_suffix('K') {
            Some(n) => (n, 1024),
            None => match s.strip_suffix('M') {
                Some(n) => (n, 1 << 20),
                None => (s, 1),
            },
        };
        if let Ok(v) = num.parse::<usize>() {
            best = best.max(v * mult);
        }
    }
    if best == 0 { 32 << 20 } else { best }
}

/// The smallest eviction buffer.
const MIN_BYTES: usize = 64 << 20;

/// The largest eviction buffer, unless the cache itself is larger. A
/// server's last-level cache can be hundreds of MiB, shared by every core
/// of its socket (a 2-vCPU VM here reports 480 MiB); four times that,
/// written before every timed run, took 77 ms a run (200 ms in a test
/// build) and left the profile a fifth of its rows.
const MAX_BYTES: usize = 512 << 20;

/// The eviction buffer's size: four times the last-level cache, at least
/// [`MIN_BYTES`], at most [`MAX_BYTES`] or the cache and a sixteenth of it,
/// whichever is larger, so that it always exceeds the cache.
fn buffer_bytes(llc: usize) -> usize {
    (4 * llc).min(MAX_BYTES.max(llc + llc / 16)).max(MIN_BYTES)
}

/// The eviction buffer.
fn buffer() -> &'static Mutex<Vec<u8>> {
    static BUF: OnceLock<Mutex<Vec<u8>>> = OnceLock::new();
    BUF.get_or_init(|| Mutex::new(vec![1u8; buffer_bytes(llc_bytes())]))
}

/// Bytes between two writes of the eviction: a cache line (64 bytes on
/// x86-64 and on current Arm cores; a 128-byte line is still written
/// twice).
const LINE: usize = 64;

/// Writes one byte of every cache line of the eviction buffer, split over
/// one thread per core: each write brings its whole line into the cache
/// (and leaves it dirty), so every line is evicted as if all of it were
/// written, at a 64th of the loop's iterations (an unoptimised test build
/// took about a third of a second a run writing every byte).
pub fn evict_host_caches() {
    let mut buf = buffer().lock().unwrap_or_else(|e| e.into_inner());
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = buf.len().div_ceil(threads);
    std::thread::scope(|s| {
        for part in buf.chunks_mut(chunk) {
            s.spawn(move || {
                for b in part.iter_mut().step_by(LINE) {
                    *b = b.wrapping_add(1);
                }
                std::hint::black_box(&part[0]);
            });
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_buffer_is_larger_than_the_last_level_cache_and_is_written() {
        assert!(llc_bytes() >= 1 << 10);
        let before = buffer().lock().unwrap().clone();
        evict_host_caches();
        let after = buffer().lock().unwrap();
        // Every cache line got a write, whatever the chunks' offsets.
        for (i, (a, b)) in after.chunks(LINE).zip(before.chunks(LINE)).enumerate() {
            assert!(a != b, "line {i} was not written");
        }
        assert_eq!(after.len(), buffer_bytes(llc_bytes()));
        assert!(after.len() > llc_bytes());
    }

    #[test]
    fn the_buffer_is_four_caches_within_its_bounds() {
        assert_eq!(buffer_bytes(8 << 20), 64 << 20);
        assert_eq!(buffer_bytes(32 << 20), 128 << 20);
        assert_eq!(buffer_bytes(480 << 20), 512 << 20);
        assert_eq!(buffer_bytes(1 << 30), (1 << 30) + (64 << 20));
    }
}
