//! Tile sizes, their autotuning and the on-disk cache of the choice.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use hetero_plan::DType;
use serde::{Deserialize, Serialize};

use super::DeviceCtx;

/// The kernel family of a tile (see `kernels.cl`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// Operands staged in local memory: the usual GPU tiling.
    Lmem,
    /// No local memory; each work-item reads Y rows with `vloadN`
    /// (`Y[K,S]` row-major).
    Direct,
    /// No local memory; Y is stored transposed (`Yᵀ[S,K]`) and each
    /// work-item runs dot products along K with `vloadN` on both operands,
    /// K-contiguous: the CPU and GEMV layout.
    Dot,
}

/// The tiling of the GEMM kernel (`kernels.cl`): a work-group computes a
/// `tr × ts` block of the output, each work-item `wr` rows by `ws`
/// columns. `Lmem` stages `tk` columns of K at a time in local memory;
/// `Direct` works on vectors of `vw` columns (so `ws` vectors); `Dot` on
/// vectors of `vw` along K.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Tile {
    /// Kernel family.
    pub family: Family,
    /// Output rows per work-group.
    pub tr: u32,
    /// Output columns per work-group.
    pub ts: u32,
    /// K slice staged in local memory per step (`Lmem` only).
    pub tk: u32,
    /// Output rows per work-item.
    pub wr: u32,
    /// Output columns (vectors of `vw`, for `Direct`) per work-item.
    pub ws: u32,
    /// Vector width (1, 2, 4, 8 or 16; 1 for `Lmem`).
    pub vw: u32,
}

impl fmt::Display for Tile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.family {
            Family::Lmem => write!(
                f,
                "lmem {}x{}x{} {}x{}",
                self.tr, self.ts, self.tk, self.wr, self.ws
            ),
            Family::Direct => write!(
                f,
                "direct {}x{} {}x{}v{}",
                self.tr, self.ts, self.wr, self.ws, self.vw
            ),
            Family::Dot => write!(
                f,
                "dot {}x{} {}x{} k{}",
                self.tr, self.ts, self.wr, self.ws, self.vw
            ),
        }
    }
}

impl Tile {
    /// Work-group size `[columns, rows]` (dimension 0 runs along the output row).
    pub fn local(&self) -> [usize; 2] {
        let cols_per_item = match self.family {
            Family::Direct => self.ws * self.vw,
            Family::Lmem | Family::Dot => self.ws,
        };
        [
            (self.ts / cols_per_item) as usize,
            (self.tr / self.wr) as usize,
        ]
    }

    /// Local memory the kernel stages, bytes (f32 tiles whatever the dtype).
    pub fn local_mem_bytes(&self) -> u64 {
        match self.family {
            Family::Lmem => 4 * u64::from(self.tk) * u64::from(self.tr + self.ts),
            Family::Direct | Family::Dot => 0,
        }
    }

    /// The vector width the Y / C row pitch must be a multiple of (`Direct`).
    pub(crate) fn col_align(&self) -> usize {
        match self.family {
            Family::Direct => self.vw as usize,
            Family::Lmem | Family::Dot => 1,
        }
    }

    /// The vector width the K pitch must be a multiple of (`Dot`).
    pub(crate) fn k_align(&self) -> usize {
        match self.family {
            Family::Dot => self.vw as usize,
            Family::Lmem | Family::Direct => 1,
        }
    }

    /// The `-D` options that instantiate the kernel with this tile.
    pub(crate) fn build_options(&self, dtype: DType) -> String {
        let mut o = format!(
            "-cl-std=CL1.2 -cl-mad-enable -DTR={} -DTS={} -DTK={} -DWR={} -DWS={} -DVW={}",
            self.tr, self.ts, self.tk, self.wr, self.ws, self.vw
        );
        if dtype == DType::F16 {
            o.push_str(" -DHALF");
        }
        match self.family {
            Family::Lmem => {}
            Family::Direct => o.push_str(" -DDIRECT"),
            Family::Dot => o.push_str(" -DDOT"),
        }
        o
    }

    /// Whether the device can run a work-group of this tile; `None` if it can.
    pub(crate) fn unfit_reason(&self, dev: &DeviceCtx) -> Option<String> {
        let [l0, l1] = self.local();
        if l0 == 0
            || l1 == 0
            || self.tr % self.wr != 0
            || self.ts as usize % l0 != 0
            || self.ts as usize / l0
                != match self.family {
                    Family::Direct => (self.ws * self.vw) as usize,
                    _ => self.ws as usize,
                }
        {
            return Some("tile not a multiple of the work per item".into());
        }
        if !matches!(self.vw, 1 | 2 | 4 | 8 | 16) || (self.family == Family::Lmem && self.vw != 1) {
            return Some(format!("vector width {} not allowed here", self.vw));
        }
        if l0 * l1 > dev.max_work_group {
            return Some(format!(
                "work-group {} > device maximum {}",
                l0 * l1,
                dev.max_work_group
            ));
        }
        if dev.max_item_sizes.len() >= 2
            && (l0 > dev.max_item_sizes[0] || l1 > dev.max_item_sizes[1])
        {
            return Some(format!(
                "work-group {l0}x{l1} exceeds item sizes {:?}",
                dev.max_item_sizes
            ));
        }
        if self.local_mem_bytes() > dev.local_mem {
            return Some(format!(
                "{} bytes of local memory > device {}",
                self.local_mem_bytes(),
                dev.local_mem
            ));
        }
        None
    }
}

const fn lmem(tr: u32, ts: u32, tk: u32, wr: u32, ws: u32) -> Tile {
    Tile {
        family: Family::Lmem,
        tr,
        ts,
        tk,
        wr,
        ws,
        vw: 1,
    }
}

/// A [`Family::Direct`] tile: the fields of a [`dot`] one (no TK either).
const fn direct(tr: u32, ts: u32, wr: u32, ws: u32, vw: u32) -> Tile {
    Tile {
        family: Family::Direct,
        ..dot(tr, ts, wr, ws, vw)
    }
}

const fn dot(tr: u32, ts: u32, wr: u32, ws: u32, vw: u32) -> Tile {
    Tile {
        family: Family::Dot,
        tr,
        ts,
        tk: 1,
        wr,
        ws,
        vw,
    }
}

/// The tiles the autotuner tries. Those that do not fit a device's limits
/// are skipped there.
pub const CANDIDATES: &[Tile] = &[
    // Local memory: one output per item on 16×16 items (the textbook
    // tiling), then 2×2, 4×4 and 8×4 per item.
    lmem(16, 16, 16, 1, 1),
    lmem(32, 32, 16, 2, 2),
    lmem(64, 64, 16, 4, 4),
    lmem(64, 64, 8, 8, 4),
    // Direct: `wr` consecutive rows × `ws` vectors of `vw` columns.
    direct(4, 128, 4, 2, 4),
    direct(32, 64, 8, 1, 4),
    direct(6, 128, 6, 1, 16),
    direct(8, 128, 8, 2, 16),
    // Dot: `wr` rows × `ws` columns, K in vectors of `vw`.
    dot(4, 32, 4, 4, 16),
    dot(4, 32, 4, 4, 8),
    dot(16, 64, 4, 4, 4),
];

/// The shape the autotuner times candidates on (`M×K×N`, operand order `aw`).
pub const TUNE_SHAPE: (u32, u32, u32) = (512, 512, 512);

/// While the best candidate takes less than this on the tuning shape, µs,
/// the tuner doubles the shape's edge and times the survivors again.
pub const ESCALATE_BELOW_US: f64 = 2000.0;

/// The largest edge the tuner escalates to.
pub const MAX_TUNE_EDGE: u32 = 2048;

/// A shape with no dimension a multiple of any tile edge, on which every
/// candidate's output is checked in full before it is timed.
pub const CHECK_SHAPE: (u32, u32, u32) = (67, 45, 93);

/// One candidate's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trial {
    /// The tile.
    pub tile: Tile,
    /// Fastest of five kernel times on the report's final tuning shape, µs
    /// (absent when it failed). The fastest, not the median: other load on
    /// the machine only ever adds time.
    pub best_us: Option<f64>,
    /// Why it was not timed or was rejected.
    pub error: Option<String>,
}

/// Where a device's tile came from.
#[derive(Debug, Clone, PartialEq)]
pub struct TuneReport {
    /// Element type tuned for.
    pub dtype: DType,
    /// The chosen tile.
    pub tile: Tile,
    /// The shape (`M, K, N`) the final timings were taken on.
    pub shape: (u32, u32, u32),
    /// Read from the cache file, no tuning run.
    pub from_cache: bool,
    /// The cache file used, if any.
    pub cache_file: Option<PathBuf>,
    /// The candidates tried (empty when read from the cache).
    pub trials: Vec<Trial>,
}

/// One remembered choice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CacheEntry {
    /// The chosen tile.
    pub tile: Tile,
    /// Its median kernel time on `shape`, µs.
    pub best_us: f64,
    /// The tuning shape `[M, K, N]`.
    pub shape: [u32; 3],
    /// When it was tuned, ms since the Unix epoch.
    pub tuned_ms: u64,
}

/// The cache file: one entry per platform, device, driver, dtype and kernel
/// source.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CacheFile {
    /// Format version of this file.
    pub version: u32,
    /// Entries by key (see [`cache_key`]).
    pub entries: BTreeMap<String, CacheEntry>,
}

const CACHE_VERSION: u32 = 3;
/// The cache file's name inside the cache folder.
pub const CACHE_FILE: &str = "opencl-tune.json";

/// The cache folder: `cache_dir` when given, else `$XDG_CACHE_HOME/hetero`,
/// else `$HOME/.cache/hetero`; `None` when none is known.
pub fn cache_dir(explicit: Option<&Path>) -> Option<PathBuf> {
    if let Some(d) = explicit {
        return Some(d.to_path_buf());
    }
    let nonempty = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(x) = nonempty("XDG_CACHE_HOME") {
        return Some(PathBuf::from(x).join("hetero"));
    }
    nonempty("HOME").map(|h| PathBuf::from(h).join(".cache").join("hetero"))
}

/// A stable 64-bit FNV-1a hash, so a change to the kernel source retunes.
pub(crate) fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The key of a device's entry: platform, device, driver, dtype and a hash
/// of the kernel source.
pub fn cache_key(platform: &str, device: &str, driver: &str, dtype: DType) -> String {
    format!(
        "{platform} | {device} | {driver} | {} | src {:016x}",
        dtype.as_str(),
        fnv1a(super::GEMM_SOURCE)
    )
}

/// Serialises read-modify-write of cache files within this process
/// (`write_atomic`'s temporary name is per process).
static CACHE_LOCK: Mutex<()> = Mutex::new(());

/// Reads an entry; a missing or unreadable file is an empty cache (an
/// unreadable one is reported on stderr and replaced on the next store).
pub fn cache_lookup(file: &Path, key: &str) -> Option<CacheEntry> {
    let _g = CACHE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    read_cache(file).entries.get(key).cloned()
}

fn read_cache(file: &Path) -> CacheFile {
    match std::fs::read_to_string(file) {
        Ok(text) => match serde_json::from_str::<CacheFile>(&text) {
            Ok(c) if c.version == CACHE_VERSION => c,
            Ok(c) => {
                eprintln!(
                    "opencl: ignoring {} (version {}, expected {CACHE_VERSION})",
                    file.display(),
                    c.version
                );
                CacheFile::default()
            }
            Err(e) => {
                eprintln!("opencl: ignoring unreadable {}: {e}", file.display());
                CacheFile::default()
            }
        },
        Err(_) => CacheFile::default(),
    }
}

/// Adds or replaces an entry, writing the file atomically.
pub fn cache_store(file: &Path, key: &str, entry: CacheEntry) -> crate::Result<()> {
    let _g = CACHE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let mut cache = read_cache(file);
    cache.version = CACHE_VERSION;
    cache.entries.insert(key.to_string(), entry);
    let text = serde_json::to_string_pretty(&cache)
        .map_err(|e| crate::Error::backend("opencl", format!("serialising the tune cache: {e}")))?;
    let fail = |e: String| {
        crate::Error::backend(
            "opencl",
            format!("writing tune cache {}: {e}", file.display()),
        )
    };
    if let Some(parent) = file.parent() {
        std::fs::create_dir_all(parent).map_err(|e| fail(e.to_string()))?;
    }
    hetero_plan::write_atomic(file, text.as_bytes()).map_err(|e| fail(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_are_consistent() {
        for t in CANDIDATES {
            assert_eq!(t.tr % t.wr, 0, "{t}");
            let [a, b] = t.local();
            assert!(a > 0 && b > 0, "{t}");
            assert!(a * b <= 256, "{t}: work-group {a}x{b}");
            assert!(t.local_mem_bytes() <= 16 * 1024, "{t}");
        }
    }

    #[test]
    fn cache_round_trip_and_replacement() {
        let dir = std::env::temp_dir().join(format!("hetero-tune-unit-{}", std::process::id()));
        let file = dir.join(CACHE_FILE);
        let _ = std::fs::remove_dir_all(&dir);
        assert!(cache_lookup(&file, "k").is_none());
        let e = CacheEntry {
            tile: CANDIDATES[1],
            best_us: 12.5,
            shape: [512, 512, 512],
            tuned_ms: 1,
        };
        cache_store(&file, "k", e.clone()).unwrap();
        assert_eq!(cache_lookup(&file, "k"), Some(e.clone()));
        let e2 = CacheEntry {
            tile: CANDIDATES[2],
            ..e.clone()
        };
        cache_store(&file, "other", e2.clone()).unwrap();
        assert_eq!(cache_lookup(&file, "k"), Some(e));
        assert_eq!(cache_lookup(&file, "other"), Some(e2));
        // A corrupt file is an empty cache, and the next store replaces it.
        std::fs::write(&file, "{ not json").unwrap();
        assert!(cache_lookup(&file, "k").is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn cache_dir_prefers_the_explicit_folder() {
        let d = Path::new("/tmp/x");
        assert_eq!(cache_dir(Some(d)), Some(d.to_path_buf()));
    }

    #[test]
    fn keys_differ_by_dtype_and_driver() {
        let a = cache_key("P", "D", "1.0", DType::F32);
        assert_ne!(a, cache_key("P", "D", "1.0", DType::F16));
        assert_ne!(a, cache_key("P", "D", "1.1", DType::F32));
    }
}
