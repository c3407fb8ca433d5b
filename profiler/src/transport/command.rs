//! Running a local program (`ssh`, `scp`, `adb`, the agent itself) and
//! keeping what it printed.

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::{Error, Result};

/// What a short command printed.
#[derive(Debug, Clone)]
pub struct CommandOutput {
    /// The exact command line.
    pub command: String,
    /// Its exit status; `None` when it was killed at the timeout.
    pub status: Option<ExitStatus>,
    /// Standard output.
    pub stdout: Vec<u8>,
    /// Standard error.
    pub stderr: Vec<u8>,
}

impl CommandOutput {
    /// True on exit code 0.
    pub fn success(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    /// The exit code, if it exited.
    pub fn code(&self) -> Option<i32> {
        self.status.and_then(|s| s.code())
    }

    /// Standard output as text.
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// `exit code 255: LAST LINES OF STDERR`.
    pub fn detail(&self) -> String {
        let status = match self.status {
            None => "timed out and was killed".to_string(),
            Some(s) => match s.code() {
                Some(c) => format!("exit code {c}"),
                None => format!("{s}"),
            },
        };
        let err = tail(&String::from_utf8_lossy(&self.stderr), 6);
        if err.is_empty() {
            status
        } else {
            format!("{status}: {err}")
        }
    }
}

/// The last `n` non-empty lines of `s`, joined with " | ".
pub fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

/// Quotes a word for a POSIX shell, only where needed.
pub fn shell_quote(s: &str) -> String {
    let safe = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=@%+,".contains(&b));
    if safe {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// A command as one would type it.
pub fn display_command(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| shell_quote(&a.to_string_lossy()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Maps a failure to spawn a program to a clear error.
pub fn spawn_error(cmd: &Command, e: std::io::Error) -> Error {
    let program = cmd.get_program().to_string_lossy().into_owned();
    if e.kind() == std::io::ErrorKind::NotFound {
        let fix = match program.as_str() {
            "ssh" | "scp" => "install OpenSSH (Debian: apt-get install openssh-client)".into(),
            "adb" => "install the Android platform tools (Debian: apt-get install adb) \
                      or put adb on PATH"
                .into(),
            p => format!("check that {p} exists and is executable"),
        };
        return Error::MissingProgram {
            program,
            source: e,
            fix,
        };
    }
    Error::Transport {
        command: display_command(cmd),
        attempts: 1,
        detail: e.to_string(),
    }
}

/// Spawns `cmd` with piped output and no input.
pub fn spawn_piped(mut cmd: Command) -> Result<Child> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.spawn().map_err(|e| spawn_error(&cmd, e))
}

/// Runs a command to completion, killing it after `timeout`.
pub fn run_with_timeout(cmd: Command, timeout: Duration) -> Result<CommandOutput> {
    let command = display_command(&cmd);
    let mut child = spawn_piped(cmd)?;
    let mut so = child.stdout.take().expect("piped");
    let mut se = child.stderr.take().expect("piped");
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = so.read_to_end(&mut v);
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = se.read_to_end(&mut v);
        v
    });
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if start.elapsed() >= timeout => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => {
                return Err(Error::Transport {
                    command,
                    attempts: 1,
                    detail: e.to_string(),
                });
            }
        }
    };
    let stdout = t_out.join().unwrap_or_default();
    let stderr = t_err.join().unwrap_or_default();
    Ok(CommandOutput {
        command,
        status,
        stdout,
        stderr,
    })
}
