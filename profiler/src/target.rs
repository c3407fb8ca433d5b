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
            return parse_ssh(rest).map_err(|r| bad(&r));
        }
        if s.contains('@') {
            return Err(bad(
                "an ssh target needs the ssh:// prefix, e.g. ssh://user@host",
            ));
        }
        Err(bad("not a device string"))
    }
}

/// Parses what follows `ssh://`: `[USER@]HOST[:PORT]`, HOST being a name,
/// an IPv4 address or a bracketed IPv6 address.
fn parse_ssh(rest: &str) -> Result<Target, String> {
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.is_empty() {
        return Err("no host after ssh://".into());
    }
    let (user, hostport) = match rest.rsplit_once('@') {
        Some(("", _)) => return Err("empty user name before `@`".into()),
        Some((u, h)) => (Some(u), h),
        None => (None, rest),
    };
    if let Some(u) = user {
        check_ssh_user(u)?;
    }
    if hostport.contains('/') {
        return Err("a path after the host is not supported".into());
    }
    let (host, bracketed, port) = split_port(hostport)?;
    if bracketed {
        check_ipv6(host)?;
    } else {
        check_host_name(host)?;
    }
    Ok(Target::Ssh {
        user: user.map(str::to_string),
        host: host.to_string(),
        port,
    })
}

/// Refuses a user or host of an ssh target that ssh could read as an option
/// or that holds characters no such name holds; `Ok` for a sound one.
///
/// [`Transport::open`](crate::transport::Transport::open) checks again, for
/// targets built without parsing.
pub(crate) fn check_ssh_destination(user: Option<&str>, host: &str) -> Result<(), String> {
    if let Some(u) = user {
        check_ssh_user(u)?;
    }
    if host.contains(':') {
        check_ipv6(host)
    } else {
        check_host_name(host)
    }
}

/// A login name: POSIX portable characters (`A-Z a-z 0-9 . _ -`), not
/// starting with `-`, at most 256 bytes.
fn check_ssh_user(u: &str) -> Result<(), String> {
    const WHAT: &str =
        "a user name is letters, digits, `.`, `_` and `-`, and does not start with `-`";
    if u.starts_with('-') {
        return Err(format!("the user `{u}` starts with `-`: {WHAT}"));
    }
    if let Some(c) = u
        .chars()
        .find(|&c| !(c.is_ascii_alphanumeric() || "._-".contains(c)))
    {
        return Err(format!("the user `{u}` holds {}: {WHAT}", describe_char(c)));
    }
    if u.len() > 256 {
        return Err(format!("the user `{u}` is longer than 256 bytes"));
    }
    Ok(())
}

/// A host name or IPv4 address: dot-separated labels of letters, digits,
/// `-` and `_` (ssh config aliases), no label starting with `-`, at most 253
/// bytes; one trailing dot is allowed.
fn check_host_name(h: &str) -> Result<(), String> {
    const WHAT: &str = "a host is a name of letters, digits, `-`, `_` and dots, \
                        an IPv4 address or an IPv6 address in brackets";
    if h.is_empty() {
        return Err("no host after ssh://".into());
    }
    if h.starts_with('-') {
        return Err(format!("the host `{h}` starts with `-`: {WHAT}"));
    }
    if let Some(c) = h
        .chars()
        .find(|&c| !(c.is_ascii_alphanumeric() || ".-_".contains(c)))
    {
        return Err(format!("the host `{h}` holds {}: {WHAT}", describe_char(c)));
    }
    let labels = h.strip_suffix('.').unwrap_or(h);
    if labels
        .split('.')
        .any(|l| l.is_empty() || l.starts_with('-'))
    {
        return Err(format!(
            "the host `{h}` has an empty part or a part starting with `-`: {WHAT}"
        ));
    }
    if h.len() > 253 {
        return Err(format!("the host `{h}` is longer than 253 bytes"));
    }
    Ok(())
}

/// The inside of `[...]`: an IPv6 address, optionally with a `%zone`
/// (`fe80::1%eth0`).
fn check_ipv6(h: &str) -> Result<(), String> {
    let (addr, zone) = match h.split_once('%') {
        Some((a, z)) => (a, Some(z)),
        None => (h, None),
    };
    let zone_ok = zone.is_none_or(|z| {
        !z.is_empty()
            && !z.starts_with('-')
            && z.chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
    });
    if addr.parse::<std::net::Ipv6Addr>().is_err() || !zone_ok {
        return Err(format!(
            "the host `[{h}]` is not an IPv6 address (e.g. `[::1]` or `[fe80::1%eth0]`)"
        ));
    }
    Ok(())
}

/// `a space`, `` `;` ``, `U+0007`: a character as a message names it.
fn describe_char(c: char) -> String {
    match c {
        ' ' => "a space".into(),
        c if c.is_control() || c.is_whitespace() => format!("the character U+{:04X}", c as u32),
        c => format!("`{c}`"),
    }
}

/// Splits `host:port`, `[v6]:port`, `host` or `[v6]`; the flag tells whether
/// the host was in brackets.
fn split_port(s: &str) -> Result<(&str, bool, Option<u16>), String> {
    let parse_port = |p: &str| {
        Some(p)
            .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|p| p.parse::<u16>().ok())
            .filter(|&p| p > 0)
            .ok_or_else(|| format!("bad port `{p}`: expected a number 1..65535"))
    };
    if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| "unclosed `[` in an IPv6 address".to_string())?;
        return match after.strip_prefix(':') {
            Some(p) => Ok((host, true, Some(parse_port(p)?))),
            None if after.is_empty() => Ok((host, true, None)),
            None => Err(format!("unexpected `{after}` after the address")),
        };
    }
    match s.split_once(':') {
        Some((h, p)) => Ok((h, false, Some(parse_port(p)?))),
        None => Ok((s, false, None)),
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
            "ssh://u@h:+22",
            "ssh://u@h:",
        ] {
            let e = s.parse::<Target>().unwrap_err();
            assert!(e.is_bad_input());
            assert!(e.to_string().contains("ssh://user@host"), "{s}: {e}");
        }
    }

    #[test]
    fn ssh_names_that_ssh_would_read_as_options_are_refused() {
        for (s, part) in [
            ("ssh://-V@x", "the user `-V`"),
            ("ssh://-oProxyCommand=touch%20/tmp/x@127.0.0.1", "the user"),
            ("ssh://-oProxyCommand=touch${IFS}x@127.0.0.1", "the user"),
            ("ssh://-oProxyCommand=x@127.0.0.1:2222", "the user"),
            ("ssh://-Ex@127.0.0.1", "the user `-Ex`"),
            ("ssh://-x", "the host `-x`"),
            ("ssh://u@-oProxyCommand=x", "the host"),
            ("ssh://u@-V:22", "the host `-V`"),
            ("ssh://a b@h", "a space"),
            ("ssh://a;b@h", "`;`"),
            ("ssh://$(id)@h", "`$`"),
            ("ssh://a`id`@h", "holds `"),
            ("ssh://a@b@h", "`@`"),
            ("ssh://u\nx@h", "U+000A"),
            (r"ssh://u\x@h", r"holds `\`"),
            ("ssh://u\u{7}@h", "U+0007"),
            ("ssh://u@h;id", "`;`"),
            ("ssh://u@h$x", "`$`"),
            ("ssh://u@a..b", "empty part"),
            ("ssh://u@.h", "empty part"),
            ("ssh://u@a.-b", "starting with `-`"),
            ("ssh://u@[::1;id]", "not an IPv6 address"),
            ("ssh://u@[-oX]", "not an IPv6 address"),
            ("ssh://u@[fe80::1%-x]", "not an IPv6 address"),
            ("ssh://u@[]", "not an IPv6 address"),
            ("ssh://u@h:2 2", "bad port"),
            ("ssh://u@h:-22", "bad port"),
        ] {
            let e = s.parse::<Target>().unwrap_err();
            assert!(e.is_bad_input());
            let m = e.to_string();
            assert!(
                m.contains(&format!("`{s}`")) && m.contains(part),
                "{s}: {m}"
            );
        }
    }

    #[test]
    fn ordinary_ssh_names_are_accepted() {
        for (s, user, host, port) in [
            (
                "ssh://pi@raspberrypi.local",
                Some("pi"),
                "raspberrypi.local",
                None,
            ),
            (
                "ssh://ci-runner_2.x@build-07",
                Some("ci-runner_2.x"),
                "build-07",
                None,
            ),
            (
                "ssh://U@HOST.Example.COM.:65535",
                Some("U"),
                "HOST.Example.COM.",
                Some(65535),
            ),
            ("ssh://my_box", None, "my_box", None),
            ("ssh://192.168.1.20:1", None, "192.168.1.20", Some(1)),
            ("ssh://root@[::1]", Some("root"), "::1", None),
            (
                "ssh://u@[fe80::1%eth0]:22",
                Some("u"),
                "fe80::1%eth0",
                Some(22),
            ),
            (
                "ssh://u@[::ffff:10.0.0.1]",
                Some("u"),
                "::ffff:10.0.0.1",
                None,
            ),
            ("ssh://u-@h/", Some("u-"), "h", None),
        ] {
            assert_eq!(
                parse(s),
                Target::Ssh {
                    user: user.map(str::to_string),
                    host: host.into(),
                    port
                },
                "{s}"
            );
        }
        assert_eq!(
            check_ssh_destination(Some("-oProxyCommand=x"), "h").unwrap_err(),
            "the user `-oProxyCommand=x` starts with `-`: a user name is letters, digits, \
             `.`, `_` and `-`, and does not start with `-`"
        );
        assert!(check_ssh_destination(None, "fe80::1%eth0").is_ok());
        assert!(check_ssh_destination(None, "::1;id").is_err());
    }
}
