//! `hetero fit`: latency models from a dataset.

use std::path::{Path, PathBuf};

use clap::Args;
use hetero_plan::{
    DeviceProfile, Fingerprint, MeasurementRow, MicrobenchKind, MicrobenchRow, Overheads, RowStatus,
};
use hetero_profiler::fit::{self, FitError, FitParams, Report, TestRun};

use crate::BadInput;
use crate::outpath::{self, Output};

#[derive(Debug, Args)]
#[command(after_help = "Examples:
  hetero fit /tmp/ds --out /tmp/p.ron --report /tmp/r.json
  hetero fit /tmp/ds --out /tmp/p.ron --test /tmp/ds-again   # scored on a second profile")]
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
    /// Leave out rows whose cv over their timed runs is above this (e.g.
    /// 0.1); the report counts them per processor. Default: keep all.
    #[arg(long)]
    max_cv: Option<f64>,
    /// A second profile of the same device to test the predictor on: every
    /// usable row of it is predicted, and the cases both profiles measured
    /// are compared (how far two runs agree bounds any predictor).
    #[arg(long, value_name = "DATASET")]
    test: Option<PathBuf>,
    /// Predict every shape from the model. By default the predictor also
    /// keeps the profile's medians of the shapes it measured, and answers
    /// those shapes with them (HeteroLLM's real-execution mode).
    #[arg(long)]
    model_only: bool,
    /// Fit only the rows measured under these conditions, as
    /// KEY=VALUE[,KEY=VALUE...] (cache=warm|cold, rotate_weights=on|off,
    /// timer=kernel|ordinary, cpu_groups=G, host_cores=N): for a dataset
    /// resumed with --allow-mixed, whose rows are refused together.
    #[arg(long, value_name = "KEY=VALUE,...")]
    conditions: Option<String>,
}

/// A dataset as the fitter needs it.
pub struct Loaded {
    pub profile: DeviceProfile,
    pub rows: Vec<MeasurementRow>,
    pub micro: Vec<MicrobenchRow>,
    /// What the agent said each microbenchmark measured, by case id.
    pub notes: std::collections::BTreeMap<String, String>,
    pub fingerprint: Fingerprint,
}

/// Loads a dataset folder through [`hetero_profiler::Dataset::load`]:
/// `device.json` plus the Parquet tables `hetero profile` writes, or JSON
/// Lines rows (`measurements.jsonl`, ...). Lines that are not rows are an
/// error here: fitting must not silently drop data.
pub fn load_dataset(dir: &Path) -> anyhow::Result<Loaded> {
    let (ds, src) = hetero_profiler::Dataset::load_with_sources(dir)?;
    if let Some(line) = src.skipped_lines.first() {
        return Err(BadInput(line.clone()).into());
    }
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let fingerprint = ds.fingerprint(name);
    let Some(profile) = ds.profile else {
        return Err(BadInput(format!(
            "{}: missing device.json (the processors of the device)",
            dir.display()
        ))
        .into());
    };
    Ok(Loaded {
        profile,
        rows: ds.measurements,
        micro: ds.microbench,
        notes: ds.notes,
        fingerprint,
    })
}

pub fn print_report(report: &Report) {
    println!(
        "{:<16} {:<6} {:<10} {:<15} {:>8} {:>8} {:>8} {:>8}",
        "processor", "dtype", "timing", "model", "MAPE %", "±10 %", "±20 %", "samples"
    );
    for e in &report.entries {
        println!(
            "{:<16} {:<6} {:<10} {:<15} {:>8.2} {:>7.1}% {:>7.1}% {:>8}",
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
        println!("{}", accuracy_line(e));
    }
    for e in &report.entries {
        if let Some(w) = e.worst.first() {
            println!(
                "  worst {} {}: {} {} measured {:.1} µs, predicted {:.1} µs ({:+.1} %)",
                e.processor, e.dtype, w.shape, w.order, w.measured_us, w.predicted_us, w.error_pct
            );
        }
    }
    for e in &report.entries {
        if let Some(l) = e.launch_us {
            println!(
                "  launch {} {}: kernels timed alone (scores above); {l:.1} µs of launch path added to every prediction",
                e.processor, e.dtype
            );
        }
    }
    for e in &report.entries {
        let bands: Vec<String> = e
            .by_cv
            .iter()
            .map(|b| {
                let range = match b.up_to {
                    Some(h) if b.above > 0.0 => format!("{} < cv ≤ {h}", b.above),
                    Some(h) => format!("cv ≤ {h}"),
                    None => format!("cv > {}", b.above),
                };
                format!(
                    "{range}: {} rows, {:.1}% within ±10 %",
                    b.rows,
                    100.0 * b.within_10pct
                )
            })
            .collect();
        if e.by_cv.len() > 1 {
            println!(
                "  by noise {} {}: {}",
                e.processor,
                e.dtype,
                bands.join("; ")
            );
        }
        if let Some(c) = e.noise_ceiling_10pct {
            println!(
                "  noise ceiling {} {}: a perfect model would put {:.1}% within ±10 % given each row's own scatter (cv, runs); drift between runs comes on top: measure it with --test",
                e.processor,
                e.dtype,
                100.0 * c
            );
        }
    }
    if let Some(c) = report.max_cv {
        for e in report.entries.iter().filter(|e| e.excluded_noisy > 0) {
            println!(
                "  left out {} {}: {} row(s) with cv above {c}",
                e.processor, e.dtype, e.excluded_noisy
            );
        }
    }
    for s in &report.skipped {
        println!("  skipped (too few rows): {s}");
    }
    if !report.skipped_microbench.is_empty() {
        println!(
            "  microbenchmarks: the profile's budget skipped {} repeat(s) (listed in its budget.json); \
             hetero profile --resume with a longer --budget measures them",
            report.skipped_microbench.len()
        );
    }
}

/// The predictor's share within ±10 % beside the repeatability of the
/// measurements it is scored on (`cpu:0 f32  predictor 58 % within ±10 %
/// · repeatability 80 % (ceiling)`).
fn accuracy_line(e: &fit::ReportEntry) -> String {
    let head = format!(
        "  {} {}  predictor {:.0} % within ±10 %",
        e.processor,
        e.dtype,
        100.0 * e.within_10pct
    );
    match &e.repeatability {
        Some(r) => format!(
            "{head}  ·  repeatability {:.0} % (ceiling; {} case(s) measured twice, median {:.1} % apart)",
            100.0 * r.within_10pct,
            r.pairs,
            r.median_abs_diff_pct
        ),
        None => format!("{head}  ·  repeatability not measured (the dataset has no repeat pass)"),
    }
}

pub fn run(args: FitArgs) -> anyhow::Result<()> {
    if let Some(c) = args.max_cv
        && !(c.is_finite() && c > 0.0)
    {
        return Err(BadInput(format!("--max-cv: must be a positive number, got {c}")).into());
    }
    let conditions = match &args.conditions {
        Some(text) => Some(
            hetero_plan::Setup::parse_pairs(text)
                .map_err(|e| BadInput(format!("--conditions: {e}")))?,
        ),
        None => None,
    };
    check_outputs(&args)?;
    let data = load_dataset(&args.dataset)?;
    let params = FitParams {
        folds: args.folds,
        max_cv: args.max_cv,
        measured: !args.model_only,
        conditions,
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
    let mut report = report;
    if let Some(plan) = hetero_profiler::profile::budget::read(&args.dataset)? {
        report.skipped_microbench = plan.skipped_microbench;
    }
    if let Some(dir) = &args.test {
        report.test = Some(test_run(&predictor, &data.rows, dir)?);
    }
    hetero_plan::save(&args.out, &predictor)?;
    if let Some(path) = &args.report {
        let text = serde_json::to_string_pretty(&report)? + "\n";
        hetero_plan::write_atomic(path, text.as_bytes())?;
    }
    print_report(&report);
    for line in bandwidth_notes(&predictor.overheads, &data.micro, &data.notes) {
        println!("{line}");
    }
    for line in overhead_notes(&predictor.overheads) {
        println!("{line}");
    }
    if let (Some(t), Some(dir)) = (&report.test, &args.test) {
        print_test(t, dir);
    }
    let kept: Vec<String> = predictor
        .models
        .iter()
        .filter(|m| !m.measured.is_empty())
        .map(|m| format!("{} {} {}", m.processor, m.dtype, m.measured.len()))
        .collect();
    if !kept.is_empty() {
        println!(
            "measured shapes kept (answered with their medians; --model-only drops them): {}",
            kept.join(", ")
        );
    }
    println!("predictor: {}", args.out.display());
    Ok(())
}

/// Refuses outputs over the inputs or into a dataset folder (exit 2).
fn check_outputs(args: &FitArgs) -> anyhow::Result<()> {
    let mut inputs = vec![("DATASET", args.dataset.as_path())];
    if let Some(t) = &args.test {
        inputs.push(("--test", t));
    }
    let mut outputs = vec![Output::file("--out", &args.out)];
    if let Some(r) = &args.report {
        outputs.push(Output::file("--report", r));
    }
    outpath::check(&inputs, &outputs)
}

/// Each device-timed processor's launch overhead beside the one after a
/// processor on host memory has run, where both were measured: the solver
/// charges the difference to its operators alone in offload mode.
fn overhead_notes(overheads: &[Overheads]) -> Vec<String> {
    overheads
        .iter()
        .filter_map(|o| {
            let after = o.launch_overhead_after_cpu_us?;
            let alone = o.op_overhead_us?;
            let block = o
                .op_overhead_block_us
                .map_or(String::new(), |b| format!(" polling, {b:.1} blocking"));
            Some(format!(
                "  operator overhead {}: {alone:.1} µs{block} with nothing before it; {after:.1} after a CPU part (both waits alternately; the solver's cost in offload mode)",
                o.processor
            ))
        })
        .collect()
}

/// A bandwidth row taken while the host's speed probe read this many times
/// its processor's median is flagged: the host was busy with something else.
const SLOW_HOST_PROBE: f64 = 1.5;

/// Each processor's concurrent-bandwidth factor, which the solver slows a
/// part beside another processor's traffic by, and a warning for each
/// bandwidth row behind it that was taken while the host ran slow: one such
/// row of a few runs can steer a plan (the CPU of a host with one H100 read
/// 0.17 beside its GPU's copies once, with the probe at twice its median,
/// and about 1 on other machines).
///
/// A discrete GPU's bandwidth GEMV copies its weights from page-locked host
/// memory at every run where its backend can, and its rows say so
/// ([`GemvStream::host_weights`](hetero_plan::GemvStream); the notes,
/// `notes` by case id, of rows from older agents): its factor is then its
/// weight copies' (offload's CG rows), as the line says.
fn bandwidth_notes(
    overheads: &[Overheads],
    micro: &[MicrobenchRow],
    notes: &std::collections::BTreeMap<String, String>,
) -> Vec<String> {
    let mut out = Vec::new();
    for o in overheads {
        let Some(factor) = o.concurrent_factor else {
            continue;
        };
        let copies = micro.iter().any(|r| {
            r.processor == o.processor
                && r.bench == MicrobenchKind::BandwidthConcurrent
                && match r.stream {
                    Some(timed) => timed.host_weights,
                    None => legacy_note_says_host_weights(notes.get(&r.case_id)),
                }
        });
        let what = if copies {
            " (its weight copies from host memory)"
        } else {
            ""
        };
        let alone = o
            .bandwidth_gbps
            .map_or(String::new(), |g| format!(" ({g:.1} GB/s alone)"));
        let clamp = if factor > 1.0 {
            "; the solver takes it as 1"
        } else {
            ""
        };
        out.push(format!(
            "  bandwidth {}{what}: {factor:.2} of its speed alone beside its peer{alone}{clamp}",
            o.processor
        ));
        let Some(median) = o.host_probe_us.filter(|m| *m > 0.0) else {
            continue;
        };
        for r in micro.iter().filter(|r| {
            r.processor == o.processor
                && r.status == RowStatus::Ok
                && matches!(
                    r.bench,
                    MicrobenchKind::BandwidthAlone | MicrobenchKind::BandwidthConcurrent
                )
        }) {
            let Some(probe) = r.conditions.host_probe_us else {
                continue;
            };
            if probe > SLOW_HOST_PROBE * median {
                out.push(format!(
                    "  warning: {} was measured while the host ran slow (speed probe {probe:.1} µs, {:.1}× this processor's median {median:.1} µs); measure the pair again (hetero profile --max-cases 1 --no-refine) and merge that dataset first",
                    r.case_id,
                    probe / median
                ));
            }
        }
    }
    out
}

/// Whether the note of a bandwidth row from an older agent, which lacks
/// [`MicrobenchRow::stream`], says that the timed GEMV copied its weights
/// from host memory: the note's timed side, before `"; peer"`, holds
/// [`HOST_WEIGHTS_NOTE`](hetero_agent::sweep::HOST_WEIGHTS_NOTE).
fn legacy_note_says_host_weights(note: Option<&String>) -> bool {
    note.and_then(|n| n.split("; peer").next())
        .is_some_and(|timed| timed.contains(hetero_agent::sweep::HOST_WEIGHTS_NOTE))
}

/// Scores `predictor` on the profile in `dir` and compares that profile's
/// medians with the fitted rows, case by case.
fn test_run(
    predictor: &hetero_plan::Predictor,
    fitted: &[MeasurementRow],
    dir: &Path,
) -> anyhow::Result<TestRun> {
    let test = load_dataset(dir)?;
    let entries = fit::test_predictor(predictor, &test.rows, fitted)
        .map_err(|e| BadInput(format!("{}: {e}", dir.display())))?;
    if entries.is_empty() {
        let fitted: Vec<String> = predictor
            .models
            .iter()
            .map(|m| format!("{}/{}", m.processor, m.dtype))
            .collect();
        return Err(BadInput(format!(
            "{}: no usable row for a fitted processor and dtype ({})",
            dir.display(),
            fitted.join(", ")
        ))
        .into());
    }
    Ok(TestRun {
        dataset: test.fingerprint,
        entries,
        agreement: fit::agreement(fitted, &test.rows),
    })
}

/// The `--test` table: the predictor against the second profile, beside
/// the two profiles against each other.
pub fn print_test(t: &TestRun, dir: &Path) {
    println!();
    println!(
        "tested on {} (sha256 {}): the predictor against every usable row, and \
         against the rows of shapes it was not fitted on (unseen); \
         the two profiles against each other on the cases both measured",
        dir.display(),
        &t.dataset.sha256[..16.min(t.dataset.sha256.len())]
    );
    println!(
        "{:<16} {:<6} {:>6} {:>8} {:>8} {:>8} {:>7} {:>8} {:>8}   {:>6} {:>12} {:>14} {:>7}",
        "processor",
        "dtype",
        "rows",
        "MAPE %",
        "±10 %",
        "±20 %",
        "unseen",
        "MAPE %",
        "±10 %",
        "pairs",
        "agree ±10 %",
        "median diff %",
        "ratio"
    );
    for e in &t.entries {
        let a = t
            .agreement
            .iter()
            .find(|a| a.processor == e.processor && a.dtype == e.dtype);
        let agree = match a {
            Some(a) => format!(
                "{:>6} {:>11.1}% {:>14.2} {:>7.3}",
                a.pairs,
                100.0 * a.within_10pct,
                a.median_abs_diff_pct,
                a.median_ratio
            ),
            None => format!("{:>6} {:>12} {:>14} {:>7}", 0, "-", "-", "-"),
        };
        let unseen = match &e.unseen {
            Some(u) => format!(
                "{:>7} {:>8.2} {:>7.1}%",
                u.samples,
                u.mape,
                100.0 * u.within_10pct
            ),
            None => format!("{:>7} {:>8} {:>8}", 0, "-", "-"),
        };
        println!(
            "{:<16} {:<6} {:>6} {:>8.2} {:>7.1}% {:>7.1}% {unseen}   {agree}",
            e.processor,
            e.dtype.as_str(),
            e.score.samples,
            e.score.mape,
            100.0 * e.score.within_10pct,
            100.0 * e.score.within_20pct,
        );
    }
    for e in &t.entries {
        if let Some(w) = e.worst.first() {
            println!(
                "  worst {} {}: {} {} measured {:.1} µs, predicted {:.1} µs ({:+.1} %)",
                e.processor, e.dtype, w.shape, w.order, w.measured_us, w.predicted_us, w.error_pct
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use hetero_plan::{Conditions, Stats, Timing};

    use super::*;

    fn row(bench: MicrobenchKind, probe: f64) -> MicrobenchRow {
        let name = match bench {
            MicrobenchKind::BandwidthAlone => "bandwidth_alone",
            _ => "bandwidth_concurrent",
        };
        MicrobenchRow {
            case_id: format!("mb/cpu:0/{name}"),
            processor: "cpu:0".into(),
            bench,
            bytes: Some(64 << 20),
            peer: None,
            shape: None,
            status: RowStatus::Ok,
            timing: Timing::Real,
            stats: Stats::from_samples(&[1000.0]),
            gbps: None,
            stream: None,
            peer_stream: None,
            message: None,
            conditions: Conditions {
                host_probe_us: Some(probe),
                ..Default::default()
            },
        }
    }

    #[test]
    fn the_launch_after_a_cpu_part_is_said_beside_the_one_alone() {
        let o = Overheads {
            processor: "cuda:0".into(),
            op_overhead_us: Some(6.9),
            op_overhead_block_us: Some(7.4),
            launch_overhead_after_cpu_us: Some(10.2),
            ..Default::default()
        };
        assert_eq!(
            overhead_notes(std::slice::from_ref(&o)),
            [
                "  operator overhead cuda:0: 6.9 µs polling, 7.4 blocking with nothing before it; 10.2 after a CPU part (both waits alternately; the solver's cost in offload mode)"
            ]
        );
        let none = Overheads {
            launch_overhead_after_cpu_us: None,
            ..o
        };
        assert!(overhead_notes(&[none]).is_empty());
    }

    #[test]
    fn a_bandwidth_row_taken_while_the_host_ran_slow_is_flagged() {
        let none_said = std::collections::BTreeMap::new();
        let o = Overheads {
            processor: "cpu:0".into(),
            bandwidth_gbps: Some(58.5),
            concurrent_factor: Some(0.17),
            host_probe_us: Some(9.0),
            ..Default::default()
        };
        let calm = [
            row(MicrobenchKind::BandwidthAlone, 9.5),
            row(MicrobenchKind::BandwidthConcurrent, 10.0),
        ];
        let notes = bandwidth_notes(std::slice::from_ref(&o), &calm, &none_said);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].contains("cpu:0: 0.17 of its speed alone"),
            "{notes:?}"
        );
        assert!(notes[0].contains("58.5 GB/s alone"), "{notes:?}");
        let slow = [
            row(MicrobenchKind::BandwidthAlone, 9.5),
            row(MicrobenchKind::BandwidthConcurrent, 18.2),
        ];
        let notes = bandwidth_notes(std::slice::from_ref(&o), &slow, &none_said);
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(
            notes[1].starts_with("  warning: mb/cpu:0/bandwidth_concurrent"),
            "{notes:?}"
        );
        assert!(
            notes[1].contains("2.0× this processor's median"),
            "{notes:?}"
        );
        // No factor, no notes; a factor above 1 is said to be taken as 1.
        let none = Overheads {
            concurrent_factor: None,
            ..o.clone()
        };
        assert!(bandwidth_notes(&[none], &slow, &none_said).is_empty());
        let above = Overheads {
            concurrent_factor: Some(1.06),
            ..o
        };
        assert!(
            bandwidth_notes(&[above], &calm, &none_said)[0].ends_with("the solver takes it as 1")
        );
        // A discrete GPU whose row (of an older agent, without the field)
        // says in its note that it copied its weights from host memory:
        // its line says its factor is its copies'.
        let copies = Overheads {
            processor: "cuda:0".into(),
            concurrent_factor: Some(0.6),
            host_probe_us: None,
            ..Default::default()
        };
        let mut gpu_row = row(MicrobenchKind::BandwidthConcurrent, 9.0);
        gpu_row.processor = "cuda:0".into();
        let said = std::collections::BTreeMap::from([(
            gpu_row.case_id.clone(),
            format!(
                "GEMV 1x4096x4096 f32: 67108864 weight bytes per run, 9 copies in turn (576 MiB of weights), {}; peer `cpu:0` streamed GEMV 1x4096x4096 f32 30 times meanwhile, 9 copies in turn (576 MiB of weights)",
                hetero_agent::sweep::HOST_WEIGHTS_NOTE
            ),
        )]);
        let notes = bandwidth_notes(
            std::slice::from_ref(&copies),
            std::slice::from_ref(&gpu_row),
            &said,
        );
        assert!(
            notes[0].starts_with("  bandwidth cuda:0 (its weight copies from host memory): 0.60"),
            "{notes:?}"
        );
        // The peer's copies alone do not make the timed side's line.
        let cpu_said = std::collections::BTreeMap::from([(
            gpu_row.case_id.clone(),
            format!(
                "GEMV: one copy; peer `cuda:0` streamed, {}",
                hetero_agent::sweep::HOST_WEIGHTS_NOTE
            ),
        )]);
        let notes = bandwidth_notes(&[copies], &[gpu_row], &cpu_said);
        assert!(
            notes[0].starts_with("  bandwidth cuda:0: 0.60"),
            "{notes:?}"
        );
    }

    #[test]
    fn a_bandwidth_rows_field_says_whether_it_copied_its_weights() {
        let o = Overheads {
            processor: "cuda:0".into(),
            concurrent_factor: Some(0.6),
            ..Default::default()
        };
        let stream = |host_weights| hetero_plan::GemvStream {
            copies: 9,
            host_weights,
            runs: None,
        };
        let mut r = row(MicrobenchKind::BandwidthConcurrent, 9.0);
        r.processor = "cuda:0".into();
        r.stream = Some(stream(true));
        // The peer's copies are not the timed side's.
        r.peer_stream = Some(stream(false));
        let none = std::collections::BTreeMap::new();
        let line = |r: &MicrobenchRow, notes| {
            bandwidth_notes(std::slice::from_ref(&o), std::slice::from_ref(r), notes)[0].clone()
        };
        assert!(line(&r, &none).contains("(its weight copies from host memory)"));
        // The field wins over the words of the note.
        r.stream = Some(stream(false));
        r.peer_stream = Some(stream(true));
        let said = std::collections::BTreeMap::from([(
            r.case_id.clone(),
            hetero_agent::sweep::HOST_WEIGHTS_NOTE.to_string(),
        )]);
        assert!(line(&r, &said).starts_with("  bandwidth cuda:0: 0.60"));
    }
}
