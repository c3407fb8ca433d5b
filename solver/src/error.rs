use std::path::PathBuf;

/// Result with the solver's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a solve (or an explanation) could not be made. Every variant is the
/// user's input: a bad argument, or a predictor or model that lacks what the
/// request needs.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An operator name the model does not have.
    #[error("unknown operator `{op}`; the model has: {}", known.join(", "))]
    UnknownOp {
        /// The name given.
        op: String,
        /// The model's operators.
        known: Vec<String>,
    },
    /// A length list or range with nothing in it.
    #[error("{what}: no lengths to solve (give a range like 1..4096 or buckets like 32,64,128)")]
    EmptyLengths {
        /// Which argument.
        what: String,
    },
    /// A malformed argument.
    #[error("{what}: {message}")]
    BadArgument {
        /// Which argument.
        what: String,
        /// What is wrong with it.
        message: String,
    },
    /// A budget that admits no static graph at all.
    #[error(
        "{what} budget {budget} is too small for any graph on `{processor}`: the cheapest needs {need}; raise the budget or pass --npu-graphs none"
    )]
    BudgetTooSmall {
        /// `prepare-time` or `memory`.
        what: &'static str,
        /// The static-graph processor.
        processor: String,
        /// What the cheapest graph needs, formatted.
        need: String,
        /// The budget, formatted.
        budget: String,
    },
    /// The request needs a processor (or a measured constant) the predictor lacks.
    #[error("{strategy} needs {need}, which the predictor does not have ({have})")]
    MissingProcessor {
        /// What was asked for (`offload mode`, `--npu-graphs`).
        strategy: String,
        /// What it needs.
        need: String,
        /// What the predictor has.
        have: String,
    },
    /// A processor without a latency model in the requested dtype.
    #[error("processor `{processor}` has no latency model for dtype {dtype}; it has: {available}")]
    NoModel {
        /// Processor id.
        processor: String,
        /// The dtype asked for.
        dtype: String,
        /// The dtypes it has.
        available: String,
    },
    /// No processor can run anything.
    #[error("no processor of the predictor has a latency model to solve with")]
    NoProcessors,
    /// A GPU memory budget offload mode cannot use: smaller than one
    /// layer's weights, or larger than the GPU.
    #[error("--gpu-mem-budget {budget} is {message}")]
    GpuBudget {
        /// The budget, formatted.
        budget: String,
        /// How it compares with the size it misses, with that size.
        message: String,
    },
    /// A malformed prompt-length histogram.
    #[error("{}:{line}: {message}", path.display())]
    BadHistogram {
        /// The CSV file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A length the plan has no decision for.
    #[error("the plan has no {phase} decision for `{op}` at length {len}; it covers {covered}")]
    NotInPlan {
        /// Operator.
        op: String,
        /// Phase name.
        phase: String,
        /// The length asked for.
        len: u32,
        /// The lengths it covers, summarised.
        covered: String,
    },
}

impl Error {
    /// True for every variant: all of them are the user's input (exit code 2).
    pub fn is_bad_input(&self) -> bool {
        true
    }

    pub(crate) fn arg(what: impl Into<String>, message: impl Into<String>) -> Error {
        Error::BadArgument {
            what: what.into(),
            message: message.into(),
        }
    }
}
