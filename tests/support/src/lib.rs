//! What the workspace's tests share.
//!
//! - [`temp_dir`]: a fresh temporary folder (from `tempfile`), removed when
//!   dropped.
//! - [`bin!`] and [`Run`]: run a binary of the package under test with
//!   arguments, environment and standard input, and check its exit code; a
//!   failure message shows the command line, the exit code and both outputs.
//! - [`golden`]: compare text with a file; `HETERO_BLESS=1` rewrites it.
//! - [`skip!`] and [`or_skip!`]: skip a test whose tool is missing here,
//!   or fail instead when the matching `HETERO_REQUIRE_*` is set (CI sets
//!   one for everything it installs).
//!
//! It depends on no crate of the workspace, so every crate can use it.

use std::path::{Path, PathBuf};

pub mod require;
mod run;

pub use run::{Bin, Run, stderr, stdout};
pub use tempfile::TempDir;

/// A tiny llama config: hidden 64, 2 layers, 4 heads (2 KV), FFN 96,
/// vocabulary 80.
pub const TINY_LLAMA: &str = r#"{"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96,
  "vocab_size": 80, "_name_or_path": "tiny-llama"}"#;

/// A fresh temporary folder named after `name`, removed when dropped.
pub fn temp_dir(name: &str) -> TempDir {
    tempfile::Builder::new()
        .prefix(&format!("hetero-test-{name}-"))
        .tempdir()
        .unwrap_or_else(|e| panic!("cannot create a temporary folder for {name}: {e}"))
}

/// Writes `text` to `dir/name` and returns the path.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    p
}

/// Compares `text` with the golden file at `path`; with `HETERO_BLESS=1`
/// in the environment it writes `text` there first.
pub fn golden(path: &Path, text: &str) {
    if std::env::var_os("HETERO_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let want = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with HETERO_BLESS=1)", path.display()));
    assert_eq!(
        text,
        want,
        "{} differs (HETERO_BLESS=1 regenerates it)",
        path.display()
    );
}

/// Parses JSON Lines, one value a line.
pub fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        .collect()
}

/// The values whose `type` field is `t`.
pub fn of_type<'a>(lines: &'a [serde_json::Value], t: &str) -> Vec<&'a serde_json::Value> {
    lines.iter().filter(|l| l["type"] == t).collect()
}

/// A program on `PATH` or in one of the sbin folders (where `sshd` lives,
/// often off a user's `PATH`).
pub fn find_tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(
            [
                "/usr/sbin",
                "/usr/bin",
                "/sbin",
                "/bin",
                "/usr/local/sbin",
                "/usr/local/bin",
            ]
            .map(PathBuf::from),
        )
        .map(|d| d.join(name))
        .find(|c| c.is_file())
}
