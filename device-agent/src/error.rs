use serde::{Deserialize, Serialize};

/// Result with the agent's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Errors of the agent and its backends.
///
/// Serialisable: errors travel from the device back to the host as JSON
/// lines over adb or ssh.
#[derive(Debug, Clone, PartialEq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "error", rename_all = "snake_case")]
pub enum Error {
    /// The backend does not offer this capability (dtype, operation, buffer kind).
    #[error("{backend}: {what} is not supported")]
    Unsupported {
        /// Backend or processor id.
        backend: String,
        /// What was asked for.
        what: String,
    },
    /// A run-time library could not be loaded.
    #[error("{library} could not be loaded: {reason} (tried: {})", tried.join(", "))]
    Library {
        /// The library (`libOpenCL.so.1`, `libQnnHtp.so`, `libcublas.so.13`).
        library: String,
        /// Every path or name tried, in order.
        tried: Vec<String>,
        /// The loader's last message.
        reason: String,
    },
    /// The backend's API reported an error.
    #[error("{backend}: {message}")]
    Backend {
        /// Backend or processor id.
        backend: String,
        /// The API's message, with the call that failed.
        message: String,
    },
    /// A case ran past its timeout.
    #[error("timed out after {ms} ms")]
    Timeout {
        /// The timeout.
        ms: u64,
    },
    /// A request (spec, argument) is malformed.
    #[error("field `{field}`: {message}")]
    BadRequest {
        /// The offending field.
        field: String,
        /// What is wrong.
        message: String,
    },
}

impl Error {
    /// Shorthand for [`Error::Unsupported`].
    pub fn unsupported(backend: impl Into<String>, what: impl Into<String>) -> Error {
        Error::Unsupported {
            backend: backend.into(),
            what: what.into(),
        }
    }

    /// Shorthand for [`Error::Backend`].
    pub fn backend(backend: impl Into<String>, message: impl Into<String>) -> Error {
        Error::Backend {
            backend: backend.into(),
            message: message.into(),
        }
    }
}
