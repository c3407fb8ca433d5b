//! Where prepared GEMMs come from: built now by the backend, or loaded from
//! graphs compiled ahead of time.
//!
//! The runtime asks a [`GraphSource`] for every GEMM a plan needs (one per
//! operator part, size and weight set). [`Prepare`] calls
//! [`Backend::prepare`], which for a static-graph processor builds and
//! finalises the graph. [`Preloaded`] hands out GEMMs that were prepared
//! elsewhere — QNN context binaries compiled on a host and loaded on the
//! phone (`hetero_agent::qnn::aot::load` returns them with their specs) —
//! and can fall back to preparing what it lacks.
//! [`Compiled`](crate::compiled::Compiled) loads a folder written by
//! `hetero compile`, checked against the plan. Any other source (a cache on
//! disk, a remote compiler) implements the same trait.

use std::collections::HashMap;

use hetero_agent::{Backend, Error, Gemm, GemmSpec, Result};
use hetero_plan::Phase;

/// What the runtime needs prepared.
#[derive(Debug, Clone)]
pub struct GraphRequest<'a> {
    /// Canonical operator name.
    pub op: &'a str,
    /// Phase of the decision that needs it.
    pub phase: Phase,
    /// The layer whose weights it holds.
    pub layer: u32,
    /// The instance (expert) whose weights it holds.
    pub instance: u32,
    /// First output column (of N) of the share it computes.
    pub first_col: u32,
    /// Shape, dtype, operand order, weight mode.
    pub spec: GemmSpec,
}

/// Supplies prepared GEMMs for one processor.
pub trait GraphSource: Send {
    /// A prepared GEMM for `req` with the weights `W[K, cols]` (row-major
    /// f32, the part's columns). A source with weights baked in elsewhere
    /// may ignore them; `--check` then catches a graph compiled with others.
    fn graph(
        &mut self,
        backend: &mut dyn Backend,
        req: &GraphRequest<'_>,
        weights: &[f32],
    ) -> Result<Box<dyn Gemm>>;

    /// What the source is, for reports (`prepare`, `preloaded (12 graphs)`).
    fn describe(&self) -> String;

    /// Per GEMM handed out so far, whether it was loaded or prepared, for
    /// sources that mix the two (empty: every GEMM came the one way
    /// [`describe`](GraphSource::describe) says).
    fn origins(&self) -> Vec<GraphOrigin> {
        Vec::new()
    }
}

/// Where one GEMM of a run came from.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GraphOrigin {
    /// Canonical operator name.
    pub op: String,
    /// Layer.
    pub layer: u32,
    /// Instance (expert).
    pub instance: u32,
    /// First output column of its share.
    pub first_col: u32,
    /// `MxKxN dtype order`.
    pub gemm: String,
    /// `loaded` (compiled ahead of time) or `prepared` (at run time).
    pub source: String,
    /// The context binary it was loaded from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

/// Builds every GEMM with [`Backend::prepare`].
#[derive(Debug, Default, Clone, Copy)]
pub struct Prepare;

impl GraphSource for Prepare {
    fn graph(
        &mut self,
        backend: &mut dyn Backend,
        req: &GraphRequest<'_>,
        weights: &[f32],
    ) -> Result<Box<dyn Gemm>> {
        backend.prepare(&req.spec, weights)
    }

    fn describe(&self) -> String {
        "prepare".into()
    }
}

/// GEMMs prepared ahead of time, handed out by spec, one per request.
pub struct Preloaded {
    graphs: HashMap<GemmSpec, Vec<Box<dyn Gemm>>>,
    loaded: usize,
    /// Prepare what is not preloaded instead of failing.
    pub fallback: bool,
}

impl Preloaded {
    /// Wraps prepared GEMMs (for instance the output of an ahead-of-time
    /// loader). Several GEMMs of one spec serve several layers in order.
    pub fn new(gemms: Vec<Box<dyn Gemm>>) -> Preloaded {
        let loaded = gemms.len();
        let mut graphs: HashMap<GemmSpec, Vec<Box<dyn Gemm>>> = HashMap::new();
        for g in gemms.into_iter().rev() {
            graphs.entry(*g.spec()).or_default().push(g);
        }
        Preloaded {
            graphs,
            loaded,
            fallback: false,
        }
    }

    /// GEMMs not handed out yet.
    pub fn remaining(&self) -> usize {
        self.graphs.values().map(Vec::len).sum()
    }
}

impl GraphSource for Preloaded {
    fn graph(
        &mut self,
        backend: &mut dyn Backend,
        req: &GraphRequest<'_>,
        weights: &[f32],
    ) -> Result<Box<dyn Gemm>> {
        if let Some(g) = self.graphs.get_mut(&req.spec).and_then(Vec::pop) {
            return Ok(g);
        }
        if self.fallback {
            return backend.prepare(&req.spec, weights);
        }
        let mut have: Vec<String> = self
            .graphs
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(s, v)| format!("{}x{} {} {}", v.len(), s.shape, s.dtype, s.order))
            .collect();
        have.sort();
        Err(Error::BadRequest {
            field: "graphs".into(),
            message: format!(
                "no ahead-of-time graph for `{}` layer {} ({} {} {}); left: {}",
                req.op,
                req.layer,
                req.spec.shape,
                req.spec.dtype,
                req.spec.order,
                if have.is_empty() {
                    "none".to_string()
                } else {
                    have.join(", ")
                }
            ),
        })
    }

    fn describe(&self) -> String {
        format!("preloaded ({} graphs)", self.loaded)
    }
}
