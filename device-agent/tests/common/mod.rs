//! Helpers for end-to-end tests that run the real `hetero-agent` binary.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The crate root (`device-agent/`).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A fresh temporary folder, removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!(
            "hetero-agent-test-{name}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `hetero-agent ARGS`, optionally with `stdin`.
pub fn agent_with_stdin(args: &[&str], stdin: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hetero-agent"));
    cmd.args(args)
        .current_dir(root())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("run hetero-agent");
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    child.wait_with_output().expect("wait for hetero-agent")
}

pub fn agent(args: &[&str]) -> Output {
    agent_with_stdin(args, None)
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts success and returns stdout.
pub fn ok(args: &[&str]) -> String {
    let o = agent(args);
    assert!(
        o.status.success(),
        "hetero-agent {args:?} failed: {}\n{}",
        o.status,
        stderr(&o)
    );
    stdout(&o)
}

/// Asserts exit code 2 and returns stderr.
pub fn bad_input(args: &[&str]) -> String {
    let o = agent(args);
    assert_eq!(
        o.status.code(),
        Some(2),
        "hetero-agent {args:?} should exit 2; stdout: {} stderr: {}",
        stdout(&o),
        stderr(&o)
    );
    stderr(&o)
}

/// Parses JSON Lines.
pub fn lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        .collect()
}

/// The lines of a given `type`.
pub fn of_type<'a>(lines: &'a [serde_json::Value], t: &str) -> Vec<&'a serde_json::Value> {
    lines.iter().filter(|l| l["type"] == t).collect()
}

/// Compares `text` with `device-agent/tests/golden/NAME`;
/// `HETERO_BLESS=1` rewrites it.
pub fn golden(name: &str, text: &str) {
    let path = root().join("tests/golden").join(name);
    if std::env::var_os("HETERO_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with HETERO_BLESS=1)", path.display()));
    assert_eq!(
        text,
        want,
        "{} differs (HETERO_BLESS=1 regenerates it)",
        path.display()
    );
}
