//! Running the agent where the device is: locally, over OpenSSH, or over adb.
//!
//! Every transport runs the real program a user would (`ssh`, `scp`, `adb`),
//! so what works by hand works here and the error names the exact command.
//! Commands that fail for a reason of the link (ssh's exit code 255, adb's
//! "device offline") are retried with exponential backoff; a failure of the
//! remote program itself is not retried.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use crate::target::check_ssh_destination;
use crate::{Error, Result, Target};

mod adb;
mod command;

use adb::pick_adb_device;
pub use adb::{AdbDevice, adb_link_failure, parse_adb_devices};
pub use command::{
    CommandOutput, display_command, run_with_timeout, shell_quote, spawn_error, spawn_piped, tail,
};

/// Where the agent lives on an Android device.
pub const ADB_DIR: &str = "/data/local/tmp/hetero";
/// Where the agent lives on an ssh host, relative to the login folder.
pub const SSH_DIR: &str = ".cache/hetero";
/// The agent's file name on the target.
pub const AGENT_NAME: &str = "hetero-agent";

/// How often and how patiently transport commands are retried.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Tries in all (1 = no retry).
    pub attempts: u32,
    /// Wait before the second try; doubled before each further one.
    pub base: Duration,
    /// Longest wait between tries.
    pub max: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts: 4,
            base: Duration::from_millis(500),
            max: Duration::from_secs(8),
        }
    }
}

impl RetryPolicy {
    /// The wait before try number `attempt` (1-based; the first try does not wait).
    pub fn delay(&self, attempt: u32) -> Duration {
        if attempt <= 1 {
            return Duration::ZERO;
        }
        let factor = 1u32 << (attempt - 2).min(16);
        self.base.saturating_mul(factor).min(self.max)
    }
}

/// A retry about to happen, for the progress output.
#[derive(Debug, Clone)]
pub struct RetryNote {
    /// The command that failed.
    pub command: String,
    /// The try that failed (1-based).
    pub attempt: u32,
    /// Tries allowed in all.
    pub attempts: u32,
    /// The wait before the next try.
    pub wait: Duration,
    /// What went wrong.
    pub detail: String,
}

/// Called before each retry.
pub type RetryObserver = Arc<dyn Fn(&RetryNote) + Send + Sync>;

/// Settings of a transport beyond the target itself.
#[derive(Clone)]
pub struct TransportOptions {
    /// Retry policy for commands that fail for a reason of the link.
    pub retry: RetryPolicy,
    /// An ssh config file (`ssh -F FILE`), for keys, ports and known hosts.
    pub ssh_config: Option<PathBuf>,
    /// Extra `-o KEY=VALUE` options for ssh and scp.
    pub ssh_options: Vec<String>,
    /// Limit for one short command (handshake, copy, probe).
    pub command_timeout: Duration,
    /// Folder for the agent on an ssh host (default [`SSH_DIR`], relative to
    /// the login folder) or an adb device (default [`ADB_DIR`]).
    pub remote_dir: Option<String>,
    /// Told about every retry.
    pub observer: Option<RetryObserver>,
}

impl Default for TransportOptions {
    fn default() -> Self {
        TransportOptions {
            retry: RetryPolicy::default(),
            ssh_config: None,
            ssh_options: Vec::new(),
            command_timeout: Duration::from_secs(120),
            remote_dir: None,
            observer: None,
        }
    }
}

impl std::fmt::Debug for TransportOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransportOptions")
            .field("retry", &self.retry)
            .field("ssh_config", &self.ssh_config)
            .field("ssh_options", &self.ssh_options)
            .field("command_timeout", &self.command_timeout)
            .field("remote_dir", &self.remote_dir)
            .finish_non_exhaustive()
    }
}

/// Facts about the target, from `uname`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Facts {
    /// `uname -m`.
    pub arch: String,
    /// Host name, or the device model on Android.
    pub name: String,
    /// `uname -sr`.
    pub os: String,
}

/// A connection to the machine the agent runs on.
pub struct Transport {
    target: Target,
    kind: Kind,
    opts: TransportOptions,
    /// Local folder for files handed to a local agent, and for pulled files.
    scratch: PathBuf,
}

enum Kind {
    Local { agent: Option<PathBuf> },
    Ssh(Ssh),
    Adb { serial: String },
}

struct Ssh {
    /// `user@host` or `host`.
    dest: String,
    port: Option<u16>,
    control_path: PathBuf,
}

impl Transport {
    /// Opens a transport: for adb, picks the device; for ssh, prepares the
    /// control connection (made by the first command).
    pub fn open(target: &Target, opts: TransportOptions) -> Result<Transport> {
        let scratch = std::env::temp_dir().join(format!(
            "hetero-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos()
                % 1_000_000_000
        ));
        create_private_dir(&scratch)?;
        let kind = match target {
            Target::Local => Kind::Local { agent: None },
            Target::Ssh { user, host, port } => {
                check_ssh_destination(user.as_deref(), host).map_err(|reason| {
                    Error::UnknownDevice {
                        given: target.to_string(),
                        reason,
                    }
                })?;
                if let Some(dir) = &opts.remote_dir {
                    check_scp_path(dir)?;
                }
                let dest = match user {
                    Some(u) => format!("{u}@{host}"),
                    None => host.clone(),
                };
                Kind::Ssh(Ssh {
                    dest,
                    port: *port,
                    // %C is a hash of host, port and user: short enough for
                    // the 104-byte limit of a socket path.
                    control_path: scratch.join("cm-%C"),
                })
            }
            Target::Adb { serial } => Kind::Adb {
                serial: pick_adb_device(serial.as_deref(), &opts)?,
            },
        };
        let target = match (&kind, target) {
            (Kind::Adb { serial }, Target::Adb { .. }) => Target::Adb {
                serial: Some(serial.clone()),
            },
            _ => target.clone(),
        };
        Ok(Transport {
            target,
            kind,
            opts,
            scratch,
        })
    }

    /// The target, with the adb serial filled in.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The folder the agent lives in on the target (`None` for local).
    pub fn remote_dir(&self) -> Option<String> {
        let default = match self.kind {
            Kind::Local { .. } => return None,
            Kind::Ssh(_) => SSH_DIR,
            Kind::Adb { .. } => ADB_DIR,
        };
        Some(
            self.opts
                .remote_dir
                .clone()
                .unwrap_or_else(|| default.to_string()),
        )
    }

    /// Architecture, name and OS of the target. Over ssh this is the first
    /// command, so an unreachable host is reported here.
    pub fn facts(&mut self) -> Result<Facts> {
        if let Kind::Local { .. } = self.kind {
            return Ok(Facts {
                arch: std::env::consts::ARCH.to_string(),
                name: std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .map(|s| s.trim().to_string())
                    .unwrap_or_else(|_| "localhost".into()),
                os: local_os(),
            });
        }
        let name_cmd = match self.kind {
            Kind::Adb { .. } => "getprop ro.product.model 2>/dev/null || uname -n",
            _ => "uname -n",
        };
        let script = format!(r#"echo "$(uname -m)"; echo "$({name_cmd})"; echo "$(uname -sr)""#);
        let out = match self.shell(&script) {
            Ok(o) => o,
            Err(Error::Transport {
                command, detail, ..
            }) if matches!(self.kind, Kind::Ssh(_)) => {
                return Err(Error::Unreachable {
                    target: self.target.to_string(),
                    command,
                    detail,
                    fix: "check the host name and port, that sshd runs there, and that \
                          `ssh [-p PORT] user@host true` logs in without a password prompt \
                          (a key in ssh-agent or the ssh config; pass --ssh-config FILE for \
                          another config, and connect once by hand to accept the host key)"
                        .into(),
                });
            }
            Err(e) => return Err(e),
        };
        if !out.success() {
            return Err(Error::Transport {
                command: out.command.clone(),
                attempts: 1,
                detail: out.detail(),
            });
        }
        let text = out.stdout_text().replace('\r', "");
        let mut lines = text.lines().map(str::trim);
        let arch = lines.next().unwrap_or_default().to_string();
        if arch.is_empty() {
            return Err(Error::Transport {
                command: out.command,
                attempts: 1,
                detail: "`uname -m` printed nothing".into(),
            });
        }
        let mut name = lines.next().unwrap_or_default().to_string();
        if let Kind::Adb { serial } = &self.kind {
            name = if name.is_empty() {
                serial.clone()
            } else {
                format!("{name} ({serial})")
            };
        }
        Ok(Facts {
            arch,
            name,
            os: lines.next().unwrap_or_default().to_string(),
        })
    }

    /// Puts the agent binary on the target (skipped when the same bytes are
    /// already there) and makes it executable.
    pub fn install_agent(&mut self, local: &Path) -> Result<()> {
        let bytes = std::fs::read(local).map_err(|e| Error::io(local, e))?;
        if let Kind::Local { agent } = &mut self.kind {
            *agent = Some(local.canonicalize().map_err(|e| Error::io(local, e))?);
            return Ok(());
        }
        let raw_dir = self.remote_dir().expect("remote");
        let dir = shell_quote(&raw_dir);
        let want = sha256_hex(&bytes);
        let check =
            format!("mkdir -p {dir} && cd {dir} && (sha256sum {AGENT_NAME} 2>/dev/null || true)");
        let out = self.shell_checked(&check)?;
        let have = out.stdout_text();
        if have.split_whitespace().next() == Some(want.as_str()) {
            return Ok(());
        }
        self.push(local, &format!("{raw_dir}/{AGENT_NAME}"))?;
        self.shell_checked(&format!("chmod 755 {dir}/{AGENT_NAME}"))?;
        Ok(())
    }

    /// Writes a file next to the agent; returns the path the agent should be
    /// given.
    pub fn put_file(&mut self, name: &str, bytes: &[u8]) -> Result<String> {
        let local = self.scratch.join(name);
        std::fs::write(&local, bytes).map_err(|e| Error::io(&local, e))?;
        match self.remote_dir() {
            None => Ok(local.to_string_lossy().into_owned()),
            Some(dir) => {
                let remote = format!("{dir}/{name}");
                self.push(&local, &remote)?;
                Ok(name.to_string())
            }
        }
    }

    /// Reads a file from the agent's folder (adb: `adb pull`; ssh: `scp`).
    pub fn fetch_file(&mut self, name: &str) -> Result<Vec<u8>> {
        let local = self.scratch.join(format!("fetched-{name}"));
        match self.remote_dir() {
            None => {
                let p = self.scratch.join(name);
                return std::fs::read(&p).map_err(|e| Error::io(p, e));
            }
            Some(dir) => self.pull(&format!("{dir}/{name}"), &local)?,
        }
        std::fs::read(&local).map_err(|e| Error::io(local, e))
    }

    /// The command that runs the agent with `args`; its standard error goes
    /// to `log` in the agent's folder on adb (old adb merges it into stdout).
    pub fn agent_command(&self, args: &[String], log: &str) -> Command {
        match &self.kind {
            Kind::Local { agent } => {
                let mut c = Command::new(agent.as_deref().unwrap_or(Path::new(AGENT_NAME)));
                c.args(args);
                c.current_dir(&self.scratch);
                c
            }
            Kind::Ssh(_) => self.ssh_command(&self.agent_line(args)),
            Kind::Adb { .. } => {
                let line = format!("{} 2>{log}", self.agent_line(args));
                let mut c = self.adb_command();
                c.args(["shell", &line]);
                c
            }
        }
    }

    /// The shell line that runs the agent with `args` in the remote folder.
    fn agent_line(&self, args: &[String]) -> String {
        format!(
            "cd {} && ./{AGENT_NAME} {}",
            shell_quote(&self.remote_dir().expect("remote")),
            args.iter()
                .map(|a| shell_quote(a))
                .collect::<Vec<_>>()
                .join(" ")
        )
    }

    /// True when the agent's standard error goes to a file on the target
    /// (fetch it with [`Transport::fetch_file`]).
    pub fn agent_stderr_is_file(&self) -> bool {
        matches!(self.kind, Kind::Adb { .. })
    }

    /// Runs the agent with `args` to completion, retrying failures of the
    /// link.
    pub fn run_agent(&mut self, args: &[String]) -> Result<CommandOutput> {
        let log = "agent-cmd.log";
        let mut out = self.retrying(|t| t.agent_command(args, log), None)?;
        if self.agent_stderr_is_file()
            && !out.success()
            && let Ok(bytes) = self.fetch_file(log)
        {
            out.stderr.extend_from_slice(&bytes);
        }
        Ok(out)
    }

    /// Whether a failed command failed because of the link (and may be
    /// retried) rather than because of the program it ran.
    pub fn is_link_failure(&self, out: &CommandOutput) -> bool {
        let Some(status) = out.status else {
            return true;
        };
        match &self.kind {
            Kind::Local { .. } => false,
            Kind::Ssh(_) => status.code() == Some(255),
            Kind::Adb { .. } => status.code() != Some(0) && adb_link_failure(&out.stderr),
        }
    }

    /// Runs a shell command line on the target (not for local).
    fn shell(&mut self, line: &str) -> Result<CommandOutput> {
        self.retrying(
            |t| match &t.kind {
                Kind::Ssh(_) => t.ssh_command(line),
                Kind::Adb { .. } => {
                    let mut c = t.adb_command();
                    c.args(["shell", line]);
                    c
                }
                Kind::Local { .. } => {
                    let mut c = Command::new("sh");
                    c.args(["-c", line]);
                    c
                }
            },
            None,
        )
    }

    fn shell_checked(&mut self, line: &str) -> Result<CommandOutput> {
        let out = self.shell(line)?;
        if out.success() {
            Ok(out)
        } else {
            Err(Error::Transport {
                command: out.command.clone(),
                attempts: 1,
                detail: out.detail(),
            })
        }
    }

    fn push(&mut self, local: &Path, remote: &str) -> Result<()> {
        self.copy(Direction::Push, local, remote)
    }

    fn pull(&mut self, remote: &str, local: &Path) -> Result<()> {
        self.copy(Direction::Pull, local, remote)
    }

    /// Copies one file between `local` and `remote` on the target, in the
    /// direction `dir`, with `scp` or `adb`.
    fn copy(&mut self, dir: Direction, local: &Path, remote: &str) -> Result<()> {
        let local_s = local.to_string_lossy().into_owned();
        let remote = remote.to_string();
        let out = self.retrying(
            |t| match &t.kind {
                Kind::Ssh(_) => t.scp_command(dir, &local_s, &remote),
                _ => {
                    let mut c = t.adb_command();
                    c.arg(dir.adb_verb())
                        .args(dir.ends(local_s.clone(), remote.clone()));
                    c
                }
            },
            Some(true),
        )?;
        self.expect_success(out)
    }

    fn expect_success(&self, out: CommandOutput) -> Result<()> {
        if out.success() {
            Ok(())
        } else {
            Err(Error::Transport {
                command: out.command.clone(),
                attempts: self.opts.retry.attempts,
                detail: out.detail(),
            })
        }
    }

    /// Runs the command `make` builds, retrying failures of the link (or
    /// every failure when `retry_all` is `Some(true)`: copies fail only for
    /// reasons of the link). Returns the last output; an error only when
    /// every try failed for a reason of the link.
    fn retrying(
        &mut self,
        make: impl Fn(&Transport) -> Command,
        retry_all: Option<bool>,
    ) -> Result<CommandOutput> {
        let policy = self.opts.retry;
        let mut attempt = 1;
        loop {
            let cmd = make(self);
            let out = run_with_timeout(cmd, self.opts.command_timeout)?;
            let link = if retry_all == Some(true) {
                !out.success()
            } else {
                self.is_link_failure(&out)
            };
            if !link {
                return Ok(out);
            }
            if attempt >= policy.attempts.max(1) {
                return Err(Error::Transport {
                    command: out.command.clone(),
                    attempts: attempt,
                    detail: out.detail(),
                });
            }
            attempt += 1;
            let wait = policy.delay(attempt);
            if let Some(obs) = &self.opts.observer {
                obs(&RetryNote {
                    command: out.command.clone(),
                    attempt: attempt - 1,
                    attempts: policy.attempts,
                    wait,
                    detail: out.detail(),
                });
            }
            std::thread::sleep(wait);
        }
    }

    fn ssh_common(&self, c: &mut Command, s: &Ssh) {
        if let Some(f) = &self.opts.ssh_config {
            c.arg("-F").arg(f);
        }
        for o in [
            "BatchMode=yes".to_string(),
            "ConnectTimeout=10".into(),
            "ServerAliveInterval=5".into(),
            "ServerAliveCountMax=6".into(),
            "ControlMaster=auto".into(),
            format!("ControlPath={}", s.control_path.display()),
            "ControlPersist=60".into(),
        ]
        .iter()
        .chain(&self.opts.ssh_options)
        {
            c.arg("-o").arg(o);
        }
    }

    /// `ssh OPTIONS [-p PORT] EXTRA -- DEST`: the destination after `--`,
    /// so that ssh never reads it as an option. The port is given to every
    /// command, `-O exit` too: the control socket's name hashes it.
    fn ssh_to_dest(&self, s: &Ssh, extra: &[&str]) -> Command {
        let mut c = Command::new("ssh");
        self.ssh_common(&mut c, s);
        if let Some(p) = s.port {
            c.arg("-p").arg(p.to_string());
        }
        c.args(extra).arg("--").arg(&s.dest);
        c
    }

    /// ssh running `line`, a command line for the remote shell whose every
    /// word was quoted with [`shell_quote`].
    fn ssh_command(&self, line: &str) -> Command {
        let Kind::Ssh(s) = &self.kind else {
            unreachable!("ssh_command on a non-ssh transport")
        };
        let mut c = self.ssh_to_dest(s, &[]);
        c.arg(line);
        c
    }

    /// `scp -q OPTIONS [-P PORT] -- FROM TO`: after `--`, neither end can be
    /// read as an option.
    fn scp_command(&self, dir: Direction, local: &str, remote: &str) -> Command {
        let Kind::Ssh(s) = &self.kind else {
            unreachable!("scp_command on a non-ssh transport")
        };
        let mut c = Command::new("scp");
        c.arg("-q");
        self.ssh_common(&mut c, s);
        if let Some(p) = s.port {
            c.arg("-P").arg(p.to_string());
        }
        let remote = format!("{}:{remote}", scp_host(&s.dest));
        c.arg("--").args(dir.ends(local.to_string(), remote));
        c
    }

    fn adb_command(&self) -> Command {
        let Kind::Adb { serial } = &self.kind else {
            unreachable!("adb_command on a non-adb transport")
        };
        let mut c = Command::new("adb");
        c.args(["-s", serial]);
        c
    }
}

impl Drop for Transport {
    fn drop(&mut self) {
        if let Kind::Ssh(s) = &self.kind {
            let c = self.ssh_to_dest(s, &["-O", "exit"]);
            let _ = run_with_timeout(c, Duration::from_secs(5));
        }
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

/// Refuses a folder on an ssh host whose name the remote shell would read
/// otherwise than scp does: scp's older protocol hands the path to the
/// remote shell unquoted, its newer one takes it literally, so only words
/// that need no quoting mean the same to both.
fn check_scp_path(dir: &str) -> Result<()> {
    if dir.is_empty() || dir.starts_with('-') || shell_quote(dir) != dir {
        return Err(Error::BadArgument {
            flag: "--remote-dir".into(),
            message: format!(
                "`{dir}`: on an ssh host the folder may hold only letters, digits and \
                 `/ . _ - + , : = @ %`, and may not start with `-`"
            ),
        });
    }
    Ok(())
}

/// `host` for scp, bracketing IPv6 addresses.
fn scp_host(dest: &str) -> String {
    match dest.rsplit_once('@') {
        Some((u, h)) if h.contains(':') => format!("{u}@[{h}]"),
        None if dest.contains(':') => format!("[{dest}]"),
        _ => dest.to_string(),
    }
}

fn create_private_dir(p: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(p)
        .map_err(|e| Error::io(p, e))
}

fn local_os() -> String {
    let read = |f: &str| {
        std::fs::read_to_string(format!("/proc/sys/kernel/{f}"))
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    let (t, r) = (read("ostype"), read("osrelease"));
    if t.is_empty() {
        std::env::consts::OS.to_string()
    } else {
        format!("{t} {r}")
    }
}

/// Lower-case hex SHA-256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The direction of a file copy.
#[derive(Debug, Clone, Copy)]
enum Direction {
    /// From this machine to the target.
    Push,
    /// From the target to this machine.
    Pull,
}

impl Direction {
    /// `[source, destination]` for the copy's `local` and `remote` ends.
    fn ends(self, local: String, remote: String) -> [String; 2] {
        match self {
            Direction::Push => [local, remote],
            Direction::Pull => [remote, local],
        }
    }

    /// `adb`'s subcommand for the copy.
    fn adb_verb(self) -> &'static str {
        match self {
            Direction::Push => "push",
            Direction::Pull => "pull",
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    #[test]
    fn quoting_leaves_plain_words_alone() {
        assert_eq!(shell_quote("sweep"), "sweep");
        assert_eq!(shell_quote("--spec=a/b.json"), "--spec=a/b.json");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
        let mut c = Command::new("adb");
        c.args(["-s", "X", "shell", "cd /x && ./a"]);
        assert_eq!(display_command(&c), "adb -s X shell 'cd /x && ./a'");
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let p = RetryPolicy {
            attempts: 6,
            base: Duration::from_millis(100),
            max: Duration::from_millis(350),
        };
        let waits: Vec<u128> = (1..=5).map(|a| p.delay(a).as_millis()).collect();
        assert_eq!(waits, [0, 100, 200, 350, 350]);
    }

    #[test]
    fn adb_devices_output_parses() {
        let text = "* daemon not running; starting now at tcp:5037\n\
                    * daemon started successfully\n\
                    List of devices attached\n\
                    emulator-5554\tdevice\r\n\
                    R58M\tunauthorized usb:1-1\n\n";
        let d = parse_adb_devices(text);
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].serial, "emulator-5554");
        assert_eq!(d[0].state, "device");
        assert_eq!(d[1].state, "unauthorized");
    }

    #[test]
    fn adb_failures_are_told_from_the_phone_program_failing() {
        assert!(adb_link_failure(b"adb: error: device offline\n"));
        assert!(adb_link_failure(b"error: no devices/emulators found\n"));
        assert!(adb_link_failure(b"adb: device 'X' not found\n"));
        assert!(!adb_link_failure(
            b"/system/bin/sh: ./hetero-agent: not found\n"
        ));
        assert!(!adb_link_failure(
            b"hetero-agent: spec: field `cases[0]`: closed\n"
        ));
    }

    /// The arguments of `c`, as strings.
    fn argv(c: &Command) -> Vec<String> {
        c.get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    fn ssh_transport(target: &str, dir: &str) -> Result<Transport> {
        let opts = TransportOptions {
            remote_dir: Some(dir.into()),
            ..TransportOptions::default()
        };
        Transport::open(&target.parse().unwrap(), opts)
    }

    #[test]
    fn a_remote_folder_that_needs_quoting_is_refused_over_ssh() {
        for dir in ["/tmp/a b", "-x", "$(reboot)", "a;b", "~/x", ""] {
            let e = ssh_transport("ssh://h", dir).err().unwrap();
            assert!(
                e.is_bad_input() && e.to_string().contains("--remote-dir"),
                "{e}"
            );
        }
    }

    #[test]
    fn ssh_and_scp_put_the_destination_after_a_double_dash() {
        let t = ssh_transport("ssh://pi@10.0.0.2:2222", "/tmp/agent-dir").unwrap();
        let args = ["sweep".to_string(), "a b;$(x)".to_string()];
        let ssh = argv(&t.agent_command(&args, "log"));
        let n = ssh.len();
        assert_eq!(ssh[n - 3..n - 1], ["--", "pi@10.0.0.2"], "{ssh:?}");
        assert_eq!(
            ssh[n - 1],
            "cd /tmp/agent-dir && ./hetero-agent sweep 'a b;$(x)'"
        );
        assert_eq!(ssh[n - 5..n - 3], ["-p", "2222"]);
        let scp = argv(&t.scp_command(Direction::Push, "/l/f", "/tmp/agent-dir/f"));
        let n = scp.len();
        assert_eq!(
            scp[n - 5..],
            ["-P", "2222", "--", "/l/f", "pi@10.0.0.2:/tmp/agent-dir/f"]
        );
        let scp = argv(&t.scp_command(Direction::Pull, "/l/f", "x"));
        assert_eq!(scp[scp.len() - 3..], ["--", "pi@10.0.0.2:x", "/l/f"]);
    }

    #[test]
    fn a_target_built_by_hand_is_checked_too() {
        for (user, host) in [
            (Some("-oProxyCommand=touch x"), "127.0.0.1"),
            (None, "-V"),
            (Some("a b"), "h"),
            (None, "h;rm"),
        ] {
            let target = Target::Ssh {
                user: user.map(str::to_string),
                host: host.into(),
                port: None,
            };
            let e = Transport::open(&target, TransportOptions::default())
                .err()
                .unwrap();
            assert!(e.is_bad_input(), "{e}");
        }
    }

    #[test]
    fn scp_brackets_ipv6() {
        assert_eq!(scp_host("u@::1"), "u@[::1]");
        assert_eq!(scp_host("u@host"), "u@host");
        assert_eq!(scp_host("::1"), "[::1]");
    }

    #[test]
    fn timeout_kills_a_hanging_command() {
        let mut c = Command::new("sleep");
        c.arg("10");
        let t = Instant::now();
        let out = run_with_timeout(c, Duration::from_millis(200)).unwrap();
        assert!(out.status.is_none());
        assert!(t.elapsed() < Duration::from_secs(5));
        assert!(out.detail().contains("timed out"));
    }
}
