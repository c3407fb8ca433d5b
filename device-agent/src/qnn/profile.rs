//! The device timer: QNN profiling at the basic level.
//!
//! A profile handle passed to `graphExecute` collects one `EXECUTE` event
//! per run; the HTP backend hangs its own timings under it as sub-events:
//! the time on the accelerator (`QNN_HTP_PROFILE_EVENTTYPE_GRAPH_EXECUTE_
//! ACCEL_TIME_MICROSEC`, "accelerator (execute) time"), the remote call as
//! the HTP saw it, and the host's side of the call. [`Profile::device_us`]
//! takes the accelerator time of the latest run, else the generic
//! on-device time (`EXECUTE_DEVICE`), else nothing: the run is then timed
//! by the host clock, as without profiling.

use std::ptr;

use super::ffi::{self, Handle};
use super::runtime::QnnLib;

/// Which event gave a device time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceClock {
    /// The HTP's accelerator time of the graph.
    Accelerator,
    /// The backend's generic on-device time.
    Device,
}

/// Runs after which the handle is replaced, so that its events cannot pile
/// up for the life of a graph (QNN 2.51's HTP lists only the latest run's;
/// a library that keeps every run's is bounded by this).
const RUNS_PER_HANDLE: u32 = 256;

/// A basic-level profile handle of one graph.
pub(crate) struct Profile {
    handle: Handle,
    lib: &'static QnnLib,
    backend: Handle,
    runs: u32,
}

// SAFETY: a profile handle is not bound to a thread; one owner uses it.
unsafe impl Send for Profile {}

impl Profile {
    /// `profileCreate` at the basic level; `Err` says why there is none.
    pub fn create(lib: &'static QnnLib, backend: Handle) -> Result<Profile, String> {
        let handle = new_handle(lib, backend)?;
        Ok(Profile {
            handle,
            lib,
            backend,
            runs: 0,
        })
    }

    /// The handle to pass to the next run; a fresh one every
    /// [`RUNS_PER_HANDLE`] runs.
    pub fn for_run(&mut self) -> Handle {
        if self.runs >= RUNS_PER_HANDLE {
            if let Ok(h) = new_handle(self.lib, self.backend) {
                self.free();
                self.handle = h;
                self.runs = 0;
            }
        }
        self.runs += 1;
        self.handle
    }

    /// The device time of the latest run, µs, and its clock.
    pub fn device_us(&self) -> Option<(f64, DeviceClock)> {
        let events = self.latest_events()?;
        let micros = |want: u32| {
            events.iter().rev().find_map(|&e| {
                let d = self.data(e)?;
                (d.event_type == want && d.unit == ffi::PROFILE_UNIT_MICROSEC)
                    .then_some(d.value as f64)
            })
        };
        micros(ffi::HTP_PROFILE_EVENTTYPE_EXECUTE_ACCEL_US)
            .map(|us| (us, DeviceClock::Accelerator))
            .or_else(|| {
                micros(ffi::PROFILE_EVENTTYPE_EXECUTE_DEVICE).map(|us| (us, DeviceClock::Device))
            })
    }

    /// The handle's events, each `EXECUTE` event followed by its
    /// sub-events. The HTP backend lists the accelerator time beside the
    /// `EXECUTE` event (QNN 2.51) or under it; both are searched, newest
    /// last.
    fn latest_events(&self) -> Option<Vec<ffi::ProfileEventId>> {
        let api = self.lib.api();
        let (get_events, get_sub) = (api.profile_get_events?, api.profile_get_sub_events?);
        // SAFETY: a live profile handle; the library owns the id list.
        let top = unsafe { ids(|p, n| get_events(self.handle, p, n)) }?;
        let mut all = Vec::with_capacity(top.len());
        for e in top {
            all.push(e);
            if self
                .data(e)
                .is_some_and(|d| d.event_type == ffi::PROFILE_EVENTTYPE_EXECUTE)
            {
                // SAFETY: an event id of this profile.
                all.extend(unsafe { ids(|p, n| get_sub(e, p, n)) }.unwrap_or_default());
            }
        }
        Some(all)
    }

    /// Every event of the latest run, `type unit value identifier`, for
    /// the tests' record of what a library reports.
    #[cfg(test)]
    pub fn describe_events(&self) -> Vec<String> {
        let api = self.lib.api();
        let (Some(get_events), Some(get_sub)) =
            (api.profile_get_events, api.profile_get_sub_events)
        else {
            return vec![];
        };
        let mut out = Vec::new();
        // SAFETY: as in `device_us`.
        let events = unsafe { ids(|p, n| get_events(self.handle, p, n)) }.unwrap_or_default();
        for e in events {
            out.push(self.line(e, ""));
            // SAFETY: an event id of this profile.
            for s in unsafe { ids(|p, n| get_sub(e, p, n)) }.unwrap_or_default() {
                out.push(self.line(s, "  "));
            }
        }
        out
    }

    #[cfg(test)]
    fn line(&self, e: ffi::ProfileEventId, indent: &str) -> String {
        match self.data(e) {
            Some(d) => {
                let name = if d.identifier.is_null() {
                    String::new()
                } else {
                    // SAFETY: non-null, NUL-terminated, owned by the library.
                    unsafe { std::ffi::CStr::from_ptr(d.identifier) }
                        .to_string_lossy()
                        .into_owned()
                };
                format!(
                    "{indent}type {} unit {} value {} `{name}`",
                    d.event_type, d.unit, d.value
                )
            }
            None => format!("{indent}event {e}: no data"),
        }
    }

    fn data(&self, e: ffi::ProfileEventId) -> Option<ffi::ProfileEventData> {
        let get = self.lib.api().profile_get_event_data?;
        let mut d = ffi::ProfileEventData::default();
        // SAFETY: an event id of this profile, a valid out-pointer.
        (unsafe { get(e, &mut d) } == ffi::QNN_SUCCESS).then_some(d)
    }

    fn free(&mut self) {
        if let Some(free) = self.lib.api().profile_free {
            // SAFETY: created by profileCreate, freed once, not in use.
            unsafe { free(self.handle) };
        }
    }
}

impl Drop for Profile {
    fn drop(&mut self) {
        self.free();
    }
}

fn new_handle(lib: &'static QnnLib, backend: Handle) -> Result<Handle, String> {
    let api = lib.api();
    let (Some(create), Some(_), Some(_), Some(_), Some(_)) = (
        api.profile_create,
        api.profile_get_events,
        api.profile_get_sub_events,
        api.profile_get_event_data,
        api.profile_free,
    ) else {
        return Err("the library has no profiling functions".into());
    };
    let mut handle: Handle = ptr::null_mut();
    // SAFETY: a live backend, a valid out-pointer.
    let err = unsafe { create(backend, ffi::PROFILE_LEVEL_BASIC, &mut handle) };
    if err != ffi::QNN_SUCCESS || handle.is_null() {
        return Err(lib.describe("profileCreate", err));
    }
    Ok(handle)
}

/// Calls a `(ids, count)` getter and copies the list the library owns.
///
/// # Safety
/// `get` must write a pointer to `count` ids, or fail.
unsafe fn ids(
    get: impl FnOnce(*mut *const ffi::ProfileEventId, *mut u32) -> ffi::QnnError,
) -> Option<Vec<ffi::ProfileEventId>> {
    let mut p: *const ffi::ProfileEventId = ptr::null();
    let mut n = 0u32;
    if get(&mut p, &mut n) != ffi::QNN_SUCCESS {
        return None;
    }
    if p.is_null() || n == 0 {
        return Some(Vec::new());
    }
    // SAFETY: the library wrote `n` ids at `p` (the caller's contract).
    Some(unsafe { std::slice::from_raw_parts(p, n as usize) }.to_vec())
}
