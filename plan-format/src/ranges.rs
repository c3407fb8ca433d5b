//! The compact form of an operator's decision table: ranges of lengths that
//! share one decision, its length-dependent parameters given as a function
//! of the length, and its costs as a piecewise-linear function.
//!
//! A [`DecisionRange`] covers `from..=to`. Its `strategy` is the decision at
//! `from`; [`Follow`] names the one parameter, if any, that moves with the
//! rows M within the range (the dynamic part of a sequence cut takes the
//! rest of M, a chunked prefill runs `ceil(M / chunk)` chunks, an offload
//! hands all M tokens to the GPU). M is the length, or a constant (the
//! lm_head's last token in prefill). Strategy, M and instances expand
//! exactly to the solve's decision at every length.
//!
//! Costs come from a predictor and move with the length in no closed form:
//! they are stored as knots of a piecewise-linear function, exact at every
//! knot; between two knots every field is within [`COST_TOLERANCE_REL`] of
//! the length's total (the runner-up's fields: of the runner-up's total),
//! and at least [`COST_TOLERANCE_ABS_US`], of the solve's value. The
//! runner-up's kind and label are those of the knot on the left.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::plan::{CostBreakdown, Decision, RunnerUp, Strategy};

/// Costs interpolated between two knots are within this share of the
/// length's total (the runner-up's fields: of the runner-up's total) of
/// the solve's value ...
///
/// Fitted predictors answer neighbouring lengths a few per cent apart (tree
/// ensembles step), so a tighter bound keeps a knot at nearly every length;
/// 2 % is about the mean error of the GPU models and a fifth of the ±10 %
/// the predictors are held to.
pub const COST_TOLERANCE_REL: f64 = 2e-2;
/// ... or within this many µs, whichever is larger.
pub const COST_TOLERANCE_ABS_US: f64 = 0.01;

/// How far an interpolated cost may be from a value whose total is `total_us`.
pub fn cost_tolerance(total_us: f64) -> f64 {
    (COST_TOLERANCE_REL * total_us).max(COST_TOLERANCE_ABS_US)
}

fn is_one(v: &u32) -> bool {
    *v == 1
}

fn one() -> u32 {
    1
}

/// Lengths `from..=to` an operator's table covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Span {
    /// First length.
    pub from: u32,
    /// Last length.
    pub to: u32,
}

/// The parameter of a range's strategy that moves with the rows M.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Follow {
    /// Sequence cut: part `part` (a dynamic processor's) takes the rest of
    /// M, the tokens the other parts leave.
    Rest {
        /// Index of the part in `parts`.
        part: u32,
    },
    /// Chunked prefill: `chunks` is `ceil(M / chunk)`.
    Chunks,
    /// Offload: `gpu_tokens` is M.
    GpuTokens,
    /// A pipe (a sequence cut of one part that runs prepared graphs, the
    /// last padded): the part's `tokens` are M.
    Tokens,
}

/// The cost of a range's decision at one length, exact there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CostKnot {
    /// The length.
    pub len: u32,
    /// Its predicted cost.
    pub cost: CostBreakdown,
    /// Its best losing candidate, if there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner_up: Option<RunnerUp>,
}

impl CostKnot {
    /// Whether lengths between this knot and `next` can be interpolated:
    /// the same optional fields, runner-up kind and label.
    pub(crate) fn same_shape(&self, next: &CostKnot) -> bool {
        same_shape(
            (&self.cost, self.runner_up.as_ref()),
            (&next.cost, next.runner_up.as_ref()),
        )
    }
}

/// Whether two costs have the same optional fields, runner-up kind and
/// label (and so can be interpolated).
pub(crate) fn same_shape(
    (a, ra): (&CostBreakdown, Option<&RunnerUp>),
    (b, rb): (&CostBreakdown, Option<&RunnerUp>),
) -> bool {
    a.parts_us.len() == b.parts_us.len()
        && a.sync_block_us.is_some() == b.sync_block_us.is_some()
        && match (ra, rb) {
            (None, None) => true,
            (Some(a), Some(b)) => a.kind == b.kind && a.label == b.label,
            _ => false,
        }
}

/// One decision over the lengths `from..=to`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DecisionRange {
    /// First length.
    pub from: u32,
    /// Last length.
    pub to: u32,
    /// Rows (M) each instance sees at every length of the range, when not
    /// the length itself (the lm_head's last token in prefill).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub m: Option<u32>,
    /// Instances run per layer (active experts).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub instances: u32,
    /// What runs where, at `from`.
    pub strategy: Strategy,
    /// The parameter of `strategy` that moves with M; none: the strategy is
    /// the same at every length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow: Option<Follow>,
    /// The costs, as knots of a piecewise-linear function of the length:
    /// the first at `from`, the last at `to`.
    pub costs: Vec<CostKnot>,
}

impl DecisionRange {
    /// Whether the range covers `len`.
    pub fn contains(&self, len: u32) -> bool {
        (self.from..=self.to).contains(&len)
    }

    /// Rows each instance sees at `len`.
    pub fn rows_m(&self, len: u32) -> u32 {
        self.m.unwrap_or(len)
    }

    /// The strategy at `len` (a length of the range).
    pub fn strategy_at(&self, len: u32) -> Strategy {
        let mut s = self.strategy.clone();
        if let Some(f) = self.follow {
            apply(&mut s, f, self.rows_m(self.from), self.rows_m(len));
        }
        s
    }

    /// The cost and runner-up at `len` (a length of the range): a knot's
    /// own where there is one, else interpolated between its neighbours.
    pub fn cost_at(&self, len: u32) -> Option<(CostBreakdown, Option<RunnerUp>)> {
        let i = match self.costs.binary_search_by_key(&len, |k| k.len) {
            Ok(i) => {
                let k = &self.costs[i];
                return Some((k.cost.clone(), k.runner_up.clone()));
            }
            Err(i) => i,
        };
        let (a, b) = (self.costs.get(i.checked_sub(1)?)?, self.costs.get(i)?);
        let t = (len - a.len) as f64 / (b.len - a.len) as f64;
        let lerp = |x: f64, y: f64| x + (y - x) * t;
        let shaped = a.same_shape(b);
        let cost = CostBreakdown {
            parts_us: (a.cost.parts_us.iter().zip(&b.cost.parts_us))
                .map(|(x, y)| lerp(*x, *y))
                .collect(),
            sync_us: lerp(a.cost.sync_us, b.cost.sync_us),
            sync_block_us: match (a.cost.sync_block_us, b.cost.sync_block_us) {
                (Some(x), Some(y)) if shaped => Some(lerp(x, y)),
                (x, _) => x,
            },
            copy_us: lerp(a.cost.copy_us, b.cost.copy_us),
            total_us: lerp(a.cost.total_us, b.cost.total_us),
        };
        let runner_up = match (&a.runner_up, &b.runner_up) {
            (Some(x), Some(y)) if shaped => Some(RunnerUp {
                kind: x.kind,
                label: x.label.clone(),
                total_us: lerp(x.total_us, y.total_us),
                margin_us: lerp(x.margin_us, y.margin_us),
            }),
            (x, _) => x.clone(),
        };
        Some((cost, runner_up))
    }

    /// The decision at `len`, materialised; `None` outside the range.
    pub fn at(&self, len: u32) -> Option<Decision> {
        if !self.contains(len) {
            return None;
        }
        let (cost, runner_up) = self.cost_at(len)?;
        let m = self.rows_m(len);
        Some(Decision {
            len,
            m: (m != len).then_some(m),
            instances: self.instances,
            strategy: self.strategy_at(len),
            cost,
            runner_up,
        })
    }

    /// The decisions at every length of the range.
    pub fn expand(&self) -> impl Iterator<Item = Decision> + '_ {
        (self.from..=self.to).filter_map(|len| self.at(len))
    }
}

impl Decision {
    /// Whether this decision (read from a plan's ranges) agrees with `dense`
    /// (the solve's): length, M, instances, strategy and runner-up family
    /// equal, every cost within the tolerance of the compact form.
    pub fn agrees_with(&self, dense: &Decision) -> bool {
        let tol = cost_tolerance(dense.cost.total_us) + 1e-9;
        let near = |a: f64, b: f64| (a - b).abs() <= tol;
        let (a, b) = (&self.cost, &dense.cost);
        let costs = a.parts_us.len() == b.parts_us.len()
            && a.parts_us
                .iter()
                .zip(&b.parts_us)
                .all(|(x, y)| near(*x, *y))
            && near(a.sync_us, b.sync_us)
            && near(a.copy_us, b.copy_us)
            && near(a.total_us, b.total_us)
            && match (a.sync_block_us, b.sync_block_us) {
                (Some(x), Some(y)) => near(x, y),
                (x, y) => x == y,
            };
        let runner = match (&self.runner_up, &dense.runner_up) {
            (Some(x), Some(y)) => {
                let tol = cost_tolerance(y.total_us) + 1e-9;
                x.kind == y.kind
                    && x.label == y.label
                    && (x.total_us - y.total_us).abs() <= tol
                    && (x.margin_us - y.margin_us).abs() <= tol
            }
            (x, y) => x.is_none() && y.is_none(),
        };
        self.len == dense.len
            && self.rows_m() == dense.rows_m()
            && self.instances == dense.instances
            && self.strategy == dense.strategy
            && costs
            && runner
    }
}

/// Moves the followed parameter of `s` (as at rows `m0`) to rows `m`.
pub(crate) fn apply(s: &mut Strategy, f: Follow, m0: u32, m: u32) {
    match (f, s) {
        (Follow::Rest { part }, Strategy::SeqCut { parts }) => {
            if let Some(p) = parts.get_mut(part as usize) {
                p.tokens = (p.tokens as i64 + m as i64 - m0 as i64).max(0) as u32;
            }
        }
        (Follow::Chunks, Strategy::Chunked { chunk, chunks, .. }) if *chunk > 0 => {
            *chunks = m.div_ceil(*chunk);
        }
        (Follow::GpuTokens, Strategy::Offload { gpu_tokens, .. }) => *gpu_tokens = m,
        (Follow::Tokens, Strategy::SeqCut { parts }) if parts.len() == 1 => parts[0].tokens = m,
        _ => {}
    }
}

/// Whether `s` is `s0` (as at rows `m0`) with its followed parameter moved
/// to rows `m` ≥ `m0`: what [`apply`] gives, compared without building it.
pub(crate) fn follows(s0: &Strategy, f: Follow, m0: u32, m: u32, s: &Strategy) -> bool {
    match (f, s0, s) {
        (Follow::Rest { part }, Strategy::SeqCut { parts: a }, Strategy::SeqCut { parts: b }) => {
            a.len() == b.len()
                && a.iter().zip(b).enumerate().all(|(i, (x, y))| {
                    let tokens = if i == part as usize {
                        x.tokens as i64 + m as i64 - m0 as i64
                    } else {
                        x.tokens as i64
                    };
                    x.processor == y.processor && x.graphs == y.graphs && tokens == y.tokens as i64
                })
        }
        (
            Follow::Chunks,
            Strategy::Chunked {
                processor: p0,
                chunk: c0,
                ..
            },
            Strategy::Chunked {
                processor,
                chunk,
                chunks,
            },
        ) => p0 == processor && c0 == chunk && *chunk > 0 && *chunks == m.div_ceil(*chunk),
        (Follow::Tokens, Strategy::SeqCut { parts: a }, Strategy::SeqCut { parts: b }) => {
            matches!((a.as_slice(), b.as_slice()), ([x], [y])
                if x.processor == y.processor && x.graphs == y.graphs && y.tokens == m)
        }
        (Follow::GpuTokens, Strategy::Offload { .. }, Strategy::Offload { gpu_tokens, .. }) => {
            let mut t = s0.clone();
            if let Strategy::Offload { gpu_tokens: g, .. } = &mut t {
                *g = *gpu_tokens;
            }
            *gpu_tokens == m && t == *s
        }
        _ => false,
    }
}

/// The follow rule a strategy at rows `m` is consistent with, if any: the
/// only dynamic part of a sequence cut, when it has tokens (a remainder of
/// zero stays a fixed part), a pipe's tokens, a chunk count of
/// `ceil(m / chunk)`, an offload that gives the GPU every token.
pub(crate) fn follow_of(s: &Strategy, m: u32) -> Option<Follow> {
    match s {
        Strategy::SeqCut { parts } if matches!(parts.as_slice(), [p] if !p.graphs.is_empty() && p.tokens == m && m > 0) => {
            Some(Follow::Tokens)
        }
        Strategy::SeqCut { parts } => {
            let mut dynamic = parts
                .iter()
                .enumerate()
                .filter(|(_, p)| p.graphs.is_empty());
            match (dynamic.next(), dynamic.next()) {
                (Some((i, p)), None) if p.tokens > 0 => Some(Follow::Rest { part: i as u32 }),
                _ => None,
            }
        }
        Strategy::Chunked { chunk, chunks, .. } if *chunk > 0 && *chunks == m.div_ceil(*chunk) => {
            Some(Follow::Chunks)
        }
        Strategy::Offload { gpu_tokens, .. } if *gpu_tokens == m && m > 0 => {
            Some(Follow::GpuTokens)
        }
        _ => None,
    }
}

/// Checks the follow rule of range `r` (at path `at`): it fits the
/// strategy, and the part taking the rest of M gets at least one token.
pub(crate) fn check_follow(r: &DecisionRange, at: &str) -> Result<(), (String, String)> {
    let Some(f) = r.follow else { return Ok(()) };
    let m = r.rows_m(r.from);
    let bad = |msg: String| Err((format!("{at}.follow"), msg));
    match (f, &r.strategy) {
        (Follow::Rest { part }, Strategy::SeqCut { parts }) => {
            let Some(p) = parts.get(part as usize) else {
                return bad(format!(
                    "part {part} is not one of the {} parts",
                    parts.len()
                ));
            };
            if !p.graphs.is_empty() {
                return bad(format!(
                    "part {part} runs prepared graphs; only a dynamic part takes the rest of M"
                ));
            }
            let others: u64 = (parts.iter().enumerate())
                .filter(|(i, _)| *i != part as usize)
                .map(|(_, p)| p.tokens as u64)
                .sum();
            if m as u64 <= others {
                return bad(format!(
                    "part {part} takes M − {others} tokens, {} at length {}: the remainder must be positive",
                    m as i64 - others as i64,
                    r.from
                ));
            }
            Ok(())
        }
        (Follow::Chunks, Strategy::Chunked { chunk, chunks, .. }) => {
            if *chunk == 0 || *chunks != m.div_ceil(*chunk) {
                return bad(format!(
                    "{chunks} chunks of {chunk} is not ceil(M / chunk) at length {} (M = {m})",
                    r.from
                ));
            }
            Ok(())
        }
        (Follow::Tokens, Strategy::SeqCut { parts }) => {
            let [p] = parts.as_slice() else {
                return bad(format!(
                    "a pipe has one part, not {}: only its tokens follow M",
                    parts.len()
                ));
            };
            let graphs: u64 = p.graphs.iter().map(|&g| g as u64).sum();
            let last = r.rows_m(r.to);
            if m == 0 || p.tokens != m || graphs < last as u64 {
                return bad(format!(
                    "the part's graphs (adding up to {graphs}) must hold M from {m} to {last}, and its tokens ({}) be M at length {}",
                    p.tokens, r.from
                ));
            }
            Ok(())
        }
        (Follow::GpuTokens, Strategy::Offload { gpu_tokens, .. }) => {
            if *gpu_tokens != m {
                return bad(format!(
                    "gpu_tokens {gpu_tokens} is not M = {m} at length {}",
                    r.from
                ));
            }
            Ok(())
        }
        (f, s) => bad(format!("{f:?} does not apply to a {} strategy", s.kind())),
    }
}

/// Checks the cost knots of range `r` (at path `at`): the first at `from`,
/// the last at `to`, strictly increasing, and knots of different shape
/// (optional fields, runner-up) only next to each other.
pub(crate) fn check_knots(r: &DecisionRange, at: &str) -> Result<(), (String, String)> {
    let (Some(first), Some(last)) = (r.costs.first(), r.costs.last()) else {
        return Err((
            format!("{at}.costs"),
            "a range needs at least one cost knot".into(),
        ));
    };
    if first.len != r.from || last.len != r.to {
        return Err((
            format!("{at}.costs"),
            format!(
                "the knots run from length {} to {}, not from {} to {} as the range",
                first.len, last.len, r.from, r.to
            ),
        ));
    }
    for (j, w) in r.costs.windows(2).enumerate() {
        let k = format!("{at}.costs[{}]", j + 1);
        if w[1].len <= w[0].len {
            return Err((
                format!("{k}.len"),
                "knot lengths must be strictly increasing".into(),
            ));
        }
        if w[1].len > w[0].len + 1 && !w[0].same_shape(&w[1]) {
            return Err((
                k,
                "a knot whose optional costs or runner-up differ from the one before must be at the next length".into(),
            ));
        }
    }
    Ok(())
}

/// Checks that the ranges of `op` (at path `at`, `ops[3]`) tile its spans:
/// each range runs forwards, starts where the one before ends (no overlap,
/// no gap inside a span) and stays inside one span.
pub(crate) fn check_coverage(op: &crate::OpPlan, at: &str) -> Result<(), (String, String)> {
    let spans = &op.spans;
    for (k, s) in spans.iter().enumerate() {
        let prev_to = k.checked_sub(1).map(|p| spans[p].to as u64 + 1);
        if s.from == 0 || s.from > s.to || prev_to.is_some_and(|p| (s.from as u64) < p) {
            return Err((
                format!("{at}.spans[{k}]"),
                "spans must be of positive lengths, from ≤ to, sorted and apart".into(),
            ));
        }
    }
    let Some(first) = spans.first() else {
        return Err((format!("{at}.spans"), "the table covers no lengths".into()));
    };
    let (mut s, mut next) = (0usize, first.from as u64);
    for (j, r) in op.ranges.iter().enumerate() {
        let here = format!("{at}.ranges[{j}]");
        let err = |msg: String| Err((here.clone(), msg));
        if r.from > r.to {
            return err(format!("from {} is after to {}", r.from, r.to));
        }
        let (from, to) = (r.from as u64, r.to as u64);
        if from < next {
            return err(match j {
                0 => format!("starts at {from}, before the first length {next} of `spans`"),
                _ => format!(
                    "lengths {from}..={} are also in ranges[{}]",
                    to.min(next - 1),
                    j - 1
                ),
            });
        }
        if next > spans[s].to as u64 {
            s += 1;
            let Some(span) = spans.get(s) else {
                return err(format!("starts at {from}, past the last length of `spans`"));
            };
            next = span.from as u64;
            if from < next {
                return err(format!("starts at {from}, outside the lengths of `spans`"));
            }
        }
        if from > next {
            return err(format!(
                "lengths {next}..={} have no decision: a gap before this range",
                from - 1
            ));
        }
        if to > spans[s].to as u64 {
            return err(format!(
                "runs to {to}, past the span {}..={} of `spans`",
                spans[s].from, spans[s].to
            ));
        }
        next = to + 1;
    }
    let last = spans.len() - 1;
    if s < last || next <= spans[last].to as u64 {
        let j = op.ranges.len().saturating_sub(1);
        let gap = if next <= spans[s].to as u64 {
            next
        } else {
            spans[s + 1].from as u64
        };
        return Err((
            format!("{at}.ranges[{j}]"),
            format!(
                "lengths {gap}..={} of `spans` have no decision after this range",
                spans[last].to
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::SeqPart;

    fn seq(npu: u32, gpu: u32) -> Strategy {
        Strategy::SeqCut {
            parts: vec![
                SeqPart {
                    processor: "npu".into(),
                    tokens: npu,
                    graphs: vec![npu],
                },
                SeqPart {
                    processor: "gpu".into(),
                    tokens: gpu,
                    graphs: vec![],
                },
            ],
        }
    }

    fn knot(len: u32, total: f64) -> CostKnot {
        CostKnot {
            len,
            cost: CostBreakdown {
                parts_us: vec![total, total / 2.0],
                sync_us: 1.0,
                sync_block_us: None,
                copy_us: 0.0,
                total_us: total,
            },
            runner_up: None,
        }
    }

    #[test]
    fn a_range_expands_its_followed_part_and_interpolates_costs() {
        let r = DecisionRange {
            from: 257,
            to: 300,
            m: None,
            instances: 1,
            strategy: seq(256, 1),
            follow: Some(Follow::Rest { part: 1 }),
            costs: vec![knot(257, 10.0), knot(300, 53.0)],
        };
        let d = r.at(280).unwrap();
        assert_eq!(d.strategy, seq(256, 24));
        assert!((d.cost.total_us - 33.0).abs() < 1e-9);
        assert_eq!(r.at(300).unwrap().cost, knot(300, 53.0).cost);
        assert!(r.at(256).is_none() && r.at(301).is_none());
        assert_eq!(r.expand().count(), 44);
        assert!(check_follow(&r, "r").is_ok() && check_knots(&r, "r").is_ok());
    }

    #[test]
    fn a_remainder_of_zero_is_refused() {
        let r = DecisionRange {
            from: 256,
            to: 300,
            m: None,
            instances: 1,
            strategy: seq(256, 0),
            follow: Some(Follow::Rest { part: 1 }),
            costs: vec![knot(256, 10.0), knot(300, 53.0)],
        };
        let (field, msg) = check_follow(&r, "ops[0].ranges[2]").unwrap_err();
        assert_eq!(field, "ops[0].ranges[2].follow");
        assert!(
            msg.contains("M − 256") && msg.contains("length 256"),
            "{msg}"
        );
    }

    #[test]
    fn chunk_counts_follow_the_length() {
        let s = Strategy::Chunked {
            processor: "npu".into(),
            chunk: 256,
            chunks: 1,
        };
        assert_eq!(follow_of(&s, 200), Some(Follow::Chunks));
        let mut t = s.clone();
        apply(&mut t, Follow::Chunks, 200, 513);
        assert!(matches!(t, Strategy::Chunked { chunks: 3, .. }));
        assert_eq!(follow_of(&s, 300), None);
    }

    #[test]
    fn a_pipes_tokens_follow_the_length_within_its_graphs() {
        let pipe = |tokens: u32| Strategy::SeqCut {
            parts: vec![SeqPart {
                processor: "npu".into(),
                tokens,
                graphs: vec![64, 32],
            }],
        };
        assert_eq!(follow_of(&pipe(65), 65), Some(Follow::Tokens));
        let mut t = pipe(65);
        apply(&mut t, Follow::Tokens, 65, 90);
        assert_eq!(t, pipe(90));
        assert!(follows(&pipe(65), Follow::Tokens, 65, 90, &pipe(90)));
        assert!(!follows(&pipe(65), Follow::Tokens, 65, 90, &pipe(89)));
        let r = |to: u32| DecisionRange {
            from: 65,
            to,
            m: None,
            instances: 1,
            strategy: pipe(65),
            follow: Some(Follow::Tokens),
            costs: vec![knot(65, 10.0), knot(to, 53.0)],
        };
        assert!(check_follow(&r(96), "r").is_ok());
        let (_, msg) = check_follow(&r(97), "r").unwrap_err();
        assert!(msg.contains("from 65 to 97"), "{msg}");
    }
}
