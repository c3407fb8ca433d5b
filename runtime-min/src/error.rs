use std::path::PathBuf;

use hetero_plan::Phase;

/// Result with the runtime's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can stop the runtime.
///
/// [`Error::is_bad_input`] separates the user's input (a plan for another
/// model or device, an absent processor, mismatched weights: exit code 2)
/// from failures of the environment (a processor failing mid-run: exit 1).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A plan, model or predictor file could not be read or is malformed.
    #[error(transparent)]
    File(#[from] hetero_plan::Error),
    /// The plan was solved for another model or predictor.
    #[error("{}: {mismatch}", plan.display())]
    Fingerprint {
        /// The plan file.
        plan: PathBuf,
        /// What differs.
        mismatch: Box<hetero_plan::FingerprintMismatch>,
    },
    /// A processor the plan uses is not here.
    #[error(
        "the plan needs processor `{id}`, which is not available here (opened: {}){}",
        opened.join(", "),
        if unavailable.is_empty() { String::new() } else { format!("; did not open: {}", unavailable.join("; ")) }
    )]
    MissingProcessor {
        /// The processor id.
        id: String,
        /// The processors that opened.
        opened: Vec<String>,
        /// Backends that did not open, with the reason.
        unavailable: Vec<String>,
    },
    /// A processor is here but is not the one the plan (or its predictor) describes.
    #[error("processor `{id}`: {message}")]
    DeviceMismatch {
        /// The processor id.
        id: String,
        /// What differs.
        message: String,
    },
    /// The plan does not cover this operator, phase or length.
    #[error("the plan has no decision for `{op}` in {phase} at length {len}{}", if covered.is_empty() { String::new() } else { format!(" (it covers {covered})") })]
    NoDecision {
        /// Operator name.
        op: String,
        /// Phase.
        phase: Phase,
        /// The length asked for.
        len: u32,
        /// The lengths the plan covers, in words.
        covered: String,
    },
    /// The plan and the model disagree about an operator.
    #[error("plan operator `{op}` ({phase}): {message}")]
    PlanModel {
        /// Operator name.
        op: String,
        /// Phase.
        phase: Phase,
        /// What differs.
        message: String,
    },
    /// A weights file does not match the model.
    #[error("{}: {message}", path.display())]
    Weights {
        /// The weights file.
        path: PathBuf,
        /// What is wrong: the tensor, the expected and the found shape or dtype.
        message: String,
    },
    /// A caller's argument is malformed (a buffer of the wrong length, a bad option).
    #[error("{what}: {message}")]
    BadArgument {
        /// The argument.
        what: String,
        /// What is wrong.
        message: String,
    },
    /// Preparing the plan would need more memory than the host or a
    /// processor has: refused before anything is allocated.
    #[error("{0}")]
    Memory(Box<MemoryShortfall>),
    /// A processor failed while the plan ran.
    #[error("{processor} failed running `{op}` (layer {layer}, {phase} length {len}): {source}")]
    Processor {
        /// The processor id.
        processor: String,
        /// Operator name.
        op: String,
        /// Layer index.
        layer: u32,
        /// Phase.
        phase: Phase,
        /// Length.
        len: u32,
        /// The backend's error.
        source: Box<hetero_agent::Error>,
    },
    /// A processor could not prepare a graph or GEMM before the run.
    #[error("{processor} could not prepare `{op}` ({what}): {source}")]
    Prepare {
        /// The processor id.
        processor: String,
        /// Operator name.
        op: String,
        /// The GEMM, in words.
        what: String,
        /// The backend's error.
        source: Box<hetero_agent::Error>,
    },
    /// A folder of compiled graphs does not match the plan, the library or
    /// the run (see [`crate::compiled`]).
    #[error("{}: {field}: {message}", path.display())]
    Graphs {
        /// The manifest or plan file.
        path: PathBuf,
        /// The field that differs.
        field: String,
        /// What differs.
        message: String,
    },
    /// The device agent failed outside a run or a prepare (opening the QNN
    /// library to compile or load graphs).
    #[error("{what}: {source}")]
    Agent {
        /// What was being done.
        what: String,
        /// The agent's error.
        source: Box<hetero_agent::Error>,
    },
    /// An output differed from the reference by more than its bound.
    #[error("check failed: {failed} of {checked} outputs off the reference; worst: {worst}")]
    CheckFailed {
        /// Outputs over their bound.
        failed: usize,
        /// Outputs compared.
        checked: usize,
        /// The worst one, in words.
        worst: String,
    },
}

impl Error {
    /// True when the error is the user's input (exit code 2).
    pub fn is_bad_input(&self) -> bool {
        match self {
            Error::File(e) => e.is_bad_input(),
            Error::Fingerprint { .. }
            | Error::MissingProcessor { .. }
            | Error::DeviceMismatch { .. }
            | Error::NoDecision { .. }
            | Error::PlanModel { .. }
            | Error::Weights { .. }
            | Error::Memory(_)
            | Error::Graphs { .. }
            | Error::BadArgument { .. } => true,
            // A graph source refusing what it was given (a compiled graph
            // for other weights, a tampered binary) is the user's input.
            Error::Prepare { source, .. } | Error::Agent { source, .. } => {
                matches!(**source, hetero_agent::Error::BadRequest { .. })
            }
            Error::Processor { .. } | Error::CheckFailed { .. } => false,
        }
    }

    pub(crate) fn arg(what: impl Into<String>, message: impl Into<String>) -> Error {
        Error::BadArgument {
            what: what.into(),
            message: message.into(),
        }
    }
}

/// What [`Error::Memory`] reports: where memory is short, for what, and
/// both figures.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryShortfall {
    /// The plan file.
    pub plan: PathBuf,
    /// The model's name.
    pub model: String,
    /// The phase being prepared.
    pub phase: Phase,
    /// Its length.
    pub len: u32,
    /// Where the memory is short: the host, or a processor's own.
    pub place: String,
    /// Bytes needed there.
    pub needed: u128,
    /// What needs them, in words (the largest operator named).
    pub what: String,
    /// Bytes the place has.
    pub available: u64,
    /// Where that figure comes from.
    pub basis: String,
}

impl std::fmt::Display for MemoryShortfall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: model `{}`, {} at length {}, needs {} on {} for {}, but {} has {} {}",
            self.plan.display(),
            self.model,
            self.phase,
            self.len,
            crate::runtime::bytes(self.needed),
            self.place,
            self.what,
            self.place,
            crate::runtime::bytes(self.available as u128),
            self.basis
        )
    }
}
