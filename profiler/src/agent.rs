//! Choosing the agent binary for a target's architecture.

use std::path::{Path, PathBuf};

use crate::{Error, Result, Target};

/// Where to find the agent.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum AgentSource {
    /// This file, whatever the architecture (`--agent PATH`).
    Path(PathBuf),
    /// A folder of builds, searched by `uname -m` (`--agent-dir DIR`).
    Dir(PathBuf),
    /// `$HETERO_AGENT_DIR`, then next to the `hetero` executable and in the
    /// cargo target folder it sits in.
    #[default]
    Auto,
}

/// The canonical architecture name for a `uname -m`.
pub fn normalize_arch(uname_m: &str) -> &str {
    match uname_m {
        "arm64" | "aarch64" | "armv8" => "aarch64",
        "amd64" | "x86_64" => "x86_64",
        "armv7l" | "armv8l" | "armv7" | "arm" => "arm",
        "i386" | "i486" | "i586" | "i686" | "x86" => "x86",
        other => other,
    }
}

/// Rust target triples that build an agent for `arch`, best first for the
/// target (Android first over adb).
pub fn triples(arch: &str, android: bool) -> Vec<String> {
    let (android_t, linux) = match arch {
        "aarch64" => ("aarch64-linux-android", "aarch64-unknown-linux"),
        "x86_64" => ("x86_64-linux-android", "x86_64-unknown-linux"),
        "arm" => ("armv7-linux-androideabi", "armv7-unknown-linux"),
        "x86" => ("i686-linux-android", "i686-unknown-linux"),
        other => return vec![format!("{other}-unknown-linux-gnu")],
    };
    let suffix = if arch == "arm" { "eabihf" } else { "" };
    let musl = format!("{linux}-musl{suffix}");
    let gnu = format!("{linux}-gnu{suffix}");
    if android {
        vec![android_t.into(), musl]
    } else {
        vec![gnu, musl, android_t.into()]
    }
}

/// Candidate paths inside a folder of builds.
fn candidates_in(dir: &Path, arch: &str, android: bool, same_as_host: bool) -> Vec<PathBuf> {
    let name = crate::transport::AGENT_NAME;
    let mut v = vec![
        dir.join(arch).join(name),
        dir.join(format!("{name}-{arch}")),
    ];
    for t in triples(arch, android) {
        v.push(dir.join(&t).join("release").join(name));
        v.push(dir.join(&t).join(name));
    }
    if same_as_host {
        v.push(dir.join(name));
    }
    v
}

/// Picks the agent binary for a target whose `uname -m` is `uname_m`.
pub fn select(source: &AgentSource, target: &Target, uname_m: &str) -> Result<PathBuf> {
    let arch = normalize_arch(uname_m).to_string();
    let android = matches!(target, Target::Adb { .. });
    let host_arch = normalize_arch(std::env::consts::ARCH);
    // A host build runs on the target only when the architecture matches and
    // the target is not Android (whose libc differs).
    let same_as_host = arch == host_arch && !android;
    let mut tried = Vec::new();
    let found = |p: &Path| p.is_file();
    match source {
        AgentSource::Path(p) => {
            if found(p) {
                return Ok(p.clone());
            }
            return Err(Error::NoAgent {
                arch,
                detail: format!("--agent {} does not exist", p.display()),
                fix: "give the path of a hetero-agent binary".into(),
            });
        }
        AgentSource::Dir(d) => {
            for c in candidates_in(d, &arch, android, same_as_host) {
                if found(&c) {
                    return Ok(c);
                }
                tried.push(c);
            }
        }
        AgentSource::Auto => {
            if let Some(d) = std::env::var_os("HETERO_AGENT_DIR") {
                for c in candidates_in(Path::new(&d), &arch, android, same_as_host) {
                    if found(&c) {
                        return Ok(c);
                    }
                    tried.push(c);
                }
            }
            if let Ok(exe) = std::env::current_exe()
                && let Some(dir) = exe.parent()
            {
                if same_as_host {
                    let c = dir.join(crate::transport::AGENT_NAME);
                    if found(&c) {
                        return Ok(c);
                    }
                    tried.push(c);
                }
                // target/debug/hetero → target/<triple>/release/hetero-agent
                if let Some(target_dir) = dir.parent() {
                    for t in triples(&arch, android) {
                        let c = target_dir
                            .join(t)
                            .join("release")
                            .join(crate::transport::AGENT_NAME);
                        if found(&c) {
                            return Ok(c);
                        }
                        tried.push(c);
                    }
                }
            }
        }
    }
    let triple = triples(&arch, android).remove(0);
    Err(Error::NoAgent {
        arch,
        detail: format!(
            "tried {}",
            tried
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        fix: format!(
            "build one (`cargo build --release -p hetero-agent --target {triple}`) and pass \
             --agent target/{triple}/release/hetero-agent, or --agent-dir DIR holding DIR/{}/hetero-agent",
            normalize_arch(uname_m)
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arch_lookup_in_a_folder_of_builds() {
        let d = std::env::temp_dir().join(format!("hetero-agents-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("aarch64-linux-android/release")).unwrap();
        std::fs::write(d.join("aarch64-linux-android/release/hetero-agent"), b"x").unwrap();
        std::fs::create_dir_all(d.join("x86_64")).unwrap();
        std::fs::write(d.join("x86_64/hetero-agent"), b"x").unwrap();
        let src = AgentSource::Dir(d.clone());
        let adb = Target::Adb { serial: None };
        assert_eq!(
            select(&src, &adb, "aarch64").unwrap(),
            d.join("aarch64-linux-android/release/hetero-agent")
        );
        assert_eq!(
            select(&src, &Target::Local, "x86_64").unwrap(),
            d.join("x86_64/hetero-agent")
        );
        let e = select(&src, &adb, "armv7l").unwrap_err();
        assert!(e.is_bad_input());
        let s = e.to_string();
        assert!(
            s.contains("armv7-linux-androideabi") && s.contains("--agent"),
            "{s}"
        );
        let _ = std::fs::remove_dir_all(&d);
    }
}
