//! One operator in one phase: its tables, the state of every static-graph
//! processor, the contention and sync rules that assemble a candidate, and
//! the cell of candidates at one length.

use hetero_plan::{LinearOp, OperandOrder, Phase, ProcessorKind};

use super::cand::FamilyKey;
use super::proc::CORE_SHARE;
use super::{Cand, INF, Setup, Shape, Small, Tables, Times, last_token_only, predict, table_top};

/// The row shares prepared at each size, sorted by size: `(size, rows,
/// the static part's time at that share)`. A size has at most three: the
/// share best at the size itself, and up to two for the shorter lengths it
/// serves, where the other processors take far fewer tokens.
#[derive(Debug, Clone, Default)]
pub(crate) struct RowShares(pub Vec<(u32, u32, f64)>);

impl RowShares {
    /// The shares prepared at `size`: `(rows, the static part's time)`.
    pub fn at(&self, size: u32) -> impl Iterator<Item = (u32, f64)> + '_ {
        let i = self.0.partition_point(|x| x.0 < size);
        self.0[i..]
            .iter()
            .take_while(move |x| x.0 == size)
            .map(|x| (x.1, x.2))
    }
}

/// Per-static-processor state of one operator.
pub(crate) struct StaticCtx {
    pub p: usize,
    /// Prepared sizes (M), increasing.
    pub sizes: Vec<u32>,
    /// `exact[t]`: least time to run exactly `t` tokens as prepared graphs
    /// one after the other (INF when no combination adds up to `t`).
    pub exact: Vec<f64>,
    /// The last graph of that combination.
    pub back: Vec<u32>,
    /// The number of graphs in that combination.
    pub runs: Vec<u32>,
    /// `pipe[m]`: the cheapest pipe of M = m, `(time, t, g)`: the
    /// cheapest combination of `t` < m tokens, then one graph `g` > m - t
    /// padded ([`pipes`](super::static_graphs::pipes)).
    pub pipe: Vec<(f64, u32, u32)>,
    /// `copy[t]`: the copies of that combination, each graph's rows in and
    /// outputs back ([`OpCtx::run_copy_us`]).
    pub copy: Vec<f64>,
    /// Values of `t` with a finite `exact[t]`, increasing.
    pub reach: Vec<u32>,
    /// The row share prepared at each size (when a row cut can use it) and
    /// the static part's time at that share.
    pub row_share: RowShares,
}

impl StaticCtx {
    pub fn smallest_ge(&self, m: u32) -> Option<u32> {
        let i = self.sizes.partition_point(|&g| g < m);
        self.sizes.get(i).copied()
    }

    pub fn has(&self, m: u32) -> bool {
        self.sizes.binary_search(&m).is_ok()
    }

    pub fn graphs_for(&self, mut t: u32) -> Vec<u32> {
        let mut v = vec![];
        while t > 0 {
            let g = self.back[t as usize];
            v.push(g);
            t -= g;
        }
        v.sort_unstable_by(|a, b| b.cmp(a));
        v
    }
}

/// What a second row share at a size must save of the time of the lengths
/// below the size, against a share chosen for each length.
pub(crate) const SHORT_SHARE_GAIN: f64 = 0.05;

/// The static processor `p`'s rows in a row cut.
fn static_rows(c: &Cand, p: usize) -> Option<u32> {
    match &c.shape {
        Shape::Rows { parts, .. } => parts.iter().find(|x| x.0 == p).map(|x| x.1),
        _ => None,
    }
}

/// How a part of a split is slowed by the others ([`OpCtx::contention`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Contention {
    /// Not at all.
    None,
    /// Time-sharing host cores: it keeps this share of its speed.
    Cores(f64),
    /// Sharing memory bandwidth: it keeps this share of its bandwidth.
    Bandwidth(f64),
}

impl Contention {
    /// A part's time `t` slowed by it (see [`OpCtx::contended`]): never
    /// less than `t`, and growing with `t`.
    pub fn apply(self, t: f64, stream: impl FnOnce() -> f64) -> f64 {
        match self {
            Contention::None => t,
            Contention::Cores(f) => t / f,
            Contention::Bandwidth(f) => t.max(stream() / f),
        }
    }
}

/// One operator in one phase: prediction tables and candidate generation.
pub(crate) struct OpCtx<'s, 'a> {
    pub setup: &'s Setup<'a>,
    pub op: &'s LinearOp,
    pub phase: Phase,
    pub k: u32,
    pub n: u32,
    pub tables: std::sync::Arc<Tables>,
    pub statics: Vec<StaticCtx>,
    /// Offload mode: rows resident on the GPU in the layers solved (one
    /// group of the operator's layers).
    pub resident: Option<u32>,
    /// Offload mode: the CC rows of the one-token decode slicing.
    pub decode_cc: std::sync::OnceLock<Option<u32>>,
    /// Skip candidates that can be neither winner nor runner-up (off when
    /// explaining, which lists every family).
    pub prune: bool,
}

/// The candidates of one cell.
pub(crate) struct Cell {
    pub m: u32,
    pub instances: u32,
    /// Best candidate per family, cheapest first.
    pub cands: Vec<Cand>,
}

impl<'s, 'a> OpCtx<'s, 'a> {
    /// Builds the tables up to M = `max_m` (and every graph size).
    pub fn new(setup: &'s Setup<'a>, op: &'s LinearOp, phase: Phase, max_m: u32) -> Self {
        let top = table_top(setup, phase, max_m);
        let t = Tables::new(setup, op, phase, top, max_m, None, None);
        Self::with_tables(setup, op, phase, std::sync::Arc::new(t))
    }

    /// Builds the context on tables made earlier.
    pub fn with_tables(
        setup: &'s Setup<'a>,
        op: &'s LinearOp,
        phase: Phase,
        tables: std::sync::Arc<Tables>,
    ) -> Self {
        let mut cx = OpCtx {
            setup,
            op,
            phase,
            k: op.k,
            n: op.n,
            tables,
            statics: vec![],
            resident: setup.offload.as_ref().map(|o| o.first_rows(&op.name)),
            prune: true,
            decode_cc: std::sync::OnceLock::new(),
        };
        if setup.offload.is_none() {
            for g in &setup.graphs {
                let sizes = if last_token_only(op, phase) {
                    vec![1]
                } else {
                    g.sizes(phase).to_vec()
                };
                let top = cx
                    .tables
                    .full
                    .first()
                    .map_or(1, |v| v.len() - 1)
                    .max(sizes.last().copied().unwrap_or(0) as usize);
                let st = cx.static_ctx(g.p, sizes, top);
                cx.statics.push(st);
            }
        }
        cx
    }

    /// The operand order of processor `p`.
    pub fn order(&self, p: usize) -> OperandOrder {
        self.tables.orders[p]
    }

    /// Time of the whole operator at M = m on `p` (from the table when it
    /// covers `m`), with the weights' write of a weights-as-inputs graph.
    pub fn full(&self, p: usize, m: u32) -> f64 {
        let t = match self.tables.full[p].get(m as usize) {
            Some(t) if !t.is_nan() => *t,
            _ => predict(&self.setup.procs[p], m, self.k, self.n, self.order(p)),
        };
        t + self.weights_in_us(p, self.n)
    }

    /// A graph run's write of `rows` rows of weights on `p`
    /// ([`Proc::weights_in_us`](super::Proc::weights_in_us)): only on a
    /// static-graph processor whose graphs take the weights as an input.
    pub fn weights_in_us(&self, p: usize, rows: u32) -> f64 {
        let sp = &self.setup.procs[p];
        if sp.static_graphs {
            sp.weights_in_us(self.k, rows)
        } else {
            0.0
        }
    }

    fn static_ctx(&self, p: usize, sizes: Vec<u32>, top: usize) -> StaticCtx {
        let mut exact = vec![INF; top + 1];
        let mut back = vec![0u32; top + 1];
        let mut copy = vec![0.0; top + 1];
        let mut runs = vec![0u32; top + 1];
        exact[0] = 0.0;
        // Larger graphs first: on ties, fewer graphs.
        let graph_us: Vec<(usize, u32, f64, f64)> = sizes
            .iter()
            .rev()
            .map(|&g| (g as usize, g, self.full(p, g), self.run_copy_us(p, g)))
            .collect();
        for t in 1..=top {
            for &(gu, g, tg, cg) in &graph_us {
                if gu <= t && exact[t - gu].is_finite() {
                    let c = exact[t - gu] + tg;
                    if c < exact[t] {
                        exact[t] = c;
                        back[t] = g;
                        copy[t] = copy[t - gu] + cg;
                        runs[t] = runs[t - gu] + 1;
                    }
                }
            }
        }
        let reach = (1..=top as u32)
            .filter(|&t| exact[t as usize].is_finite())
            .collect();
        let graphs: Vec<(u32, f64)> = graph_us.iter().map(|x| (x.1, x.2)).collect();
        let pipe = super::static_graphs::pipes(&exact, &graphs);
        let mut st = StaticCtx {
            p,
            sizes: sizes.clone(),
            exact,
            back,
            runs,
            copy,
            pipe,
            reach,
            row_share: RowShares::default(),
        };
        for (i, &g) in sizes.iter().enumerate() {
            let lo = if i == 0 { 1 } else { sizes[i - 1] + 1 };
            for &(rows, t) in self.row_shares_at(p, g, lo).iter() {
                st.row_share.0.push((g, rows, t));
            }
        }
        st
    }

    /// The row-share graphs worth preparing at size `g`, which serves
    /// lengths `lo..=g`: the share of the best row cut at `g`, where it
    /// beats `p` alone there; and up to two shares for the shorter lengths
    /// ([`short_shares`](Self::short_shares)). One share for every length
    /// leaves short prompts far off it: the other processors' part shrinks
    /// with the tokens, the padded graph's does not.
    fn row_shares_at(&self, p: usize, g: u32, lo: u32) -> Small<(u32, f64), 3> {
        let mut out: Small<(u32, f64), 3> = Small::new();
        if let Some(c) = self.best_free_rows(p, g)
            && c.total < self.full(p, g)
            && let Some(rows) = static_rows(&c, p)
        {
            out.push((rows, self.time(p, g, rows)));
        }
        if lo < g {
            self.short_shares(p, g, lo, &mut out);
        }
        out
    }

    /// Adds to `shares` the shares of size `g` for the lengths `lo..g`
    /// below it, one at a time: of the shares best at up to eight lengths
    /// spread evenly over them, the one whose hybrids, beside `p` alone
    /// and the shares already kept, save the most time over those lengths
    /// (they weigh alike, as in the default prompt distribution). A share
    /// is kept only where it saves [`SHORT_SHARE_GAIN`] of the time a share
    /// chosen for each length would take: below it, the graphs it adds are
    /// not worth preparing.
    fn short_shares(&self, p: usize, g: u32, lo: u32, shares: &mut Small<(u32, f64), 3>) {
        let mut points: Vec<u32> = (0..8).map(|i| lo + (g - 1 - lo) * i / 7).collect();
        points.dedup();
        // Per length: the best hybrid's time and share, and the best time
        // the size offers with the shares kept.
        let mut per: Vec<(u32, f64, u32, f64)> = points
            .iter()
            .filter_map(|&m| {
                let c = (self.splittable_dynamic())
                    .filter_map(|d| self.row2(m, p, d, self.n, &[], Some(g)))
                    .min_by(|a, b| a.total.total_cmp(&b.total))?;
                let have = (shares.iter())
                    .map(|&s| self.hybrid_us(m, p, g, s))
                    .fold(self.full(p, g) + self.run_copy_us(p, m), f64::min);
                Some((m, c.total, static_rows(&c, p)?, have))
            })
            .collect();
        let free: f64 = per.iter().map(|x| x.1).sum();
        while shares.len() < 3 {
            let saved = |s: (u32, f64)| -> f64 {
                (per.iter())
                    .map(|&(m, .., have)| (have - self.hybrid_us(m, p, g, s)).max(0.0))
                    .sum()
            };
            let Some((share, gain)) = (per.iter())
                .map(|x| x.2)
                .filter(|&r| shares.iter().all(|s| s.0 != r))
                .map(|r| {
                    let share = (r, self.time(p, g, r));
                    (share, saved(share))
                })
                .max_by(|a, b| a.1.total_cmp(&b.1))
            else {
                return;
            };
            if gain < SHORT_SHARE_GAIN * free {
                return;
            }
            shares.push(share);
            for x in &mut per {
                x.3 = x.3.min(self.hybrid_us(x.0, p, g, share));
            }
        }
    }

    /// The cheapest hybrid at M = `m` with `p`'s share `(rows, time)` of
    /// the graph of size `g`, the rest on one dynamic processor.
    pub fn hybrid_us(&self, m: u32, p: usize, g: u32, (r, t_r): (u32, f64)) -> f64 {
        let rest = self.n - r;
        (self.splittable_dynamic())
            .map(|d| {
                let t_d = self.time(d, m, rest);
                self.rows_cand_t(m, &[(p, r), (d, rest)], &[t_r, t_d], Some(g))
                    .total
            })
            .fold(INF, f64::min)
    }

    /// How `p` is slowed while it runs a part of a split beside the
    /// processors in `with`. Two processors on the same host cores (a
    /// cpu-backend group and an OpenCL CPU device such as PoCL, which takes
    /// every core) time-share them: at most [`CORE_SHARE`] of its speed
    /// each. Otherwise the parts share memory bandwidth: `p` keeps its
    /// measured concurrent factor of its bandwidth alone. A discrete GPU's
    /// resident weights are in memory of its own, which no other processor
    /// reads: not slowed. Its measured factor is about its weight copies
    /// from host memory (`bandwidth_concurrent`), which offload's CG rows
    /// make ([`crate::offload::concurrent_cpu_and_copies`]).
    pub fn contention(&self, p: usize, with: impl IntoIterator<Item = usize>) -> Contention {
        let procs = &self.setup.procs;
        let cpu = |q: usize| procs[q].kind == ProcessorKind::Cpu;
        let mut others: Small<usize, 8> = Small::new();
        for q in with.into_iter().filter(|&q| q != p) {
            others.push(q);
        }
        let shares_cores = cpu(p)
            && others
                .iter()
                .any(|&q| cpu(q) && (procs[p].on_all_host_cores || procs[q].on_all_host_cores));
        // Weights in memory apart: a discrete GPU's, or all the others'.
        // Beside discrete GPUs whose weights are resident, a processor on
        // host memory shares no bandwidth: its measured factor is about
        // those GPUs copying from host memory (`bandwidth_concurrent`),
        // which only offload's CG rows do.
        let apart = procs[p].discrete_gpu()
            || (procs[p].host_memory() && others.iter().all(|&q| procs[q].discrete_gpu()));
        if shares_cores {
            Contention::Cores(procs[p].concurrent.min(CORE_SHARE))
        } else if apart || procs[p].concurrent >= 1.0 {
            Contention::None
        } else {
            Contention::Bandwidth(procs[p].concurrent)
        }
    }

    /// A part's time `t` beside the processors in `with`, by its
    /// [`contention`](Self::contention): on shared cores, slowed by the
    /// factor; on shared memory, no faster than streaming what it streams
    /// alone (`stream`: the time of its weights' rows at M = 1, once per
    /// graph run) at its concurrent share of the bandwidth. So a part bound
    /// by bandwidth (a decode step, a one-row lm_head in prefill) is slowed
    /// by the whole factor, whatever the phase, and a compute-bound one
    /// (long prompts) by nothing.
    pub fn contended(
        &self,
        p: usize,
        with: impl IntoIterator<Item = usize>,
        t: f64,
        stream: impl FnOnce() -> f64,
    ) -> f64 {
        self.contention(p, with).apply(t, stream)
    }

    /// The streaming floor of a part of `rows` output rows on `p`: its time
    /// at M = 1 (see [`contended`](Self::contended)).
    pub fn stream_us(&self, p: usize, rows: u32) -> f64 {
        self.time(p, 1, rows)
    }

    /// Time of M = m over `rows` output rows on processor `p`, µs.
    pub fn time(&self, p: usize, m: u32, rows: u32) -> f64 {
        if rows == self.n {
            return self.full(p, m);
        }
        predict(&self.setup.procs[p], m, self.k, rows, self.order(p)) + self.weights_in_us(p, rows)
    }

    pub fn dynamic(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.setup.procs.len()).filter(|&p| !self.setup.procs[p].static_graphs)
    }

    /// The dynamic processors that can take part in a split.
    pub fn splittable_dynamic(&self) -> impl Iterator<Item = usize> + '_ {
        self.dynamic().filter(|&d| self.setup.procs[d].can_split)
    }

    /// Row alignment for this operator (halved until two parts fit).
    pub fn align(&self) -> u32 {
        let mut a = self.setup.row_align.max(1);
        while a > 1 && self.n < 2 * a {
            a /= 2;
        }
        a
    }

    /// Assembles a candidate from its parts (processor, its time alone, its
    /// streaming floor): `max(parts) + sync + copy`, with each part of a
    /// split [`contended`](Self::contended).
    pub fn finish(&self, shape: Shape, raw: &[(usize, f64, f64)], copy: f64) -> Cand {
        let procs = &self.setup.procs;
        let split = raw.len() > 1;
        let mut parts = Times::new();
        for &(p, t, stream) in raw {
            parts.push(if split {
                self.contended(p, raw.iter().map(|&(q, ..)| q), t, || stream)
            } else {
                t
            });
        }
        let ((sync, sync_block), rule) = if split {
            let dom = (0..parts.len())
                .max_by(|&a, &b| parts[a].total_cmp(&parts[b]))
                .unwrap();
            let dp = &procs[raw[dom].0];
            let submits: f64 = raw
                .iter()
                .enumerate()
                .filter(|&(i, &(p, ..))| i != dom && procs[p].queue)
                .map(|(_, &(p, ..))| procs[p].submit_us)
                .sum();
            let rule = if submits > 0.0 {
                "sync on the dominant side + resubmission of the queued side"
            } else if dp.queue {
                "queue-dominant: sync on it, no resubmission"
            } else {
                "sync on the dominant side"
            };
            ((dp.sync_us + submits, dp.sync_block_us + submits), rule)
        } else {
            ((0.0, 0.0), "")
        };
        let max = parts.iter().cloned().fold(0.0, f64::max);
        Cand {
            shape,
            total: max + sync + copy,
            parts,
            sync,
            sync_block,
            copy,
            sync_rule: rule,
        }
    }

    /// Every candidate family at one length, best of each family first.
    pub fn cell(&self, len: u32) -> Cell {
        let (m, instances) = self.rows(len);
        self.cell_at(m, instances)
    }

    /// Rows per instance and instances at a length.
    pub fn rows(&self, len: u32) -> (u32, u32) {
        let (shape, instances) = self
            .op
            .gemms(self.phase, len)
            .expect("operator dimensions are positive");
        (shape.m.get(), instances)
    }

    /// The cell of `instances` GEMMs of M = `m` (lengths with the same rows
    /// share it: the lm_head in prefill, routed experts).
    pub fn cell_at(&self, m: u32, instances: u32) -> Cell {
        let mut cands = if self.setup.offload.is_some() {
            self.offload_cands(m)
        } else {
            self.cands(m)
        };
        cands.retain(|c| c.total.is_finite());
        let mut best: Vec<(FamilyKey, Cand)> = Vec::with_capacity(cands.len());
        for c in cands {
            let key = c.family(m);
            match best.iter_mut().find(|(k, _)| *k == key) {
                Some((_, b)) if b.total <= c.total => {}
                Some((_, b)) => *b = c,
                None => best.push((key, c)),
            }
        }
        let mut cands: Vec<Cand> = best
            .into_iter()
            .map(|(_, c)| c.scale(instances as f64))
            .collect();
        // Ties are broken by family, so the order never depends on hashing.
        let key = |c: &Cand| {
            let (kind, procs, variant) = c.family(m);
            (kind as u8, procs, variant)
        };
        cands.sort_by(|a, b| {
            a.total
                .total_cmp(&b.total)
                .then_with(|| key(a).cmp(&key(b)))
        });
        Cell {
            m,
            instances,
            cands,
        }
    }

    /// Every candidate outside offload mode: the dynamic processors' ones,
    /// then each static-graph processor alone and beside them, then online
    /// prepare (the order matters: pruning compares against the families
    /// already found).
    fn cands(&self, m: u32) -> Vec<Cand> {
        let mut out = self.dyn_cands(m);
        for st in &self.statics {
            self.static_alone(st, m, &mut out);
            if self.setup.procs[st.p].can_split {
                self.static_splits(st, m, &mut out);
            }
        }
        for st in &self.statics {
            self.online_prepare(st, m, &mut out);
        }
        out
    }
}
