use std::path::PathBuf;

use crate::{Backend, Error};

/// Options every backend may read when it opens.
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    /// CPU core groups, `0-3;4-7`; detected from sysfs when absent.
    pub cpu_groups: Option<String>,
    /// Folder holding `libQnnHtp.so` and its companions.
    pub qnn_lib_dir: Option<PathBuf>,
    /// QNN HTP SoC model (57 = SM8650, 69 = SM8750, 87 = SM8850);
    /// `HETERO_QNN_SOC` when absent.
    pub qnn_soc: Option<u32>,
    /// QNN HTP performance vote, `default` or `burst`; `HETERO_QNN_PERF`
    /// when absent.
    pub qnn_perf: Option<String>,
    /// RON file with NPU simulator parameters; the illustrative defaults when absent.
    pub sim_params: Option<PathBuf>,
    /// Where backends cache autotuning results.
    pub cache_dir: Option<PathBuf>,
    /// How long a CPU pool's workers poll for work after a run, µs;
    /// `HETERO_CPU_POLL_US`, else [`crate::cpu::DEFAULT_POLL_US`], when
    /// absent (0: they sleep at once).
    pub cpu_poll_us: Option<u64>,
}

/// A compiled-in backend that did not open here, and why.
#[derive(Debug, Clone)]
pub struct Unavailable {
    /// Backend name (`opencl`, `qnn`, `cuda`).
    pub backend: String,
    /// Why (a missing library names the paths tried).
    pub reason: Error,
}

/// Every processor the compiled-in backends could open.
pub struct Registry {
    /// Opened processors, in backend order.
    pub backends: Vec<Box<dyn Backend>>,
    /// Backends that did not open.
    pub unavailable: Vec<Unavailable>,
}

impl Registry {
    /// Opens every compiled-in backend, keeps those that work, and records
    /// why the others did not. `filter` keeps only the listed processor ids
    /// (a trailing `*` matches a prefix: `opencl:*`); a backend none of whose
    /// ids the filter can match is neither opened nor listed as unavailable.
    pub fn open(opts: &OpenOptions, filter: Option<&[String]>) -> Registry {
        type Opener = fn(&OpenOptions) -> crate::Result<Vec<Box<dyn Backend>>>;
        // Each backend module adds one line here, behind its feature.
        let openers: Vec<(&str, Opener)> = vec![
            #[cfg(feature = "cpu")]
            ("cpu", crate::cpu::open),
            #[cfg(feature = "opencl")]
            ("opencl", crate::opencl::open),
            #[cfg(feature = "cuda")]
            ("cuda", crate::cuda::open),
            #[cfg(feature = "sim")]
            ("npu-sim", crate::sim::open),
            #[cfg(feature = "qnn")]
            ("qnn", crate::qnn::open),
        ];
        let mut reg = Registry {
            backends: Vec::new(),
            unavailable: Vec::new(),
        };
        for (name, feature, compiled) in COMPILED {
            if !compiled {
                reg.unavailable.push(Unavailable {
                    backend: name.to_string(),
                    reason: Error::unsupported(
                        name,
                        format!("this build (compiled without cargo feature `{feature}`)"),
                    ),
                });
            }
        }
        for (name, open) in openers {
            // A backend none of whose ids the filter can match is not
            // opened at all (no library loaded for a plan that cannot use it).
            if let Some(ids) = filter
                && !ids.iter().any(|f| backend_may_match(f, name))
            {
                continue;
            }
            match open(opts) {
                Ok(list) => reg.backends.extend(list),
                Err(reason) => reg.unavailable.push(Unavailable {
                    backend: name.to_string(),
                    reason,
                }),
            }
        }
        if let Some(ids) = filter {
            reg.backends
                .retain(|b| ids.iter().any(|f| id_matches(f, &b.processor().id)));
        }
        reg
    }

    /// The processors opened, in order.
    pub fn processors(&self) -> Vec<hetero_plan::Processor> {
        self.backends
            .iter()
            .map(|b| b.processor().clone())
            .collect()
    }

    /// The backend for a processor id.
    pub fn get_mut(&mut self, id: &str) -> Option<&mut Box<dyn Backend>> {
        self.backends.iter_mut().find(|b| b.processor().id == id)
    }
}

/// Every backend this crate knows: name, cargo feature, compiled in.
const COMPILED: [(&str, &str, bool); 5] = [
    ("cpu", "cpu", cfg!(feature = "cpu")),
    ("opencl", "opencl", cfg!(feature = "opencl")),
    ("qnn", "qnn", cfg!(feature = "qnn")),
    ("cuda", "cuda", cfg!(feature = "cuda")),
    ("npu-sim", "sim", cfg!(feature = "sim")),
];

/// Whether a filter entry can match an id of backend `name` (ids start
/// `name:`, or are `npu-sim`).
fn backend_may_match(filter: &str, name: &str) -> bool {
    let prefix = if name == "npu-sim" {
        name.to_string()
    } else {
        format!("{name}:")
    };
    match filter.strip_suffix('*') {
        Some(stem) => prefix.starts_with(stem) || stem.starts_with(&prefix),
        None => filter.starts_with(&prefix),
    }
}

/// `cpu:0` matches itself; `opencl:*` matches every id starting `opencl:`.
pub fn id_matches(filter: &str, id: &str) -> bool {
    match filter.strip_suffix('*') {
        Some(prefix) => id.starts_with(prefix),
        None => filter == id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_skips_backends_it_cannot_match() {
        assert!(backend_may_match("cpu:0", "cpu"));
        assert!(!backend_may_match("cpu:0", "qnn"));
        assert!(backend_may_match("npu-sim", "npu-sim"));
        assert!(backend_may_match("npu-*", "npu-sim"));
        assert!(backend_may_match("*", "qnn"));
        assert!(backend_may_match("opencl:*", "opencl"));
        assert!(!backend_may_match("opencl:*", "cuda"));
        assert!(!backend_may_match("cuda:0", "cpu"));
    }

    #[test]
    fn filters_match_exact_ids_and_prefixes() {
        assert!(id_matches("cpu:0", "cpu:0"));
        assert!(!id_matches("cpu:0", "cpu:1"));
        assert!(id_matches("opencl:*", "opencl:0:0"));
        assert!(!id_matches("opencl:*", "cuda:0"));
    }

    #[test]
    fn default_build_opens_cpu_and_sim_and_filters() {
        let reg = Registry::open(&OpenOptions::default(), None);
        let ids: Vec<String> = reg.processors().into_iter().map(|p| p.id).collect();
        if cfg!(feature = "cpu") {
            assert!(ids.contains(&"cpu:0".to_string()), "{ids:?}");
        }
        if cfg!(feature = "sim") {
            assert!(ids.contains(&"npu-sim".to_string()), "{ids:?}");
        }
        // Backends not compiled in say so; compiled-in ones that did not
        // open (cuda without libcuda) give their own reason instead.
        for u in &reg.unavailable {
            let compiled = COMPILED
                .iter()
                .any(|(name, _, compiled)| *name == u.backend && *compiled);
            let says = u.reason.to_string().contains("compiled without");
            assert_eq!(says, !compiled, "{u:?}");
        }
        let only = Registry::open(&OpenOptions::default(), Some(&["npu-*".to_string()]));
        assert!(
            only.backends
                .iter()
                .all(|b| b.processor().id.starts_with("npu-"))
        );
    }
}
