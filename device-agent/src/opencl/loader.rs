//! Finding libOpenCL at run time.
//!
//! `opencl3` (with its `dynamic` feature) loads the library itself, once, on
//! the first OpenCL call: the paths in `OPENCL_DYLIB_PATH` (separated by
//! `;`), then `libOpenCL.so.1`. When that fails every later call returns
//! `DLOPEN_RUNTIME_LOAD_FAILED` and says nothing about why. So before the first
//! call this module tries the same names with `libloading`, to report the
//! library, every path tried and the loader's message; and on systems where
//! the library is not `libOpenCL.so.1` (Android keeps it in
//! `/vendor/lib64/libOpenCL.so`) it points `OPENCL_DYLIB_PATH` at the one
//! that loads.

use std::sync::OnceLock;

use crate::{Error, Result};

/// The library `opencl3` loads when `OPENCL_DYLIB_PATH` is unset.
pub(crate) const DEFAULT_LIBRARY: &str = if cfg!(target_os = "windows") {
    "OpenCL.dll"
} else if cfg!(target_os = "macos") {
    "/System/Library/Frameworks/OpenCL.framework/OpenCL"
} else {
    "libOpenCL.so.1"
};

/// Further places to look when the default name does not load: the vendor
/// partitions of Android phones (Adreno, Mali, PowerVR) and the unversioned
/// name some distributions ship alone.
const FALLBACKS: &[&str] = &[
    "libOpenCL.so",
    "/vendor/lib64/libOpenCL.so",
    "/system/vendor/lib64/libOpenCL.so",
    "/system/lib64/libOpenCL.so",
    "/vendor/lib64/egl/libGLES_mali.so",
    "/vendor/lib/libOpenCL.so",
    "/system/vendor/lib/libOpenCL.so",
];

static LOADED: OnceLock<Result<String>> = OnceLock::new();

/// Makes sure libOpenCL can be loaded before `opencl3` first tries; returns
/// the path that loaded. The outcome is decided once per process.
pub(crate) fn ensure_loaded() -> Result<String> {
    LOADED.get_or_init(probe).clone()
}

fn try_load(name: &str) -> std::result::Result<(), String> {
    // SAFETY: loading libOpenCL runs its initialisers; the OpenCL ICD loader
    // and vendor drivers are meant to be loaded by any process. The handle
    // is dropped at once: the probe only checks that the load succeeds.
    match unsafe { libloading::Library::new(name) } {
        Ok(lib) => {
            drop(lib);
            Ok(())
        }
        Err(e) => {
            // libloading's Display is only "dlopen failed"; the reason is its source.
            let mut msg = e.to_string();
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                msg = format!("{msg}: {s}");
                src = s.source();
            }
            Err(msg)
        }
    }
}

fn probe() -> Result<String> {
    let env = std::env::var("OPENCL_DYLIB_PATH").ok();
    // What opencl3 itself will try, in its order.
    let own: Vec<String> = env
        .iter()
        .flat_map(|v| v.split(';'))
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .chain(std::iter::once(DEFAULT_LIBRARY.to_string()))
        .collect();
    // With the user's own OPENCL_DYLIB_PATH set, only what opencl3 tries counts.
    let fallbacks: &[&str] = if env.is_some() { &[] } else { FALLBACKS };
    let found = search(&own, fallbacks)?;
    if found.fallback {
        // SAFETY: `set_var` races with threads reading the environment.
        // This runs at most once per process (inside a OnceLock), only on
        // systems without `libOpenCL.so.1` (phones), where the agent opens
        // its backends before it starts any thread of its own.
        unsafe { std::env::set_var("OPENCL_DYLIB_PATH", &found.path) };
    }
    Ok(found.path)
}

/// A library that loaded.
#[derive(Debug, PartialEq)]
struct Found {
    path: String,
    /// It is not one opencl3 tries by itself.
    fallback: bool,
}

/// Tries `own` (what opencl3 will load) then `fallbacks`, in order.
fn search(own: &[String], fallbacks: &[&str]) -> Result<Found> {
    let mut tried = Vec::new();
    let mut last = String::from("nothing to try");
    let all = own
        .iter()
        .map(|p| (p.as_str(), false))
        .chain(fallbacks.iter().map(|p| (*p, true)));
    for (path, fallback) in all {
        tried.push(path.to_string());
        match try_load(path) {
            Ok(()) => {
                return Ok(Found {
                    path: path.to_string(),
                    fallback,
                });
            }
            Err(e) => last = e,
        }
    }
    Err(Error::Library {
        library: DEFAULT_LIBRARY.to_string(),
        tried,
        reason: last,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_reported_with_the_name_tried() {
        let err = try_load("libdefinitely-not-here-hetero.so.9").unwrap_err();
        assert!(
            err.contains("libdefinitely-not-here-hetero.so.9"),
            "loader message: {err}"
        );
    }

    #[test]
    fn search_lists_every_path_tried_when_none_loads() {
        let own = vec!["/nonexistent/hetero/libOpenCL.so.1".to_string()];
        let err = search(&own, &["/nonexistent/hetero/libOpenCL.so"]).unwrap_err();
        match &err {
            Error::Library {
                library,
                tried,
                reason,
            } => {
                assert_eq!(library, DEFAULT_LIBRARY);
                assert_eq!(
                    tried,
                    &[
                        "/nonexistent/hetero/libOpenCL.so.1".to_string(),
                        "/nonexistent/hetero/libOpenCL.so".to_string()
                    ]
                );
                assert!(
                    reason.contains("/nonexistent/hetero/libOpenCL.so"),
                    "{reason}"
                );
            }
            other => panic!("expected Error::Library, got {other:?}"),
        }
        assert!(
            err.to_string()
                .contains("tried: /nonexistent/hetero/libOpenCL.so.1")
        );
    }

    #[test]
    fn library_error_names_library_and_paths() {
        let e = Error::Library {
            library: DEFAULT_LIBRARY.into(),
            tried: vec!["a.so".into(), "b.so".into()],
            reason: "not found".into(),
        };
        let text = e.to_string();
        assert!(
            text.contains(DEFAULT_LIBRARY) && text.contains("a.so, b.so"),
            "{text}"
        );
    }
}
