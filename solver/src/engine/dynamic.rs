//! Candidates on dynamic processors: each alone, and row cuts among them.

use super::cand::second_family_best;
use super::{Cand, OpCtx, Shape};

impl OpCtx<'_, '_> {
    /// One dynamic processor alone: its GEMM, plus what runtime-min adds
    /// around it (see [`Proc::alone_overhead_us`] and
    /// [`Proc::alone_copy_us`]).
    pub(crate) fn single(&self, p: usize, m: u32) -> Cand {
        let pr = &self.setup.procs[p];
        let copy = pr.alone_copy_us(
            m as f64 * self.k as f64,
            m as f64 * self.n as f64,
            self.order(p),
        );
        let mut c = self.finish(
            Shape::Single {
                p,
                padded_to: None,
                online: false,
            },
            &[(p, self.time(p, m, self.n), 0.0)],
            copy,
        );
        let host = pr.alone_overhead_us();
        if host > 0.0 {
            c.sync = host;
            c.sync_block = pr.alone_overhead_block_us();
            c.total += host;
            c.sync_rule = "alone on a device-timed processor: one launch-to-completion round trip";
        }
        c
    }

    /// Candidates on dynamic processors only: each alone, row cuts between
    /// two, and three-way row cuts.
    pub fn dyn_cands(&self, m: u32) -> Vec<Cand> {
        let mut out = vec![];
        for p in self.dynamic() {
            out.push(self.single(p, m));
        }
        // Splits that can be neither the winner nor the runner-up (their
        // lower bound is no better than a second family's best) are skipped.
        let dy_split: Vec<usize> = self.splittable_dynamic().collect();
        if dy_split.len() < 2 {
            return out;
        }
        // Each processor's time on the smallest share and its least copy
        // cost, once per cell.
        let rmin = self.rmin();
        let (tmin, copy): (Vec<f64>, Vec<f64>) = (0..self.setup.procs.len())
            .map(|p| {
                if self.prune && dy_split.contains(&p) {
                    (self.time(p, m, rmin), self.copy_floor(p, m))
                } else {
                    (0.0, 0.0)
                }
            })
            .unzip();
        let hopeless = |out: &[Cand], ps: &[(usize, u32)]| {
            let slowest = ps.iter().map(|&(p, _)| tmin[p]).fold(0.0, f64::max);
            let sync = self.least_sync(ps);
            let copies: f64 = ps.iter().map(|&(p, _)| copy[p]).sum();
            self.prune && slowest + sync + copies >= second_family_best(out, m)
        };
        for (i, &a) in dy_split.iter().enumerate() {
            for &b in &dy_split[i + 1..] {
                if !hopeless(&out, &[(a, m), (b, m)]) {
                    out.extend(self.row2(m, a, b, self.n, &[], None));
                }
            }
        }
        for (i, &a) in dy_split.iter().enumerate() {
            for (j, &b) in dy_split.iter().enumerate().skip(i + 1) {
                for &c in &dy_split[j + 1..] {
                    if !hopeless(&out, &[(a, m), (b, m), (c, m)]) {
                        out.extend(self.row3(m, [a, b, c], None));
                    }
                }
            }
        }
        out
    }
}
