//! Cold caches for timed runs (`RunParams::cold_cache`).
//!
//! The sweep repeats one GEMM back to back, so a small GEMM's weights stay
//! in the CPU caches between runs; runtime-min runs a layer's operators in
//! turn, so each finds its weights evicted by the others. With
//! `cold_cache`, every timed run is preceded (outside the timer) by writes
//! to a buffer several times the last-level cache (at most 512 MiB where
//! the cache is smaller), so that private and shared caches lose what the
//! last run left. It reaches the host's caches only, not a GPU's own.
//!
//! Who writes matters as much as what is written. [`evict_host_caches`]
//! writes from fresh threads, one per core, while the processor's own
//! workers sleep; [`evict_on`] has a rayon pool's own workers write it, so
//! the GEMM that follows finds them awake, as runtime-min's next operator
//! finds the workers the last one ran on. (An OpenCL device reads a buffer
//! of [`host_buffer_bytes`] with a kernel on its own queue instead,
//! `opencl::DeviceCtx::evict_caches`.) On a 2-core x86-64 machine, a
//! 64×1536×1536 GEMM after the first took 3.3–3.6 ms and after the second
//! 1.8–1.9 ms, the time runtime-min ran it in (1.7–2.1 ms); warm, 1.6 ms.
//! Idle workers alone (an 80 ms sleep instead of the writes) made it
//! 3.5–4.0 ms: a woken pool starts on fewer cores than it has
//! (`docs/benchmarks.md`, Runtime).

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
/// of its socket (a 2-core x86-64 cloud machine reports 480 MiB); four times that,
/// written before every timed run, took 77 ms a run (200 ms in a test
/// build) and left the profile a fifth of its rows.
const MAX_BYTES: usize = 512 << 20;

/// The eviction buffer's size: four times the last-level cache, at least
/// [`MIN_BYTES`], at most [`MAX_BYTES`] or the cache and a sixteenth of it,
/// whichever is larger, so that it always exceeds the cache.
fn buffer_bytes(llc: usize) -> usize {
    (4 * llc).min(MAX_BYTES.max(llc + llc / 16)).max(MIN_BYTES)
}

/// How many bytes a host eviction goes through on this machine (for
/// devices that evict the host's caches with kernels of their own):
/// [`buffer_bytes`] of the last-level cache, or `HETERO_EVICT_MIB` MiB when
/// that is set to a positive number.
pub fn host_buffer_bytes() -> usize {
    static BYTES: OnceLock<usize> = OnceLock::new();
    *BYTES.get_or_init(|| env_bytes().unwrap_or_else(|| buffer_bytes(llc_bytes())))
}

/// The largest rotation ([`rotation_bytes`]) unless `HETERO_EVICT_MIB`
/// sets one.
const MAX_ROTATION_BYTES: usize = 2 << 30;

/// How many bytes of other copies of a case's weights
/// `RunParams::rotate_weights` reads between two runs of one copy: four
/// times the last-level cache, at least [`MIN_BYTES`], at most
/// [`MAX_ROTATION_BYTES`], or `HETERO_EVICT_MIB` MiB when that is set.
/// Unlike an eviction, a rotation costs memory rather than time (copies
/// are read by the timed runs themselves), so it is not held to
/// [`MAX_BYTES`]: on an H100 host's 15 cores, 2 GiB of copies put a
/// decode GEMV at the runtime's time with every layer's weights its own,
/// 512 MiB 2–24 % below it (`docs/benchmarks.md`, Runtime).
pub fn rotation_bytes() -> usize {
    static BYTES: OnceLock<usize> = OnceLock::new();
    *BYTES.get_or_init(|| env_bytes().unwrap_or_else(|| default_rotation_bytes(llc_bytes())))
}

/// [`rotation_bytes`] without `HETERO_EVICT_MIB`.
fn default_rotation_bytes(llc: usize) -> usize {
    (4 * llc).clamp(MIN_BYTES, MAX_ROTATION_BYTES)
}

/// `HETERO_EVICT_MIB` of this process in bytes ([`override_bytes`]).
fn env_bytes() -> Option<usize> {
    override_bytes(std::env::var("HETERO_EVICT_MIB").ok().as_deref())
}

/// `HETERO_EVICT_MIB`'s value in bytes; `None` (the default size) when it
/// is unset, not a number, or zero.
fn override_bytes(mib: Option<&str>) -> Option<usize> {
    let mib = mib?.trim().parse::<usize>().ok().filter(|&m| m > 0)?;
    mib.checked_mul(1 << 20)
}

/// The eviction buffer, in one part per core of the machine, so that
/// threads can write their parts at once.
fn parts() -> &'static [Mutex<Vec<u8>>] {
    static PARTS: OnceLock<Vec<Mutex<Vec<u8>>>> = OnceLock::new();
    PARTS.get_or_init(|| {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        let each = host_buffer_bytes().div_ceil(n);
        (0..n).map(|_| Mutex::new(vec![1u8; each])).collect()
    })
}

/// Bytes between two writes of the eviction: a cache line (64 bytes on
/// x86-64 and on current Arm cores; a 128-byte line is still written
/// twice).
const LINE: usize = 64;

/// Writes one byte of every cache line of a part: each write brings its
/// whole line into the cache (and leaves it dirty), so every line is
/// evicted as if all of it were written, at a 64th of the loop's iterations
/// (an unoptimised test build took about a third of a second a run writing
/// every byte).
fn evict_part(part: &Mutex<Vec<u8>>) {
    let mut b = part.lock().unwrap_or_else(|e| e.into_inner());
    for x in b.iter_mut().step_by(LINE) {
        *x = x.wrapping_add(1);
    }
    std::hint::black_box(&b[0]);
}

/// Writes the whole eviction buffer from fresh threads, one per part (per
/// core): for processors with no eviction of their own.
pub fn evict_host_caches() {
    std::thread::scope(|s| {
        for part in parts() {
            s.spawn(move || evict_part(part));
        }
    });
}

/// Writes the whole eviction buffer from `pool`'s own workers, each taking
/// every `n`-th part (`n` workers), so that they are the threads awake when
/// the timed run starts.
#[cfg(feature = "cpu")]
pub fn evict_on(pool: &rayon::ThreadPool) {
    let parts = parts();
    pool.broadcast(|ctx| {
        for part in parts.iter().skip(ctx.index()).step_by(ctx.num_threads()) {
            evict_part(part);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot() -> Vec<Vec<u8>> {
        parts().iter().map(|p| p.lock().unwrap().clone()).collect()
    }

    /// Every cache line of every part changed between `before` and now.
    fn every_line_written(before: &[Vec<u8>]) {
        for (pi, (a, b)) in snapshot().iter().zip(before).enumerate() {
            for (i, (x, y)) in a.chunks(LINE).zip(b.chunks(LINE)).enumerate() {
                assert!(x != y, "part {pi}, line {i} was not written");
            }
        }
    }

    #[test]
    fn the_buffer_is_larger_than_the_last_level_cache_and_is_written() {
        assert!(llc_bytes() >= 1 << 10);
        let before = snapshot();
        evict_host_caches();
        every_line_written(&before);
        let total: usize = before.iter().map(Vec::len).sum();
        assert!(total >= host_buffer_bytes());
        assert!(total > llc_bytes());
    }

    #[cfg(feature = "cpu")]
    #[test]
    fn a_pool_writes_the_whole_buffer_from_its_own_workers() {
        for threads in [1, 2, 3] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .thread_name(|i| format!("evict-test-{i}"))
                .build()
                .unwrap();
            let before = snapshot();
            evict_on(&pool);
            every_line_written(&before);
        }
    }

    #[test]
    fn the_buffer_is_four_caches_within_its_bounds() {
        assert_eq!(buffer_bytes(8 << 20), 64 << 20);
        assert_eq!(buffer_bytes(32 << 20), 128 << 20);
        assert_eq!(buffer_bytes(480 << 20), 512 << 20);
        assert_eq!(buffer_bytes(1 << 30), (1 << 30) + (64 << 20));
    }

    #[test]
    fn a_rotation_is_four_caches_up_to_2_gib() {
        assert_eq!(default_rotation_bytes(8 << 20), 64 << 20);
        assert_eq!(default_rotation_bytes(105 << 20), 420 << 20);
        assert_eq!(default_rotation_bytes(480 << 20), 1920 << 20);
        assert_eq!(default_rotation_bytes(1 << 30), 2 << 30);
    }

    #[test]
    fn an_eviction_writes_one_byte_of_every_line() {
        let part = Mutex::new(vec![7u8; 5 * LINE + 3]);
        evict_part(&part);
        let b = part.lock().unwrap();
        assert!(b.iter().step_by(LINE).all(|&x| x == 8));
        assert_eq!(b.iter().filter(|&&x| x == 8).count(), 6);
    }

    #[test]
    fn hetero_evict_mib_sets_the_size_in_mib() {
        assert_eq!(override_bytes(Some("2048")), Some(2048 << 20));
        assert_eq!(override_bytes(Some(" 64 ")), Some(64 << 20));
        for default in [None, Some(""), Some("0"), Some("1G"), Some("-5")] {
            assert_eq!(override_bytes(default), None, "{default:?}");
        }
    }
}
