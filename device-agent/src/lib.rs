//! The device agent: the small binary pushed to phones, boards and hosts,
//! and the library behind it.
//!
//! The core is the [`Backend`] trait. A backend opens one or more processors;
//! for each it prepares GEMMs ([`Gemm`]) and times them. The same trait is
//! reused by `hetero-runtime` to execute plans, which is why it is object-safe
//! (`Box<dyn Backend>`) and why a prepared GEMM keeps its weights resident and
//! separates `write_input` / `execute` / `read_output`: the timed part is the
//! execution alone, and the runtime can overlap processors with
//! [`Gemm::submit`] and [`Gemm::wait`].
//!
//! Two layers of "optional": a cargo feature decides whether a backend is
//! compiled in; loading its library at run time decides whether it opens
//! here. A missing library is an [`Error::Library`] naming the library and
//! the paths tried, never a panic. Optional capabilities default to
//! [`Error::Unsupported`].
//!
//! The design choice a newcomer would otherwise get wrong: **no time counts
//! until the result is checked.** The [`sweep`] runner verifies every case
//! against a CPU f64 reference ([`verify`]) before and after its timed runs,
//! and a wrong result becomes a `failed` row without statistics. Backends
//! only compute and time; they never judge their own results.
#![warn(missing_docs)]

mod backend;
#[cfg(any(feature = "cpu", feature = "qnn"))]
mod completion;
pub mod conditions;
pub mod conformance;
#[cfg(any(feature = "cpu", feature = "cuda", feature = "sim", feature = "opencl"))]
pub mod convert;
#[cfg(feature = "cpu")]
pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(any(feature = "cpu", feature = "sim"))]
mod dense;
mod error;
mod evict;
mod host;
#[cfg(feature = "opencl")]
pub mod opencl;
pub mod protocol;
#[cfg(feature = "qnn")]
pub mod qnn;
mod registry;
#[cfg(feature = "sim")]
pub mod sim;
pub mod sweep;
pub mod verify;

pub use backend::{Backend, Gemm, GemmSpec, SyncMode, Timed, default_tolerance};
pub use error::{Error, Result};
pub use host::{HostBuf, HostMem};
pub use registry::{OpenOptions, Registry, Unavailable, id_matches};

/// Threads for `work` items spread over every core: one below
/// `serial_below`, where starting threads costs more than they save.
pub(crate) fn threads_for(work: usize, serial_below: usize) -> usize {
    if work < serial_below {
        1
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }
}

/// The sweep protocol version this agent speaks; the host checks it in the
/// handshake.
pub use hetero_plan::protocol::PROTOCOL_VERSION;
