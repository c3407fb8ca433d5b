//! Scratch folders of runs that ended without removing theirs.
//!
//! A transport keeps the files it hands to a local agent, and its ssh
//! control socket, in `TMPDIR/hetero-<pid>-<n>`, removed when the run ends.
//! A run that is killed leaves it behind; the next `hetero profile`
//! removes those whose process is gone.

use std::path::{Path, PathBuf};

/// The process id of a scratch folder name `hetero-<pid>-<n>` (digits
/// only); `None` for any other name.
fn owner_pid(name: &str) -> Option<u32> {
    let (pid, n) = name.strip_prefix("hetero-")?.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(pid) && digits(n)).then(|| pid.parse().ok())?
}

/// Removes the scratch folders in `dir` of processes that no longer run:
/// folders only (no links), named as a transport names them, owned by this
/// user, and not of this process. Where process ids cannot be checked
/// (no `/proc`), nothing is removed. Returns the folders removed.
pub fn clean_dead_runs(dir: &Path) -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let proc = Path::new("/proc");
    let Ok(me) = std::fs::metadata(proc.join("self")) else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for e in entries.filter_map(|e| e.ok()) {
        let Some(pid) = e.file_name().to_str().and_then(owner_pid) else {
            continue;
        };
        let path = e.path();
        let ours =
            std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir() && m.uid() == me.uid());
        let alive = pid == std::process::id() || proc.join(pid.to_string()).exists();
        if ours && !alive && std::fs::remove_dir_all(&path).is_ok() {
            removed.push(path);
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_folders_of_dead_runs_named_as_ours_are_removed() {
        assert_eq!(owner_pid("hetero-12-345"), Some(12));
        for other in [
            "hetero-12",
            "hetero-x-1",
            "hetero-12-",
            "hetero-demo-1",
            "hetero-1-2-3",
        ] {
            assert_eq!(owner_pid(other), None, "{other}");
        }
        let d = std::env::temp_dir().join(format!("hetero-scratch-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        // A process id above the largest Linux hands out: never alive.
        let dead = d.join("hetero-4194305-1");
        let live = d.join(format!("hetero-{}-2", std::process::id()));
        let other = d.join("hetero-4194305-notes");
        for p in [&dead, &live, &other] {
            std::fs::create_dir_all(p).unwrap();
        }
        std::fs::write(dead.join("spec.json"), "{}").unwrap();
        let removed = clean_dead_runs(&d);
        if Path::new("/proc/self").exists() {
            assert_eq!(removed, vec![dead.clone()]);
            assert!(!dead.exists());
        }
        assert!(live.exists() && other.exists());
        let _ = std::fs::remove_dir_all(&d);
    }
}
