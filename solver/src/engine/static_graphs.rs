//! Candidates on a static-graph processor (an NPU): padded to a prepared
//! size, chunked, a multi-graph sequence, online prepare, and its splits
//! with dynamic processors (sequence cut, row cut at a prepared size,
//! hybrid).

use super::cand::second_family_best;
use super::{Cand, INF, OpCtx, Shape, StaticCtx};

impl OpCtx<'_, '_> {
    /// The cheapest use of one prepared size `c` at M = `m` (padding,
    /// one-graph sequence cut, chunks, hybrid), as the graph-set choice
    /// estimates it. INF when `c` cannot serve `m`.
    pub fn static_term(&self, st: &StaticCtx, c: u32, m: u32, hybrid: bool) -> f64 {
        let s = st.p;
        let t_c = self.full(s, c);
        let mut best = INF;
        if c >= m {
            best = best.min(t_c + self.run_copy_us(s, m));
            if hybrid && self.setup.procs[s].can_split {
                for share in st.row_share.at(c) {
                    best = best.min(self.hybrid_us(m, s, c, share));
                }
            }
        } else {
            best = best.min(m.div_ceil(c) as f64 * t_c + self.chunks_copy_us(s, m, c));
            if self.setup.procs[s].can_split {
                let rest = m - c;
                let copy_s = self.run_copy_us(s, c);
                for d in self.splittable_dynamic() {
                    let copy = copy_s + self.part_copy_us(d, rest, self.n);
                    let cand = self.finish(
                        Shape::Chunked {
                            s,
                            chunk: c,
                            chunks: 1,
                        },
                        &[
                            (s, t_c, self.stream_us(s, self.n)),
                            (d, self.time(d, rest, self.n), self.stream_us(d, self.n)),
                        ],
                        copy,
                    );
                    best = best.min(cand.total);
                }
            }
        }
        best
    }

    /// The static side's time for `graphs` run one after the other: one
    /// graph's own time, else the cheapest combination of their sum (which
    /// they are).
    pub(super) fn graphs_us(&self, st: &StaticCtx, graphs: &[u32]) -> f64 {
        match graphs {
            [g] => self.full(st.p, *g),
            _ => st.exact[graphs.iter().sum::<u32>() as usize],
        }
    }

    /// The streaming floor of `runs` graph runs of the whole operator on
    /// `s` (see [`OpCtx::contended`]): each streams the weights again.
    pub(super) fn graphs_stream_us(&self, s: usize, runs: usize) -> f64 {
        runs as f64 * self.stream_us(s, self.n)
    }

    /// The copies of `graphs` run one after the other, each full (see
    /// [`graphs_us`](Self::graphs_us)).
    pub(super) fn graphs_copy_us(&self, st: &StaticCtx, graphs: &[u32]) -> f64 {
        match graphs {
            [g] => self.run_copy_us(st.p, *g),
            _ => st.copy[graphs.iter().sum::<u32>() as usize],
        }
    }

    /// One graph run of `rows` token rows on `p`: the runtime keeps
    /// activations in host memory, so it copies those rows in and their
    /// outputs back, alone or beside another processor
    /// ([`Proc::alone_copy_us`]: nothing where no copy cost was measured).
    /// A padded run copies only the rows it has.
    pub(crate) fn run_copy_us(&self, p: usize, rows: u32) -> f64 {
        let r = rows as f64;
        self.setup.procs[p].alone_copy_us(r * self.k as f64, r * self.n as f64, self.order(p))
    }

    /// The copies of `m` rows in chunks of `c`: every chunk full but the
    /// last.
    pub(super) fn chunks_copy_us(&self, p: usize, m: u32, c: u32) -> f64 {
        let full = m.div_ceil(c) - 1;
        full as f64 * self.run_copy_us(p, c) + self.run_copy_us(p, m - full * c)
    }

    /// The static processor alone: padded to the smallest prepared size at
    /// or above M, in chunks of each smaller size, and on an exact
    /// combination of several prepared sizes (multi-graph sequence).
    pub(super) fn static_alone(&self, st: &StaticCtx, m: u32, out: &mut Vec<Cand>) {
        let s = st.p;
        if let Some(g) = st.smallest_ge(m) {
            out.push(self.finish(
                Shape::Single {
                    p: s,
                    padded_to: Some(g),
                    online: false,
                },
                &[(s, self.full(s, g), 0.0)],
                self.run_copy_us(s, m),
            ));
        }
        for &c in st.sizes.iter().filter(|&&c| c < m) {
            let chunks = m.div_ceil(c);
            out.push(self.finish(
                Shape::Chunked {
                    s,
                    chunk: c,
                    chunks,
                },
                &[(s, chunks as f64 * self.full(s, c), 0.0)],
                self.chunks_copy_us(s, m, c),
            ));
        }
        self.pipe(st, m, out);
        if (m as usize) < st.exact.len() && st.exact[m as usize].is_finite() {
            let graphs = st.graphs_for(m);
            if graphs.len() > 1 {
                out.push(self.finish(
                    Shape::Seq {
                        s,
                        graphs,
                        d: None,
                        rest: 0,
                    },
                    &[(s, st.exact[m as usize], 0.0)],
                    st.copy[m as usize],
                ));
            }
        }
    }

    /// The static processor beside dynamic ones: a sequence cut with each,
    /// and, where M is a prepared size, a row cut free to take any share;
    /// else a hybrid cut padded to the prepared row-share graph.
    pub(super) fn static_splits(&self, st: &StaticCtx, m: u32, out: &mut Vec<Cand>) {
        let s = st.p;
        let dy_split: Vec<usize> = self.splittable_dynamic().collect();
        for &d in &dy_split {
            self.seq_cuts(st, d, m, out);
        }
        if st.has(m) {
            let limit = if self.prune {
                second_family_best(out, m)
            } else {
                INF
            };
            out.extend(self.free_rows_with(s, m, limit));
        } else if let Some(g) = st.smallest_ge(m) {
            // Each share prepared at the size: the hybrid takes the one
            // cheapest at this length.
            for share in st.row_share.at(g) {
                self.hybrid(m, s, g, share, &dy_split, out);
            }
        }
    }

    /// Hybrid: the prepared row-share graph of size `g` (`r` rows taking
    /// `t_r`) padded, the rest of the rows on one or two dynamic processors.
    fn hybrid(
        &self,
        m: u32,
        s: usize,
        g: u32,
        (r, t_r): (u32, f64),
        dy_split: &[usize],
        out: &mut Vec<Cand>,
    ) {
        let rest = self.n - r;
        for &d in dy_split {
            let t_d = self.time(d, m, rest);
            out.push(self.rows_cand_t(m, &[(s, r), (d, rest)], &[t_r, t_d], Some(g)));
        }
        for (i, &d1) in dy_split.iter().enumerate() {
            for &d2 in &dy_split[i + 1..] {
                out.extend(self.row2(m, d1, d2, rest, &[(s, r)], Some(g)));
            }
        }
    }

    /// HeteroLLM's multi-sequence pipe: prepared graphs back to back, the
    /// last padded (85 tokens as 64 + 32). Where the cheapest pipe is one
    /// graph size over and over, it is the chunked candidate, already
    /// costed.
    pub(super) fn pipe(&self, st: &StaticCtx, m: u32, out: &mut Vec<Cand>) {
        let Some(&(us, t, g)) = st.pipe.get(m as usize) else {
            return;
        };
        if !us.is_finite() {
            return;
        }
        let mut graphs = st.graphs_for(t);
        graphs.push(g);
        if graphs.iter().all(|&x| x == g) {
            return;
        }
        let s = st.p;
        let copy = st.copy[t as usize] + self.run_copy_us(s, m - t);
        out.push(self.finish(
            Shape::Seq {
                s,
                graphs,
                d: None,
                rest: 0,
            },
            &[(s, us, 0.0)],
            copy,
        ));
    }

    /// Online prepare of the exact shape, where M is no prepared size. Its
    /// prepare share is a lower bound, and when two other families already
    /// beat it, it can be neither the winner nor the runner-up, so its GEMM
    /// need not be predicted: it comes after every other candidate.
    pub(super) fn online_prepare(&self, st: &StaticCtx, m: u32, out: &mut Vec<Cand>) {
        let s = st.p;
        let sp = &self.setup.procs[s];
        if st.has(m) {
            return;
        }
        if sp.prepare.is_none() {
            return;
        }
        // Every graph this size needs, shared over the layers' runs.
        let share = sp.op_graphs(self.op, m, self.n).0 / self.op.layers.max(1) as f64;
        if self.prune && share >= second_family_best(out, m) {
            return;
        }
        let t = self.full(s, m) + share;
        out.push(self.finish(
            Shape::Single {
                p: s,
                padded_to: None,
                online: true,
            },
            &[(s, t, 0.0)],
            self.run_copy_us(s, m),
        ));
    }

    /// Sequence cuts: prepared graphs on `st` adding up to `t`, the other
    /// `m - t` tokens on `d`. One graph and several graphs are kinds of
    /// their own, so each gets its best: one graph at any prepared size
    /// below `m`, several at any `t` below `m` whose cheapest combination
    /// has more than one graph.
    fn seq_cuts(&self, st: &StaticCtx, d: usize, m: u32, out: &mut Vec<Cand>) {
        let s = st.p;
        let sizes = &st.sizes[..st.sizes.partition_point(|&g| g < m)];
        let one = (sizes.iter().rev()).map(|&g| SeqSide {
            t: g,
            stream: self.graphs_stream_us(s, 1),
            us: self.full(s, g),
            copy: self.run_copy_us(s, g),
        });
        out.extend(self.best_seq_cut(st, d, m, one, |g| vec![g]));
        let reach = &st.reach[..st.reach.partition_point(|&t| t < m)];
        let several = (reach.iter().rev())
            .filter(|&&t| st.back[t as usize] != t)
            .map(|&t| SeqSide {
                t,
                stream: self.graphs_stream_us(s, st.runs[t as usize] as usize),
                us: st.exact[t as usize],
                copy: st.copy[t as usize],
            });
        out.extend(self.best_seq_cut(st, d, m, several, |t| st.graphs_for(t)));
    }

    /// The cheapest sequence cut over `sides` (tokens decreasing). Stops
    /// once the dynamic side alone costs more than the best found: it only
    /// grows as the static side shrinks (its streaming floor is its whole
    /// N's, the same at every length).
    fn best_seq_cut(
        &self,
        st: &StaticCtx,
        d: usize,
        m: u32,
        sides: impl Iterator<Item = SeqSide>,
        graphs: impl Fn(u32) -> Vec<u32>,
    ) -> Option<Cand> {
        let s = st.p;
        let procs = &self.setup.procs;
        let (sp, dp) = (&procs[s], &procs[d]);
        // The same total as `finish` for two parts, without allocating.
        let stream_d = self.stream_us(d, self.n);
        let (cs, cd) = (self.contention(s, [s, d]), self.contention(d, [s, d]));
        let total = |side: &SeqSide, td: f64, copy: f64| {
            let ts = cs.apply(side.us, || side.stream);
            let (dom, other) = if ts > td { (sp, dp) } else { (dp, sp) };
            let submit = if other.queue { other.submit_us } else { 0.0 };
            ts.max(td) + dom.sync_us + submit + copy
        };
        let mut best: Option<(f64, SeqSide)> = None;
        for side in sides {
            let rest = m - side.t;
            let td = cd.apply(self.time(d, rest, self.n), || stream_d);
            if best.as_ref().is_some_and(|(b, _)| td >= *b) {
                break;
            }
            let copy = side.copy + self.part_copy_us(d, rest, self.n);
            let c = total(&side, td, copy);
            if best.as_ref().is_none_or(|(b, _)| c < *b) {
                best = Some((c, side));
            }
        }
        let (_, side) = best?;
        let rest = m - side.t;
        Some(self.finish(
            Shape::Seq {
                s,
                graphs: graphs(side.t),
                d: Some(d),
                rest,
            },
            &[
                (s, side.us, side.stream),
                (d, self.time(d, rest, self.n), stream_d),
            ],
            side.copy + self.part_copy_us(d, rest, self.n),
        ))
    }
}

/// The cheapest pipe at every M up to `exact.len() - 1`: `exact` as in
/// [`StaticCtx::exact`], `graphs` each prepared size and its time. A pipe
/// of M = m runs a combination of `t` tokens (at least one graph) and then
/// one graph `g` with `t + g > m`, padded: the least `exact[t]` over the
/// window `m - g < t < m`, kept per `g` by a monotone queue, so the table
/// costs one pass per size. `(INF, 0, 0)` where there is none.
pub(crate) fn pipes(exact: &[f64], graphs: &[(u32, f64)]) -> Vec<(f64, u32, u32)> {
    let mut best = vec![(INF, 0u32, 0u32); exact.len()];
    // Smaller last graphs first: on ties, the least padding.
    let mut by_size = graphs.to_vec();
    by_size.sort_by_key(|x| x.0);
    for (g, tg) in by_size {
        let mut window: std::collections::VecDeque<usize> = Default::default();
        for (m, slot) in best.iter_mut().enumerate().skip(2) {
            let t = m - 1;
            if exact[t].is_finite() {
                while window.back().is_some_and(|&b| exact[b] >= exact[t]) {
                    window.pop_back();
                }
                window.push_back(t);
            }
            while window.front().is_some_and(|&t| t + g as usize <= m) {
                window.pop_front();
            }
            if let Some(&t) = window.front() {
                let c = exact[t] + tg;
                if c < slot.0 {
                    *slot = (c, t as u32, g);
                }
            }
        }
    }
    best
}

/// The static side of a sequence cut: `t` tokens on graphs taking `us`,
/// with the streaming floor `stream` and copies of `copy` µs.
struct SeqSide {
    t: u32,
    stream: f64,
    us: f64,
    copy: f64,
}
