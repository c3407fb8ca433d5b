//! Choosing the static graph set: which prefill sizes to prepare on a
//! static-graph processor, under a prepare-time and a memory budget, to
//! minimise the expected prefill latency over a prompt-length distribution.
//!
//! Published systems fix the set (powers of two, or one chunk size). Here
//! the choice is greedy: start from no graph; at each step add the size that
//! lowers the expected latency most, while both budgets hold. The expected
//! latency of a set is estimated on a sample of the distribution (at most
//! 1024 lengths) with the candidates that one size can serve on its own
//! (padding, a one-graph sequence cut, chunks, a hybrid cut), which makes
//! the estimate separable per size: the best of the set at a length is the
//! best of its sizes, and each step costs one pass over a table.

use hetero_plan::{LinearOp, Phase};
use rayon::prelude::*;

use std::collections::HashMap;
use std::sync::Arc;

use crate::engine::{INF, OpCtx, Setup, Tables, last_token_only};
use crate::settings::{MAX_AUTO_GRAPHS, fmt_bytes, fmt_us};
use crate::{Error, Result};

/// Prepare time and memory of the graphs already fixed on static processor
/// `gi`: the decode sizes, the M = 1 graph of operators that see only the
/// last token in prefill, and the prefill sizes set so far (those given).
/// Each operator has a full graph per size, plus the row-share graphs the
/// size keeps.
pub(crate) fn reserved(
    setup: &Setup,
    gi: usize,
    ops: &[&LinearOp],
    has_prefill: bool,
) -> (f64, f64) {
    let g = &setup.graphs[gi];
    let p = &setup.procs[g.p];
    let (mut us, mut bytes) = (0.0, 0.0);
    let mut add = |cx: &OpCtx, op: &LinearOp, sizes: &[u32]| {
        let st = cx
            .statics
            .iter()
            .find(|st| st.p == g.p)
            .expect("static context");
        for &m in sizes {
            let shares = st.row_share.at(m).map(|x| x.0);
            for rows in std::iter::once(op.n).chain(shares) {
                let (u, b) = p.op_graphs(op, m, rows);
                us += u;
                bytes += b;
            }
        }
    };
    for op in ops {
        if !g.decode.is_empty() {
            let max = *g.decode.last().expect("not empty");
            let cx = OpCtx::new(setup, op, Phase::Decode, max);
            add(&cx, op, &g.decode);
        }
        if has_prefill && last_token_only(op, Phase::Prefill) && !g.decode.contains(&1) {
            let cx = OpCtx::new(setup, op, Phase::Prefill, 1);
            add(&cx, op, &[1]);
        }
        if has_prefill && !last_token_only(op, Phase::Prefill) && !g.prefill.is_empty() {
            let max = *g.prefill.last().expect("not empty");
            let cx = OpCtx::new(setup, op, Phase::Prefill, max);
            add(&cx, op, &g.prefill);
        }
    }
    (us, bytes)
}

/// Sample points of the distribution: `(length, probability)`, each length
/// moved up to the next solved length (where the runtime would look it up).
pub(crate) fn sample(points: &[(u32, f64)], solved: &[u32], max_samples: usize) -> Vec<(u32, f64)> {
    let mut mapped: Vec<(u32, f64)> = vec![];
    for &(l, w) in points {
        let i = solved.partition_point(|&s| s < l);
        if let Some(&s) = solved.get(i) {
            match mapped.last_mut() {
                Some(last) if last.0 == s => last.1 += w,
                _ => mapped.push((s, w)),
            }
        }
    }
    if mapped.len() <= max_samples {
        return mapped;
    }
    // Stratified sampling with a fixed-seed jitter: deterministic, and not
    // biased towards multiples of the stride.
    let total: f64 = mapped.iter().map(|p| p.1).sum();
    let mut cum = Vec::with_capacity(mapped.len());
    let mut acc = 0.0;
    for p in &mapped {
        acc += p.1 / total;
        cum.push(acc);
    }
    let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut out: Vec<(u32, f64)> = vec![];
    for i in 0..max_samples {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let u = (seed >> 11) as f64 / (1u64 << 53) as f64;
        let q = (i as f64 + u) / max_samples as f64;
        let j = cum.partition_point(|&c| c < q).min(mapped.len() - 1);
        let l = mapped[j].0;
        match out.iter_mut().find(|p| p.0 == l) {
            Some(p) => p.1 += 1.0 / max_samples as f64,
            None => out.push((l, 1.0 / max_samples as f64)),
        }
    }
    out.sort_by_key(|p| p.0);
    out
}

/// The candidate sizes for a static processor: multiples of its tile up to
/// the longest length, at most 256 of them.
pub(crate) fn pool(max_len: u32, tile: u32) -> Vec<u32> {
    let tile = tile.max(1);
    let count = max_len.div_ceil(tile);
    let stride = tile * count.div_ceil(256).max(1);
    (1..)
        .map(|i| i * stride)
        .take_while(|&c| c < max_len + stride)
        .collect()
}

/// Chooses the prefill sizes of static processor `s` (index into
/// `setup.procs`; its entry in `setup.graphs` is `gi`), sorted, and the
/// expected prefill latency of the operators with them (as the choice
/// estimates it). `reserved_us` and `reserved_bytes` are already spent on
/// decode graphs. `tables` holds the prefill predictions of every operator.
#[allow(clippy::too_many_arguments)]
pub(crate) fn choose(
    setup: &Setup,
    gi: usize,
    ops: &[&LinearOp],
    tables: &HashMap<String, Arc<Tables>>,
    dist: &[(u32, f64)],
    solved: &[u32],
    prepare_budget_us: f64,
    mem_budget: Option<u64>,
    reserved_us: f64,
    reserved_bytes: f64,
) -> Result<(Vec<u32>, f64)> {
    let s = setup.graphs[gi].p;
    let max_len = *solved.last().expect("lengths checked non-empty");
    let pool = pool(max_len, setup.procs[s].tile);
    let samples = sample(dist, solved, 1024);
    let terms = size_terms(
        &with_pool(setup, gi, &pool),
        s,
        ops,
        tables,
        &samples,
        &pool,
    );
    let costs = SizeCosts::new(setup, s, ops, &terms, &pool);
    let budget = Budget {
        prepare_us: prepare_budget_us,
        bytes: mem_budget.map(|b| b as f64).unwrap_or(INF),
    };
    costs.check_any_fits(&setup.procs[s].id, &budget, reserved_us, reserved_bytes)?;
    let (chosen, expected) = greedy(&terms, &costs, &budget, reserved_us, reserved_bytes);
    let mut sizes: Vec<u32> = chosen.into_iter().map(|ci| pool[ci]).collect();
    sizes.sort_unstable();
    Ok((sizes, expected))
}

/// The setup with every candidate size prepared on static processor `gi`.
fn with_pool<'a>(setup: &Setup<'a>, gi: usize, pool: &[u32]) -> Setup<'a> {
    let mut tmp = setup.clone();
    tmp.graphs[gi].prefill = pool.to_vec();
    tmp
}

/// One operator's weighted costs over the samples.
struct Terms {
    /// Per sample: the dynamic processors' best.
    base: Vec<f64>,
    /// Per candidate size, per sample: the best with that size.
    with: Vec<Vec<f32>>,
    /// Per candidate size: the row-share graphs a row cut can use there.
    rows_at: Vec<u8>,
}

/// Per operator: the weighted dynamic-only cost per sample, and per
/// candidate size the weighted cost when that size is prepared. `setup`
/// has every size of `pool` prepared on static processor `s`.
fn size_terms(
    setup: &Setup,
    s: usize,
    ops: &[&LinearOp],
    tables: &HashMap<String, Arc<Tables>>,
    samples: &[(u32, f64)],
    pool: &[u32],
) -> Vec<Terms> {
    ops.par_iter()
        .map(|op| {
            let cx = OpCtx::with_tables(setup, op, Phase::Prefill, tables[&op.name].clone());
            let st = cx
                .statics
                .iter()
                .find(|st| st.p == s)
                .expect("the static processor has a context");
            let rows_at = pool
                .iter()
                .map(|&c| st.row_share.at(c).count() as u8)
                .collect();
            let per_sample: Vec<(f64, Vec<f32>)> = samples
                .par_iter()
                .map(|&(l, w)| {
                    let (shape, inst) = op.gemms(Phase::Prefill, l).expect("positive dims");
                    let m = shape.m.get();
                    let scale = w * op.layers as f64 * inst as f64;
                    let dy = cx.dyn_cands(m).iter().map(|c| c.total).fold(INF, f64::min);
                    // Hybrids pad to one of the four smallest sizes at or
                    // above M; padding further is left to plain padding.
                    let first = pool.partition_point(|&c| c < m);
                    let per: Vec<f32> = pool
                        .iter()
                        .enumerate()
                        .map(|(i, &c)| {
                            let hybrid = i >= first && i < first + 4;
                            (cx.static_term(st, c, m, hybrid) * scale) as f32
                        })
                        .collect();
                    (dy * scale, per)
                })
                .collect();
            // Size-major, so each step of the greedy reads contiguously.
            let with = (0..pool.len())
                .map(|ci| per_sample.iter().map(|p| p.1[ci]).collect())
                .collect();
            Terms {
                base: per_sample.iter().map(|p| p.0).collect(),
                with,
                rows_at,
            }
        })
        .collect()
}

/// The prepare-time and memory budgets of a static processor.
struct Budget {
    prepare_us: f64,
    bytes: f64,
}

/// Per candidate size, what preparing it costs.
struct SizeCosts {
    /// Prepare time, µs.
    prep: Vec<f64>,
    /// Buffer memory, bytes.
    mem: Vec<f64>,
}

impl SizeCosts {
    /// Conservative costs: every graph of a full operator per operator,
    /// plus as many again for each row-share graph a row cut could use
    /// there (counted at the whole N).
    fn new(setup: &Setup, s: usize, ops: &[&LinearOp], terms: &[Terms], pool: &[u32]) -> Self {
        let sp = &setup.procs[s];
        let (prep, mem) = pool
            .iter()
            .enumerate()
            .map(|(ci, &c)| {
                ops.iter().zip(terms).fold((0.0, 0.0), |(u, b), (o, t)| {
                    let (gu, gb) = sp.op_graphs(o, c, o.n);
                    let copies = 1.0 + t.rows_at[ci] as f64;
                    (u + copies * gu, b + copies * gb)
                })
            })
            .unzip();
        SizeCosts { prep, mem }
    }

    /// Size `ci` fits beside `spent_us` and `spent_bytes` already spent.
    fn fits(&self, ci: usize, budget: &Budget, spent_us: f64, spent_bytes: f64) -> bool {
        spent_us + self.prep[ci] <= budget.prepare_us && spent_bytes + self.mem[ci] <= budget.bytes
    }

    /// Refuses budgets that leave room for no size at all, naming the
    /// budget that is short and what the cheapest size needs.
    fn check_any_fits(
        &self,
        processor: &str,
        budget: &Budget,
        reserved_us: f64,
        reserved_bytes: f64,
    ) -> Result<()> {
        let n = self.prep.len();
        if n == 0 || (0..n).any(|ci| self.fits(ci, budget, reserved_us, reserved_bytes)) {
            return Ok(());
        }
        let (ci, _) = self
            .prep
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.total_cmp(b.1))
            .expect("pool is not empty");
        if reserved_us + self.prep[ci] > budget.prepare_us {
            return Err(Error::BudgetTooSmall {
                what: "prepare-time",
                processor: processor.into(),
                need: fmt_us(reserved_us + self.prep[ci]),
                budget: fmt_us(budget.prepare_us),
            });
        }
        let ci = (0..n)
            .min_by(|&a, &b| self.mem[a].total_cmp(&self.mem[b]))
            .expect("pool is not empty");
        Err(Error::BudgetTooSmall {
            what: "memory",
            processor: processor.into(),
            need: fmt_bytes((reserved_bytes + self.mem[ci]) as u64),
            budget: fmt_bytes(budget.bytes as u64),
        })
    }
}

/// The greedy choice: from no size, add the size that lowers the expected
/// latency most while both budgets hold, until no size gains. Returns the
/// chosen indices into the pool, in the order chosen, and the expected
/// latency with them.
fn greedy(
    terms: &[Terms],
    costs: &SizeCosts,
    budget: &Budget,
    reserved_us: f64,
    reserved_bytes: f64,
) -> (Vec<usize>, f64) {
    let mut cur: Vec<Vec<f64>> = terms.iter().map(|t| t.base.clone()).collect();
    let total = |cur: &Vec<Vec<f64>>| cur.iter().flatten().sum::<f64>();
    let mut chosen: Vec<usize> = vec![];
    let (mut spent_us, mut spent_b) = (reserved_us, reserved_bytes);
    while chosen.len() < MAX_AUTO_GRAPHS {
        let gains: Vec<(usize, f64)> = (0..costs.prep.len())
            .into_par_iter()
            .filter(|ci| !chosen.contains(ci) && costs.fits(*ci, budget, spent_us, spent_b))
            .map(|ci| {
                let g: f64 = terms
                    .iter()
                    .zip(&cur)
                    .map(|(t, c)| {
                        t.with[ci]
                            .iter()
                            .zip(c)
                            .map(|(&w, &now)| (now - w as f64).max(0.0))
                            .sum::<f64>()
                    })
                    .sum();
                (ci, g)
            })
            .collect();
        let Some(&(ci, gain)) = gains
            .iter()
            .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))
        else {
            break;
        };
        let now = total(&cur);
        if gain.is_nan() || gain <= 1e-6 * now.max(1e-9) {
            break;
        }
        for (t, c) in terms.iter().zip(cur.iter_mut()) {
            for (&w, now) in t.with[ci].iter().zip(c.iter_mut()) {
                *now = now.min(w as f64);
            }
        }
        spent_us += costs.prep[ci];
        spent_b += costs.mem[ci];
        chosen.push(ci);
    }
    let expected = total(&cur);
    (chosen, expected)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampling_maps_up_to_solved_lengths_and_keeps_mass() {
        let pts: Vec<(u32, f64)> = (1..=10).map(|l| (l, 0.1)).collect();
        let s = sample(&pts, &[4, 8, 12], 1024);
        assert_eq!(s.iter().map(|p| p.0).collect::<Vec<_>>(), vec![4, 8, 12]);
        assert!((s[0].1 - 0.4).abs() < 1e-12 && (s[2].1 - 0.2).abs() < 1e-12);
        let pts: Vec<(u32, f64)> = (1..=5000).map(|l| (l, 1.0 / 5000.0)).collect();
        let solved: Vec<u32> = (1..=5000).collect();
        let s = sample(&pts, &solved, 1024);
        assert!(s.len() <= 1024 && s.len() > 900, "{}", s.len());
        let mass: f64 = s.iter().map(|p| p.1).sum();
        assert!((mass - 1.0).abs() < 1e-9);
        let aligned = s.iter().filter(|p| p.0 % 32 == 0).count();
        assert!(aligned < 100, "biased to multiples of 32: {aligned}");
    }
}
