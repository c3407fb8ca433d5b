//! The reference profile built into `hetero`: the measurements of a GPU
//! host (`datasets/gpu-host-h200`), so that a demo on a machine with one
//! real processor can show how the plan changes with a second one.
//!
//! Only what a fit of `cpu:0` and `cuda:0` reads is built in (about 660
//! KB): the probe and sweep plan (`device.json`), the two processors'
//! sweeps and the microbenchmarks. The demo writes the rows of the element
//! type each processor is profiled in by default (f32 on the CPU, f16 on
//! the GPU) into its folder and fits them there, as `hetero fit` of that
//! folder would; the fitted predictor (about 4 MB) is not stored.

use std::path::Path;

use anyhow::Result;

/// The machine, in words.
pub const MACHINE: &str = "a 16-core Xeon host with one H200 (datasets/gpu-host-h200)";

/// The processors the reference plan uses.
pub const PROCESSORS: [&str; 2] = ["cpu:0", "cuda:0"];

/// The element type of each, as a profile measures it by default
/// (`Processor::default_dtype`).
const DTYPES: [&str; 2] = ["f32", "f16"];

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

/// True for a line of the built-in files the reference fit uses: every
/// line but the rows of other processors, and the measurements of other
/// element types.
fn keep(line: &str) -> bool {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
        return true;
    };
    let Some(p) = v["processor"].as_str() else {
        return true;
    };
    match PROCESSORS.iter().position(|x| *x == p) {
        None => false,
        Some(i) => v["type"] != "measurement" || v["dtype"] == DTYPES[i],
    }
}

/// Writes the reference dataset into `dir` (created).
pub fn write(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    for (name, text) in FILES {
        let text = if name.ends_with(".jsonl") {
            let lines: Vec<&str> = text.lines().filter(|l| keep(l)).collect();
            lines.join("\n") + "\n"
        } else {
            text.to_string()
        };
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
        for (p, dtype) in PROCESSORS.iter().zip(DTYPES) {
            let rows: Vec<_> = ds
                .measurements
                .iter()
                .filter(|r| r.processor == *p)
                .collect();
            assert!(rows.len() > 200, "{p}: {} rows", rows.len());
            assert!(rows.iter().all(|r| r.dtype.as_str() == dtype), "{p}");
        }
        assert!(!ds.microbench.is_empty());
        assert!(
            ds.microbench
                .iter()
                .all(|r| PROCESSORS.contains(&r.processor.as_str()))
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
