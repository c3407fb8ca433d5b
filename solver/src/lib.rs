//! The hetero solver: for a device (a predictor) and a model, decide how
//! every GEMM runs at every sequence length, and write it down as a plan.
//!
//! For each operator × phase × length the solver chooses among the
//! candidates of the seeds, generalised to the processors the predictor
//! names (every candidate is costed at a length unless lower bounds of the
//! latency models prove a neighbouring decision within 0.5 % there; see
//! [`Settings::exhaustive`]):
//!
//! * one processor alone; a static-graph processor (an NPU) pads to a
//!   prepared graph size or prepares the exact shape online;
//! * **row cut** (HeteroLLM): output rows split, the static side's share a
//!   multiple of the row alignment (256); **three-way** across three processors;
//! * **sequence cut** and **multi-sequence cut**: prepared graph sizes run one
//!   after the other on the static processor, the remainder on a dynamic one;
//! * **pipe**: prepared graphs back to back on the static processor alone,
//!   the last padded (85 tokens as 64 + 32);
//! * **hybrid**: the static side pads to a prepared size and takes a share of
//!   the rows;
//! * **chunked prefill** (mllm-NPU): fixed-size chunks of one prepared graph;
//! * **offload** (ScheInfer) on a discrete GPU with a memory budget: CC / CG /
//!   GG row slicing with PCIe copies and token assignment.
//!
//! The cost is HeteroLLM's `max(T_a, T_b) + T_sync + T_copy`, with the sync
//! depending on which side dominates, copies where the processor measured
//! them (every graph run of a static processor too), and each side on
//! shared memory no faster than streaming its weights at its
//! concurrent-bandwidth share (a part bound by bandwidth, whatever the
//! phase).
//!
//! The design choice a newcomer would otherwise get wrong: **a static
//! processor's row share is a property of a prepared graph, not of a
//! length.** A graph is compiled for one (M, K, N-share); so the share is
//! chosen once per graph size (the best row cut at that very length) and
//! every hybrid cut that pads to that size reuses it. Lengths that are
//! themselves graph sizes (and every decode step, whose graphs are
//! per-length) choose their share freely. Likewise the operand order is
//! chosen once per operator and processor, not per length.
//!
//! The solver is generic over [`LatencyOracle`] so tests can use the
//! simulated processors of [`synthetic`]; plans written by the command line
//! always come from a predictor file and carry its fingerprint.
#![warn(missing_docs)]

mod engine;
mod error;
mod explain;
mod graphs;
mod model_bounds;
mod nongemm;
mod offload;
pub mod oracle;
mod residency;
pub mod settings;
mod solve;
pub mod synthetic;

pub use error::{Error, Result};
pub use explain::{ExplainedCandidate, Explanation, coverage, explain, explain_layer};
pub use oracle::{GemmModel, LatencyOracle};
pub use settings::{Distribution, GraphChoice, OffloadStrategy, Settings};
pub use solve::{SolveStats, solve, solve_with_stats, solve_with_tables};

#[cfg(test)]
mod tests;
