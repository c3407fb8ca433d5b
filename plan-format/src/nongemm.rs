//! The non-GEMM operators of a decoder layer (attention, RoPE, RMSNorm,
//! the SwiGLU activation, residual adds): where each layer runs them, and
//! their predicted costs, as a plan records them.
//!
//! A placement is `host` (the host CPU, on the activations in host memory,
//! which is where runtime-min keeps them between operators) or the id of
//! the processor that holds the activation. Costs are per layer, as
//! piecewise-linear functions of a length: the prompt length in prefill
//! (every token attends to the prompt), the context length in decode (the
//! step's tokens attend to everything before them).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{Phase, checked, is_zero};

/// The placement that runs on the host CPU.
pub const HOST: &str = "host";

/// A non-GEMM operator of a decoder layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum NonGemmOp {
    /// Scaled dot-product attention with the KV cache: QKᵀ, softmax, PV
    /// per query head, and the cache write of the new keys and values.
    Attention,
    /// Rotary position embedding of the queries and keys.
    Rope,
    /// The two RMSNorms of a layer (before attention, before the MLP).
    Norm,
    /// The gated activation of the MLP (SwiGLU: `silu(gate) · up`).
    Activation,
    /// The two residual adds of a layer.
    Residual,
}

impl NonGemmOp {
    /// Every operator, in the order a layer runs them first.
    pub const ALL: [NonGemmOp; 5] = [
        NonGemmOp::Norm,
        NonGemmOp::Rope,
        NonGemmOp::Attention,
        NonGemmOp::Residual,
        NonGemmOp::Activation,
    ];

    /// The snake_case name used in files and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            NonGemmOp::Attention => "attention",
            NonGemmOp::Rope => "rope",
            NonGemmOp::Norm => "norm",
            NonGemmOp::Activation => "activation",
            NonGemmOp::Residual => "residual",
        }
    }

    /// The operator named `s`, if it is one.
    pub fn parse(s: &str) -> Option<NonGemmOp> {
        Self::ALL.into_iter().find(|o| o.as_str() == s)
    }
}

impl std::fmt::Display for NonGemmOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The predicted cost of one operator in one layer at one length, µs.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct NonGemmKnot {
    /// The length: the prompt length (prefill) or the context length (decode).
    pub len: u32,
    /// Compute: the GEMM-shaped parts through the placed processor's
    /// latency model, the rest as bytes over its memory bandwidth.
    #[serde(deserialize_with = "checked::non_negative")]
    pub compute_us: f64,
    /// Launches and completion notices the placement adds.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[serde(deserialize_with = "checked::non_negative")]
    pub sync_us: f64,
    /// Moving the operator's activations between host memory and the
    /// placement.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[serde(deserialize_with = "checked::non_negative")]
    pub copy_us: f64,
}

impl NonGemmKnot {
    /// `compute + sync + copy`.
    pub fn total_us(&self) -> f64 {
        self.compute_us + self.sync_us + self.copy_us
    }
}

/// One operator's cost per layer, as knots of a piecewise-linear function
/// of the length (sorted, lengths strictly increasing); below the first
/// knot it is the first knot's, beyond the last it continues the last
/// segment's slope.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NonGemmCost {
    /// The operator.
    pub op: NonGemmOp,
    /// The knots.
    pub knots: Vec<NonGemmKnot>,
}

impl NonGemmCost {
    /// The cost at `len`, interpolated between the knots (`None` without
    /// knots).
    pub fn at(&self, len: u32) -> Option<NonGemmKnot> {
        let k = &self.knots;
        let first = *k.first()?;
        if len <= first.len || k.len() == 1 {
            return Some(NonGemmKnot { len, ..first });
        }
        // The segment holding `len`, or the last one beyond the last knot.
        let i = k.partition_point(|x| x.len < len).clamp(1, k.len() - 1);
        let (a, b) = (k[i - 1], k[i]);
        let t = (len as f64 - a.len as f64) / (b.len as f64 - a.len as f64);
        let lerp = |x: f64, y: f64| (x + t * (y - x)).max(0.0);
        Some(NonGemmKnot {
            len,
            compute_us: lerp(a.compute_us, b.compute_us),
            sync_us: lerp(a.sync_us, b.sync_us),
            copy_us: lerp(a.copy_us, b.copy_us),
        })
    }
}

impl NonGemmCost {
    /// The knots without those the line between their neighbours gives
    /// within `rel` (relative, at least 0.01 µs) in every term: an
    /// element-wise operator's cost, linear in the tokens, keeps its ends.
    pub fn pruned(mut self, rel: f64) -> NonGemmCost {
        let close = |x: f64, y: f64| (x - y).abs() <= (rel * y.abs()).max(0.01);
        let fits = |a: &NonGemmKnot, b: &NonGemmKnot, skipped: &[NonGemmKnot]| {
            let line = cost_of(vec![*a, *b]);
            skipped.iter().all(|k| {
                let at = line.at(k.len).expect("two knots");
                close(at.compute_us, k.compute_us)
                    && close(at.sync_us, k.sync_us)
                    && close(at.copy_us, k.copy_us)
            })
        };
        let mut kept: Vec<NonGemmKnot> = vec![];
        let mut since = 0;
        for (i, k) in self.knots.iter().enumerate() {
            match kept.last() {
                Some(a) if i > since + 1 && !fits(a, k, &self.knots[since + 1..i]) => {
                    kept.push(self.knots[i - 1]);
                    since = i - 1;
                }
                None => {
                    kept.push(*k);
                    since = i;
                }
                _ => {}
            }
        }
        if let Some(last) = self.knots.last().filter(|l| kept.last() != Some(l)) {
            kept.push(*last);
        }
        self.knots = kept;
        self
    }
}

fn cost_of(knots: Vec<NonGemmKnot>) -> NonGemmCost {
    NonGemmCost {
        op: NonGemmOp::Norm,
        knots,
    }
}

/// The non-GEMM operators on one placement, with their costs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PlacedCosts {
    /// `host`, or the id of the processor that runs them.
    pub at: String,
    /// Per operator, its cost per layer.
    pub ops: Vec<NonGemmCost>,
}

impl PlacedCosts {
    /// The cost of `op` per layer at `len`, if costed.
    pub fn at_len(&self, op: NonGemmOp, len: u32) -> Option<NonGemmKnot> {
        self.ops.iter().find(|c| c.op == op)?.at(len)
    }

    /// Every operator's cost per layer at `len`, summed.
    pub fn total_at(&self, len: u32) -> f64 {
        self.ops
            .iter()
            .filter_map(|c| c.at(len))
            .map(|k| k.total_us())
            .sum()
    }
}

/// A placement the solver costed but did not choose.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Alternative {
    /// Where and what it would cost.
    pub costs: PlacedCosts,
    /// The runtime can run the non-GEMM operators there
    /// ([`Capabilities::non_gemm`](crate::Capabilities)); when false it was
    /// costed for comparison only.
    #[serde(default)]
    pub executable: bool,
}

/// Layers `first..=last`, counted from 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Layers {
    /// The first layer.
    pub first: u32,
    /// The last layer (included).
    pub last: u32,
}

impl Layers {
    /// Layers in the range.
    pub fn count(&self) -> u32 {
        self.last.saturating_sub(self.first) + 1
    }

    /// Whether `layer` is in the range.
    pub fn contains(&self, layer: u32) -> bool {
        (self.first..=self.last).contains(&layer)
    }
}

/// Where a range of layers runs its non-GEMM operators in one phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LayerPlacement {
    /// The phase.
    pub phase: Phase,
    /// The layers.
    pub layers: Layers,
    /// The chosen placement and its costs.
    pub chosen: PlacedCosts,
    /// The other placement costed (the processor that holds the
    /// activation, when it is not the host's CPU), if there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alternative: Option<Alternative>,
}

fn one() -> u32 {
    1
}

fn is_one(v: &u32) -> bool {
    *v == 1
}

/// Where every layer runs its non-GEMM operators, and what they cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NonGemmPlan {
    /// Tokens per decode step the decode costs are for (the GEMMs' decode
    /// length).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub decode_tokens: u32,
    /// Placements, per phase as ranges of layers, sorted by phase and
    /// first layer.
    pub placements: Vec<LayerPlacement>,
}

impl NonGemmPlan {
    /// The placements of a phase, in order of layers.
    pub fn of_phase(&self, phase: Phase) -> impl Iterator<Item = &LayerPlacement> {
        self.placements.iter().filter(move |p| p.phase == phase)
    }

    /// The placement of `layer` in `phase`.
    pub fn placement(&self, phase: Phase, layer: u32) -> Option<&LayerPlacement> {
        self.of_phase(phase).find(|p| p.layers.contains(layer))
    }

    /// Checks the placements against the plan's processors: each names
    /// `host` or one of them; knots are sorted; layer ranges of a phase do
    /// not overlap. Returns `(field path, message)` on the first problem.
    pub(crate) fn check(&self, processors: &[String]) -> Result<(), (String, String)> {
        if self.decode_tokens == 0 {
            return Err(("non_gemm.decode_tokens".into(), "must be at least 1".into()));
        }
        let known = |at: &str| at == HOST || processors.iter().any(|p| p == at);
        for (i, p) in self.placements.iter().enumerate() {
            let here = format!("non_gemm.placements[{i}]");
            if p.layers.first > p.layers.last {
                return Err((
                    format!("{here}.layers"),
                    format!("first {} is after last {}", p.layers.first, p.layers.last),
                ));
            }
            let overlaps = self.placements[..i].iter().any(|q| {
                q.phase == p.phase
                    && q.layers.first <= p.layers.last
                    && p.layers.first <= q.layers.last
            });
            if overlaps {
                return Err((
                    format!("{here}.layers"),
                    format!("layers overlap another {} placement", p.phase),
                ));
            }
            let alt = p.alternative.as_ref().map(|a| (&a.costs, "alternative"));
            for (costs, field) in [(&p.chosen, "chosen")].into_iter().chain(alt) {
                if !known(&costs.at) {
                    return Err((
                        format!("{here}.{field}.at"),
                        format!(
                            "`{}` is neither `host` nor in the plan's `processors`",
                            costs.at
                        ),
                    ));
                }
                for (j, c) in costs.ops.iter().enumerate() {
                    if c.knots.is_empty() || c.knots.windows(2).any(|w| w[0].len >= w[1].len) {
                        return Err((
                            format!("{here}.{field}.ops[{j}].knots"),
                            "knots must be at least one, lengths strictly increasing".into(),
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn knot(len: u32, compute_us: f64) -> NonGemmKnot {
        NonGemmKnot {
            len,
            compute_us,
            sync_us: 1.0,
            copy_us: 0.0,
        }
    }

    fn cost(knots: Vec<NonGemmKnot>) -> NonGemmCost {
        NonGemmCost {
            op: NonGemmOp::Attention,
            knots,
        }
    }

    #[test]
    fn costs_interpolate_between_knots_and_extrapolate_beyond() {
        let c = cost(vec![knot(4, 10.0), knot(8, 30.0), knot(16, 50.0)]);
        assert_eq!(c.at(1).unwrap().compute_us, 10.0);
        assert_eq!(c.at(6).unwrap().compute_us, 20.0);
        assert_eq!(c.at(8).unwrap().compute_us, 30.0);
        assert_eq!(c.at(12).unwrap().compute_us, 40.0);
        assert_eq!(c.at(32).unwrap().compute_us, 90.0);
        assert_eq!(c.at(32).unwrap().total_us(), 91.0);
        assert_eq!(cost(vec![knot(4, 10.0)]).at(100).unwrap().compute_us, 10.0);
        assert!(cost(vec![]).at(1).is_none());
    }

    #[test]
    fn pruning_keeps_the_ends_of_a_line_and_the_bends_of_a_curve() {
        let line: Vec<NonGemmKnot> = (1..=8).map(|l| knot(l, 3.0 * l as f64)).collect();
        let p = cost(line).pruned(1e-3);
        assert_eq!(p.knots.iter().map(|k| k.len).collect::<Vec<_>>(), [1, 8]);
        let curve: Vec<NonGemmKnot> = [1, 2, 4, 8, 16]
            .into_iter()
            .map(|l| knot(l, (l * l) as f64))
            .collect();
        let p = cost(curve.clone()).pruned(1e-3);
        assert_eq!(p.knots, curve);
        // Whatever it drops, it gives back within the tolerance.
        let bent: Vec<NonGemmKnot> = (1..=40)
            .map(|l| {
                knot(
                    l,
                    if l < 20 {
                        l as f64
                    } else {
                        20.0 + 5.0 * (l - 20) as f64
                    },
                )
            })
            .collect();
        let p = cost(bent.clone()).pruned(1e-3);
        assert!(p.knots.len() < 6, "{:?}", p.knots);
        for k in &bent {
            assert!((p.at(k.len).unwrap().compute_us - k.compute_us).abs() <= 0.01);
        }
    }

    fn plan(at: &str, layers: (u32, u32), knots: Vec<NonGemmKnot>) -> NonGemmPlan {
        NonGemmPlan {
            decode_tokens: 1,
            placements: vec![LayerPlacement {
                phase: Phase::Decode,
                layers: Layers {
                    first: layers.0,
                    last: layers.1,
                },
                chosen: PlacedCosts {
                    at: at.into(),
                    ops: vec![cost(knots)],
                },
                alternative: None,
            }],
        }
    }

    #[test]
    fn check_names_the_bad_field() {
        let procs = ["cuda:0".to_string()];
        let good = vec![knot(1, 1.0), knot(2, 2.0)];
        assert!(plan(HOST, (0, 3), good.clone()).check(&procs).is_ok());
        assert!(plan("cuda:0", (0, 3), good.clone()).check(&procs).is_ok());
        let e = plan("npu", (0, 3), good.clone()).check(&procs).unwrap_err();
        assert_eq!(e.0, "non_gemm.placements[0].chosen.at");
        let e = plan(HOST, (3, 0), good.clone()).check(&procs).unwrap_err();
        assert_eq!(e.0, "non_gemm.placements[0].layers");
        let e = plan(HOST, (0, 3), vec![knot(2, 1.0), knot(2, 2.0)])
            .check(&procs)
            .unwrap_err();
        assert_eq!(e.0, "non_gemm.placements[0].chosen.ops[0].knots");
        let mut no_step = plan(HOST, (0, 3), good.clone());
        no_step.decode_tokens = 0;
        assert_eq!(
            no_step.check(&procs).unwrap_err().0,
            "non_gemm.decode_tokens"
        );
        let mut twice = plan(HOST, (0, 3), good.clone());
        let mut second = twice.placements[0].clone();
        second.layers = Layers { first: 3, last: 5 };
        twice.placements.push(second);
        let e = twice.check(&procs).unwrap_err();
        assert_eq!(e.0, "non_gemm.placements[1].layers");
    }
}
