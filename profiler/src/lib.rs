//! The profiler: run the device agent where the device is, sweep GEMM
//! shapes within a time budget, and keep the rows as a dataset.
//!
//! The pieces, in the order a run uses them:
//! - [`Target`] parses `--device` (`local`, `ssh://user@host[:port]`,
//!   `adb[:SERIAL]`); [`transport::Transport`] runs the real `ssh`/`scp`/`adb`
//!   programs, retrying failures of the link with backoff;
//! - [`agent`] picks the agent binary for the target's `uname -m`;
//!   [`hetero_plan::protocol`] types the agent's JSON Lines;
//! - [`design`] plans the sweep (model shapes, stage probes, a coarse grid,
//!   microbenchmarks, then refinement where the [`guide`]'s held-out error is
//!   high);
//! - [`journal`] appends every row as it arrives; [`dataset`] writes and
//!   reads the Parquet dataset ([`Dataset::load`] is what fitting calls);
//! - [`profile::profile`] ties them together;
//! - [`fit`] turns measured rows into a [`hetero_plan::Predictor`]: one
//!   latency model per processor and dtype, chosen among regression trees
//!   (on log latency), linear and roofline models by k-fold held-out error,
//!   plus overhead constants fitted from the microbenchmark rows.
//!
//! The design choice a newcomer would otherwise get wrong: **the journal,
//! not the Parquet files, is the record of a run.** Rows are appended to
//! `journal.jsonl` the moment they arrive and case ids name their content,
//! so an interrupted run (Ctrl-C, a killed agent, a pulled cable) loses
//! nothing and `--resume` measures exactly the ids not yet in the journal.
//! The Parquet files are derived from the journal at the end of each run,
//! atomically. Polars stays on the host: the agent that goes to the phone
//! never links it.
#![warn(missing_docs)]

pub mod agent;
pub mod dataset;
pub mod design;
mod error;
pub mod fit;
pub mod guide;
pub mod journal;
pub mod profile;
pub mod report;
pub mod scratch;
mod target;
pub mod transport;

pub use dataset::Dataset;
pub use error::{Error, Result};
pub use profile::{Outcome, ProfileOptions, profile};
pub use report::{Event, Reporter};
pub use target::Target;
