//! Step 3, probe: ask the agent which processors it opened, keep those
//! `--processors` selects, and describe the device in its profile
//! (`device.json`), which on resume must be the dataset's device.

use std::path::Path;

use hetero_plan::protocol::ProbeReport;
use hetero_plan::{AgentInfo, DeviceProfile, HostInfo, Processor, SchemaVersion, SweepSpec};

use super::ProfileOptions;
use super::connect::Link;
use crate::dataset;
use crate::report::{Event, Reporter};
use crate::{Error, Result};

/// What the probe found.
pub(super) struct Probed {
    /// Every processor the agent opened (`device.json` lists them all).
    pub processors: Vec<Processor>,
    /// Those to measure.
    pub selected: Vec<Processor>,
    /// Backends that did not open, each as its reason.
    pub unavailable: Vec<String>,
}

/// Runs the agent's `probe --json` and selects the processors to measure.
pub(super) fn probe(link: &mut Link, opts: &ProfileOptions, rep: &Reporter) -> Result<Probed> {
    let mut args = opts.agent_args.clone();
    args.extend(["probe".to_string(), "--json".to_string()]);
    let o = link.tr.run_agent(&args)?;
    if !o.success() {
        let err = Error::AgentRefused {
            command: o.command.clone(),
            detail: o.detail(),
        };
        return Err(if o.code() == Some(2) {
            err
        } else {
            Error::Transport {
                command: o.command.clone(),
                attempts: 1,
                detail: o.detail(),
            }
        });
    }
    let probe: ProbeReport = serde_json::from_slice(&o.stdout).map_err(|e| Error::Handshake {
        command: o.command.clone(),
        message: format!("probe --json printed no probe report: {e}"),
    })?;
    let found: Vec<String> = probe.processors.iter().map(|p| p.id.clone()).collect();
    let selected = select(&probe.processors, opts.processors.as_deref(), &found)?;
    let unavailable: Vec<String> = probe
        .unavailable
        .iter()
        .map(|u| {
            if u.reason.is_empty() {
                u.backend.clone()
            } else {
                u.reason.clone()
            }
        })
        .collect();
    rep.emit(&Event::Processors {
        selected: selected.iter().map(|p| p.id.clone()).collect(),
        found,
        unavailable: unavailable.clone(),
    });
    for p in &selected {
        if p.simulated || p.emulated {
            rep.emit(&Event::Warning {
                message: format!(
                    "{}: its times are {} (not a processor's latency); its rows say so",
                    p.id,
                    if p.simulated { "simulated" } else { "emulated" }
                ),
            });
        }
    }
    Ok(Probed {
        processors: probe.processors,
        selected,
        unavailable,
    })
}

/// The processors `want` names (all when `None`); an unknown name, or
/// nothing to measure, is an error that lists what was `found`.
fn select(
    processors: &[Processor],
    want: Option<&[String]>,
    found: &[String],
) -> Result<Vec<Processor>> {
    let selected: Vec<Processor> = match want {
        None => processors.to_vec(),
        Some(want) => {
            let missing: Vec<&str> = want
                .iter()
                .filter(|w| !found.iter().any(|f| id_matches(w, f)))
                .map(String::as_str)
                .collect();
            if !missing.is_empty() {
                return Err(Error::UnknownProcessor {
                    missing: missing.join(", "),
                    available: found.join(", "),
                });
            }
            processors
                .iter()
                .filter(|p| want.iter().any(|w| id_matches(w, &p.id)))
                .cloned()
                .collect()
        }
    };
    if selected.is_empty() {
        return Err(Error::UnknownProcessor {
            missing: "any processor".into(),
            available: if found.is_empty() {
                "none".into()
            } else {
                found.join(", ")
            },
        });
    }
    Ok(selected)
}

fn id_matches(pattern: &str, id: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => id.starts_with(prefix),
        None => pattern == id,
    }
}

/// The device profile of this run. On resume (`old`), the folder must hold
/// this device; the profile then keeps the old one's start, time spent,
/// processors and the cases it sent.
pub(super) fn device_profile(
    link: &Link,
    hello: &hetero_plan::protocol::Hello,
    probed: &Probed,
    opts: &ProfileOptions,
    old: Option<&DeviceProfile>,
) -> Result<DeviceProfile> {
    let mut profile = DeviceProfile {
        schema_version: SchemaVersion,
        host: HostInfo {
            name: link.facts.name.clone(),
            os: link.facts.os.clone(),
            arch: link.facts.arch.clone(),
            transport: link.tr.target().to_string(),
        },
        agent: AgentInfo {
            version: hello.version.clone(),
            protocol: hello.protocol,
            arch: hello.arch.clone(),
        },
        processors: probed.processors.clone(),
        unavailable: probed.unavailable.clone(),
        sweep: Some(SweepSpec {
            schema_version: SchemaVersion,
            run: opts.run,
            cases: Vec::new(),
            microbench: Vec::new(),
        }),
        started_ms: now_ms(),
        seconds: 0.0,
    };
    let Some(old) = old else {
        return Ok(profile);
    };
    same_device(old, &profile).map_err(|why| another_device(&opts.out, old, &profile, &why))?;
    profile.started_ms = old.started_ms;
    profile.seconds = old.seconds;
    for p in &old.processors {
        if !profile.processors.iter().any(|q| q.id == p.id) {
            profile.processors.push(p.clone());
        }
    }
    // The old sweep's run parameters stay: they are the conditions of the
    // rows that carry none of their own (those of older datasets). Cases
    // this run sends under other ones carry theirs (`record_sent`).
    if let Some(s) = &old.sweep {
        profile.sweep = Some(s.clone());
    }
    Ok(profile)
}

fn another_device(out: &Path, old: &DeviceProfile, new: &DeviceProfile, why: &str) -> Error {
    let short = |p: &DeviceProfile| {
        let sha = dataset::device_fingerprint(p).sha256;
        sha[..sha.len().min(12)].to_string()
    };
    Error::FolderInUse {
        path: out.to_path_buf(),
        message: format!(
            "holds another device's data: {why} (device fingerprint {} vs {})",
            short(old),
            short(new)
        ),
        fix: "choose another --out for this device".into(),
    }
}

/// Why two profiles are not of the same device, if they are not.
pub fn same_device(old: &DeviceProfile, new: &DeviceProfile) -> std::result::Result<(), String> {
    if old.host.name != new.host.name || old.host.arch != new.host.arch {
        return Err(format!(
            "it holds data of `{}` ({}), this device is `{}` ({})",
            old.host.name, old.host.arch, new.host.name, new.host.arch
        ));
    }
    for p in &new.processors {
        if let Some(q) = old.processors.iter().find(|q| q.id == p.id)
            && (q.name != p.name || q.kind != p.kind || q.api != p.api)
        {
            return Err(format!(
                "processor {} was `{}`, it is now `{}`",
                p.id, q.name, p.name
            ));
        }
    }
    Ok(())
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_prefixes() {
        assert!(id_matches("opencl:*", "opencl:0:0"));
        assert!(id_matches("cpu:0", "cpu:0"));
        assert!(!id_matches("cpu:0", "cpu:01"));
    }
}
