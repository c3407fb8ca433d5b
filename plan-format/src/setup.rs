//! The settings a row was measured with that change its times: each row
//! carries its own ([`Conditions::setup`](crate::Conditions::setup)), so
//! that a dataset continued with other settings keeps every row's label,
//! `hetero profile --resume` can refuse to mix them, and a fit can keep
//! them apart.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::RunParams;

/// The measuring conditions of a row that change its times. A field that
/// is `None` was not recorded (a row of an older dataset, labelled from its
/// `device.json`): it is compared with nothing.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize, JsonSchema,
)]
pub struct Setup {
    /// Caches evicted before every timed run ([`RunParams::cold_cache`]).
    pub cold_cache: bool,
    /// Cold weights by rotation ([`RunParams::rotate_weights`]).
    #[serde(default)]
    pub rotate_weights: bool,
    /// Kernels timed without the launch path ([`RunParams::kernel_timer`]).
    #[serde(default)]
    pub kernel_timer: bool,
    /// The agent's `--cpu-groups` (`auto`: its default groups, the clusters
    /// of sysfs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_groups: Option<String>,
    /// Cores of the device's CPU processors together, as the probe found
    /// them (a machine given fewer cores measures otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_cores: Option<u32>,
}

/// One condition two setups disagree on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetupDifference {
    /// The condition (`cache`, `rotate_weights`, `timer`, `cpu_groups`,
    /// `host_cores`), as in [`Setup::label`].
    pub key: &'static str,
    /// Its value in the first setup.
    pub old: String,
    /// Its value in the second.
    pub new: String,
    /// The flag of `hetero profile` that sets it.
    pub flag: &'static str,
}

impl Setup {
    /// The setup of rows measured with `run`; `cpu_groups` and
    /// `host_cores` where they are known.
    pub fn of_run(run: &RunParams, cpu_groups: Option<String>, host_cores: Option<u32>) -> Setup {
        Setup {
            cold_cache: run.cold_cache || run.rotate_weights,
            rotate_weights: run.rotate_weights,
            kernel_timer: run.kernel_timer,
            cpu_groups,
            host_cores,
        }
    }

    /// Each condition as `(key, value, flag)`; `None` where not recorded.
    fn entries(&self) -> [(&'static str, Option<String>, &'static str); 5] {
        let on = |b: bool| if b { "on" } else { "off" }.to_string();
        [
            (
                "cache",
                Some(if self.cold_cache { "cold" } else { "warm" }.into()),
                "--cold-cache",
            ),
            (
                "rotate_weights",
                Some(on(self.rotate_weights)),
                "--rotate-weights",
            ),
            (
                "timer",
                Some(
                    if self.kernel_timer {
                        "kernel"
                    } else {
                        "ordinary"
                    }
                    .into(),
                ),
                "--kernel-timer / --ordinary-timer",
            ),
            (
                "cpu_groups",
                self.cpu_groups.clone(),
                "--agent-arg=--cpu-groups",
            ),
            (
                "host_cores",
                self.host_cores.map(|n| n.to_string()),
                "the cores the device gives the agent",
            ),
        ]
    }

    /// The conditions as `key=value` pairs joined by `,` (those recorded):
    /// `cache=warm,rotate_weights=off,timer=kernel,cpu_groups=auto,host_cores=8`.
    /// `hetero fit --conditions` takes any of these pairs.
    pub fn label(&self) -> String {
        self.entries()
            .into_iter()
            .filter_map(|(k, v, _)| Some(format!("{k}={}", v?)))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The conditions recorded in both that differ.
    pub fn differences(&self, new: &Setup) -> Vec<SetupDifference> {
        self.entries()
            .into_iter()
            .zip(new.entries())
            .filter_map(|((key, a, flag), (_, b, _))| match (a, b) {
                (Some(old), Some(new)) if old != new => Some(SetupDifference {
                    key,
                    old,
                    new,
                    flag,
                }),
                _ => None,
            })
            .collect()
    }

    /// True when every condition recorded in both agrees.
    pub fn agrees_with(&self, other: &Setup) -> bool {
        self.differences(other).is_empty()
    }

    /// True when the setup has every `key=value` pair of `want` (a
    /// condition not recorded matches no pair).
    pub fn matches(&self, want: &[(String, String)]) -> bool {
        let have = self.entries();
        want.iter().all(|(k, v)| {
            have.iter()
                .any(|(key, value, _)| key == k && value.as_deref() == Some(v.as_str()))
        })
    }

    /// Parses `key=value[,key=value...]` as [`Setup::label`] writes it;
    /// the message names the pair that is not one.
    pub fn parse_pairs(text: &str) -> Result<Vec<(String, String)>, String> {
        let keys = Setup::default().entries().map(|(k, _, _)| k);
        text.split(',')
            .filter(|p| !p.trim().is_empty())
            .map(|p| {
                let (k, v) = p
                    .split_once('=')
                    .ok_or_else(|| format!("`{p}` is not KEY=VALUE"))?;
                let k = k.trim();
                if !keys.contains(&k) {
                    return Err(format!(
                        "unknown condition `{k}`; the conditions are {}",
                        keys.join(", ")
                    ));
                }
                Ok((k.to_string(), v.trim().to_string()))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_differences_and_filters() {
        let warm = Setup::of_run(
            &RunParams {
                kernel_timer: true,
                ..RunParams::default()
            },
            Some("auto".into()),
            Some(8),
        );
        assert_eq!(
            warm.label(),
            "cache=warm,rotate_weights=off,timer=kernel,cpu_groups=auto,host_cores=8"
        );
        let cold = Setup {
            cold_cache: true,
            ..warm.clone()
        };
        let d = warm.differences(&cold);
        assert_eq!(d.len(), 1);
        assert_eq!((d[0].old.as_str(), d[0].new.as_str()), ("warm", "cold"));
        assert_eq!(d[0].flag, "--cold-cache");
        // Conditions not recorded on one side are not compared.
        let old_row = Setup {
            cpu_groups: None,
            host_cores: None,
            ..warm.clone()
        };
        assert!(old_row.agrees_with(&warm) && warm.agrees_with(&old_row));
        let want = Setup::parse_pairs("cache=cold, timer=kernel").unwrap();
        assert!(cold.matches(&want) && !warm.matches(&want));
        assert!(Setup::parse_pairs("cache").is_err());
        assert!(
            Setup::parse_pairs("speed=fast")
                .unwrap_err()
                .contains("cache")
        );
    }
}
