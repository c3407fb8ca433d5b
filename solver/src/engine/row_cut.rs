//! Row cuts (HeteroLLM): output rows split between two or three
//! processors, the static side's share a multiple of the row alignment.

use super::context::Contention;
use super::{Cand, HOST_BYTES, INF, OpCtx, RowParts, Shape, Small, Times};

impl OpCtx<'_, '_> {
    pub(super) fn rows_copy(&self, m: u32, parts: &[(usize, u32)]) -> f64 {
        parts.iter().map(|&(p, r)| self.part_copy_us(p, m, r)).sum()
    }

    /// Processor `p`'s copies for a part of `rows` input rows and `cols`
    /// output columns, in the operand order it runs ([`Proc::copy_us`]),
    /// and, for a part of fewer than all the columns, the host copy that
    /// scatters its rows into the merged output ([`Setup::scatter_us`]).
    pub(crate) fn part_copy_us(&self, p: usize, rows: u32, cols: u32) -> f64 {
        let out = rows as f64 * cols as f64;
        let scatter = if cols < self.n {
            self.setup.scatter_us(out * HOST_BYTES)
        } else {
            0.0
        };
        self.setup.procs[p].copy_us(rows as f64 * self.k as f64, out, self.order(p)) + scatter
    }

    /// A row split costed from its parts' predicted times; the static part
    /// runs at M = `graph` when given.
    pub(super) fn rows_cand_t(
        &self,
        m: u32,
        parts: &[(usize, u32)],
        times: &[f64],
        graph: Option<u32>,
    ) -> Cand {
        let procs = &self.setup.procs;
        let mut raw: Small<(usize, f64, f64), 3> = Small::new();
        for (&(p, rows), &t) in parts.iter().zip(times) {
            let with = parts.iter().map(|x| x.0);
            let stream = match self.contention(p, with) {
                Contention::Bandwidth(_) => self.stream_us(p, rows),
                _ => t,
            };
            raw.push((p, t, stream));
        }
        let copy = self.rows_copy(m, parts);
        self.finish(
            Shape::Rows {
                parts: RowParts::from_slice(parts),
                graph: graph.or_else(|| {
                    parts
                        .iter()
                        .any(|&(p, _)| procs[p].static_graphs)
                        .then_some(m)
                }),
            },
            &raw,
            copy,
        )
    }

    /// The M a part on `p` runs at: a static-graph processor runs the
    /// prepared graph `graph` where given.
    fn part_m(&self, p: usize, m: u32, graph: Option<u32>) -> u32 {
        if self.setup.procs[p].static_graphs {
            graph.unwrap_or(m)
        } else {
            m
        }
    }

    /// Two-way row cut of `total` rows between `a` (gets multiples of the
    /// alignment) and `b`, next to `fixed` parts. A search for where the
    /// two sides cross (the first cut at which `a` is no faster than `b`),
    /// started at the proportional share, then the neighbouring cut points.
    pub(crate) fn row2(
        &self,
        m: u32,
        a: usize,
        b: usize,
        total: u32,
        fixed: &[(usize, u32)],
        graph: Option<u32>,
    ) -> Option<Cand> {
        let align = self.align();
        let j_max = (total.checked_sub(1)?) / align;
        if j_max == 0 {
            return None;
        }
        let gm = |p: usize| self.part_m(p, m, graph);
        // A part's time beside the others, contended.
        let with = || fixed.iter().map(|&(q, _)| q).chain([a, b]);
        let c =
            |p: usize, t: f64, rows: u32| self.contended(p, with(), t, || self.stream_us(p, rows));
        let rows_a = |j: u32| j * align;
        let rows_b = |j: u32| total - j * align;
        // Smallest j with ta(j) >= tb(j); the cost is least at it or just
        // below it (each side's time grows with its rows). Raw and
        // contended times per j.
        let mut seen: Vec<(u32, [f64; 4])> = Vec::with_capacity(12);
        let mut eval = |j: u32| -> [f64; 4] {
            if let Some(&(_, v)) = seen.iter().find(|e| e.0 == j) {
                return v;
            }
            let x = self.time(a, gm(a), rows_a(j));
            let y = self.time(b, gm(b), rows_b(j));
            let v = [x, y, c(a, x, rows_a(j)), c(b, y, rows_b(j))];
            seen.push((j, v));
            v
        };
        let mut crossed = |j: u32| {
            let [_, _, x, y] = eval(j);
            x >= y
        };
        // The first probe is where the two sides would cross if each
        // scaled linearly with its rows from its whole-operator time (a
        // table lookup): usually two probes in all, against log2(j_max)
        // bisecting from the middle.
        let (ra, rb) = (
            c(a, self.time(a, gm(a), self.n), self.n),
            c(b, self.time(b, gm(b), self.n), self.n),
        );
        let guess = total as f64 * rb / (ra + rb) / align as f64;
        let j0 = if guess.is_finite() {
            guess.round() as u32
        } else {
            j_max.div_ceil(2)
        };
        let lo = first_crossing(j0, j_max, &mut crossed);
        let mut best: Option<Cand> = None;
        for j in lo.saturating_sub(1).max(1)..=lo.min(j_max) {
            let [x, y, ..] = eval(j);
            let mut parts = RowParts::from_slice(fixed);
            parts.push((a, j * align));
            parts.push((b, total - j * align));
            let mut times = Times::new();
            for &(p, r) in fixed {
                times.push(self.time(p, gm(p), r));
            }
            times.push(x);
            times.push(y);
            let c = self.rows_cand_t(m, &parts, &times, graph);
            if best.as_ref().is_none_or(|b| c.total < b.total) {
                best = Some(c);
            }
        }
        best
    }

    /// Three-way row cut: shares proportional to speed, rebalanced on the
    /// measured throughput of each share, then single alignment steps from
    /// the slowest part while its time drops. Parts 0 and 1 hold multiples
    /// of the alignment, part 2 the rest.
    pub(super) fn row3(&self, m: u32, ps: [usize; 3], graph: Option<u32>) -> Option<Cand> {
        let align = self.align();
        let n = self.n;
        if n < 3 * align {
            return None;
        }
        let gm = |p: usize| self.part_m(p, m, graph);
        let c = |i: usize, t: f64, rows: u32| {
            self.contended(ps[i], ps, t, || self.stream_us(ps[i], rows))
        };
        // Part `i` on `r` rows: its time alone and contended.
        let mut cache: Vec<(usize, u32, (f64, f64))> = Vec::with_capacity(48);
        let mut raw = |i: usize, r: u32| -> (f64, f64) {
            if let Some(&(_, _, t)) = cache.iter().find(|c| c.0 == i && c.1 == r) {
                return t;
            }
            let t = self.time(ps[i], gm(ps[i]), r);
            let v = (t, c(i, t, r));
            cache.push((i, r, v));
            v
        };
        let fix = |w: [f64; 3]| -> Option<[u32; 3]> {
            let sum: f64 = w.iter().sum();
            if !(sum.is_finite() && sum > 0.0) {
                return None;
            }
            let share = |x: f64| (n as f64 * x / sum / align as f64).round() as u32 * align;
            let r0 = share(w[0]).clamp(align, n - 2 * align);
            let r1 = share(w[1]).clamp(align, (n - r0 - 1) / align * align);
            Some([r0, r1, n - r0 - r1])
        };
        let full: [f64; 3] = std::array::from_fn(|i| self.time(ps[i], gm(ps[i]), n));
        let mut rows = fix(full.map(|t| 1.0 / t))?;
        for _ in 0..4 {
            let w: [f64; 3] = std::array::from_fn(|i| rows[i] as f64 / raw(i, rows[i]).0);
            match fix(w) {
                Some(next) if next != rows => rows = next,
                _ => break,
            }
        }
        for _ in 0..16 {
            let t: [f64; 3] = std::array::from_fn(|i| raw(i, rows[i]).1);
            let slow = (0..3)
                .max_by(|&a, &b| t[a].total_cmp(&t[b]))
                .expect("3 parts");
            let mut best: Option<([u32; 3], f64)> = None;
            for o in (0..3).filter(|&o| o != slow) {
                // One step from `slow` to `o`; part 2 takes the rest.
                let mut r = rows;
                if slow != 2 {
                    if r[slow] < 2 * align {
                        continue;
                    }
                    r[slow] -= align;
                }
                if o != 2 {
                    r[o] += align;
                }
                if r[0] + r[1] >= n {
                    continue;
                }
                r[2] = n - r[0] - r[1];
                let max = (0..3).map(|i| raw(i, r[i]).1).fold(0.0, f64::max);
                if max < best.map_or(t[slow], |b| b.1) {
                    best = Some((r, max));
                }
            }
            match best {
                Some((r, _)) => rows = r,
                None => break,
            }
        }
        let mut parts = RowParts::new();
        let mut times = Times::new();
        for i in 0..3 {
            parts.push((ps[i], rows[i]));
            times.push(raw(i, rows[i]).0);
        }
        Some(self.rows_cand_t(m, &parts, &times, graph))
    }

    /// A lower bound on any row split among `ps` (processor, its M): every
    /// part gets at least the smallest share a cut can give, and no part is
    /// faster with more rows.
    fn split_bound(&self, ps: &[(usize, u32)]) -> f64 {
        let rmin = self.rmin();
        ps.iter()
            .map(|&(p, gm)| self.time(p, gm, rmin))
            .fold(0.0, f64::max)
            + self.split_overhead_floor(ps)
    }

    /// The fewest rows a part of a row cut can get.
    pub(super) fn rmin(&self) -> u32 {
        (self.n - 1) % self.align() + 1
    }

    /// What a row split among `ps` (processor, its M) pays at least beyond
    /// its slowest part: the cheapest of their syncs, and each part's
    /// copies at the cheaper end of the shares it can get (a copy's cost is
    /// linear in the rows).
    fn split_overhead_floor(&self, ps: &[(usize, u32)]) -> f64 {
        let sync = self.least_sync(ps);
        let copy: f64 = ps.iter().map(|&(p, m)| self.copy_floor(p, m)).sum();
        sync + copy
    }

    /// The cheapest sync among the processors of `ps`: a split pays at
    /// least that.
    pub(super) fn least_sync(&self, ps: &[(usize, u32)]) -> f64 {
        let procs = &self.setup.procs;
        ps.iter()
            .map(|&(p, _)| procs[p].sync_us)
            .fold(INF, f64::min)
    }

    /// The least copy cost of a part on `p` at M = `m`, over its shares.
    pub(super) fn copy_floor(&self, p: usize, m: u32) -> f64 {
        self.part_copy_us(p, m, self.rmin())
            .min(self.part_copy_us(p, m, self.n))
    }

    /// The best row split with the static processor `s` free to take any
    /// share at M = `g` (a prepared size): two-way with each dynamic
    /// partner, three-way with each pair.
    pub fn best_free_rows(&self, s: usize, g: u32) -> Option<Cand> {
        let limit = if self.prune { self.full(s, g) } else { INF };
        self.free_rows_with(s, g, limit)
            .into_iter()
            .min_by(|a, b| a.total.total_cmp(&b.total))
    }

    /// Row splits of the static processor `s` at M = `g`, skipping those
    /// whose lower bound is at least `limit`.
    pub(super) fn free_rows_with(&self, s: usize, g: u32, limit: f64) -> Vec<Cand> {
        let dy: Vec<usize> = self.splittable_dynamic().collect();
        let mut out = vec![];
        for &d in &dy {
            if self.split_bound(&[(s, g), (d, g)]) < limit {
                out.extend(self.row2(g, s, d, self.n, &[], Some(g)));
            }
        }
        for (i, &d1) in dy.iter().enumerate() {
            for &d2 in &dy[i + 1..] {
                if self.split_bound(&[(s, g), (d1, g), (d2, g)]) < limit {
                    out.extend(self.row3(g, [s, d1, d2], Some(g)));
                }
            }
        }
        out
    }
}

/// The smallest `j` in `1..=j_max` with `crossed(j)`, or `j_max + 1` when
/// there is none, for a `crossed` that is false and then true (where it is
/// not, some `j` with `crossed(j)` and not `crossed(j - 1)`, or `j = 1`).
/// The first probe is `j0`; from there steps double away from it until
/// the answer is bracketed, then bisection: near the answer, far fewer
/// probes than bisecting `1..=j_max` from the middle.
pub(crate) fn first_crossing(j0: u32, j_max: u32, mut crossed: impl FnMut(u32) -> bool) -> u32 {
    if j_max == 0 {
        return 1;
    }
    let j0 = j0.clamp(1, j_max);
    // Not crossed below `lo`; crossed at `hi` (or `hi == j_max + 1`).
    let (mut lo, mut hi) = (1u32, j_max + 1);
    let mut step = 1;
    if crossed(j0) {
        hi = j0;
        while let Some(j) = hi.checked_sub(step).filter(|&j| j >= lo) {
            if !crossed(j) {
                lo = j + 1;
                break;
            }
            hi = j;
            step *= 2;
        }
    } else {
        lo = j0 + 1;
        while lo + step - 1 < hi {
            let j = lo + step - 1;
            if crossed(j) {
                hi = j;
                break;
            }
            lo = j + 1;
            step *= 2;
        }
    }
    while lo < hi {
        let mid = (lo + hi) / 2;
        if crossed(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo
}
