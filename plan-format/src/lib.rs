//! The data vocabulary of hetero.
//!
//! Every stage of the pipeline (agent rows, datasets, predictors, plans, the
//! runtime) speaks through the types of this crate, so it holds data only:
//! serde types, their validation and their versioning. It depends on no other
//! crate of the workspace.
//!
//! The design choice a newcomer would otherwise get wrong: **invariants live in
//! the types where serde can check them** (a GEMM dimension is a
//! [`std::num::NonZeroU32`], a schema version is a [`SchemaVersion`] that refuses
//! other versions while it is being parsed, a cost or a fitted rate is an
//! `f64` read through a checked deserializer that refuses NaN, infinity and
//! values out of its range in RON and JSON alike). An invalid file is then refused
//! *during* parsing, and the error carries the field path and the line:column
//! of the offending value, not just a message after the fact. Checks that span
//! several fields live in [`Validate`] and report a field path.
//!
//! Every file type carries a `schema_version` field; [`load`] and [`save`]
//! pick RON or JSON from the file extension.
#![warn(missing_docs)]

/// `skip_serializing_if` for fields whose zero is the default.
fn is_zero<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

mod checked;
mod compact;
mod compiled;
mod duration;
mod error;
mod fingerprint;
mod forecast;
mod gemm;
pub mod hf;
mod io;
mod layers;
mod model;
pub mod nongemm;
mod plan;
pub mod predictor;
mod processor;
mod profile;
pub mod protocol;
pub mod ranges;
mod setup;
mod sweep;
mod version;

pub use compact::{DenseOpPlan, compact, expand, spans_of};
pub use compiled::CompiledModel;
pub use duration::parse_duration;
pub use error::{Error, Result};
pub use fingerprint::Fingerprint;
pub use forecast::{GenerationForecast, NotCovered, OpForecast, PassForecast};
pub use gemm::{DType, GemmShape, OperandOrder, WeightMode};
pub use io::{Format, load, load_str, read_text, save, to_string, to_string_depth, write_atomic};
pub use layers::layer_count;
pub use model::{LinearOp, MRule, ModelSpec, OpRole, Phase};
pub use nongemm::{
    Alternative, HOST, LayerPlacement, Layers, NonGemmCost, NonGemmKnot, NonGemmOp, NonGemmPlan,
    PlacedCosts,
};
pub use plan::{
    CostBreakdown, Decision, FingerprintMismatch, GraphSet, OffloadPlacement, OpPlan, Plan,
    ProcessorDType, ProcessorOrder, Resident, RowGraph, RowPart, RunnerUp, SeqPart, SolverInfo,
    Strategy, StrategyKind,
};
pub use predictor::{
    LatencyModel, LinearCost, MEAN_ROWS_MIN, MeasuredGemm, Overheads, Predictor, ProcessorModel,
    Score, StageSmall, Tree, TreeNode, Work,
};
pub use processor::{Capabilities, Processor, ProcessorApi, ProcessorKind, Timing};
pub use profile::{AgentInfo, DeviceProfile, HostInfo};
pub use ranges::{
    COST_TOLERANCE_ABS_US, COST_TOLERANCE_REL, CostKnot, DecisionRange, Follow, Span,
    cost_tolerance,
};
pub use setup::{Setup, SetupDifference};
pub use sweep::{
    Conditions, DEFAULT_WARMUP_MS, GemvStream, MeasurementRow, MicrobenchKind, MicrobenchRequest,
    MicrobenchRow, RowStatus, RunFlags, RunParams, Stats, SweepCase, SweepSpec,
};
pub use version::{OLDEST_SCHEMA_VERSION, SCHEMA_VERSION, SchemaVersion};

/// Checks that span several fields, which serde cannot express in types.
///
/// `validate` returns the first problem found as `(field path, message)`; the
/// path uses the same notation as parse errors (`ops[2].k`).
pub trait Validate {
    /// Returns `Err((field_path, message))` on the first broken invariant.
    fn validate(&self) -> std::result::Result<(), (String, String)>;
}
