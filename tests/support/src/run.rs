//! Running a binary and checking how it ended.

use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// A binary of the package under test; [`bin!`](crate::bin) makes one.
#[derive(Clone, Copy, Debug)]
pub struct Bin {
    /// Its name, as in `[[bin]]`.
    pub name: &'static str,
    /// Where cargo built it (`CARGO_BIN_EXE_<name>`).
    pub path: &'static str,
    /// The root of the package under test, where it runs.
    pub crate_dir: &'static str,
}

/// The [`Bin`] named `$name` of the package whose test expands it; a
/// constant: `const HETERO: Bin = bin!("hetero");`.
#[macro_export]
macro_rules! bin {
    ($name:literal) => {
        $crate::Bin {
            name: $name,
            path: env!(concat!("CARGO_BIN_EXE_", $name)),
            crate_dir: env!("CARGO_MANIFEST_DIR"),
        }
    };
}

impl Bin {
    /// A [`Run`] of this binary in the package root.
    pub fn cmd(&self) -> Run {
        Run::named(self.name, self.path).current_dir(self.crate_dir)
    }

    /// Runs it with `args` to the end.
    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output()
    }

    /// Runs it with `args`, which must succeed; its standard output.
    pub fn ok(&self, args: &[&str]) -> String {
        self.cmd().args(args).ok()
    }

    /// Runs it with `args`, which must exit 2 (bad input); its standard error.
    pub fn bad_input(&self, args: &[&str]) -> String {
        self.cmd().args(args).bad_input()
    }

    /// The package root.
    pub fn root(&self) -> PathBuf {
        PathBuf::from(self.crate_dir)
    }

    /// The binary `name` that cargo built next to this one, or why there is
    /// none (a binary of another workspace member is built by `cargo test
    /// --workspace`, not by `cargo test -p` of this package alone).
    pub fn sibling(&self, name: &str) -> Result<PathBuf, String> {
        let path = Path::new(self.path).with_file_name(name);
        if path.is_file() {
            Ok(path)
        } else {
            Err(format!(
                "no {name} next to {} (`cargo test --workspace` builds it)",
                self.path
            ))
        }
    }
}

/// A command to run: program, arguments, environment, folder and standard
/// input, and the checks of how it ended.
#[derive(Debug)]
pub struct Run {
    cmd: Command,
    /// The command line as it is shown in failure messages.
    line: String,
    stdin: Option<Vec<u8>>,
}

impl Run {
    /// Runs `program`.
    pub fn new(program: impl AsRef<OsStr>) -> Run {
        let p = program.as_ref();
        Run::named(&p.to_string_lossy(), p)
    }

    /// Runs `program`, shown in messages as `name`.
    pub fn named(name: &str, program: impl AsRef<OsStr>) -> Run {
        Run {
            cmd: Command::new(program),
            line: name.to_string(),
            stdin: None,
        }
    }

    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Run {
        let a = arg.as_ref();
        self.line.push(' ');
        self.line.push_str(&a.to_string_lossy());
        self.cmd.arg(a);
        self
    }

    pub fn args<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(self, args: I) -> Run {
        args.into_iter().fold(self, Run::arg)
    }

    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Run {
        self.cmd.env(key, value);
        self
    }

    pub fn envs<I, K, V>(mut self, vars: I) -> Run
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        self.cmd.envs(vars);
        self
    }

    pub fn env_remove(mut self, key: impl AsRef<OsStr>) -> Run {
        self.cmd.env_remove(key);
        self
    }

    pub fn current_dir(mut self, dir: impl AsRef<Path>) -> Run {
        self.cmd.current_dir(dir);
        self
    }

    /// Standard input (otherwise it is empty).
    pub fn stdin(mut self, text: impl Into<Vec<u8>>) -> Run {
        self.stdin = Some(text.into());
        self
    }

    /// Runs it to the end and returns what it wrote and how it ended.
    pub fn output(mut self) -> Output {
        self.cmd
            .stdin(if self.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = self
            .cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start `{}`: {e}", self.line));
        if let Some(text) = self.stdin.take() {
            let mut pipe = child.stdin.take().unwrap();
            // A program may exit without reading all of it.
            let _ = pipe.write_all(&text);
        }
        child
            .wait_with_output()
            .unwrap_or_else(|e| panic!("waiting for `{}`: {e}", self.line))
    }

    /// Runs it; it must exit with `code`. Returns its output.
    pub fn expect_code(self, code: i32) -> Output {
        let line = self.line.clone();
        let o = self.output();
        if o.status.code() != Some(code) {
            panic!(
                "`{line}` ended with {} (expected exit code {code})\n--- stdout\n{}\n--- stderr\n{}",
                o.status,
                stdout(&o),
                stderr(&o)
            );
        }
        o
    }

    /// Runs it; it must succeed. Returns its standard output.
    pub fn ok(self) -> String {
        stdout(&self.expect_code(0))
    }

    /// Runs it; it must exit 2 (bad input). Returns its standard error.
    pub fn bad_input(self) -> String {
        stderr(&self.expect_code(2))
    }
}

/// Standard output as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Standard error as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
