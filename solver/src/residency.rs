//! Offload mode's placement: which weights stay resident on the GPU, per
//! operator and group of layers, for each way of running a model larger
//! than the GPU budget ([`OffloadStrategy`]), and the choice among them.
//!
//! Every strategy is judged by one decode step at the first decode length,
//! summed over operators and layers: the placement is static, and
//! generation dominates end-to-end time.

use std::collections::HashMap;

use hetero_plan::{LinearOp, Phase};

use crate::OffloadStrategy;
use crate::engine::{INF, LayerGroup, OpCtx, Setup, groups_of};
use crate::settings::fmt_bytes;

/// Resident rows per operator, in groups of layers.
pub(crate) type Groups = HashMap<String, Vec<LayerGroup>>;

/// A strategy's placement and its predicted decode step, µs.
pub(crate) struct Placement {
    pub strategy: OffloadStrategy,
    pub resident: Groups,
    pub step_us: f64,
}

/// The weight bytes of `rows` output rows of one layer of `op` on the GPU
/// (every instance).
pub(crate) fn layer_bytes(setup: &Setup, op: &LinearOp, rows: u32) -> f64 {
    let gpu = setup.offload.as_ref().expect("offload mode").gpu;
    rows as f64 * op.k as f64 * setup.procs[gpu].wbytes() * op.count as f64
}

/// The decoder's layers: the most layers any operator runs in.
pub(crate) fn model_layers(ops: &[&LinearOp]) -> u32 {
    ops.iter().map(|o| o.layers).max().unwrap_or(0)
}

/// The weights of one whole decoder layer on the GPU: every operator that
/// runs in each layer.
pub(crate) fn one_layer_bytes(setup: &Setup, ops: &[&LinearOp]) -> f64 {
    let layers = model_layers(ops);
    ops.iter()
        .filter(|o| o.layers == layers)
        .map(|o| layer_bytes(setup, o, o.n))
        .sum()
}

/// The placement of `strategy` under `budget` bytes, its layers costed
/// at decode `m` on `setup` (whose offload strategy is set to it).
pub(crate) fn place(setup: &Setup, ops: &[&LinearOp], budget: u64, m: u32) -> Placement {
    let strategy = setup.offload.as_ref().expect("offload mode").strategy;
    let mut costs = LayerCosts::new(setup, m);
    let resident = match strategy {
        OffloadStrategy::Cpu => Groups::new(),
        OffloadStrategy::LayerSplit => layer_split(setup, ops, budget),
        OffloadStrategy::GpuStream | OffloadStrategy::Sliced | OffloadStrategy::Best => {
            per_layer_greedy(&mut costs, ops, budget)
        }
    };
    let step_us = ops
        .iter()
        .map(|op| {
            groups_of(&resident, op)
                .iter()
                .map(|g| g.layers as f64 * costs.at(op, g.rows))
                .sum::<f64>()
        })
        .sum();
    Placement {
        strategy,
        resident,
        step_us,
    }
}

/// Chooses among `strategies` (each solved on a copy of `setup` with its
/// CPU as the strategy needs it): the one with the least decode step, and
/// a note comparing them.
pub(crate) fn best(
    setup: &Setup,
    ops: &[&LinearOp],
    budget: u64,
    m: u32,
    strategies: &[OffloadStrategy],
) -> (Placement, String) {
    let placements: Vec<Placement> = strategies
        .iter()
        .map(|&s| place(&with_strategy(setup, s), ops, budget, m))
        .collect();
    let words: Vec<String> = placements
        .iter()
        .map(|p| format!("{} {:.1} ms", p.strategy.name(), p.step_us / 1e3))
        .collect();
    let best = placements
        .into_iter()
        .min_by(|a, b| a.step_us.total_cmp(&b.step_us))
        .expect("at least one strategy");
    let note = format!(
        "offload strategy best: {} has the least predicted decode step ({})",
        best.strategy.name(),
        words.join(", ")
    );
    (best, note)
}

/// `setup` running `strategy`: `gpu-stream` leaves the CPU out.
pub(crate) fn with_strategy<'a>(setup: &Setup<'a>, strategy: OffloadStrategy) -> Setup<'a> {
    let mut s = setup.clone();
    let o = s.offload.as_mut().expect("offload mode");
    o.strategy = strategy;
    if strategy == OffloadStrategy::GpuStream {
        o.cpu = None;
    }
    s
}

/// One layer's best time of an operator at each resident row count, as
/// the setup's strategy allows it, memoised.
struct LayerCosts<'s, 'a> {
    setup: &'s Setup<'a>,
    m: u32,
    memo: HashMap<(String, u32), f64>,
}

impl<'s, 'a> LayerCosts<'s, 'a> {
    fn new(setup: &'s Setup<'a>, m: u32) -> Self {
        LayerCosts {
            setup,
            m,
            memo: HashMap::new(),
        }
    }

    /// One layer of `op` at decode `m` with `rows` resident, µs.
    fn at(&mut self, op: &LinearOp, rows: u32) -> f64 {
        let key = (op.name.clone(), rows);
        if let Some(&t) = self.memo.get(&key) {
            return t;
        }
        // A fresh context per level: its memoised slicing depends on it.
        let mut cx = OpCtx::new(self.setup, op, Phase::Decode, self.m);
        cx.resident = Some(rows);
        let t = cx.cell(self.m).cands.first().map_or(INF, |c| c.total);
        self.memo.insert(key, t);
        t
    }
}

/// The resident levels tried per operator: eighths of the rows, aligned.
fn levels(n: u32, align: u32) -> Vec<u32> {
    let mut v: Vec<u32> = (0..=8)
        .map(|i| {
            let r = (n as u64 * i / 8) as u32;
            if i == 8 { n } else { r / align * align }
        })
        .collect();
    v.dedup();
    v
}

/// ScheInfer's GPU memory assignment, per layer: start with nothing
/// resident; at each step raise the (operator, layers, level) that saves
/// the most decode time per byte, while the budget lasts. Layers of an
/// operator are alike, so a step raises as many of its layers at one
/// level as the budget holds, one layer's worth at a time. The layers kept
/// most resident come first; runs of layers at one level form a group.
fn per_layer_greedy(costs: &mut LayerCosts, ops: &[&LinearOp], budget: u64) -> Groups {
    struct OpLevels {
        levels: Vec<u32>,
        time: Vec<f64>,
        bytes: Vec<f64>,
        /// Layers at each level.
        count: Vec<u32>,
    }
    let setup = costs.setup;
    let mut table: Vec<OpLevels> = ops
        .iter()
        .map(|op| {
            let lv = levels(op.n, OpCtx::new(setup, op, Phase::Decode, costs.m).align());
            let mut count = vec![0; lv.len()];
            count[0] = op.layers;
            OpLevels {
                time: lv.iter().map(|&r| costs.at(op, r)).collect(),
                bytes: lv.iter().map(|&r| layer_bytes(setup, op, r)).collect(),
                levels: lv,
                count,
            }
        })
        .collect();
    let mut left = budget as f64;
    loop {
        let mut pick: Option<(f64, usize, usize, usize)> = None;
        for (i, t) in table.iter().enumerate() {
            for from in (0..t.levels.len()).filter(|&f| t.count[f] > 0) {
                for to in from + 1..t.levels.len() {
                    let db = t.bytes[to] - t.bytes[from];
                    let dt = t.time[from] - t.time[to];
                    if db <= left && dt > 0.0 {
                        let imp = dt / db.max(1.0);
                        if pick.is_none_or(|(b, ..)| imp > b) {
                            pick = Some((imp, i, from, to));
                        }
                    }
                }
            }
        }
        let Some((_, i, from, to)) = pick else { break };
        let t = &mut table[i];
        let db = (t.bytes[to] - t.bytes[from]).max(1.0);
        let moved = t.count[from].min((left / db).floor() as u32).max(1);
        t.count[from] -= moved;
        t.count[to] += moved;
        left -= moved as f64 * db;
    }
    ops.iter()
        .zip(table)
        .map(|(op, t)| {
            let mut groups = vec![];
            let mut first = 0;
            for j in (0..t.levels.len()).rev().filter(|&j| t.count[j] > 0) {
                groups.push(LayerGroup {
                    first,
                    layers: t.count[j],
                    rows: t.levels[j],
                });
                first += t.count[j];
            }
            (op.name.clone(), groups)
        })
        .collect()
}

/// llama.cpp's `-ngl N`: the first N whole decoder layers resident, N the
/// most that fit the budget; the rest resident nowhere. An operator outside
/// the decoder's layers (the lm_head) is resident when every decoder layer
/// is and it fits what is left.
fn layer_split(setup: &Setup, ops: &[&LinearOp], budget: u64) -> Groups {
    let layers = model_layers(ops);
    let per_layer = one_layer_bytes(setup, ops);
    let n_gpu = if per_layer > 0.0 {
        ((budget as f64 / per_layer).floor() as u32).min(layers)
    } else {
        layers
    };
    let mut left = budget as f64 - n_gpu as f64 * per_layer;
    let mut out = Groups::new();
    for op in ops {
        let groups = if op.layers == layers {
            [(0, n_gpu, op.n), (n_gpu, layers - n_gpu, 0)]
                .into_iter()
                .filter(|g| g.1 > 0)
                .map(|(first, layers, rows)| LayerGroup {
                    first,
                    layers,
                    rows,
                })
                .collect()
        } else {
            let all = layer_bytes(setup, op, op.n) * op.layers as f64;
            let rows = if n_gpu == layers && all <= left {
                left -= all;
                op.n
            } else {
                0
            };
            vec![LayerGroup {
                first: 0,
                layers: op.layers,
                rows,
            }]
        };
        out.insert(op.name.clone(), groups);
    }
    out
}

/// The bytes resident under `resident`, over every layer.
pub(crate) fn resident_bytes(setup: &Setup, ops: &[&LinearOp], resident: &Groups) -> f64 {
    ops.iter()
        .map(|op| {
            groups_of(resident, op)
                .iter()
                .map(|g| layer_bytes(setup, op, g.rows) * g.layers as f64)
                .sum::<f64>()
        })
        .sum()
}

/// A note on a strategy's placement: its layer groups in words.
pub(crate) fn describe(setup: &Setup, ops: &[&LinearOp], p: &Placement) -> String {
    let bytes = resident_bytes(setup, ops, &p.resident);
    format!(
        "offload strategy {}: {} resident, predicted decode step {:.1} ms",
        p.strategy.name(),
        fmt_bytes(bytes as u64),
        p.step_us / 1e3
    )
}
