//! Step 1, connect: check the output folder, open the transport to the
//! device and install the agent that fits its architecture.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use hetero_plan::DeviceProfile;

use super::ProfileOptions;
use crate::agent;
use crate::dataset::{DEVICE_FILE, MEASUREMENTS_FILE, MICROBENCH_FILE};
use crate::journal::Journal;
use crate::report::{Event, Reporter};
use crate::transport::{Facts, RetryNote, RetryPolicy, Transport};
use crate::{Error, Result};

/// An open link to the device, with the agent installed.
pub(super) struct Link {
    /// The transport.
    pub tr: Transport,
    /// What the device said about itself.
    pub facts: Facts,
    /// The agent binary installed.
    pub agent_path: PathBuf,
    /// The transport's retry policy, which also paces agent restarts.
    pub retry: RetryPolicy,
}

/// Opens the transport (its retries reported as events) and installs the
/// agent.
pub(super) fn connect(opts: &ProfileOptions, rep: &Arc<Reporter>) -> Result<Link> {
    let mut topts = opts.transport.clone();
    if topts.observer.is_none() {
        let r = rep.clone();
        topts.observer = Some(Arc::new(move |n: &RetryNote| {
            r.emit(&Event::Retry {
                command: n.command.clone(),
                attempt: n.attempt,
                attempts: n.attempts,
                wait_ms: n.wait.as_millis() as u64,
                detail: n.detail.clone(),
            })
        }));
    }
    let retry = topts.retry;
    let mut tr = Transport::open(&opts.target, topts)?;
    let facts = tr.facts()?;
    let agent_path = agent::select(&opts.agent, tr.target(), &facts.arch)?;
    tr.install_agent(&agent_path)?;
    Ok(Link {
        tr,
        facts,
        agent_path,
        retry,
    })
}

/// What the output folder holds before the run: the device profile of the
/// dataset to resume, if any. A folder with data is refused without
/// `resume`, and a folder with other files always.
pub(super) fn check_out_folder(out: &Path, resume: bool) -> Result<Option<DeviceProfile>> {
    if !out.exists() {
        return Ok(None);
    }
    if !out.is_dir() {
        return Err(Error::FolderInUse {
            path: out.to_path_buf(),
            message: "exists and is not a folder".into(),
            fix: "choose another --out".into(),
        });
    }
    let device = out.join(DEVICE_FILE);
    let journal = out.join(Journal::FILE);
    let has_data = device.exists()
        || out.join(MEASUREMENTS_FILE).exists()
        || out.join(MICROBENCH_FILE).exists()
        || std::fs::metadata(&journal).is_ok_and(|m| m.len() > 0);
    // An empty journal (a run that stopped before its first row) is no data.
    let empty = std::fs::read_dir(out)
        .map_err(|e| Error::io(out, e))?
        .filter_map(|e| e.ok())
        .all(|e| e.file_name() == Journal::FILE && e.metadata().is_ok_and(|m| m.len() == 0));
    if !has_data {
        if empty {
            return Ok(None);
        }
        return Err(Error::FolderInUse {
            path: out.to_path_buf(),
            message: "is not empty and holds no dataset".into(),
            fix: "choose a new or empty folder for --out".into(),
        });
    }
    let profile = if device.exists() {
        Some(hetero_plan::load::<DeviceProfile>(&device)?)
    } else {
        None
    };
    if !resume {
        let what = match &profile {
            Some(p) => format!(
                "already holds a dataset of {} ({})",
                p.host.name, p.host.transport
            ),
            None => "already holds rows of an earlier run".into(),
        };
        return Err(Error::FolderInUse {
            path: out.to_path_buf(),
            message: what,
            fix: "pass --resume to continue it on the same device, or choose another --out".into(),
        });
    }
    Ok(profile)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folder_checks() {
        let d = std::env::temp_dir().join(format!("hetero-out-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        assert!(check_out_folder(&d, false).unwrap().is_none());
        std::fs::create_dir_all(&d).unwrap();
        assert!(check_out_folder(&d, false).unwrap().is_none());
        std::fs::write(d.join("notes.txt"), "mine").unwrap();
        let e = check_out_folder(&d, true).unwrap_err();
        assert!(
            e.is_bad_input() && e.to_string().contains("holds no dataset"),
            "{e}"
        );
        std::fs::write(d.join(Journal::FILE), "{}\n").unwrap();
        let e = check_out_folder(&d, false).unwrap_err();
        assert!(e.to_string().contains("--resume"), "{e}");
        assert!(check_out_folder(&d, true).unwrap().is_none());
        let _ = std::fs::remove_dir_all(&d);
    }
}
