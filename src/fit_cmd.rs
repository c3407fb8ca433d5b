//! `hetero fit`: latency models from a dataset.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use hetero_plan::{DeviceProfile, Fingerprint, MeasurementRow, MicrobenchRow};
use hetero_profiler::fit::{self, FitError, FitParams, Report};

use crate::BadInput;

#[derive(Debug, Args)]
#[command(after_help = "Example:\n  hetero fit /tmp/ds --out /tmp/p.ron --report /tmp/r.json")]
pub struct FitArgs {
    /// A dataset folder written by `hetero profile` (device.json plus rows).
    dataset: PathBuf,
    /// Where to write the predictor (.ron or .json).
    #[arg(long)]
    out: PathBuf,
    /// Also write the fit report as JSON.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Folds of the cross-validation.
    #[arg(long, default_value_t = 5)]
    folds: usize,
}

/// A dataset as the fitter needs it.
pub struct Loaded {
    pub profile: DeviceProfile,
    pub rows: Vec<MeasurementRow>,
    pub micro: Vec<MicrobenchRow>,
    pub fingerprint: Fingerprint,
}

fn read_jsonl<T: serde::de::DeserializeOwned>(path: &Path) -> anyhow::Result<Vec<T>> {
    if !path.exists() {
        return Ok(Vec::new());
    }
    let text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| {
                BadInput(format!("{}:{}:{}: {e}", path.display(), i + 1, e.column())).into()
            })
        })
        .collect()
}

/// Loads `device.json` plus `measurements.jsonl` / `microbench.jsonl`.
pub fn load_dataset(dir: &Path) -> anyhow::Result<Loaded> {
    if !dir.is_dir() {
        return Err(BadInput(format!("{}: not a dataset folder", dir.display())).into());
    }
    let profile: DeviceProfile = hetero_plan::load(&dir.join("device.json"))?;
    let rows: Vec<MeasurementRow> = read_jsonl(&dir.join("measurements.jsonl"))?;
    let micro: Vec<MicrobenchRow> = read_jsonl(&dir.join("microbench.jsonl"))?;
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let fingerprint = Fingerprint::of(name, &(&profile.processors, &rows, &micro));
    Ok(Loaded {
        profile,
        rows,
        micro,
        fingerprint,
    })
}

pub fn print_report(report: &Report) {
    println!(
        "{:<16} {:<6} {:<10} {:<13} {:>8} {:>8} {:>8} {:>8}",
        "processor", "dtype", "timing", "model", "MAPE %", "±10 %", "±20 %", "samples"
    );
    for e in &report.entries {
        println!(
            "{:<16} {:<6} {:<10} {:<13} {:>8.2} {:>7.1}% {:>7.1}% {:>8}",
            e.processor,
            e.dtype.as_str(),
            format!("{:?}", e.timing).to_lowercase(),
            e.model,
            e.mape,
            100.0 * e.within_10pct,
            100.0 * e.within_20pct,
            e.samples
        );
    }
    for e in &report.entries {
        if let Some(w) = e.worst.first() {
            println!(
                "  worst {} {}: {} {} measured {:.1} µs, predicted {:.1} µs ({:+.1} %)",
                e.processor, e.dtype, w.shape, w.order, w.measured_us, w.predicted_us, w.error_pct
            );
        }
    }
    for s in &report.skipped {
        println!("  skipped (too few rows): {s}");
    }
}

pub fn run(args: FitArgs) -> anyhow::Result<()> {
    let data = load_dataset(&args.dataset)?;
    let params = FitParams {
        folds: args.folds,
        ..FitParams::default()
    };
    let (predictor, report) = fit::fit(
        &data.profile,
        data.fingerprint,
        &data.rows,
        &data.micro,
        &params,
    )
    .map_err(|e: FitError| BadInput(format!("{}: {e}", args.dataset.display())))?;
    hetero_plan::save(&args.out, &predictor)?;
    if let Some(path) = &args.report {
        let text = serde_json::to_string_pretty(&report)? + "\n";
        hetero_plan::write_atomic(path, text.as_bytes())?;
    }
    print_report(&report);
    println!("predictor: {}", args.out.display());
    Ok(())
}
