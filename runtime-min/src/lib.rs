//! hetero-runtime: execute a plan file across processors.
//!
//! [`Runtime::open`] loads a plan, refuses one solved for another model (or
//! predictor), and opens the plan's processors through the device agent's
//! [`hetero_agent::Registry`] as `Box<dyn Backend>`. [`Runtime::run`]
//! prepares every GEMM a phase needs at a length (static graphs through a
//! pluggable [`GraphSource`]), then runs every linear operator of every
//! layer as the plan decides: the output rows (N) or the sequence (M) split
//! between processors, the parts started at once, waited for with fast
//! synchronisation (sleep for the predicted time, then poll a flag:
//! HeteroLLM §4.2) or a blocking wait, and merged. [`Runtime::linear`] runs
//! one operator for an embedding engine; the [`capi`] module exposes it to C.
//!
//! The design choice a newcomer would otherwise get wrong: **a simulated
//! processor's time is never a measurement.** npu-sim computes its product
//! on the host CPU and reports a modelled time. The runtime runs such parts
//! after the real ones (so the host CPU does not steal the real processors'
//! cores), counts their modelled time as overlapped with the real parts, and
//! labels every operator and total that includes one `simulated`; the host
//! wall clock of such an operator is reported apart and is not an NPU
//! latency.
#![warn(missing_docs)]

pub mod capi;
pub mod check;
pub mod compiled;
pub mod decider;
mod error;
mod exec;
pub mod graphs;
pub mod model;
pub mod report;
mod runtime;
#[cfg(test)]
mod testutil;
mod weights;

pub use compiled::{CompileOptions, Compiled, compile_plan};
pub use decider::Decider;
pub use error::{Error, MemoryShortfall, Result};
pub use exec::SyncChoice;
pub use graphs::{GraphOrigin, GraphRequest, GraphSource, Preloaded, Prepare};
pub use model::{Decoder, GenerateSpec, Generation, ModelFiles, Sampling};
pub use report::Report;
pub use runtime::{
    LinearTiming, PlanGemm, RunSpec, Runtime, RuntimeOptions, StaticGraph, label, load_model,
    plan_gemms, plan_static_graphs,
};
pub use weights::WeightSource;
