//! adb: which device `--device adb[:SERIAL]` means, and whether a failure
//! was adb's own.

use std::process::Command;

use super::{TransportOptions, run_with_timeout};
use crate::{Error, Result};

/// Whether adb's standard error shows a failure of adb itself (the device
/// went away) rather than of the program run on the phone: adb's own
/// messages start with `adb:` or `error:`; what the phone's shell prints
/// (`sh: ./x: not found`) does not.
pub fn adb_link_failure(stderr: &[u8]) -> bool {
    let err = String::from_utf8_lossy(stderr).to_ascii_lowercase();
    err.lines().any(|l| {
        let l = l.trim_start();
        (l.starts_with("adb:") || l.starts_with("error:"))
            && [
                "device offline",
                "no devices",
                "not found",
                "closed",
                "protocol fault",
                "connection reset",
                "failed to get feature set",
                "cannot connect",
            ]
            .iter()
            .any(|p| l.contains(p))
    })
}

/// One line of `adb devices`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdbDevice {
    /// The serial.
    pub serial: String,
    /// `device`, `offline`, `unauthorized`, ...
    pub state: String,
}

/// Parses the output of `adb devices`.
pub fn parse_adb_devices(text: &str) -> Vec<AdbDevice> {
    text.lines()
        .map(|l| l.trim_end_matches('\r'))
        .filter(|l| !l.starts_with("List of devices") && !l.starts_with('*'))
        .filter_map(|l| {
            let mut parts = l.split_whitespace();
            let serial = parts.next()?;
            let state = parts.next()?;
            Some(AdbDevice {
                serial: serial.to_string(),
                state: state.to_string(),
            })
        })
        .collect()
}

pub(super) fn pick_adb_device(serial: Option<&str>, opts: &TransportOptions) -> Result<String> {
    let mut cmd = Command::new("adb");
    cmd.arg("devices");
    let out = run_with_timeout(cmd, opts.command_timeout)?;
    if !out.success() {
        return Err(Error::AdbDevice {
            message: format!("`{}` failed: {}", out.command, out.detail()),
            fix: "check that the adb server can start (`adb kill-server; adb devices`)".into(),
        });
    }
    let devices = parse_adb_devices(&out.stdout_text());
    let list = || {
        devices
            .iter()
            .map(|d| format!("{} ({})", d.serial, d.state))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let usable: Vec<&AdbDevice> = devices.iter().filter(|d| d.state == "device").collect();
    let state_fix = |d: &AdbDevice| match d.state.as_str() {
        "unauthorized" => {
            "unlock the phone and accept the \"Allow USB debugging\" prompt".to_string()
        }
        "offline" => "reconnect the cable, or run `adb reconnect`".to_string(),
        s => format!("the device is `{s}`; wait until `adb devices` shows it as `device`"),
    };
    match serial {
        Some(s) => match devices.iter().find(|d| d.serial == s) {
            Some(d) if d.state == "device" => Ok(s.to_string()),
            Some(d) => Err(Error::AdbDevice {
                message: format!("adb device `{s}` is {}", d.state),
                fix: state_fix(d),
            }),
            None => Err(Error::AdbDevice {
                message: format!(
                    "no adb device `{s}`; `adb devices` lists: {}",
                    if devices.is_empty() {
                        "nothing".into()
                    } else {
                        list()
                    }
                ),
                fix: "use a serial from `adb devices` in --device adb:SERIAL".into(),
            }),
        },
        None => match usable.as_slice() {
            [one] => Ok(one.serial.clone()),
            [] => Err(Error::AdbDevice {
                message: if devices.is_empty() {
                    "no adb device connected".into()
                } else {
                    format!("no usable adb device: {}", list())
                },
                fix: match devices.first() {
                    Some(d) => state_fix(d),
                    None => "connect the phone with USB debugging on (Settings > Developer \
                             options), check `adb devices`, then run again"
                        .into(),
                },
            }),
            several => Err(Error::AdbDevice {
                message: format!(
                    "{} adb devices connected: {}",
                    several.len(),
                    several
                        .iter()
                        .map(|d| d.serial.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                fix: format!("pick one with --device adb:{}", several[0].serial),
            }),
        },
    }
}
