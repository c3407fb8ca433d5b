//! CPU core groups: detected from each core's maximum frequency, or given
//! as `0-3;4-7`.

use std::collections::BTreeMap;
use std::path::Path;

use crate::{Error, Result};

/// One group of cores that becomes one processor.
#[derive(Debug, Clone, PartialEq)]
pub struct CoreGroup {
    /// Core numbers, ascending.
    pub cores: Vec<usize>,
    /// Maximum frequency of the group's cores, kHz, where sysfs shows it.
    pub max_khz: Option<u64>,
}

impl CoreGroup {
    /// `cores 0-3 @ 2.40 GHz`.
    pub fn describe(&self) -> String {
        let list = format_list(&self.cores);
        match self.max_khz {
            Some(k) => format!("cores {list} @ {:.2} GHz", k as f64 / 1e6),
            None => format!("cores {list}"),
        }
    }
}

/// Parses `0-3;4-7` (groups separated by `;`, each a comma list of cores and
/// ranges) and checks every core is one this process may run on.
pub fn parse_groups(text: &str, allowed: &[usize]) -> Result<Vec<CoreGroup>> {
    let bad = |message: String| Error::BadRequest {
        field: "cpu_groups".into(),
        message,
    };
    let mut groups = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for part in text.split(';').map(str::trim) {
        if part.is_empty() {
            return Err(bad(format!(
                "`{text}`: empty group; expected groups like `0-3;4-7`"
            )));
        }
        let cores = parse_list(part).map_err(|m| bad(format!("`{text}`: {m}")))?;
        for &c in &cores {
            available(c, allowed).map_err(bad)?;
            if !seen.insert(c) {
                return Err(bad(format!("core {c} is in two groups")));
            }
        }
        groups.push(CoreGroup {
            cores,
            max_khz: None,
        });
    }
    Ok(groups)
}

/// Whether this process may run on core `c`; else the message naming it.
fn available(c: usize, allowed: &[usize]) -> std::result::Result<(), String> {
    if allowed.contains(&c) {
        Ok(())
    } else {
        Err(format!(
            "core {c} is not available to this process (available: {})",
            format_list(allowed)
        ))
    }
}

/// The cores for the host thread, from `--host-cores`: `rest` (the cores
/// `allowed` that no group of `groups` holds) or a list like `15` or
/// `12-15`, which must be allowed and must hold no group's core: a host
/// thread that spins on a worker's core holds the worker back.
pub fn host_cores(text: &str, groups: Option<&str>, allowed: &[usize]) -> Result<Vec<usize>> {
    let bad = |message: String| Error::BadRequest {
        field: "host_cores".into(),
        message,
    };
    let groups = match groups {
        Some(g) => parse_groups(g, allowed)?,
        None if text.trim() == "rest" => {
            return Err(bad(
                "`rest` is the cores no CPU group holds: give the groups too (--cpu-groups)".into(),
            ));
        }
        None => Vec::new(),
    };
    let held: std::collections::BTreeSet<usize> = groups
        .iter()
        .flat_map(|g| g.cores.iter().copied())
        .collect();
    let cores = if text.trim() == "rest" {
        let rest: Vec<usize> = allowed
            .iter()
            .copied()
            .filter(|c| !held.contains(c))
            .collect();
        if rest.is_empty() {
            return Err(bad(format!(
                "`rest`: the CPU groups hold every core this process may run on ({})",
                format_list(allowed)
            )));
        }
        rest
    } else {
        let cores = parse_list(text).map_err(|m| bad(format!("`{text}`: {m}")))?;
        if cores.is_empty() {
            return Err(bad(format!("`{text}`: no cores")));
        }
        for &c in &cores {
            available(c, allowed).map_err(bad)?;
            if held.contains(&c) {
                return Err(bad(format!("core {c} is in a CPU group")));
            }
        }
        cores
    };
    Ok(cores)
}

/// Parses `0-3,6,8-9` into ascending core numbers.
pub fn parse_list(text: &str) -> std::result::Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let num = |s: &str| {
            s.trim()
                .parse::<usize>()
                .map_err(|_| format!("`{item}` is not a core number or range"))
        };
        match item.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi) = (num(lo)?, num(hi)?);
                if lo > hi {
                    return Err(format!("range `{item}` runs backwards"));
                }
                out.extend(lo..=hi);
            }
            None => out.push(num(item)?),
        }
    }
    if out.is_empty() {
        return Err("no cores listed".into());
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// `[0,1,2,3,6]` → `0-3,6`.
pub fn format_list(cores: &[usize]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < cores.len() {
        let mut j = i;
        while j + 1 < cores.len() && cores[j + 1] == cores[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            cores[i].to_string()
        } else {
            format!("{}-{}", cores[i], cores[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

/// Groups `cores` by `cpuN/cpufreq/cpuinfo_max_freq` under `sys_cpu`. Cores
/// with the same maximum frequency form one cluster (phones: little, middle,
/// big, prime). If any core does not show its frequency, all cores form one
/// group. Groups are ordered by their first core.
pub fn detect_groups(sys_cpu: &Path, cores: &[usize]) -> Vec<CoreGroup> {
    let freqs: Option<Vec<u64>> = cores
        .iter()
        .map(|c| {
            crate::conditions::read_number(
                &sys_cpu.join(format!("cpu{c}/cpufreq/cpuinfo_max_freq")),
            )
            .map(|f| f as u64)
        })
        .collect();
    let Some(freqs) = freqs else {
        return vec![CoreGroup {
            cores: cores.to_vec(),
            max_khz: None,
        }];
    };
    let mut by_freq: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for (&c, &f) in cores.iter().zip(&freqs) {
        by_freq.entry(f).or_default().push(c);
    }
    let mut groups: Vec<CoreGroup> = by_freq
        .into_iter()
        .map(|(f, cores)| CoreGroup {
            cores,
            max_khz: Some(f),
        })
        .collect();
    groups.sort_by_key(|g| g.cores[0]);
    groups
}

/// The cores this process may run on: the calling thread's mask the first
/// time any thread asks, kept. `hetero run --host-cores` pins its main
/// thread to a core or two before the processors open, and the groups are
/// then still checked against the whole process's cores.
pub fn process_cores() -> Vec<usize> {
    static CORES: std::sync::OnceLock<Vec<usize>> = std::sync::OnceLock::new();
    CORES.get_or_init(allowed_cores).clone()
}

/// The cores the calling thread may run on (its affinity mask).
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn allowed_cores() -> Vec<usize> {
    // SAFETY: `cpu_set_t` is plain data; sched_getaffinity writes at most
    // `size_of::<cpu_set_t>()` bytes into it; CPU_ISSET only reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// The cores the calling thread may run on.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn allowed_cores() -> Vec<usize> {
    (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect()
}

/// Restricts the calling thread to `cores`.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn pin_current_thread(cores: &[usize]) -> std::io::Result<()> {
    // SAFETY: as in `allowed_cores`; CPU_SET writes inside the set for
    // core numbers below CPU_SETSIZE, which is checked.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cores {
            if c >= libc::CPU_SETSIZE as usize {
                return Err(std::io::Error::other(format!("core {c} out of range")));
            }
            libc::CPU_SET(c, &mut set);
        }
        if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Restricts the calling thread to `cores` (not possible on this OS).
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn pin_current_thread(_cores: &[usize]) -> std::io::Result<()> {
    Err(std::io::Error::other(
        "thread affinity is not supported on this OS",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_parse_with_ranges_and_lists() {
        let allowed: Vec<usize> = (0..8).collect();
        let g = parse_groups("0-3;4,5, 6-7", &allowed).unwrap();
        assert_eq!(g.len(), 2);
        assert_eq!(g[0].cores, vec![0, 1, 2, 3]);
        assert_eq!(g[1].cores, vec![4, 5, 6, 7]);
        assert_eq!(format_list(&g[1].cores), "4-7");
        assert_eq!(format_list(&[0, 2, 3, 4, 9]), "0,2-4,9");
    }

    #[test]
    fn host_cores_are_the_rest_or_a_list_outside_the_groups() {
        let allowed: Vec<usize> = (0..16).collect();
        assert_eq!(
            host_cores("rest", Some("0-14"), &allowed).unwrap(),
            vec![15]
        );
        assert_eq!(
            host_cores("rest", Some("0-3;4-11"), &allowed).unwrap(),
            vec![12, 13, 14, 15]
        );
        assert_eq!(
            host_cores("14-15", Some("0-13"), &allowed).unwrap(),
            vec![14, 15]
        );
        assert_eq!(host_cores("3", None, &allowed).unwrap(), vec![3]);
        for (text, groups, needle) in [
            ("rest", None, "--cpu-groups"),
            ("rest", Some("0-15"), "every core"),
            ("14", Some("0-14"), "core 14 is in a CPU group"),
            ("16", Some("0-14"), "core 16 is not available"),
            ("x", Some("0-14"), "`x`"),
        ] {
            let e = host_cores(text, groups, &allowed).unwrap_err().to_string();
            assert!(
                e.contains("host_cores") && e.contains(needle),
                "{text}: {e}"
            );
        }
    }

    #[test]
    fn bad_groups_name_the_field() {
        let allowed: Vec<usize> = (0..4).collect();
        for (text, needle) in [
            ("0-3;", "empty group"),
            ("0-9", "core 4 is not available"),
            ("0-1;1-2", "two groups"),
            ("3-1", "backwards"),
            ("a", "not a core"),
        ] {
            let e = parse_groups(text, &allowed).unwrap_err();
            let Error::BadRequest { field, message } = &e else {
                panic!("{e:?}")
            };
            assert_eq!(field, "cpu_groups");
            assert!(message.contains(needle), "{text}: {message}");
        }
    }

    #[test]
    fn clusters_come_from_max_frequency() {
        let root = std::env::temp_dir().join(format!("hetero-topo-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        // A phone: 0-3 little, 4-6 big, 7 prime.
        for c in 0..8 {
            let khz = match c {
                0..=3 => 1_800_000,
                4..=6 => 2_400_000,
                _ => 3_000_000,
            };
            let d = root.join(format!("cpu{c}/cpufreq"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("cpuinfo_max_freq"), format!("{khz}\n")).unwrap();
        }
        let g = detect_groups(&root, &(0..8).collect::<Vec<_>>());
        let cores: Vec<Vec<usize>> = g.iter().map(|g| g.cores.clone()).collect();
        assert_eq!(cores, vec![vec![0, 1, 2, 3], vec![4, 5, 6], vec![7]]);
        assert_eq!(g[1].describe(), "cores 4-6 @ 2.40 GHz");
        // A core without cpufreq: one group of everything.
        let g = detect_groups(&root, &(0..9).collect::<Vec<_>>());
        assert_eq!(g.len(), 1);
        assert_eq!(g[0].cores.len(), 9);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
