use std::path::PathBuf;

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong reading, checking or writing a hetero file.
///
/// Every variant names the file; parse and validation errors name the field
/// path and, where the parser knows it, the line and column.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be read or written (the I/O error is the source,
    /// printed after the path by `{:#}`).
    #[error("{}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// The file is not valid RON/JSON for the expected type.
    #[error("{}:{line}:{column}: field `{field}`: {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// Field path inside the document (`ops[2].k`), `.` for the root.
        field: String,
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error.
        column: usize,
        /// What the parser said.
        message: String,
    },
    /// The file parsed but breaks an invariant that spans several fields.
    #[error("{}: field `{field}`: {message}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Field path of the offending value.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// A required field is absent (used for foreign formats such as a
    /// Hugging Face `config.json`, where fields are optional per architecture).
    #[error("{}: missing required field `{field}`{}", path.display(), context.as_deref().map(|c| format!(" ({c})")).unwrap_or_default())]
    MissingField {
        /// The file.
        path: PathBuf,
        /// The field that is missing.
        field: String,
        /// Why it is required.
        context: Option<String>,
    },
    /// A Hugging Face `model_type` this build does not know.
    #[error("{}: field `model_type`: unsupported model type `{model_type}`; supported: {}", path.display(), supported.join(", "))]
    UnknownModelType {
        /// The file.
        path: PathBuf,
        /// The value found.
        model_type: String,
        /// The values this build supports.
        supported: Vec<&'static str>,
    },
    /// The file is not UTF-8 text.
    #[error("{}:{line}:{column}: not UTF-8: byte 0x{byte:02x} at byte offset {offset}", path.display())]
    NotUtf8 {
        /// The file.
        path: PathBuf,
        /// 0-based byte offset of the first byte that is not UTF-8.
        offset: usize,
        /// That byte.
        byte: u8,
        /// 1-based line of it.
        line: usize,
        /// 1-based column of it, in characters.
        column: usize,
    },
    /// The extension does not say whether the file is RON or JSON.
    #[error("{}: cannot tell the format from the extension; use .ron or .json", path.display())]
    UnknownFormat {
        /// The file.
        path: PathBuf,
    },
    /// Serialising a value failed (a bug, not bad input).
    #[error("serialising {what}: {message}")]
    Serialize {
        /// What was being written.
        what: &'static str,
        /// The serializer's message.
        message: String,
    },
}

impl Error {
    /// True when the error is the user's input (exit code 2), false when it is
    /// the environment (a failed write) or a bug.
    pub fn is_bad_input(&self) -> bool {
        match self {
            Error::Io { source, .. } => matches!(
                source.kind(),
                std::io::ErrorKind::NotFound
                    | std::io::ErrorKind::InvalidData
                    | std::io::ErrorKind::IsADirectory
            ),
            Error::Serialize { .. } => false,
            _ => true,
        }
    }
}
