//! The run's measuring conditions ([`Setup`]): worked out from its flags
//! and the probe, added to every row it journals, and on `--resume`
//! compared with the conditions of the rows already in the dataset, which
//! a run may not mix unless `--allow-mixed` says so.

use std::path::Path;

use hetero_plan::protocol::AgentLine;
use hetero_plan::{DeviceProfile, Processor, ProcessorApi, ProcessorKind, Setup, SetupDifference};

use super::ProfileOptions;
use crate::dataset;
use crate::journal::Rows;
use crate::report::{Event, Reporter};
use crate::{Error, Result};

/// The conditions of this run's rows: its run parameters, the agent's
/// `--cpu-groups` (`auto` without one) and the cores of the `processors`
/// the probe found.
pub(super) fn of_run(opts: &ProfileOptions, processors: &[Processor]) -> Setup {
    Setup::of_run(
        &opts.run,
        Some(cpu_groups(&opts.agent_args)),
        host_cores(processors),
    )
}

/// The value of `--cpu-groups G` or `--cpu-groups=G` among the agent's
/// flags; `auto` without one.
fn cpu_groups(args: &[String]) -> String {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--cpu-groups"
            && let Some(v) = it.next()
        {
            return v.clone();
        }
        if let Some(v) = a.strip_prefix("--cpu-groups=") {
            return v.to_string();
        }
    }
    "auto".into()
}

/// The cores of the agent's own CPU processors together; `None` when it
/// has none or one does not say.
fn host_cores(processors: &[Processor]) -> Option<u32> {
    let cpus = processors
        .iter()
        .filter(|p| p.kind == ProcessorKind::Cpu && p.api == ProcessorApi::Cpu);
    let mut n = None::<u32>;
    for p in cpus {
        n = Some(n.unwrap_or(0) + p.capabilities.compute_units?);
    }
    n
}

/// On resume: the rows already in the dataset must have been measured
/// under `new`'s conditions (those recorded on both sides), unless
/// `allow_mixed`, which only warns. Rows of older datasets take their
/// conditions from `device.json` (`old`).
pub(super) fn check_resume(
    out: &Path,
    rows: &Rows,
    old: Option<&DeviceProfile>,
    new: &Setup,
    allow_mixed: bool,
    rep: &Reporter,
) -> Result<()> {
    let conditions = rows
        .measurements
        .iter()
        .map(|r| &r.conditions)
        .chain(rows.microbench.iter().map(|r| &r.conditions));
    let Some(diff) = conditions
        .filter_map(|c| dataset::setup_of(c, old))
        .map(|s| s.differences(new))
        .find(|d| !d.is_empty())
    else {
        return Ok(());
    };
    let what = describe(&diff);
    if allow_mixed {
        rep.emit(&Event::Warning {
            message: format!(
                "--allow-mixed: {what}; each row keeps its own conditions, and `hetero fit` \
                 fits one set of them at a time (--conditions)"
            ),
        });
        return Ok(());
    }
    Err(Error::FolderInUse {
        path: out.to_path_buf(),
        message: format!("{what}: their times do not compare"),
        fix: format!(
            "resume with the dataset's settings ({}), or pass --allow-mixed to keep rows of \
             both in it (each row keeps its own conditions)",
            diff.iter()
                .map(|d| format!("{}: {}", d.flag, d.old))
                .collect::<Vec<_>>()
                .join("; ")
        ),
    })
}

/// `holds rows measured with cache=warm, this run measures with
/// cache=cold (--cold-cache)`.
fn describe(diff: &[SetupDifference]) -> String {
    let pairs = |f: fn(&SetupDifference) -> &str| {
        diff.iter()
            .map(|d| format!("{}={}", d.key, f(d)))
            .collect::<Vec<_>>()
            .join(",")
    };
    format!(
        "holds rows measured with {}, this run measures with {} ({})",
        pairs(|d| &d.old),
        pairs(|d| &d.new),
        diff.iter().map(|d| d.flag).collect::<Vec<_>>().join(", ")
    )
}

/// Adds `setup` to the conditions of a row line that has none: in the
/// parsed `line`, and in the text kept in the journal, which is returned.
pub(super) fn stamp(text: &str, line: &mut AgentLine, setup: &Setup) -> String {
    let conditions = match line {
        AgentLine::Measurement(r) => &mut r.conditions,
        AgentLine::Microbench(l) => &mut l.row.conditions,
        _ => return text.to_string(),
    };
    if conditions.setup.is_some() {
        return text.to_string();
    }
    conditions.setup = Some(setup.clone());
    let Ok(mut v) = serde_json::from_str::<serde_json::Value>(text) else {
        return text.to_string();
    };
    if let Some(c) = v.get_mut("conditions").and_then(|c| c.as_object_mut()) {
        c.insert(
            "setup".into(),
            serde_json::to_value(setup).expect("a setup serialises"),
        );
    }
    serde_json::to_string(&v).unwrap_or_else(|_| text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_groups_are_read_from_the_agent_flags() {
        let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(cpu_groups(&a(&[])), "auto");
        assert_eq!(cpu_groups(&a(&["--cpu-groups", "0-3;4-7"])), "0-3;4-7");
        assert_eq!(cpu_groups(&a(&["--cache-dir", "x", "--cpu-groups=0"])), "0");
    }

    #[test]
    fn a_stamped_row_keeps_its_other_fields() {
        let text = r#"{"type":"microbench","case_id":"b","processor":"cpu:0","bench":"submit_empty","status":"ok","timing":"real","stats":{"median_us":3.0,"min_us":2.5,"p90_us":3.5,"count":7,"cv":0.01},"note":"kept","conditions":{"timestamp_ms":1}}"#;
        let mut line = AgentLine::parse(text).unwrap().unwrap();
        let setup = Setup {
            cold_cache: true,
            ..Setup::default()
        };
        let out = stamp(text, &mut line, &setup);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["note"], "kept");
        assert_eq!(v["conditions"]["setup"]["cold_cache"], true);
        let again = AgentLine::parse(&out).unwrap().unwrap();
        assert_eq!(again, line);
    }
}
