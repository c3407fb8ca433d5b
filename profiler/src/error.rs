use std::path::PathBuf;

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong while profiling a device or reading a dataset.
///
/// Variants that are the user's to fix (a bad device string, an unreachable
/// host, a folder holding another device's data) answer true to
/// [`Error::is_bad_input`], and the command line exits with code 2. Every
/// transport failure names the exact command that failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The `--device` string is not `local`, `ssh://user@host[:port]` or `adb[:SERIAL]`.
    #[error(
        "unknown device `{given}`: {reason}; use `local`, `ssh://user@host[:port]` or `adb[:SERIAL]`"
    )]
    UnknownDevice {
        /// What the user wrote.
        given: String,
        /// Why it is not understood.
        reason: String,
    },
    /// A command line flag has a bad value.
    #[error("{flag}: {message}")]
    BadArgument {
        /// The flag (`--budget`).
        flag: String,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// The budget does not measure the rows a fit needs
    /// ([`crate::profile::BudgetPlan::minimum_s`]); refused before any case
    /// runs.
    #[error(
        "--budget {budget} is too short to profile {processors} for a fit: it needs at least {minimum}"
    )]
    BudgetTooShort {
        /// The budget given, as `--budget` takes it.
        budget: String,
        /// The processors asked for, comma-separated.
        processors: String,
        /// The shortest budget that does.
        minimum: String,
    },
    /// The host did not answer over ssh.
    #[error("cannot reach {target}: `{command}` failed: {detail}\nfix: {fix}")]
    Unreachable {
        /// `ssh://user@host:port`.
        target: String,
        /// The exact command that failed.
        command: String,
        /// Exit status and what it printed.
        detail: String,
        /// What to check.
        fix: String,
    },
    /// `adb devices` lists no usable device, several without a serial, or not
    /// the one asked for.
    #[error("{message}\nfix: {fix}")]
    AdbDevice {
        /// What `adb devices` showed.
        message: String,
        /// What to do.
        fix: String,
    },
    /// A program the transport needs is not installed.
    #[error("cannot run `{program}`; {fix}")]
    MissingProgram {
        /// `ssh`, `scp` or `adb`.
        program: String,
        /// The spawn error.
        source: std::io::Error,
        /// How to install it.
        fix: String,
    },
    /// No agent binary for the target's architecture.
    #[error("no hetero-agent for `{arch}`: {detail}\nfix: {fix}")]
    NoAgent {
        /// `uname -m` of the target.
        arch: String,
        /// What was tried.
        detail: String,
        /// What to do.
        fix: String,
    },
    /// The agent speaks another protocol, or did not answer the handshake.
    #[error("agent handshake failed (`{command}`): {message}")]
    Handshake {
        /// The command run.
        command: String,
        /// What is wrong.
        message: String,
    },
    /// A command of the transport failed after its retries.
    #[error("`{command}` failed after {attempts} attempt(s): {detail}")]
    Transport {
        /// The exact command line.
        command: String,
        /// How many times it was tried.
        attempts: u32,
        /// Exit status and the tail of what it printed.
        detail: String,
    },
    /// The agent stopped in the middle of a sweep more often than the retry
    /// policy allows.
    #[error(
        "the agent stopped {failures} time(s) in a row without progress; last: `{command}`: {detail}\n\
         the rows measured so far are in {journal}; run again with --resume to continue"
    )]
    AgentStopped {
        /// The last command.
        command: String,
        /// Consecutive failures.
        failures: u32,
        /// What happened last.
        detail: String,
        /// The journal holding the rows so far.
        journal: PathBuf,
    },
    /// The agent refused the request as bad input (exit code 2).
    #[error("the agent refused the request (`{command}`): {detail}")]
    AgentRefused {
        /// The command.
        command: String,
        /// What it printed.
        detail: String,
    },
    /// The output folder already holds data that may not be mixed with this run.
    #[error("{}: {message}\nfix: {fix}", path.display())]
    FolderInUse {
        /// The folder.
        path: PathBuf,
        /// What it holds.
        message: String,
        /// What to do.
        fix: String,
    },
    /// Processors asked for with `--processors` that the device lacks.
    #[error("--processors: {missing} not found on the device; it has: {available}")]
    UnknownProcessor {
        /// The ids not found.
        missing: String,
        /// The ids the probe reported.
        available: String,
    },
    /// A dataset file is malformed or missing.
    #[error("{}: {message}", path.display())]
    Dataset {
        /// The file or folder.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A file of hetero's formats (`device.json`, a model config) is bad.
    #[error(transparent)]
    Plan(#[from] hetero_plan::Error),
    /// Reading or writing a file failed.
    #[error("{}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Polars failed reading or writing a table.
    #[error("{}: {source}", path.display())]
    Polars {
        /// The file.
        path: PathBuf,
        /// The polars error.
        source: polars::error::PolarsError,
    },
}

impl Error {
    /// True when the error is the user's to fix (exit code 2).
    pub fn is_bad_input(&self) -> bool {
        match self {
            Error::UnknownDevice { .. }
            | Error::BadArgument { .. }
            | Error::BudgetTooShort { .. }
            | Error::Unreachable { .. }
            | Error::AdbDevice { .. }
            | Error::MissingProgram { .. }
            | Error::NoAgent { .. }
            | Error::Handshake { .. }
            | Error::AgentRefused { .. }
            | Error::FolderInUse { .. }
            | Error::UnknownProcessor { .. }
            | Error::Dataset { .. } => true,
            Error::Plan(e) => e.is_bad_input(),
            Error::Io { source, .. } => matches!(
                source.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::InvalidData
            ),
            Error::Transport { .. } | Error::AgentStopped { .. } | Error::Polars { .. } => false,
        }
    }

    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// A malformed dataset file.
    pub fn dataset(path: impl Into<PathBuf>, message: impl Into<String>) -> Error {
        Error::Dataset {
            path: path.into(),
            message: message.into(),
        }
    }

    /// A bad flag value.
    pub fn arg(flag: impl Into<String>, message: impl Into<String>) -> Error {
        Error::BadArgument {
            flag: flag.into(),
            message: message.into(),
        }
    }
}
