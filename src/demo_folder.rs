//! The folder `hetero demo` writes, and how a demo replaces an earlier one.
//!
//! A demo is written into `OUT.partial` beside `OUT`, and renamed to `OUT`
//! only once every step has succeeded; until then an earlier demo in `OUT`
//! stays as it was. Each folder holds a manifest, `demo-manifest.json`,
//! listing every file the demo wrote with its size and SHA-256, and a
//! fingerprint of that list. A demo replaces a folder only when it is empty
//! or its manifest parses, its fingerprint matches, and the folder holds no
//! file the manifest does not list, nor a listed file since changed.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use hetero_plan::Fingerprint;
use serde::{Deserialize, Serialize};

use crate::bad;
use crate::outpath::{Input, is_within, resolve};

/// The manifest's file name, in the demo's folder.
pub const MANIFEST: &str = "demo-manifest.json";

/// Who writes the manifest.
const WRITER: &str = "hetero demo";

/// How far the demo that wrote a folder got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum State {
    /// Steps were still running when the manifest was written.
    Running,
    /// A step failed.
    Failed,
    /// Every step succeeded.
    Finished,
}

/// One file the demo wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Entry {
    /// The path under the demo's folder, `/`-separated.
    path: String,
    bytes: u64,
    sha256: String,
}

/// `demo-manifest.json`.
#[derive(Debug, Serialize, Deserialize)]
struct Manifest {
    written_by: String,
    state: State,
    files: Vec<Entry>,
    /// [`Fingerprint::of`] the list of files.
    fingerprint: Fingerprint,
}

/// What a folder's regular files are now, and anything else in it (links,
/// devices) that no demo writes.
struct Contents {
    files: Vec<Entry>,
    others: Vec<String>,
}

/// Reads every file under `dir` (the manifest at the top excepted).
fn scan(dir: &Path) -> Result<Contents> {
    let mut c = Contents {
        files: Vec::new(),
        others: Vec::new(),
    };
    let mut pending = vec![(dir.to_path_buf(), String::new())];
    while let Some((here, prefix)) = pending.pop() {
        for e in std::fs::read_dir(&here).with_context(|| format!("reading {}", here.display()))? {
            let e = e.with_context(|| format!("reading {}", here.display()))?;
            let name = format!("{prefix}{}", e.file_name().to_string_lossy());
            let kind = e.file_type()?;
            if kind.is_dir() {
                pending.push((e.path(), format!("{name}/")));
            } else if kind.is_file() {
                if name == MANIFEST {
                    continue;
                }
                let bytes = std::fs::read(e.path())
                    .with_context(|| format!("reading {}", e.path().display()))?;
                c.files.push(Entry {
                    sha256: Fingerprint::of_bytes(&name, &bytes).sha256,
                    path: name,
                    bytes: bytes.len() as u64,
                });
            } else {
                c.others.push(name);
            }
        }
    }
    c.files.sort_by(|a, b| a.path.cmp(&b.path));
    c.others.sort();
    Ok(c)
}

/// Writes `dir`'s manifest, listing every file in it now.
fn write_manifest(dir: &Path, state: State) -> Result<()> {
    let files = scan(dir)?.files;
    let m = Manifest {
        written_by: WRITER.into(),
        state,
        fingerprint: Fingerprint::of("files", &files),
        files,
    };
    let text = serde_json::to_string_pretty(&m)? + "\n";
    hetero_plan::write_atomic(&dir.join(MANIFEST), text.as_bytes())?;
    Ok(())
}

/// A few names, and how many more.
fn some(names: &[String]) -> String {
    let shown: Vec<&str> = names.iter().take(3).map(String::as_str).collect();
    match names.len() {
        n if n > 3 => format!("{} and {} more", shown.join(", "), n - 3),
        _ => shown.join(", "),
    }
}

/// `Ok` when a demo wrote `dir` (which exists and is not empty) and nothing
/// in it has changed since; otherwise why not.
fn recognise(dir: &Path) -> Result<std::result::Result<(), String>> {
    let path = dir.join(MANIFEST);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Err(format!("it holds no {MANIFEST}, so no demo wrote it")));
        }
        Err(e) => return Ok(Err(format!("its {MANIFEST} cannot be read: {e}"))),
    };
    let m: Manifest = match serde_json::from_str(&text) {
        Ok(m) => m,
        Err(e) => return Ok(Err(format!("its {MANIFEST} is not a demo's manifest: {e}"))),
    };
    if m.written_by != WRITER || !Fingerprint::of("files", &m.files).matches(&m.fingerprint) {
        return Ok(Err(format!(
            "its {MANIFEST} does not match its own fingerprint"
        )));
    }
    let now = scan(dir)?;
    if !now.others.is_empty() {
        return Ok(Err(format!(
            "it holds {}, which no demo writes",
            some(&now.others)
        )));
    }
    let listed = |p: &str| m.files.iter().find(|e| e.path == p);
    let unlisted: Vec<String> = (now.files.iter())
        .filter(|e| listed(&e.path).is_none())
        .map(|e| e.path.clone())
        .collect();
    if !unlisted.is_empty() {
        return Ok(Err(format!(
            "it holds files its demo did not write: {}",
            some(&unlisted)
        )));
    }
    let changed: Vec<String> = (now.files.iter())
        .filter(|e| listed(&e.path) != Some(e))
        .map(|e| e.path.clone())
        .collect();
    if !changed.is_empty() {
        return Ok(Err(format!(
            "files changed since the demo wrote them: {}",
            some(&changed)
        )));
    }
    Ok(Ok(()))
}

/// What a folder the demo would write to holds.
#[derive(Debug, PartialEq, Eq)]
enum Found {
    Absent,
    Empty,
    /// An earlier demo's folder, unchanged.
    Demo,
}

/// Looks at `dir`; refuses (exit 2) a file, or a folder a demo did not
/// write.
fn classify(dir: &Path) -> Result<Found> {
    let Ok(meta) = std::fs::metadata(dir) else {
        return Ok(Found::Absent);
    };
    if !meta.is_dir() {
        return Err(bad(format!(
            "--out {}: exists and is not a folder",
            dir.display()
        )));
    }
    let empty = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .next()
        .is_none();
    if empty {
        return Ok(Found::Empty);
    }
    match recognise(dir)? {
        Ok(()) => Ok(Found::Demo),
        Err(why) => Err(bad(format!(
            "--out {}: the folder is not empty and the demo will not replace it: {why}; \
             choose another --out, or remove the folder yourself if nothing in it is yours",
            dir.display()
        ))),
    }
}

/// Removes what [`classify`] found: an empty folder or an earlier demo's.
fn remove(dir: &Path, found: Found) -> Result<()> {
    match found {
        Found::Absent => Ok(()),
        Found::Empty => std::fs::remove_dir(dir),
        Found::Demo => std::fs::remove_dir_all(dir),
    }
    .with_context(|| format!("removing {}", dir.display()))
}

/// The demo's folder while its steps run, and where it goes once they all
/// succeeded.
pub struct Staging {
    /// `--out`.
    pub out: PathBuf,
    /// `OUT.partial`, where the steps write.
    pub work: PathBuf,
}

impl Staging {
    /// The output folder and its `.partial` sibling for `--out`, after
    /// refusing an input that lies inside either (exit 2). Creates nothing.
    pub fn check(out: &Path, inputs: &[Input<'_>]) -> Result<(PathBuf, PathBuf)> {
        let out = if out.file_name().is_some() {
            out.to_path_buf()
        } else {
            resolve(out)
        };
        let Some(name) = out.file_name() else {
            return Err(bad(format!("--out {}: names no folder", out.display())));
        };
        let work = out.with_file_name(format!("{}.partial", name.to_string_lossy()));
        classify(&out)?;
        for &(flag, p) in inputs {
            if let Some(dir) = [&out, &work].into_iter().find(|d| is_within(p, d)) {
                return Err(bad(format!(
                    "{flag} {} lies inside {}, which the demo replaces; move it out first",
                    p.display(),
                    dir.display()
                )));
            }
        }
        Ok((out, work))
    }

    /// Checks `out` and its `.partial` sibling (each absent, empty, or an
    /// earlier demo's), refuses inputs inside either, and makes a fresh
    /// `.partial` folder with `logs/` in it.
    pub fn prepare(out: &Path, inputs: &[Input<'_>]) -> Result<Staging> {
        let (out, work) = Self::check(out, inputs)?;
        let found = classify(&work)?;
        remove(&work, found)?;
        std::fs::create_dir_all(work.join("logs"))
            .with_context(|| format!("creating {}", work.display()))?;
        let s = Staging { out, work };
        s.checkpoint()?;
        Ok(s)
    }

    /// Lists what the steps have written so far, so that a demo stopped
    /// between two steps leaves a folder the next demo replaces.
    pub fn checkpoint(&self) -> Result<()> {
        write_manifest(&self.work, State::Running)
    }

    /// Marks the folder as a failed demo's, which the next demo replaces.
    pub fn fail(&self) {
        if let Err(e) = write_manifest(&self.work, State::Failed) {
            eprintln!("note: {}: {e:#}", self.work.display());
        }
    }

    /// Puts the finished demo in place of `--out`: the earlier demo (if it
    /// is still unchanged) goes, and `.partial` is renamed to `--out`.
    pub fn finish(&self) -> Result<()> {
        write_manifest(&self.work, State::Finished)?;
        let found = classify(&self.out)
            .with_context(|| format!("the finished demo stays in {}", self.work.display()))?;
        remove(&self.out, found)?;
        std::fs::rename(&self.work, &self.out)
            .with_context(|| format!("renaming {} to {}", self.work.display(), self.out.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("hetero-demo-folder-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_demo_folder_is_recognised_until_it_changes() {
        let d = temp("recognise");
        std::fs::create_dir_all(d.join("logs")).unwrap();
        std::fs::write(d.join("plan.ron"), "()").unwrap();
        std::fs::write(d.join("logs/1-probe.log"), "ok").unwrap();
        assert!(recognise(&d).unwrap().is_err());
        write_manifest(&d, State::Finished).unwrap();
        assert_eq!(recognise(&d).unwrap(), Ok(()));
        // A file the demo did not write.
        std::fs::write(d.join("notes.txt"), "mine").unwrap();
        let why = recognise(&d).unwrap().unwrap_err();
        assert!(why.contains("notes.txt"), "{why}");
        std::fs::remove_file(d.join("notes.txt")).unwrap();
        // A file changed since.
        std::fs::write(d.join("plan.ron"), "(edited)").unwrap();
        let why = recognise(&d).unwrap().unwrap_err();
        assert!(why.contains("plan.ron"), "{why}");
        // A manifest edited to list the change no longer matches its
        // fingerprint.
        let text = std::fs::read_to_string(d.join(MANIFEST)).unwrap();
        let mut m: Manifest = serde_json::from_str(&text).unwrap();
        m.files[1].bytes = 8;
        std::fs::write(d.join(MANIFEST), serde_json::to_string(&m).unwrap()).unwrap();
        let why = recognise(&d).unwrap().unwrap_err();
        assert!(why.contains("fingerprint"), "{why}");
        std::fs::write(d.join(MANIFEST), "not json").unwrap();
        assert!(recognise(&d).unwrap().is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn staging_swaps_only_when_finished() {
        let d = temp("staging");
        let out = d.join("demo");
        // A first demo into an absent folder.
        let s = Staging::prepare(&out, &[]).unwrap();
        assert_eq!(s.work, d.join("demo.partial"));
        std::fs::write(s.work.join("plan.ron"), "first").unwrap();
        s.finish().unwrap();
        assert!(!s.work.exists());
        assert_eq!(
            std::fs::read_to_string(out.join("plan.ron")).unwrap(),
            "first"
        );
        // A second that fails leaves the first as it was.
        let s = Staging::prepare(&out, &[]).unwrap();
        std::fs::write(s.work.join("plan.ron"), "second").unwrap();
        s.fail();
        assert_eq!(
            std::fs::read_to_string(out.join("plan.ron")).unwrap(),
            "first"
        );
        // A third replaces the failed one's folder, then the first.
        let s = Staging::prepare(&out, &[]).unwrap();
        assert!(!s.work.join("plan.ron").exists());
        std::fs::write(s.work.join("plan.ron"), "third").unwrap();
        s.finish().unwrap();
        assert_eq!(
            std::fs::read_to_string(out.join("plan.ron")).unwrap(),
            "third"
        );
        // An input inside the folder it would replace is refused.
        let model = out.join("model.json");
        let e = Staging::prepare(&out, &[("--model", &model)])
            .err()
            .unwrap();
        assert!(e.to_string().contains("--model"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
