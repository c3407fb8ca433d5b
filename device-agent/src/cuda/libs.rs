//! Finding `libcuda` and `libcublas` before cudarc's lazy loaders touch them.
//!
//! cudarc resolves each symbol on first use and panics when the library is
//! missing. So the backend loads the libraries itself first and turns a
//! miss into [`Error::Library`] naming every candidate tried.
//!
//! `libcuda` comes with the driver and is on the loader path. cuBLAS is part
//! of the toolkit, which is often not: if the loader cannot find it by name,
//! the usual install folders are tried by full path, and the library is
//! loaded there with `RTLD_GLOBAL`. cudarc's own `dlopen("libcublas.so.13")`
//! then finds the already loaded object by its soname.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};

use crate::{Error, Result};

/// The CUDA major version of the bindings (cudarc's `cuda-13000` feature).
pub(super) const CUDA_MAJOR: u32 = 13;

/// Libraries loaded here stay loaded for the life of the process (unloading
/// a driver library is not safe, and cudarc holds its own handles anyway).
static KEPT: Mutex<Vec<Library>> = Mutex::new(Vec::new());

fn keep(lib: Library) {
    KEPT.lock().unwrap_or_else(|e| e.into_inner()).push(lib);
}

/// The loader's own message (libloading's error only says "dlopen failed").
fn describe(e: &libloading::Error) -> String {
    use std::error::Error as _;
    match e.source() {
        Some(src) => src.to_string(),
        None => e.to_string(),
    }
}

/// Tries `dlopen` on each name; keeps the first that loads.
fn load_first(names: &[String], tried: &mut Vec<String>, reason: &mut String) -> bool {
    for name in names {
        tried.push(name.clone());
        // SAFETY: loading the CUDA driver or cuBLAS runs their initialisers,
        // which have no preconditions on the caller.
        match unsafe { Library::open(Some(name.as_str()), RTLD_NOW | RTLD_GLOBAL) } {
            Ok(lib) => {
                keep(lib);
                return true;
            }
            Err(e) => *reason = describe(&e),
        }
    }
    false
}

/// Makes sure the CUDA driver library can be loaded.
pub(super) fn load_driver() -> Result<()> {
    // cudarc's own search finds the loaded object by its soname later.
    let names = ["libcuda.so.1".to_string(), "libcuda.so".to_string()];
    let mut tried = Vec::new();
    let mut reason = String::from("not found");
    if load_first(&names, &mut tried, &mut reason) {
        return Ok(());
    }
    Err(Error::Library {
        library: "libcuda.so.1".into(),
        tried,
        reason,
    })
}

/// Folders where a CUDA toolkit keeps its libraries, in the order tried.
fn toolkit_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(list) = std::env::var_os("HETERO_CUDA_LIB_DIR") {
        dirs.extend(std::env::split_paths(&list));
    }
    for var in ["CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"] {
        if let Some(root) = std::env::var_os(var) {
            let root = PathBuf::from(root);
            dirs.push(root.join("lib64"));
            dirs.push(root.join("lib"));
        }
    }
    dirs.push("/usr/local/cuda/lib64".into());
    dirs.push("/usr/local/cuda/targets/x86_64-linux/lib".into());
    dirs.push("/usr/local/cuda/targets/sbsa-linux/lib".into());
    // Versioned installs (`/usr/local/cuda-13.0`), newest name last.
    if let Ok(entries) = std::fs::read_dir("/usr/local") {
        let mut versioned: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("cuda-"))
            })
            .collect();
        versioned.sort();
        for root in versioned.into_iter().rev() {
            dirs.push(root.join("lib64"));
        }
    }
    dirs.dedup();
    dirs
}

/// Makes sure cuBLAS (and its companion cuBLASLt) can be loaded: by name
/// through the loader, else by full path from the toolkit folders.
pub(super) fn load_cublas() -> Result<()> {
    let soname = format!("libcublas.so.{CUDA_MAJOR}");
    let lt_soname = format!("libcublasLt.so.{CUDA_MAJOR}");
    let mut tried = Vec::new();
    let mut reason = String::from("not found");
    // By name first: LD_LIBRARY_PATH, the loader cache, RUNPATH.
    if load_first(std::slice::from_ref(&soname), &mut tried, &mut reason) {
        return Ok(());
    }
    for dir in toolkit_dirs() {
        let path = dir.join(&soname);
        tried.push(path.display().to_string());
        if !path.is_file() {
            continue;
        }
        // cuBLAS needs cuBLASLt from the same folder; load it first so the
        // dependency resolves even when the folder is not on the loader path.
        let lt = dir.join(&lt_soname);
        if lt.is_file() && !load_path(&lt, &mut reason) {
            continue;
        }
        if load_path(&path, &mut reason) {
            return Ok(());
        }
    }
    Err(Error::Library {
        library: soname,
        tried,
        reason,
    })
}

fn load_path(path: &Path, reason: &mut String) -> bool {
    // SAFETY: as in `load_first`.
    match unsafe { Library::open(Some(path), RTLD_NOW | RTLD_GLOBAL) } {
        Ok(lib) => {
            keep(lib);
            true
        }
        Err(e) => {
            *reason = describe(&e);
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_cublas_names_what_was_tried() {
        // Meaningful only where cuBLAS is absent (as on the CI machine).
        match load_cublas() {
            Ok(()) => eprintln!("skipping: cuBLAS is installed here"),
            Err(Error::Library { library, tried, .. }) => {
                assert!(library.starts_with("libcublas.so."), "{library}");
                assert!(tried.iter().any(|t| t.contains("/usr/local/cuda/lib64")));
            }
            Err(e) => panic!("unexpected error {e}"),
        }
    }

    #[test]
    fn missing_driver_is_an_error_not_a_panic() {
        match load_driver() {
            Ok(()) => eprintln!("skipping: libcuda is installed here"),
            Err(Error::Library { library, tried, .. }) => {
                assert_eq!(library, "libcuda.so.1");
                assert!(tried.iter().any(|t| t == "libcuda.so.1"), "{tried:?}");
            }
            Err(e) => panic!("unexpected error {e}"),
        }
    }
}
