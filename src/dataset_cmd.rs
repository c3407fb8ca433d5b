//! `hetero dataset show | merge | export | compare`.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use hetero_profiler::Dataset;
use hetero_profiler::dataset::{DEVICE_FILE, MEASUREMENTS_FILE, MICROBENCH_FILE, Summary};
use hetero_profiler::fit::agreement;

use crate::BadInput;
use crate::outpath::{self, Input, Output};

#[derive(Debug, Subcommand)]
pub enum DatasetCmd {
    /// Rows per processor, time spent and failed rows of a dataset folder.
    #[command(after_help = "Examples:
  hetero dataset show datasets/my-phone
  hetero dataset show /tmp/ds --json     # rows per processor, for scripts")]
    Show(ShowArgs),
    /// Merge datasets of one device into a new folder (each case id once).
    #[command(after_help = "Example:
  hetero dataset merge --out datasets/phone-all datasets/phone-mon datasets/phone-tue")]
    Merge(MergeArgs),
    /// Export the tables of a dataset (CSV).
    #[command(after_help = "Examples:
  hetero dataset export datasets/my-phone --csv              # writes measurements.csv, microbench.csv beside the data
  hetero dataset export datasets/my-phone --csv --out /tmp/csv")]
    Export(ExportArgs),
    /// How two profiles of one device agree on the cases both measured
    /// (test-retest: the ceiling for any predictor scored on one of them).
    #[command(after_help = "Examples:
  hetero dataset compare datasets/phone-mon datasets/phone-tue
  hetero dataset compare /tmp/ds-a /tmp/ds-b --json")]
    Compare(CompareArgs),
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The dataset folder (Parquet, or JSON Lines rows).
    dir: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The new dataset folder.
    #[arg(long)]
    out: PathBuf,
    /// Dataset folders to merge, the first wins for a case id present twice.
    #[arg(required = true, num_args = 2..)]
    inputs: Vec<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The dataset folder.
    dir: PathBuf,
    /// Write CSV (measurements.csv, microbench.csv).
    #[arg(long, required = true)]
    csv: bool,
    /// Folder for the exported files (default: the dataset folder).
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The first profile (differences are relative to its medians).
    first: PathBuf,
    /// The second profile.
    second: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(cmd: DatasetCmd) -> anyhow::Result<()> {
    match cmd {
        DatasetCmd::Show(a) => show(a),
        DatasetCmd::Merge(a) => merge(a),
        DatasetCmd::Export(a) => export(a),
        DatasetCmd::Compare(a) => compare(a),
    }
}

fn folder_name(dir: &Path) -> String {
    dir.canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| dir.display().to_string())
}

fn show(a: ShowArgs) -> anyhow::Result<()> {
    let (ds, src) = Dataset::load_with_sources(&a.dir)?;
    let summary = ds.summary(&folder_name(&a.dir), &src);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print!("{}", table(&summary));
    }
    Ok(())
}

fn table(s: &Summary) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "dataset {} (sha256 {})",
        s.name,
        &s.fingerprint.sha256[..16]
    );
    match &s.device {
        Some(d) => {
            let _ = writeln!(
                o,
                "device: {} ({}, {}) via {}; agent {}",
                d.name, d.arch, d.os, d.transport, d.agent
            );
            for u in &d.unavailable {
                let _ = writeln!(o, "  not opened: {u}");
            }
        }
        None => {
            let _ = writeln!(o, "device: unknown (no {DEVICE_FILE})");
        }
    }
    if let Some(secs) = s.seconds {
        let _ = writeln!(o, "time spent profiling: {secs:.1} s");
    }
    let _ = writeln!(
        o,
        "rows: {} measurements, {} microbenchmarks",
        s.measurements, s.microbench
    );
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "{:<16} {:>6} {:>6} {:>6} {:>6} {:>6} {:>7} {:>6} {:>6} {:>5} {:>9}  dtypes",
        "processor",
        "rows",
        "usable",
        "ok",
        "failed",
        "unsup",
        "timeout",
        "error",
        "shapes",
        "bench",
        "busy s"
    );
    for p in &s.processors {
        let _ = writeln!(
            o,
            "{:<16} {:>6} {:>6} {:>6} {:>6} {:>6} {:>7} {:>6} {:>6} {:>5} {:>9.2}  {}{}",
            p.id,
            p.rows,
            p.usable,
            p.ok,
            p.failed,
            p.unsupported,
            p.timeout,
            p.error,
            p.shapes,
            p.microbench,
            p.measured_seconds,
            p.dtypes.join(","),
            if p.timing.is_empty() {
                String::new()
            } else {
                format!("  [{}]", p.timing.join(","))
            }
        );
    }
    if !s.failed.is_empty() {
        let _ = writeln!(o);
        let _ = writeln!(o, "failed rows ({}):", s.failed.len());
        for f in s.failed.iter().take(20) {
            let _ = writeln!(o, "  {} [{}] {}", f.case_id, f.status, f.message);
        }
        if s.failed.len() > 20 {
            let _ = writeln!(o, "  ... {} more (--json lists all)", s.failed.len() - 20);
        }
    }
    if s.sources.unfinished_rows > 0 {
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            "unfinished: {} row(s) in journal.jsonl are not in the tables; finish with \
             `hetero profile --resume`",
            s.sources.unfinished_rows
        );
    }
    for n in &s.sources.notes {
        let _ = writeln!(o, "note: {n}");
    }
    if !s.sources.skipped_lines.is_empty() {
        let _ = writeln!(
            o,
            "skipped {} line(s) that are not rows, e.g. {}",
            s.sources.skipped_lines.len(),
            s.sources.skipped_lines[0]
        );
    }
    o
}

fn merge(a: MergeArgs) -> anyhow::Result<()> {
    let inputs: Vec<Input<'_>> = a.inputs.iter().map(|p| ("DATASET", p.as_path())).collect();
    outpath::check(&inputs, &[Output::dataset("--out", &a.out)])?;
    if a.out.exists()
        && std::fs::read_dir(&a.out)
            .map(|mut d| d.next().is_some())
            .unwrap_or(true)
    {
        return Err(BadInput(format!(
            "--out {}: exists and is not empty; merge into a new folder",
            a.out.display()
        ))
        .into());
    }
    let mut parts = Vec::new();
    for p in &a.inputs {
        parts.push((p.clone(), Dataset::load(p)?));
    }
    let (merged, dropped) = Dataset::merge(&parts)?;
    merged.save(&a.out)?;
    println!(
        "wrote {}: {} measurements, {} microbenchmarks from {} datasets ({} duplicate case ids dropped); {} {}",
        a.out.display(),
        merged.measurements.len(),
        merged.microbench.len(),
        parts.len(),
        dropped,
        MEASUREMENTS_FILE,
        MICROBENCH_FILE,
    );
    Ok(())
}

fn export(a: ExportArgs) -> anyhow::Result<()> {
    debug_assert!(a.csv, "clap requires --csv");
    let ds = Dataset::load(&a.dir)?;
    // The CSV files go beside the dataset's rows by default; the guard
    // keeps them out of any other dataset's subfolders.
    let out = a.out.unwrap_or_else(|| a.dir.clone());
    outpath::check(&[], &[Output::dataset("--out", &out)])?;
    for f in ds.export_csv(&out)? {
        println!("wrote {}", f.display());
    }
    Ok(())
}

fn compare(a: CompareArgs) -> anyhow::Result<()> {
    let first = Dataset::load(&a.first)?;
    let second = Dataset::load(&a.second)?;
    let groups = agreement(&first.measurements, &second.measurements);
    if groups.is_empty() {
        return Err(BadInput(format!(
            "{} and {}: no usable case (ok and verified) was measured in both",
            a.first.display(),
            a.second.display()
        ))
        .into());
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&groups)?);
        return Ok(());
    }
    println!(
        "{} against {}: each case's median, (second - first) / first",
        a.second.display(),
        a.first.display()
    );
    println!(
        "{:<16} {:<6} {:>6} {:>7} {:>7} {:>7} {:>14} {:>7}",
        "processor", "dtype", "pairs", "±5 %", "±10 %", "±20 %", "median diff %", "ratio"
    );
    for g in &groups {
        println!(
            "{:<16} {:<6} {:>6} {:>6.1}% {:>6.1}% {:>6.1}% {:>14.2} {:>7.3}",
            g.processor,
            g.dtype.as_str(),
            g.pairs,
            100.0 * g.within_5pct,
            100.0 * g.within_10pct,
            100.0 * g.within_20pct,
            g.median_abs_diff_pct,
            g.median_ratio
        );
    }
    for g in &groups {
        if let Some(w) = g.worst.first() {
            println!(
                "  furthest apart {} {}: {} {:.1} µs, then {:.1} µs ({:+.1} %)",
                g.processor, g.dtype, w.case_id, w.first_us, w.second_us, w.diff_pct
            );
        }
    }
    Ok(())
}
