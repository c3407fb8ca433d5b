//! The guard every command runs on its outputs before it writes anything:
//! an output is never one of the command's own inputs (compared through
//! symbolic links and, on Unix, hard links), never another output of the
//! same command, and never inside a dataset folder unless writing a dataset
//! folder is the command's job. Every refusal is bad input (exit 2) and
//! names both paths.

use std::path::{Component, Path, PathBuf};

use hetero_profiler::dataset::DEVICE_FILE;

use crate::bad;

/// Extensions of the files beside `device.json` that make a folder a
/// dataset: the journal and other JSON Lines rows, the Parquet tables.
const ROW_EXTENSIONS: [&str; 2] = ["jsonl", "parquet"];

/// One path a command reads, named by its argument (`--predictor`, or
/// `DATASET` for a positional one).
pub type Input<'a> = (&'a str, &'a Path);

/// One path a command writes.
#[derive(Debug, Clone, Copy)]
pub struct Output<'a> {
    flag: &'a str,
    path: &'a Path,
    /// The path is a folder the command writes files into.
    folder: bool,
    /// The folder itself may be a dataset (its ancestors still may not):
    /// `hetero profile --out`, `hetero dataset merge --out`, `export`.
    dataset: bool,
}

impl<'a> Output<'a> {
    /// A file the command writes.
    pub fn file(flag: &'a str, path: &'a Path) -> Self {
        Output {
            flag,
            path,
            folder: false,
            dataset: false,
        }
    }

    /// A folder the command writes files into.
    pub fn folder(flag: &'a str, path: &'a Path) -> Self {
        Output {
            folder: true,
            ..Output::file(flag, path)
        }
    }

    /// A folder that is, or becomes, a dataset.
    pub fn dataset(flag: &'a str, path: &'a Path) -> Self {
        Output {
            dataset: true,
            ..Output::folder(flag, path)
        }
    }
}

/// Refuses (exit 2) any output that is one of `inputs`, another output, or
/// lies in a dataset folder it has no business in.
pub fn check(inputs: &[Input<'_>], outputs: &[Output<'_>]) -> anyhow::Result<()> {
    for (i, out) in outputs.iter().enumerate() {
        for &(flag, input) in inputs {
            if same_path(out.path, input) {
                return Err(bad(format!(
                    "{} {} is the same {} as {flag} {}: a command never writes over its \
                     own input; choose another {}",
                    out.flag,
                    out.path.display(),
                    if out.folder { "folder" } else { "file" },
                    input.display(),
                    out.flag
                )));
            }
        }
        for other in &outputs[..i] {
            if same_path(out.path, other.path) {
                return Err(bad(format!(
                    "{} {} and {} {} are the same path; give each its own",
                    other.flag,
                    other.path.display(),
                    out.flag,
                    out.path.display()
                )));
            }
        }
        if let Some(ds) = dataset_around(out) {
            return Err(bad(format!(
                "{} {}: {} is a dataset folder ({DEVICE_FILE} and its rows), and this \
                 command does not write into one; write it elsewhere",
                out.flag,
                out.path.display(),
                ds.display()
            )));
        }
    }
    Ok(())
}

/// True when `a` and `b` name the same file or folder: the same resolved
/// path (symbolic links followed), or on Unix the same device and inode
/// (hard links).
pub fn same_path(a: &Path, b: &Path) -> bool {
    if resolve(a) == resolve(b) {
        return true;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if let (Ok(x), Ok(y)) = (std::fs::metadata(a), std::fs::metadata(b)) {
            return x.dev() == y.dev() && x.ino() == y.ino();
        }
    }
    false
}

/// True when `path` is `folder` or lies inside it, once both are resolved.
pub fn is_within(path: &Path, folder: &Path) -> bool {
    resolve(path).starts_with(resolve(folder))
}

/// `p` made absolute, its longest existing prefix canonicalised (links
/// followed) and the rest appended with `.` and `..` applied.
pub fn resolve(p: &Path) -> PathBuf {
    let abs = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_default().join(p)
    };
    let mut base = abs.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(c) = base.canonicalize() {
            let mut out = c;
            for part in rest.iter().rev() {
                match part {
                    Component::ParentDir => {
                        out.pop();
                    }
                    Component::CurDir => {}
                    c => out.push(c),
                }
            }
            return out;
        }
        match (base.parent(), base.components().next_back()) {
            (Some(parent), Some(last)) => {
                rest.push(last);
                base = parent;
            }
            _ => return abs,
        }
    }
}

/// True when `dir` holds a hetero dataset: `device.json` and rows.
pub fn is_dataset(dir: &Path) -> bool {
    let rows = |e: std::fs::DirEntry| {
        let p = e.path();
        p.extension()
            .is_some_and(|x| ROW_EXTENSIONS.iter().any(|r| x == *r))
            && p.is_file()
    };
    dir.join(DEVICE_FILE).is_file()
        && std::fs::read_dir(dir).is_ok_and(|mut d| d.any(|e| e.is_ok_and(rows)))
}

/// The dataset folder `out` would write into, if any: for a file, any
/// folder above it; for a folder, the folder itself (unless it may be a
/// dataset) and any folder above it.
fn dataset_around(out: &Output<'_>) -> Option<PathBuf> {
    let full = resolve(out.path);
    let mut dirs = full.ancestors();
    if !out.folder || out.dataset {
        dirs.next();
    }
    dirs.find(|d| is_dataset(d)).map(Path::to_path_buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("hetero-outpath-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn message(r: anyhow::Result<()>) -> String {
        let e = r.expect_err("should be refused");
        assert_eq!(crate::exit::code_for(&e), 2, "{e}");
        e.to_string()
    }

    #[test]
    fn an_output_may_not_be_an_input() {
        let d = temp("same");
        let p = d.join("p.ron");
        std::fs::write(&p, "()").unwrap();
        let out = Output::file("--out", &p);
        let e = message(check(&[("--predictor", &p)], &[out]));
        assert!(e.contains("--out") && e.contains("--predictor"), "{e}");
        assert!(e.contains(&p.display().to_string()), "{e}");
        // Through `..` and `.`.
        let roundabout = d.join("x/../.").join("p.ron");
        message(check(
            &[("--predictor", &p)],
            &[Output::file("--out", &roundabout)],
        ));
        // Another file is fine, existing or not.
        let q = d.join("q.ron");
        check(&[("--predictor", &p)], &[Output::file("--out", &q)]).unwrap();
        std::fs::write(&q, "()").unwrap();
        check(&[("--predictor", &p)], &[Output::file("--out", &q)]).unwrap();
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn links_are_followed() {
        let d = temp("links");
        let p = d.join("p.ron");
        std::fs::write(&p, "()").unwrap();
        let soft = d.join("soft.ron");
        std::os::unix::fs::symlink(&p, &soft).unwrap();
        let hard = d.join("hard.ron");
        std::fs::hard_link(&p, &hard).unwrap();
        for link in [&soft, &hard] {
            let e = message(check(
                &[("--predictor", &p)],
                &[Output::file("--out", link)],
            ));
            assert!(e.contains(&link.display().to_string()), "{e}");
        }
        // A link to the folder above.
        let dir_link = d.join("dir-link");
        std::os::unix::fs::symlink(&d, &dir_link).unwrap();
        assert!(same_path(&dir_link.join("p.ron"), &p));
        assert!(is_within(&dir_link.join("new/file"), &d));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn two_outputs_may_not_be_one_path() {
        let d = temp("two");
        let a = d.join("a.json");
        let e = message(check(
            &[],
            &[Output::file("--out", &a), Output::file("--report", &a)],
        ));
        assert!(e.contains("--out") && e.contains("--report"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn nothing_is_written_into_a_dataset_unless_that_is_the_job() {
        let d = temp("dataset");
        let ds = d.join("ds");
        std::fs::create_dir_all(&ds).unwrap();
        std::fs::write(ds.join(DEVICE_FILE), "{}").unwrap();
        // device.json alone is not a dataset.
        check(&[], &[Output::file("--out", &ds.join("p.ron"))]).unwrap();
        std::fs::write(ds.join("journal.jsonl"), "").unwrap();
        assert!(is_dataset(&ds));
        for out in [
            Output::file("--out", &ds.join(DEVICE_FILE)),
            Output::file("--out", &ds.join("p.ron")),
            Output::folder("--out", &ds),
            Output::folder("--out", &ds.join("charts/deeper")),
            Output::dataset("--out", &ds.join("nested")),
        ] {
            let e = message(check(&[], &[out]));
            assert!(e.contains("dataset folder") && e.contains("ds"), "{e}");
        }
        // Writing a dataset folder is a dataset command's job; beside one is fine.
        check(&[], &[Output::dataset("--out", &ds)]).unwrap();
        check(&[], &[Output::file("--out", &d.join("p.ron"))]).unwrap();
        check(&[], &[Output::folder("--out", &d.join("charts"))]).unwrap();
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn resolve_keeps_what_does_not_exist_yet() {
        let d = temp("resolve");
        let r = resolve(&d.join("a/b/../c.txt"));
        assert_eq!(r, d.canonicalize().unwrap().join("a/c.txt"));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
