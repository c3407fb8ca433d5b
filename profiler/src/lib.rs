//! The host side of profiling: transports to the device, sweep design,
//! datasets, and fitting latency models from them.
//!
//! Fitting ([`fit`]) turns measured rows into a [`hetero_plan::Predictor`]:
//! one latency model per processor and dtype, chosen among regression trees
//! (on log latency), linear and roofline models by k-fold held-out error, plus
//! overhead constants fitted from the microbenchmark rows.
#![warn(missing_docs)]

pub mod fit;
