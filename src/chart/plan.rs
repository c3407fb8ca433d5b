//! What the plan charts draw: each processor's share of the work per
//! length (partition chart) and each candidate's predicted latency per
//! length (latency curves), extracted from a plan and, for the latency
//! curves, re-evaluated with the predictor it was solved with.

use std::collections::BTreeMap;

use hetero_plan::{Decision, ModelSpec, OpPlan, Phase, Plan, Predictor, Strategy, StrategyKind};

/// Every strategy family in a fixed order: colours and legends follow it,
/// so a family has the same colour in every chart of every plan.
pub const KINDS: [StrategyKind; 9] = [
    StrategyKind::Single,
    StrategyKind::RowCut,
    StrategyKind::ThreeWay,
    StrategyKind::SeqCut,
    StrategyKind::MultiSeq,
    StrategyKind::Hybrid,
    StrategyKind::Chunked,
    StrategyKind::Offload,
    StrategyKind::Pipe,
];

/// Position of a family in [`KINDS`].
pub fn kind_index(k: StrategyKind) -> usize {
    KINDS.iter().position(|x| *x == k).unwrap_or(0)
}

/// A family for legends: its name in plans and `plan explain`, in words.
pub fn kind_words(k: StrategyKind) -> String {
    let words = match k {
        StrategyKind::Single => "one processor",
        StrategyKind::RowCut => "rows split",
        StrategyKind::ThreeWay => "rows split three ways",
        StrategyKind::SeqCut => "tokens split",
        StrategyKind::MultiSeq => "several graphs + remainder",
        StrategyKind::Hybrid => "padding + rows split",
        StrategyKind::Chunked => "chunked prefill",
        StrategyKind::Offload => "CC/CG/GG offload",
        StrategyKind::Pipe => "graphs back to back, the last padded",
    };
    format!("{k} ({words})")
}

/// Each processor's share of the useful output (the M × N elements) of a
/// decision, in the order of `processors` (0 for processors it leaves idle).
/// Padding is not work: a padded graph's share is its share of the real rows.
pub fn shares(d: &Decision, n: u32, processors: &[String]) -> Vec<f64> {
    let mut out = vec![0.0; processors.len()];
    let mut add = |p: &str, v: f64| {
        if let Some(i) = processors.iter().position(|q| q == p) {
            out[i] += v;
        }
    };
    let n = n.max(1) as f64;
    let m = d.rows_m().max(1) as f64;
    match &d.strategy {
        Strategy::Single { processor, .. } | Strategy::Chunked { processor, .. } => {
            add(processor, 1.0)
        }
        Strategy::RowCut { parts } | Strategy::Hybrid { parts, .. } => {
            for p in parts {
                add(&p.processor, p.rows as f64 / n);
            }
        }
        Strategy::SeqCut { parts } => {
            for p in parts {
                add(&p.processor, p.tokens as f64 / m);
            }
        }
        Strategy::Offload {
            cpu,
            gpu,
            cc_rows,
            gpu_tokens,
            ..
        } => {
            let cpu_share = *cc_rows as f64 / n * (m - *gpu_tokens as f64).max(0.0) / m;
            add(cpu, cpu_share);
            add(gpu, 1.0 - cpu_share);
        }
    }
    out
}

/// One length of one operator in the partition chart.
pub struct SharePoint {
    /// Sequence length (prefill) or tokens per step (decode).
    pub len: u32,
    /// The chosen family.
    pub kind: StrategyKind,
    /// Share per processor of the figure, 0..=1.
    pub shares: Vec<f64>,
}

/// One operator's panel.
pub struct OpPanel<T> {
    /// Panel title.
    pub title: String,
    /// What is drawn.
    pub data: T,
}

/// Prepared graph sizes of one static-graph processor in one phase.
pub struct GraphMarks {
    /// The processor.
    pub processor: String,
    /// Sizes (M).
    pub sizes: Vec<u32>,
}

/// The partition chart of one phase.
pub struct PartitionFigure {
    /// The phase.
    pub phase: Phase,
    /// Processors, in the plan's order.
    pub processors: Vec<String>,
    /// Families chosen anywhere in the phase, in [`KINDS`] order.
    pub kinds: Vec<StrategyKind>,
    /// Prepared graph sizes per static-graph processor.
    pub marks: Vec<GraphMarks>,
    /// One panel per operator, in the plan's order.
    pub panels: Vec<OpPanel<Vec<SharePoint>>>,
}

fn title(o: &OpPlan) -> String {
    let mut t = format!("{} (K {}, N {}", o.op, o.k, o.n);
    if o.layers > 1 {
        t += &format!(", ×{} layers", o.layers);
    }
    // A fixed M (the lm_head's last token in prefill) is worth saying.
    if let Some(r) = o.ranges.first()
        && o.length_count() > 1
        && o.ranges
            .iter()
            .all(|x| x.rows_m(x.from) == r.rows_m(r.from) && x.rows_m(x.to) == r.rows_m(r.from))
    {
        t += &format!(", M = {}", r.rows_m(r.from));
    }
    t + ")"
}

/// The phases a plan holds, prefill first.
pub fn phases(plan: &Plan) -> Vec<Phase> {
    [Phase::Prefill, Phase::Decode]
        .into_iter()
        .filter(|ph| {
            plan.ops
                .iter()
                .any(|o| o.phase == *ph && !o.ranges.is_empty())
        })
        .collect()
}

fn marks(plan: &Plan, phase: Phase) -> Vec<GraphMarks> {
    plan.graph_sets
        .iter()
        .map(|g| {
            let mut sizes = g.sizes_for(phase).to_vec();
            sizes.sort_unstable();
            sizes.dedup();
            GraphMarks {
                processor: g.processor.clone(),
                sizes,
            }
        })
        .filter(|g| !g.sizes.is_empty())
        .collect()
}

/// The partition chart of `phase`.
pub fn partition(plan: &Plan, phase: Phase) -> PartitionFigure {
    let processors = plan.processors.clone();
    let mut used = [false; KINDS.len()];
    let panels = plan
        .ops
        .iter()
        .filter(|o| o.phase == phase && !o.ranges.is_empty())
        .map(|o| {
            let pts = o
                .decisions()
                .map(|d| {
                    let kind = d.strategy.kind();
                    used[kind_index(kind)] = true;
                    SharePoint {
                        len: d.len,
                        kind,
                        shares: shares(&d, o.n, &processors),
                    }
                })
                .collect();
            OpPanel {
                title: title(o),
                data: pts,
            }
        })
        .collect();
    PartitionFigure {
        phase,
        kinds: KINDS
            .iter()
            .zip(used)
            .filter(|(_, u)| *u)
            .map(|(k, _)| *k)
            .collect(),
        processors,
        marks: marks(plan, phase),
        panels,
    }
}

/// One candidate's predicted latency against length.
pub struct Curve {
    /// Stable name of the candidate (family, processors, variant).
    pub key: String,
    /// Its family.
    pub kind: StrategyKind,
    /// Its index among the curves of its family in the figure (line style).
    pub variant: usize,
    /// Runs of (length, one layer's worth of the operator in µs) over
    /// consecutive sampled lengths, lengths increasing; a run ends where the
    /// candidate does not exist (a row cut with a static processor only at
    /// its graph sizes), so no line is drawn across a gap.
    pub runs: Vec<Vec<(u32, f64)>>,
}

/// One operator's latency panel.
pub struct LatencyData {
    /// The plan's decision at every length drawn.
    pub chosen: Vec<(u32, f64, StrategyKind)>,
    /// Each candidate (re-evaluated); empty when the plan alone is drawn.
    pub curves: Vec<Curve>,
    /// The runner-up the plan stores (plan alone).
    pub runner_up: Vec<(u32, f64, StrategyKind)>,
}

/// Where the candidate curves come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CurveSource {
    /// Re-evaluated with the predictor and model the plan was solved with.
    Reevaluated,
    /// The plan alone: the chosen strategy and the stored runner-up.
    Stored,
}

/// The latency curves of one phase.
pub struct LatencyFigure {
    /// The phase.
    pub phase: Phase,
    /// Where the curves come from.
    pub source: CurveSource,
    /// Every candidate key drawn, with its family and variant, in legend order.
    pub keys: Vec<(String, StrategyKind, usize)>,
    /// Prepared graph sizes.
    pub marks: Vec<GraphMarks>,
    /// Panels.
    pub panels: Vec<OpPanel<LatencyData>>,
}

/// A stable name for a candidate, also its legend text: its family (as
/// `plan explain` names it), processors and, for one processor alone, how
/// it runs; the names of HeteroLLM Fig. 14 in brackets. Split sizes are
/// left out: they change with the length, the curve does not.
pub fn candidate_key(s: &Strategy) -> String {
    let kind = s.kind();
    let what = match s {
        Strategy::Single {
            processor,
            padded_to: Some(_),
            ..
        } => format!("{processor} static graph (padding)"),
        Strategy::Single {
            processor,
            online_prepare: true,
            ..
        } => format!("{processor} online prepare"),
        Strategy::Single { processor, .. } => format!("{processor} alone"),
        Strategy::Chunked { processor, .. } => format!("{processor} (chunked prefill)"),
        // The static processor's graphs alone, one after the other: HeteroLLM's "Pipe".
        Strategy::SeqCut { parts } if kind == StrategyKind::MultiSeq && parts.len() == 1 => {
            format!("{} (pipe)", parts[0].processor)
        }
        other => other.processors().join(" + "),
    };
    format!("{kind}: {what}")
}

/// Lengths at which to re-evaluate an operator: all of them when few,
/// else about `budget` spread evenly on a log axis, plus every graph size
/// and the length after it (where padding steps up), and both ends.
pub fn sample_lengths(o: &OpPlan, graph_sizes: &[u32], budget: usize) -> Vec<u32> {
    let lens: Vec<u32> = o.lengths().collect();
    if lens.len() <= budget {
        return lens;
    }
    let (lo, hi) = (lens[0] as f64, *lens.last().unwrap() as f64);
    let mut want: Vec<u32> = (0..budget)
        .map(|i| (lo * (hi / lo).powf(i as f64 / (budget - 1) as f64)).round() as u32)
        .collect();
    for g in graph_sizes {
        want.extend([g.saturating_sub(1), *g, g + 1]);
    }
    want.extend([lens[0], *lens.last().unwrap()]);
    want.sort_unstable();
    want.dedup();
    // Keep only lengths the plan holds; snap the others to the next one.
    let mut out: Vec<u32> = want
        .into_iter()
        .filter_map(|w| {
            let i = lens.partition_point(|l| *l < w);
            lens.get(i).copied()
        })
        .collect();
    out.dedup();
    out
}

/// Re-evaluates every candidate of `phase` with the predictor and model the
/// plan was solved with (the caller checks the fingerprints).
pub fn latency(
    plan: &Plan,
    phase: Phase,
    eval: Option<(&Predictor, &ModelSpec)>,
    budget: usize,
) -> anyhow::Result<LatencyFigure> {
    let marks = marks(plan, phase);
    let all_sizes: Vec<u32> = marks.iter().flat_map(|m| m.sizes.clone()).collect();
    let mut panels = Vec::new();
    let mut keys: BTreeMap<(usize, String), ()> = BTreeMap::new();
    for o in plan
        .ops
        .iter()
        .filter(|o| o.phase == phase && !o.ranges.is_empty())
    {
        let lens = match eval {
            Some(_) => sample_lengths(o, &all_sizes, budget),
            None => o.lengths().collect(),
        };
        let mut chosen = Vec::new();
        let mut runner_up = Vec::new();
        // Per key: family, runs, index of the last sampled length it had.
        type Runs = (StrategyKind, Vec<Vec<(u32, f64)>>, usize);
        let mut curves: BTreeMap<String, Runs> = BTreeMap::new();
        for (li, &len) in lens.iter().enumerate() {
            let d = o.at(len).expect("sampled lengths are in the plan");
            chosen.push((len, d.cost.total_us, d.strategy.kind()));
            if let Some(r) = &d.runner_up
                && r.total_us.is_finite()
            {
                runner_up.push((len, r.total_us, r.kind));
            }
            if let Some((predictor, model)) = eval {
                let e = hetero_solver::explain(predictor, model, plan, &o.op, phase, len)?;
                for c in e.candidates.iter().filter(|c| c.total_us.is_finite()) {
                    let key = candidate_key(&c.strategy);
                    let entry = curves
                        .entry(key)
                        .or_insert((c.kind, Vec::new(), usize::MAX));
                    let last = entry.1.last_mut().and_then(|r| r.last_mut());
                    match last {
                        // Two candidates with one key at one length: keep the cheaper.
                        Some(last) if last.0 == len => last.1 = last.1.min(c.total_us),
                        _ if entry.2.checked_add(1) == Some(li) => {
                            entry.1.last_mut().expect("a run").push((len, c.total_us))
                        }
                        _ => entry.1.push(vec![(len, c.total_us)]),
                    }
                    entry.2 = li;
                }
            }
        }
        for (key, (kind, _, _)) in &curves {
            keys.insert((kind_index(*kind), key.clone()), ());
        }
        panels.push(OpPanel {
            title: title(o),
            data: LatencyData {
                chosen,
                curves: curves
                    .into_iter()
                    .map(|(key, (kind, runs, _))| Curve {
                        key,
                        kind,
                        variant: 0,
                        runs,
                    })
                    .collect(),
                runner_up: if eval.is_some() { vec![] } else { runner_up },
            },
        });
    }
    // Variants: the n-th key of a family gets the n-th line style.
    let mut keys_out = Vec::new();
    let mut per_kind = [0usize; KINDS.len()];
    for (ki, key) in keys.into_keys() {
        keys_out.push((key, KINDS[ki], per_kind[ki]));
        per_kind[ki] += 1;
    }
    for p in &mut panels {
        for c in &mut p.data.curves {
            c.variant = keys_out.iter().find(|k| k.0 == c.key).map_or(0, |k| k.2);
        }
        // Legend order, not alphabetical.
        c_sort(&mut p.data.curves, &keys_out);
    }
    Ok(LatencyFigure {
        phase,
        source: if eval.is_some() {
            CurveSource::Reevaluated
        } else {
            CurveSource::Stored
        },
        keys: keys_out,
        marks,
        panels,
    })
}

fn c_sort(curves: &mut [Curve], keys: &[(String, StrategyKind, usize)]) {
    curves.sort_by_key(|c| keys.iter().position(|k| k.0 == c.key).unwrap_or(usize::MAX));
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetero_plan::{CostBreakdown, RowPart, SeqPart};

    fn dec(len: u32, strategy: Strategy) -> Decision {
        Decision {
            len,
            m: None,
            instances: 1,
            strategy,
            cost: CostBreakdown {
                parts_us: vec![1.0],
                sync_us: 0.0,
                sync_block_us: None,
                copy_us: 0.0,
                total_us: 1.0,
            },
            runner_up: None,
        }
    }

    #[test]
    fn shares_count_useful_work_not_padding() {
        let procs = vec!["npu".to_string(), "gpu".to_string()];
        let hybrid = dec(
            300,
            Strategy::Hybrid {
                padded_to: 512,
                parts: vec![
                    RowPart {
                        processor: "npu".into(),
                        rows: 768,
                        graph: Some(512),
                    },
                    RowPart {
                        processor: "gpu".into(),
                        rows: 256,
                        graph: None,
                    },
                ],
            },
        );
        assert_eq!(shares(&hybrid, 1024, &procs), vec![0.75, 0.25]);
        let seq = dec(
            300,
            Strategy::SeqCut {
                parts: vec![
                    SeqPart {
                        processor: "npu".into(),
                        tokens: 256,
                        graphs: vec![256],
                    },
                    SeqPart {
                        processor: "gpu".into(),
                        tokens: 44,
                        graphs: vec![],
                    },
                ],
            },
        );
        let s = shares(&seq, 1024, &procs);
        assert!((s[0] - 256.0 / 300.0).abs() < 1e-12 && (s[0] + s[1] - 1.0).abs() < 1e-12);
        let off = dec(
            10,
            Strategy::Offload {
                cpu: "npu".into(),
                gpu: "gpu".into(),
                cc_rows: 512,
                cg_rows: 256,
                gg_rows: 256,
                gpu_tokens: 5,
            },
        );
        // The CPU computes half the rows for half the tokens.
        assert_eq!(shares(&off, 1024, &procs), vec![0.25, 0.75]);
    }

    #[test]
    fn sampled_lengths_keep_the_padding_steps() {
        let o = OpPlan::from_dense(hetero_plan::DenseOpPlan {
            op: "x".into(),
            phase: Phase::Prefill,
            k: 8,
            n: 8,
            layers: 1,
            orders: vec![],
            decisions: (1..=1000)
                .map(|l| {
                    dec(
                        l,
                        Strategy::Single {
                            processor: "gpu".into(),
                            padded_to: None,
                            online_prepare: false,
                        },
                    )
                })
                .collect(),
        });
        let s = sample_lengths(&o, &[256, 512], 50);
        assert!(s.len() <= 60 && s.len() >= 40, "{}", s.len());
        for want in [1, 255, 256, 257, 511, 512, 513, 1000] {
            assert!(s.contains(&want), "{want} missing from {s:?}");
        }
        assert!(s.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(sample_lengths(&o, &[], 2000).len(), 1000);
    }
}
