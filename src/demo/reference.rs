//! The reference profile built into `hetero`: the measurements of a GPU
//! host (`datasets/gpu-host-h200`), so that a demo on a machine with one
//! real processor can show how the plan changes with a second one.
//!
//! Only what a fit of `cpu:0` and `cuda:0` reads is built in (about 660
//! KB): the probe and sweep plan (`device.json`), the two processors'
//! sweeps and the microbenchmarks. The demo writes them into its folder
//! and fits them there, as `hetero fit datasets/gpu-host-h200` would; the
//! fitted predictor (about 4 MB) is not stored.

use std::path::Path;

use anyhow::Result;

/// The machine, in words.
pub const MACHINE: &str = "a 16-core Xeon host with one NVIDIA H200 (datasets/gpu-host-h200)";

/// The processors the reference plan uses.
pub const PROCESSORS: [&str; 2] = ["cpu:0", "cuda:0"];

/// The files, by name: the reference dataset as the repository has it.
const FILES: [(&str, &str); 4] = [
    (
        "device.json",
        include_str!("../../datasets/gpu-host-h200/device.json"),
    ),
    (
        "sweep-cpu-0.jsonl",
        include_str!("../../datasets/gpu-host-h200/sweep-cpu-0.jsonl"),
    ),
    (
        "sweep-cuda-0.jsonl",
        include_str!("../../datasets/gpu-host-h200/sweep-cuda-0.jsonl"),
    ),
    (
        "microbench.jsonl",
        include_str!("../../datasets/gpu-host-h200/microbench.jsonl"),
    ),
];

/// Writes the reference dataset into `dir` (created).
pub fn write(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    for (name, text) in FILES {
        hetero_plan::write_atomic(&dir.join(name), text.as_bytes())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_dataset_loads_with_rows_of_both_processors() {
        let dir = std::env::temp_dir().join(format!("hetero-reference-{}", std::process::id()));
        write(&dir).unwrap();
        let ds = hetero_profiler::dataset::Dataset::load(&dir).unwrap();
        for p in PROCESSORS {
            let rows = ds.measurements.iter().filter(|r| r.processor == p).count();
            assert!(rows > 300, "{p}: {rows} rows");
        }
        assert!(!ds.microbench.is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
