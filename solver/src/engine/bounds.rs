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
            .max(0.0)
    }

    /// Lower bounds of every family over M in `lo..=hi`. They take syncs as
    /// costing at least the cheaper side's, copies as growing with the
    /// bytes moved, a part of a split as taking at least the smallest share
    /// a cut can give (a sequence cut's dynamic part as running any M up to
    /// `hi`), and a static-graph processor as running at least one of its
    /// prepared graphs or the exact shape.
    pub fn bounds(&self, lo: u32, hi: u32) -> Bounds {
        let procs = &self.setup.procs;
        let (n, rmin) = (self.n, self.rmin());
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
        let mut rest = INF;
        // Each processor's least part of a split, and its least copies.
        let dyn_lo = if self.statics.is_empty() { lo } else { 1 };
        let part: Vec<(f64, f64)> = (0..procs.len())
            .map(|p| match self.statics.iter().find(|st| st.p == p) {
                Some(st) => {
                    let t = st
                        .sizes
                        .iter()
                        .map(|&g| self.time_floor(p, (g, g), (rmin, n)))
                        .fold(self.time_floor(p, (lo, hi), (rmin, n)), f64::min);
                    let copy =
                        self.copy_floor_over((1, hi), (rmin, n), |m, r| self.part_copy_us(p, m, r));
                    (t, copy)
                }
                None => {
                    let t = self.time_floor(p, (dyn_lo, hi), (rmin, n));
                    let copy = self.copy_floor_over((dyn_lo, hi), (rmin, n), |m, r| {
                        self.part_copy_us(p, m, r)
                    });
                    (t, copy)
                }
            })
            .collect();
        let split: Vec<usize> = (0..procs.len()).filter(|&p| procs[p].can_split).collect();
        for (i, &a) in split.iter().enumerate() {
            for &b in &split[i + 1..] {
                if procs[a].static_graphs && procs[b].static_graphs {
                    continue;
                }
                let sync = procs[a].sync_us.min(procs[b].sync_us).max(0.0);
                rest = rest.min(part[a].0.max(part[b].0) + sync + part[a].1 + part[b].1);
            }
        }
        for st in &self.statics {
            let whole = st
                .sizes
                .iter()
                .map(|&g| self.time_floor(st.p, (g, g), (n, n)))
                .fold(self.time_floor(st.p, (lo, hi), (n, n)), f64::min);
            rest = rest.min(whole);
        }
        Bounds { alone, rest }
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
            } => {
                pads_to(*p, *g).then(|| self.finish(shape.clone(), &[(*p, self.full(*p, *g))], 0.0))
            }
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
                let (r, t_r) = statics(s)?.row_share.get(*g)?;
                if !pads_to(s, *g) || parts.iter().any(|&(p, rows)| p == s && rows != r) {
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
                let copy = self.part_copy_us(*d, rest, self.n);
                Some(self.finish(
                    Shape::Seq {
                        s: *s,
                        graphs: graphs.clone(),
                        d: Some(*d),
                        rest,
                    },
                    &[
                        (*s, st.exact[t as usize]),
                        (*d, self.time(*d, rest, self.n)),
                    ],
                    copy,
                ))
            }
            Shape::Chunked { s, chunk, .. } if *chunk < m => {
                let chunks = m.div_ceil(*chunk);
                Some(self.finish(
                    Shape::Chunked {
                        s: *s,
                        chunk: *chunk,
                        chunks,
                    },
                    &[(*s, chunks as f64 * self.full(*s, *chunk))],
                    0.0,
                ))
            }
            _ => None,
        }
    }
}
