//! What a block of lengths needs to be solved without costing every
//! candidate at every length: lower bounds of every candidate family over
//! the block, and a candidate's shape carried to another length.

use super::{Cand, INF, OpCtx, Shape};

/// Lower bounds of the candidates of one operator over a block of M
/// (`lo..=hi`), per GEMM instance.
#[derive(Debug, Clone)]
pub(crate) struct Bounds {
    /// Each dynamic processor alone (INF for a static-graph one).
    alone: Vec<f64>,
    /// Every other candidate: splits of two or three processors, and a
    /// static-graph processor alone (padded, chunked, a graph sequence or
    /// online prepare).
    rest: f64,
}

impl Bounds {
    /// The least any candidate can cost other than dynamic processor `p`
    /// alone (every candidate when `p` is `None`).
    pub fn floor_without(&self, p: Option<usize>) -> f64 {
        self.alone
            .iter()
            .enumerate()
            .filter(|&(q, _)| Some(q) != p)
            .map(|(_, &t)| t)
            .fold(self.rest, f64::min)
    }
}

impl OpCtx<'_, '_> {
    /// A lower bound of `p`'s time over M in `m` and output rows in `rows`.
    /// 0 where the model gives none.
    fn time_floor(&self, p: usize, m: (u32, u32), rows: (u32, u32)) -> f64 {
        self.setup.procs[p]
            .model
            .lower_bound_us(m.0..=m.1, self.k, rows.0..=rows.1, self.order(p))
            .unwrap_or(0.0)
    }

    /// The least of `f` at the corners of M in `m` and rows in `rows`: the
    /// least copy cost over the box, copy lines growing with the bytes
    /// they move (as the cost model's pruning takes them too).
    fn copy_floor_over(&self, m: (u32, u32), rows: (u32, u32), f: impl Fn(u32, u32) -> f64) -> f64 {
        [(m.0, rows.0), (m.0, rows.1), (m.1, rows.0), (m.1, rows.1)]
            .into_iter()
            .map(|(mm, r)| f(mm, r))
            .fold(INF, f64::min)
    }

    /// Lower bounds of every family over M in `lo..=hi`. They take syncs as
    /// costing at least the cheaper side's, copies as growing with the
    /// bytes moved, a part of a split as taking at least the smallest share
    /// a cut can give (a sequence cut's dynamic part as running any M up to
    /// `hi`), and a static-graph processor as running at least one of its
    /// prepared graphs or the exact shape.
    pub fn bounds(&self, lo: u32, hi: u32) -> Bounds {
        let procs = &self.setup.procs;
        let n = self.n;
        let (k, nf) = (self.k as f64, n as f64);
        let alone: Vec<f64> = (0..procs.len())
            .map(|p| {
                if procs[p].static_graphs {
                    return INF;
                }
                let copy = self.copy_floor_over((lo, hi), (n, n), |m, _| {
                    let m = m as f64;
                    procs[p].alone_copy_us(m * k, m * nf, self.order(p))
                });
                self.time_floor(p, (lo, hi), (n, n)) + copy + procs[p].alone_overhead_us()
            })
            .collect();
        let rest = self
            .dynamic_splits_floor(lo, hi)
            .min(self.static_floor(lo, hi));
        Bounds { alone, rest }
    }

    /// The least cost of a row cut among dynamic processors over M in
    /// `lo..=hi`. Two parts: the rows of one part are cut into ranges
    /// (doubling from either end), and in each range the two parts' time
    /// floors, the cheaper sync and both parts' least copies bound every
    /// cut in it. Three parts: the largest has at least a third of the
    /// rows.
    fn dynamic_splits_floor(&self, lo: u32, hi: u32) -> f64 {
        let procs = &self.setup.procs;
        let (n, rmin, align) = (self.n, self.rmin(), self.align());
        let dy: Vec<usize> = self.splittable_dynamic().collect();
        if dy.len() < 2 || n < 2 {
            return INF;
        }
        // Cut points, symmetric: the range of one part's rows mirrors the
        // other's.
        let mut pts = vec![rmin.min(n - 1), n - rmin.min(n - 1)];
        let mut x = align;
        while x < n {
            pts.extend([x, n - x]);
            x = x.saturating_mul(2);
        }
        pts.retain(|&r| r >= rmin.min(n - 1) && r <= n - rmin.min(n - 1));
        pts.sort_unstable();
        pts.dedup();
        let ranges: Vec<(u32, u32)> = match pts.len() {
            1 => vec![(pts[0], pts[0])],
            _ => pts.windows(2).map(|w| (w[0], w[1])).collect(),
        };
        // Per processor and range of its rows: (time floor, least copies).
        let floor: Vec<Vec<(f64, f64)>> = (0..procs.len())
            .map(|p| {
                if !dy.contains(&p) {
                    return vec![];
                }
                ranges
                    .iter()
                    .map(|&r| {
                        let copy = self
                            .copy_floor_over((lo, hi), r, |m, rows| self.part_copy_us(p, m, rows));
                        (self.time_floor(p, (lo, hi), r), copy)
                    })
                    .collect()
            })
            .collect();
        let mut best = INF;
        for (i, &a) in dy.iter().enumerate() {
            for &b in &dy[i + 1..] {
                let sync = procs[a].sync_us.min(procs[b].sync_us).max(0.0);
                // Range `j` of `a`'s rows leaves `b` the mirrored range.
                for j in 0..ranges.len() {
                    let (ta, ca) = floor[a][j];
                    let (tb, cb) = floor[b][ranges.len() - 1 - j];
                    best = best.min(ta.max(tb) + sync + ca + cb);
                }
            }
        }
        if dy.len() >= 3 {
            best = best.min(self.three_way_floor(&dy, (lo, hi), &ranges, &floor));
        }
        best
    }

    /// The least cost of a three-way row cut among `dy` over M in `m`:
    /// for each part, over each range of its rows, the other two share the
    /// rest and the larger of them has at least half of it. Every part
    /// gives a bound; the greatest holds.
    fn three_way_floor(
        &self,
        dy: &[usize],
        m: (u32, u32),
        ranges: &[(u32, u32)],
        floor: &[Vec<(f64, f64)>],
    ) -> f64 {
        let procs = &self.setup.procs;
        let (n, rmin) = (self.n, self.rmin());
        let half: Vec<u32> = ranges
            .iter()
            .map(|r| (n - r.1).div_ceil(2).max(1))
            .collect();
        // Per processor: its time floor with at least `half[j]` rows, and
        // its least copies.
        let larger: Vec<Vec<f64>> = (0..procs.len())
            .map(|p| {
                if !dy.contains(&p) {
                    return vec![];
                }
                half.iter()
                    .map(|&h| self.time_floor(p, m, (h, n)))
                    .collect()
            })
            .collect();
        let copy: Vec<f64> = (0..procs.len())
            .map(|p| self.copy_floor_over(m, (rmin, n), |mm, r| self.part_copy_us(p, mm, r)))
            .collect();
        let mut best = INF;
        for (i, &a) in dy.iter().enumerate() {
            for (j, &b) in dy.iter().enumerate().skip(i + 1) {
                for &c in &dy[j + 1..] {
                    let three = [a, b, c];
                    let sync = three
                        .iter()
                        .map(|&p| procs[p].sync_us)
                        .fold(INF, f64::min)
                        .max(0.0);
                    let mut bound: f64 = 0.0;
                    for (x, &p) in three.iter().enumerate() {
                        let (q, r) = (three[(x + 1) % 3], three[(x + 2) % 3]);
                        let least = (0..ranges.len())
                            .map(|k| {
                                let (tp, cp) = floor[p][k];
                                tp.max(larger[q][k].min(larger[r][k])) + cp
                            })
                            .fold(INF, f64::min);
                        bound = bound.max(least + copy[q] + copy[r]);
                    }
                    best = best.min(bound + sync);
                }
            }
        }
        best
    }

    /// The least cost of a candidate that uses a static-graph processor:
    /// alone (at least one of its graphs, or the exact shape), or beside a
    /// dynamic one (their least parts, the least sync, their least copies;
    /// a sequence cut's dynamic part may run any M up to `hi`).
    fn static_floor(&self, lo: u32, hi: u32) -> f64 {
        let procs = &self.setup.procs;
        let (n, rmin) = (self.n, self.rmin());
        let least_sync = (0..procs.len())
            .map(|p| procs[p].sync_us)
            .fold(INF, f64::min)
            .max(0.0);
        let mut best = INF;
        for st in &self.statics {
            let s = st.p;
            let graphs = |rows: (u32, u32)| {
                st.sizes
                    .iter()
                    .map(|&g| self.time_floor(s, (g, g), rows))
                    .fold(self.time_floor(s, (lo, hi), rows), f64::min)
            };
            best = best.min(graphs((n, n)));
            if !procs[s].can_split {
                continue;
            }
            let ts = graphs((rmin, n));
            let cs = self.copy_floor_over((1, hi), (rmin, n), |m, r| self.part_copy_us(s, m, r));
            for d in self.splittable_dynamic() {
                let td = self.time_floor(d, (1, hi), (rmin, n));
                let cd =
                    self.copy_floor_over((1, hi), (rmin, n), |m, r| self.part_copy_us(d, m, r));
                best = best.min(ts.max(td) + least_sync + cs + cd);
            }
        }
        best
    }

    /// The candidate of `shape`'s family with the same parameters carried
    /// to M = `m` (a sequence cut's dynamic part takes the tokens the
    /// graphs leave, a chunked run as many chunks as `m` needs); `None`
    /// where the shape does not apply at `m` (a graph size other than the
    /// one `m` pads to, a row cut free at a prepared size, offload).
    pub fn carried(&self, shape: &Shape, m: u32) -> Option<Cand> {
        let statics = |s: usize| self.statics.iter().find(|st| st.p == s);
        let pads_to = |s: usize, g: u32| {
            statics(s).is_some_and(|st| !st.has(m) && st.smallest_ge(m) == Some(g))
        };
        match shape {
            Shape::Single {
                p,
                padded_to: None,
                online: false,
            } => (!self.setup.procs[*p].static_graphs).then(|| self.single(*p, m)),
            Shape::Single {
                p,
                padded_to: Some(g),
                ..
            } => pads_to(*p, *g).then(|| {
                let copy = self.run_copy_us(*p, m);
                self.finish(shape.clone(), &[(*p, self.full(*p, *g), 0.0)], copy)
            }),
            Shape::Single {
                p, online: true, ..
            } => {
                let mut out = vec![];
                self.online_prepare(statics(*p)?, m, &mut out);
                out.pop()
            }
            Shape::Rows { parts, graph: None } => {
                let times: Vec<f64> = parts.iter().map(|&(p, r)| self.time(p, m, r)).collect();
                Some(self.rows_cand_t(m, parts, &times, None))
            }
            Shape::Rows {
                parts,
                graph: Some(g),
            } => {
                // A hybrid: the static part is the row-share graph of `g`.
                let s = parts
                    .iter()
                    .find(|x| self.setup.procs[x.0].static_graphs)?
                    .0;
                let r = parts.iter().find(|x| x.0 == s)?.1;
                let (_, t_r) = statics(s)?.row_share.at(*g).find(|x| x.0 == r)?;
                if !pads_to(s, *g) {
                    return None;
                }
                let times: Vec<f64> = parts
                    .iter()
                    .map(|&(p, rows)| if p == s { t_r } else { self.time(p, m, rows) })
                    .collect();
                Some(self.rows_cand_t(m, parts, &times, Some(*g)))
            }
            Shape::Seq {
                s,
                graphs,
                d: Some(d),
                ..
            } => {
                let st = statics(*s)?;
                let t: u32 = graphs.iter().sum();
                let rest = m.checked_sub(t).filter(|&r| r > 0)?;
                let copy = self.graphs_copy_us(st, graphs) + self.part_copy_us(*d, rest, self.n);
                Some(self.finish(
                    Shape::Seq {
                        s: *s,
                        graphs: graphs.clone(),
                        d: Some(*d),
                        rest,
                    },
                    &[
                        (
                            *s,
                            self.graphs_us(st, graphs),
                            self.graphs_stream_us(*s, graphs.len()),
                        ),
                        (*d, self.time(*d, rest, self.n), self.stream_us(*d, self.n)),
                    ],
                    copy,
                ))
            }
            // A pipe: the cheapest pipe at `m`, as the cell costs it.
            Shape::Seq {
                s, graphs, d: None, ..
            } if graphs.iter().sum::<u32>() > m => {
                let mut out = vec![];
                self.pipe(statics(*s)?, m, &mut out);
                out.pop()
            }
            Shape::Chunked { s, chunk, .. } if *chunk < m => {
                let chunks = m.div_ceil(*chunk);
                Some(self.finish(
                    Shape::Chunked {
                        s: *s,
                        chunk: *chunk,
                        chunks,
                    },
                    &[(*s, chunks as f64 * self.full(*s, *chunk), 0.0)],
                    self.chunks_copy_us(*s, m, *chunk),
                ))
            }
            _ => None,
        }
    }
}
