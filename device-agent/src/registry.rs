use std::path::PathBuf;

use crate::{Backend, Error};

/// Options every backend may read when it opens.
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    /// CPU core groups, `0-3;4-7`; detected from sysfs when absent.
    pub cpu_groups: Option<String>,
    /// Folder holding `libQnnHtp.so` and its companions.
    pub qnn_lib_dir: Option<PathBuf>,
    /// RON file with NPU simulator parameters; the illustrative defaults when absent.
    pub sim_params: Option<PathBuf>,
    /// Where backends cache autotuning results.
    pub cache_dir: Option<PathBuf>,
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
    /// (a trailing `*` matches a prefix: `opencl:*`).
    pub fn open(opts: &OpenOptions, filter: Option<&[String]>) -> Registry {
        type Opener = fn(&OpenOptions) -> crate::Result<Vec<Box<dyn Backend>>>;
        // Each backend module adds one line here, behind its feature.
        let openers: Vec<(&str, Opener)> = vec![
            #[cfg(feature = "cuda")]
            ("cuda", crate::cuda::open),
        ];
        let mut reg = Registry {
            backends: Vec::new(),
            unavailable: Vec::new(),
        };
        for (name, open) in openers {
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

    /// The backend for a processor id.
    pub fn get_mut(&mut self, id: &str) -> Option<&mut Box<dyn Backend>> {
        self.backends.iter_mut().find(|b| b.processor().id == id)
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
    fn filters_match_exact_ids_and_prefixes() {
        assert!(id_matches("cpu:0", "cpu:0"));
        assert!(!id_matches("cpu:0", "cpu:1"));
        assert!(id_matches("opencl:*", "opencl:0:0"));
        assert!(!id_matches("opencl:*", "cuda:0"));
    }
}
