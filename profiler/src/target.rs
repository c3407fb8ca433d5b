//! The `--device` string: where the agent runs.

use std::fmt;
use std::str::FromStr;

use crate::Error;

/// Where to run the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// This machine: the agent is spawned directly.
    Local,
    /// A host reached with OpenSSH.
    Ssh {
        /// Login name; `None` uses ssh's default (the ssh config or the local user).
        user: Option<String>,
        /// Host name or address.
        host: String,
        /// Port; `None` uses ssh's default.
        port: Option<u16>,
    },
    /// An Android device reached with adb.
    Adb {
        /// The serial from `adb devices`; `None` picks the only device.
        serial: Option<String>,
    },
}

impl FromStr for Target {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let bad = |reason: &str| Error::UnknownDevice {
            given: s.to_string(),
            reason: reason.to_string(),
        };
        if s == "local" {
            return Ok(Target::Local);
        }
        if s == "adb" {
            return Ok(Target::Adb { serial: None });
        }
        if let Some(serial) = s.strip_prefix("adb:") {
            if serial.is_empty() || serial.chars().any(char::is_whitespace) {
                return Err(bad("the adb serial is empty or has spaces"));
            }
            return Ok(Target::Adb {
                serial: Some(serial.to_string()),
            });
        }
        if let Some(rest) = s.strip_prefix("ssh://") {
            let rest = rest.strip_suffix('/').unwrap_or(rest);
            if rest.is_empty() {
                return Err(bad("no host after ssh://"));
            }
            if rest.contains('/') {
                return Err(bad("a path after the host is not supported"));
            }
            let (user, hostport) = match rest.rsplit_once('@') {
                Some((u, h)) if !u.is_empty() => (Some(u.to_string()), h),
                Some(_) => return Err(bad("empty user name before `@`")),
                None => (None, rest),
            };
            let (host, port) = split_port(hostport).map_err(|r| bad(&r))?;
            if host.is_empty() {
                return Err(bad("no host after ssh://"));
            }
            if host.starts_with('-') {
                return Err(bad("a host may not start with `-`"));
            }
            return Ok(Target::Ssh {
                user,
                host: host.to_string(),
                port,
            });
        }
        if s.contains('@') {
            return Err(bad(
                "an ssh target needs the ssh:// prefix, e.g. ssh://user@host",
            ));
        }
        Err(bad("not a device string"))
    }
}

/// Splits `host:port`, `[v6]:port`, `host` or `[v6]`.
fn split_port(s: &str) -> Result<(&str, Option<u16>), String> {
    let parse_port = |p: &str| {
        p.parse::<u16>()
            .ok()
            .filter(|&p| p > 0)
            .ok_or_else(|| format!("bad port `{p}`: expected 1..65535"))
    };
    if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| "unclosed `[` in an IPv6 address".to_string())?;
        return match after.strip_prefix(':') {
            Some(p) => Ok((host, Some(parse_port(p)?))),
            None if after.is_empty() => Ok((host, None)),
            None => Err(format!("unexpected `{after}` after the address")),
        };
    }
    match s.split_once(':') {
        Some((h, p)) => Ok((h, Some(parse_port(p)?))),
        None => Ok((s, None)),
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Local => f.write_str("local"),
            Target::Ssh { user, host, port } => {
                f.write_str("ssh://")?;
                if let Some(u) = user {
                    write!(f, "{u}@")?;
                }
                if host.contains(':') {
                    write!(f, "[{host}]")?;
                } else {
                    f.write_str(host)?;
                }
                if let Some(p) = port {
                    write!(f, ":{p}")?;
                }
                Ok(())
            }
            Target::Adb { serial: None } => f.write_str("adb"),
            Target::Adb { serial: Some(s) } => write!(f, "adb:{s}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Target {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn device_strings_parse_and_print_back() {
        for s in [
            "local",
            "adb",
            "adb:emulator-5554",
            "ssh://pi@10.0.0.2",
            "ssh://pi@10.0.0.2:2222",
            "ssh://host",
            "ssh://[::1]:22",
        ] {
            assert_eq!(parse(s).to_string(), s);
        }
        assert_eq!(
            parse("ssh://me@box:2200"),
            Target::Ssh {
                user: Some("me".into()),
                host: "box".into(),
                port: Some(2200)
            }
        );
    }

    #[test]
    fn bad_device_strings_say_what_is_expected() {
        for s in [
            "",
            "phone",
            "pi@host",
            "ssh://",
            "ssh://u@h:0",
            "ssh://u@h:99999",
            "ssh://@h",
            "ssh://h/path",
            "adb:",
            "ssh://-oProxyCommand=x",
        ] {
            let e = s.parse::<Target>().unwrap_err();
            assert!(e.is_bad_input());
            assert!(e.to_string().contains("ssh://user@host"), "{s}: {e}");
        }
    }
}
