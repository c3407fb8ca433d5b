//! ScheInfer offload on a discrete-GPU host: CC/CG/GG slicing with the
//! PCIe α+β·n cost, token assignment in prefill, and the greedy choice of
//! which weight rows stay resident under a GPU memory budget.

use std::collections::HashMap;

use hetero_plan::{LinearOp, Phase};

use crate::engine::{Cand, HOST_BYTES, INF, OpCtx, Setup, Shape};

impl OpCtx<'_, '_> {
    /// Offload-mode candidates: the CPU alone, the GPU alone when every row
    /// is resident, and the best CC/CG/GG slicing.
    pub(crate) fn offload_cands(&self, m: u32) -> Vec<Cand> {
        let o = self.setup.offload.as_ref().expect("offload mode");
        let gg = self.resident.unwrap_or(0).min(self.n);
        let mut out = vec![self.finish(
            Shape::Single {
                p: o.cpu,
                padded_to: None,
                online: false,
            },
            &[(o.cpu, self.time(o.cpu, m, self.n))],
            0.0,
        )];
        if gg == self.n {
            out.push(self.finish(
                Shape::Single {
                    p: o.gpu,
                    padded_to: None,
                    online: false,
                },
                &[(o.gpu, self.time(o.gpu, m, self.n))],
                0.0,
            ));
        }
        out.extend(self.offload_search(m, gg));
        if self.phase == Phase::Prefill && m > 1 {
            out.extend(self.token_assignment(m, gg));
        }
        out
    }

    /// ScheInfer's prompt phase: keep the slicing optimised for one decode
    /// token and move `gpu_tokens` of the CC rows' tokens to the GPU (after
    /// copying those weights). Re-slicing per length (the search above)
    /// dominates it under this cost model: moving `cc·ng/m` rows from CC to
    /// CG relieves the CPU as much for less PCIe traffic. It is kept as its
    /// own candidate so `plan explain` shows the comparison.
    fn token_assignment(&self, m: u32, gg: u32) -> Option<Cand> {
        // The decode slicing is the same at every length: find it once.
        let cc = (*self
            .decode_cc
            .get_or_init(|| match self.offload_search(1, gg)?.shape {
                Shape::Offload { cc, .. } if cc > 0 => Some(cc),
                _ => None,
            }))?;
        let g_gg = self.gg_time(m, gg);
        let base = self.offload_cost_with(m, gg, cc, 0, g_gg).total;
        let step = (m / 16).max(1);
        (step..=m)
            .step_by(step as usize)
            .chain([m])
            .map(|ng| self.offload_cost_with(m, gg, cc, ng, g_gg))
            .filter(|c| c.total < base)
            .min_by(|a, b| a.total.total_cmp(&b.total))
    }

    /// The GPU time of the resident rows at M = `m`.
    fn gg_time(&self, m: u32, gg: u32) -> f64 {
        let gpu = self.setup.offload.as_ref().expect("offload mode").gpu;
        if gg > 0 { self.time(gpu, m, gg) } else { 0.0 }
    }

    /// One CC/CG/GG slicing costed on the ScheInfer timeline: the GPU runs
    /// GG at once, CG after its weights cross PCIe, and the token-assigned
    /// CC rows after theirs; the CPU runs CC on the other tokens, with the
    /// activations crossing both ways.
    /// `g_gg` is the GPU time of the resident rows.
    fn offload_cost_with(&self, m: u32, gg: u32, cc: u32, ng: u32, g_gg: f64) -> Cand {
        let o = self.setup.offload.as_ref().expect("offload mode");
        let (cpu, gpu) = (o.cpu, o.gpu);
        let gp = &self.setup.procs[gpu];
        let (k, n) = (self.k as f64, self.n);
        let cg = n - gg - cc;
        // Activations cross as f32, the runtime's host format.
        let a = HOST_BYTES;
        let w = gp.wbytes();
        let h2d = |b: f64| gp.copy_h2d.map_or(INF, |c| c.at(b));
        let d2h = |b: f64| gp.copy_d2h.or(gp.copy_h2d).map_or(INF, |c| c.at(b));
        let mc = m - ng;
        let (cpu_compute, cpu_end) = if cc > 0 && mc > 0 {
            let t = self.time(cpu, mc, cc);
            (
                t,
                d2h(mc as f64 * k * a) + t + h2d(mc as f64 * cc as f64 * a),
            )
        } else {
            (0.0, 0.0)
        };
        let c_cg = if cg > 0 { h2d(cg as f64 * k * w) } else { 0.0 };
        let c_ccw = if ng > 0 && cc > 0 {
            h2d(cc as f64 * k * w)
        } else {
            0.0
        };
        let g_cg = if cg > 0 { self.time(gpu, m, cg) } else { 0.0 };
        let g_cc = if ng > 0 && cc > 0 {
            self.time(gpu, ng, cc)
        } else {
            0.0
        };
        let mut t = g_gg;
        if cg > 0 {
            t = t.max(c_cg) + g_cg;
        }
        if g_cc > 0.0 {
            t = t.max(c_cg + c_ccw) + g_cc;
        }
        let gpu_end = t;
        let gpu_compute = g_gg + g_cg + g_cc;
        let both = cpu_end > 0.0 && gpu_end > 0.0;
        let ((sync, sync_block), rule) = if both {
            let (dom, other) = if gpu_end >= cpu_end {
                (gpu, cpu)
            } else {
                (cpu, gpu)
            };
            let procs = &self.setup.procs;
            let submit = if procs[other].queue {
                procs[other].submit_us
            } else {
                0.0
            };
            (
                (
                    procs[dom].sync_us + submit,
                    procs[dom].sync_block_us + submit,
                ),
                "sync on the side that ends last + resubmission of a queued side",
            )
        } else {
            ((0.0, 0.0), "")
        };
        let end = cpu_end.max(gpu_end);
        let total = end + sync;
        Cand {
            shape: Shape::Offload {
                cpu,
                gpu,
                cc,
                cg,
                gg,
                gpu_tokens: ng,
            },
            parts: crate::engine::Times::from_slice(&[cpu_compute, gpu_compute]),
            sync,
            sync_block,
            copy: (end - cpu_compute.max(gpu_compute)).max(0.0),
            total,
            sync_rule: rule,
        }
    }

    /// Searches the CC rows: binary search where the CPU and GPU sides
    /// cross, then the neighbours and both ends.
    pub(crate) fn offload_search(&self, m: u32, gg: u32) -> Option<Cand> {
        let free = self.n - gg;
        if free == 0 {
            return None;
        }
        let align = self.align();
        let g_gg = self.gg_time(m, gg);
        let search_cc = |ng: u32| -> Option<Cand> {
            let steps = free / align;
            let cc_at = |j: u32| if j >= steps { free } else { j * align };
            let side = |j: u32| {
                let c = self.offload_cost_with(m, gg, cc_at(j), ng, g_gg);
                // CPU compute rises with CC, the GPU's falls.
                c.parts[0] - c.parts[1]
            };
            let (mut lo, mut hi) = (0u32, steps);
            while lo < hi {
                let mid = (lo + hi) / 2;
                if side(mid) >= 0.0 {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            let mut js: Vec<u32> = (lo.saturating_sub(2)..=(lo + 1).min(steps)).collect();
            js.extend([0, steps]);
            // All rows on the CPU is the CPU alone, not an offload.
            js.into_iter()
                .filter(|&j| !(gg == 0 && ng == 0 && cc_at(j) == free))
                .map(|j| self.offload_cost_with(m, gg, cc_at(j), ng, g_gg))
                .min_by(|a, b| a.total.total_cmp(&b.total))
        };
        let best = search_cc(0)?;
        Some(best)
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

/// ScheInfer's GPU memory assignment: start with nothing resident; at each
/// step take the (operator, level) that saves the most decode time per
/// byte, while the budget lasts. The objective is one decode step at `m`
/// tokens, summed over layers (placement is static, and generation
/// dominates end-to-end time).
pub(crate) fn choose_resident(
    setup: &Setup,
    ops: &[&LinearOp],
    budget: u64,
    m: u32,
) -> HashMap<String, u32> {
    let gpu = setup.offload.as_ref().expect("offload mode").gpu;
    let wb = setup.procs[gpu].wbytes();
    struct OpLevels {
        name: String,
        levels: Vec<u32>,
        time: Vec<f64>,
        bytes: Vec<f64>,
    }
    let table: Vec<OpLevels> = ops
        .iter()
        .map(|op| {
            let lv = levels(op.n, OpCtx::new(setup, op, Phase::Decode, m).align());
            let mut time = vec![];
            let mut bytes = vec![];
            for &r in &lv {
                // A fresh context per level: its memoised slicing depends on it.
                let mut cx = OpCtx::new(setup, op, Phase::Decode, m);
                cx.resident = Some(r);
                let cell = cx.cell(m);
                let best = cell.cands.first().map_or(INF, |c| c.total);
                time.push(best * op.layers as f64);
                bytes.push(r as f64 * op.k as f64 * wb * op.count as f64 * op.layers as f64);
            }
            OpLevels {
                name: op.name.clone(),
                levels: lv,
                time,
                bytes,
            }
        })
        .collect();
    let mut cur = vec![0usize; table.len()];
    let mut left = budget as f64;
    loop {
        let mut pick: Option<(f64, usize, usize)> = None;
        for (i, t) in table.iter().enumerate() {
            for j in cur[i] + 1..t.levels.len() {
                let db = t.bytes[j] - t.bytes[cur[i]];
                let dt = t.time[cur[i]] - t.time[j];
                if db <= left && dt > 0.0 {
                    let imp = dt / db.max(1.0);
                    if pick.is_none_or(|(b, _, _)| imp > b) {
                        pick = Some((imp, i, j));
                    }
                }
            }
        }
        match pick {
            Some((_, i, j)) => {
                left -= table[i].bytes[j] - table[i].bytes[cur[i]];
                cur[i] = j;
            }
            None => break,
        }
    }
    table
        .iter()
        .zip(cur)
        .filter(|(_, j)| *j > 0)
        .map(|(t, j)| (t.name.clone(), t.levels[j]))
        .collect()
}
