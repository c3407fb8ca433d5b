//! Skipping a test whose tool is missing, unless its presence is required.
//!
//! A test that needs something this machine may lack (an OpenCL device, the
//! QNN library, `sshd`, ...) says why and returns through [`skip!`]. When
//! the matching `HETERO_REQUIRE_*` variable is set (to anything but empty or
//! `0`) the same test fails instead, so a machine that installs the tool
//! (CI) cannot pass by skipping.
//!
//! [`skip!`]: crate::skip

/// A `HETERO_REQUIRE_*` variable.
#[derive(Clone, Copy, Debug)]
pub struct Require(pub &'static str);

/// An OpenCL platform with a device (PoCL will do).
pub const OPENCL: Require = Require("HETERO_REQUIRE_OPENCL");
/// `libQnnHtp.so` in `HETERO_QNN_LIB_DIR` (`scripts/fetch-qnn.sh`).
pub const QNN: Require = Require("HETERO_REQUIRE_QNN");
/// `sshd` and the ssh client tools (`ssh`, `scp`, `ssh-keygen`), and an
/// `sshd` that starts on 127.0.0.1.
pub const SSHD: Require = Require("HETERO_REQUIRE_SSHD");
/// The `hetero-agent` binary next to the `hetero` under test (`cargo test
/// --workspace` builds both).
pub const AGENT: Require = Require("HETERO_REQUIRE_AGENT");
/// A TrueType font for the charts.
pub const FONT: Require = Require("HETERO_REQUIRE_FONT");
/// `python3` (the profiler's fake agent is a Python script).
pub const PYTHON: Require = Require("HETERO_REQUIRE_PYTHON");
/// A C compiler, `cc` (the C API example).
pub const CC: Require = Require("HETERO_REQUIRE_CC");
/// Permission to mount a tmpfs (root, outside a container that forbids
/// mounts): the full-disk test fills a small one.
pub const MOUNT: Require = Require("HETERO_REQUIRE_MOUNT");

impl Require {
    /// Whether the variable is set to anything but empty or `0`.
    pub fn is_set(self) -> bool {
        std::env::var_os(self.0).is_some_and(|v| !v.is_empty() && v != "0")
    }

    /// Says on stderr that something is not tested because of `reason`;
    /// panics instead when the variable is set. [`skip!`] calls it and
    /// returns; call it directly for a part of a test.
    ///
    /// [`skip!`]: crate::skip
    pub fn skipping(self, reason: &str) {
        if self.is_set() {
            panic!("{} is set, but {reason}", self.0);
        }
        eprintln!("skipping: {reason} (with {}=1 this fails)", self.0);
    }
}

/// Returns from the test after saying why on stderr.
///
/// `skip!(OPENCL, "no OpenCL device: {e}")` names a [`require`](crate::require)
/// constant: when its `HETERO_REQUIRE_*` variable is set the test fails
/// instead. `skip!("one core, nothing to split")` is for what no installation
/// can change, and always skips.
#[macro_export]
macro_rules! skip {
    ($require:ident, $($reason:tt)+) => {{
        $crate::require::$require.skipping(&format!($($reason)+));
        return;
    }};
    ($($reason:tt)+) => {{
        eprintln!("skipping: {}", format!($($reason)+));
        return;
    }};
}

/// The value of `Ok(value)`; for `Err(reason)`, [`skip!`]`(REQUIRE, reason)`.
///
/// `let devs = or_skip!(OPENCL, devices());`
#[macro_export]
macro_rules! or_skip {
    ($require:ident, $result:expr) => {
        match $result {
            Ok(value) => value,
            Err(reason) => $crate::skip!($require, "{}", reason),
        }
    };
}
