//! ScheInfer offload on a discrete-GPU host: CC/CG/GG slicing with the
//! PCIe α+β·n cost, token assignment in prefill, and the greedy choice of
//! which weight rows stay resident under a GPU memory budget.

use std::collections::HashMap;

use hetero_plan::{LinearOp, Phase};

use crate::engine::{Cand, INF, OpCtx, Setup, Shape};

impl OpCtx<'_, '_> {
    /// Offload-mode candidates: the CPU alone, the GPU alone when every row
    /// is resident, and the best CC/CG/GG slicing. Alone, each costs what
    /// it costs outside offload mode ([`OpCtx::single`]): runtime-min keeps
    /// activations in host memory, so a GPU alone still copies its input in
    /// and its output back, and pays its launch and completion notice.
    pub(crate) fn offload_cands(&self, m: u32) -> Vec<Cand> {
        let o = self.setup.offload.as_ref().expect("offload mode");
        let gg = self.resident.unwrap_or(0).min(self.n);
        let mut out = vec![self.single(o.cpu, m)];
        if gg == self.n {
            out.push(self.single(o.gpu, m));
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

    /// One CC/CG/GG slicing costed on runtime-min's timeline. The CPU
    /// part (CC rows on the tokens the GPU does not take) starts first and
    /// runs beside the GPU's steps. The GPU runs its steps one after the
    /// other, each a launch and a wait of its own: the resident GG rows;
    /// the CG rows, whose weights cross PCIe from page-locked memory at the
    /// start of that step (`copy_h2d`, inside the GPU's timed part); and
    /// the CC rows of the tokens assigned to the GPU, the same way. Every
    /// step copies the input in and its output back from host memory, where
    /// runtime-min keeps activations, and scatters its columns into the
    /// merged output ([`OpCtx::part_copy_us`]); the CPU part's output is
    /// scattered last. ScheInfer's own timeline keeps activations on the
    /// GPU and overlaps the CG copy with the GG rows; on an H100 host,
    /// runtime-min ran offload plans costed on that timeline at 3.0× their
    /// prediction at prefill 300 and 1.4× at prefill 16
    /// (`docs/benchmarks.md`, offload).
    /// `g_gg` is the GPU time of the resident rows.
    fn offload_cost_with(&self, m: u32, gg: u32, cc: u32, ng: u32, g_gg: f64) -> Cand {
        let o = self.setup.offload.as_ref().expect("offload mode");
        let (cpu, gpu) = (o.cpu, o.gpu);
        let procs = &self.setup.procs;
        let gp = &procs[gpu];
        let k = self.k as f64;
        let cg = self.n - gg - cc;
        let weights = |rows: u32| {
            gp.copy_h2d
                .map_or(INF, |c| c.at(rows as f64 * k * gp.wbytes()))
        };
        // The GPU's steps, one after the other: (weights uploaded, GEMM,
        // copies).
        let mut steps: Vec<(f64, f64, f64)> = Vec::with_capacity(3);
        if gg > 0 {
            steps.push((0.0, g_gg, self.part_copy_us(gpu, m, gg)));
        }
        if cg > 0 {
            steps.push((
                weights(cg),
                self.time(gpu, m, cg),
                self.part_copy_us(gpu, m, cg),
            ));
        }
        if ng > 0 && cc > 0 {
            steps.push((
                weights(cc),
                self.time(gpu, ng, cc),
                self.part_copy_us(gpu, ng, cc),
            ));
        }
        let mut gpu_compute: f64 = steps.iter().map(|s| s.0 + s.1).sum();
        let gpu_copy: f64 = steps.iter().map(|s| s.2).sum();
        let launches = steps.len() as f64;
        let (host, host_block) = (gp.alone_overhead_us(), gp.alone_overhead_block_us());
        let mc = m - ng;
        let cp = &procs[cpu];
        let (cpu_compute, cpu_copy) = if cc > 0 && mc > 0 {
            // The CPU part shares host memory with the GPU's weight copies,
            // which start once the GG step is done: each slows the other.
            let copying: f64 = steps.iter().map(|s| s.0).sum();
            let gg_step = if gg > 0 {
                steps[0].1 + steps[0].2 + host
            } else {
                0.0
            };
            let (cpu_time, copies) = concurrent_cpu_and_copies(
                self.time(cpu, mc, cc),
                gg_step,
                copying,
                cp.concurrent,
                gp.concurrent,
            );
            gpu_compute += copies - copying;
            (cpu_time, self.part_copy_us(cpu, mc, cc))
        } else {
            (0.0, 0.0)
        };
        // The operator's end, for a wait that costs the GPU `host` per
        // launch: the host waits for the CPU part (`cpu_sync`) when it is
        // still running once the GPU's steps are done.
        let gpu_end = |host: f64| gpu_compute + gpu_copy + launches * host;
        let end = |host: f64, cpu_sync: f64| {
            if cpu_compute > 0.0 {
                gpu_end(host).max(cpu_compute + cpu_sync) + cpu_copy
            } else {
                gpu_end(host)
            }
        };
        let cpu_waited = cpu_compute > 0.0 && cpu_compute > gpu_end(host);
        let (cpu_sync, cpu_sync_block) = if cpu_waited {
            (cp.sync_us, cp.sync_block_us)
        } else {
            (0.0, 0.0)
        };
        let total = end(host, cpu_sync);
        let total_block = end(host_block, cpu_sync_block);
        // What the waits add on the critical path, and the copies beyond
        // it, so that `total = max(parts) + sync + copy`.
        let max = cpu_compute.max(gpu_compute);
        let waits = if cpu_waited {
            cpu_sync
        } else {
            launches * host
        };
        let copy = (total - max - waits).max(0.0);
        let sync = total - max - copy;
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
            sync_block: sync + (total_block - total),
            copy,
            total,
            sync_rule: "one launch and wait per GPU step (resident, copied, token-assigned rows), the CPU part beside them",
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
        let steps = free / align;
        let cc_at = |j: u32| if j >= steps { free } else { j * align };
        let side = |j: u32| {
            let c = self.offload_cost_with(m, gg, cc_at(j), 0, g_gg);
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
            .filter(|&j| !(gg == 0 && cc_at(j) == free))
            .map(|j| self.offload_cost_with(m, gg, cc_at(j), 0, g_gg))
            .min_by(|a, b| a.total.total_cmp(&b.total))
    }
}

/// A CPU part of `cpu` µs alone beside the GPU's weight copies of
/// `copying` µs alone, which start `start` µs after it: while both run,
/// the CPU keeps `cpu_factor` of its speed and the copies `copy_factor` of
/// theirs; whichever ends first leaves the other to run alone. Returns the
/// CPU part's time and the copies' time. The factors are the processors'
/// measured concurrent-bandwidth factors (`bandwidth_concurrent`: the
/// CPU's GEMV beside the GPU copying its weights from page-locked host
/// memory, and the GPU's copies beside the CPU's GEMV), 1 where not
/// measured. On an H100 host, beside each other at decode's `ffn_gate`
/// shares, the CPU part ran at 0.86–0.89 of its speed alone and the copies
/// at 0.57–0.62 (`docs/benchmarks.md`, offload).
pub(crate) fn concurrent_cpu_and_copies(
    cpu: f64,
    start: f64,
    copying: f64,
    cpu_factor: f64,
    copy_factor: f64,
) -> (f64, f64) {
    let (fc, fg) = (cpu_factor.clamp(1e-3, 1.0), copy_factor.clamp(1e-3, 1.0));
    if cpu <= start || copying <= 0.0 {
        return (cpu, copying);
    }
    let left = cpu - start;
    let (tc, tg) = (left / fc, copying / fg);
    if tc <= tg {
        // The CPU part ends inside the copies, which then run alone.
        (start + tc, tc + (copying - fg * tc))
    } else {
        // The copies end first; the CPU part's rest runs alone.
        (start + tg + (left - fc * tg), tg)
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
