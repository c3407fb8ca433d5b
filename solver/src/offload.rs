//! ScheInfer offload on a discrete-GPU host: CC/CG/GG slicing with the
//! PCIe α+β·n cost, the GPU streaming its weights alone, and token
//! assignment in prefill. Which weights stay resident is chosen in
//! [`crate::residency`].

use crate::engine::{Cand, GroupMode, INF, OpCtx, Shape};

impl OpCtx<'_, '_> {
    /// Offload-mode candidates for the layers solved, as their group's
    /// mode allows ([`crate::engine::OffloadSetup::mode`]): the CPU alone;
    /// the GPU alone when every row is resident; the GPU alone streaming
    /// the rows that are not (no CC rows); and the best CC/CG/GG slicing.
    /// Alone, each costs what it costs outside offload mode
    /// ([`OpCtx::single`]): runtime-min keeps activations in host memory,
    /// so a GPU alone still copies its input in and its output back, and
    /// pays its launch and completion notice.
    pub(crate) fn offload_cands(&self, m: u32) -> Vec<Cand> {
        let o = self.setup.offload.as_ref().expect("offload mode");
        let gg = self.resident.unwrap_or(0).min(self.n);
        let mode = o.mode(gg, self.n);
        let mut out = vec![];
        if mode != GroupMode::Gpu
            && let Some(cpu) = o.cpu
        {
            out.push(self.single(cpu, m));
        }
        if mode == GroupMode::Cpu {
            return out;
        }
        if gg == self.n {
            out.push(self.single(o.gpu, m));
        } else {
            let g_gg = self.gg_time(m, gg);
            out.push(self.offload_cost_with(m, gg, 0, 0, g_gg));
        }
        if mode == GroupMode::Any && o.cpu.is_some() {
            out.extend(self.offload_search(m, gg));
            if self.phase == hetero_plan::Phase::Prefill && m > 1 {
                out.extend(self.token_assignment(m, gg));
            }
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
    /// other on its compute stream, each a launch and a wait of its own:
    /// the resident GG rows; the CG rows, whose weights cross PCIe from
    /// page-locked memory (`copy_h2d`, α+β·n per step); and the CC rows of
    /// the tokens assigned to the GPU, copied the same way. The weight
    /// copies run on a copy stream through a small device staging ring:
    /// an operator's copies start while the previous operator computes and
    /// run beside its own GG rows and CPU part, so in a run of operators
    /// the GPU side costs max(copies, GEMMs), not their sum. The copies
    /// and the CPU part read host memory at once and slow each other by
    /// the processors' measured concurrent-bandwidth factors
    /// ([`concurrent_cpu_and_copies`]). Every step copies the input in and
    /// its output back from host memory, where runtime-min keeps
    /// activations, and scatters its columns into the merged output
    /// ([`OpCtx::part_copy_us`]); the CPU part's output is scattered last.
    /// `g_gg` is the GPU time of the resident rows.
    pub(crate) fn offload_cost_with(&self, m: u32, gg: u32, cc: u32, ng: u32, g_gg: f64) -> Cand {
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
        // activation copies).
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
        let gemms: f64 = steps.iter().map(|s| s.1).sum();
        let mut copying: f64 = steps.iter().map(|s| s.0).sum();
        let gpu_copy: f64 = steps.iter().map(|s| s.2).sum();
        let launches = steps.len() as f64;
        let (host, host_block) = (gp.alone_overhead_us(), gp.alone_overhead_block_us());
        let mc = m - ng;
        let (cpu_compute, cpu_copy) = match cpu {
            Some(cpu) if cc > 0 && mc > 0 => {
                let cp = &procs[cpu];
                // The CPU part and the weight copies start together and
                // share the host's memory: each slows the other.
                let (cpu_time, copies) = concurrent_cpu_and_copies(
                    self.time(cpu, mc, cc),
                    0.0,
                    copying,
                    cp.concurrent,
                    gp.concurrent,
                );
                copying = copies;
                (cpu_time, self.part_copy_us(cpu, mc, cc))
            }
            _ => (0.0, 0.0),
        };
        let gpu_compute = gemms.max(copying);
        let (cpu_sync_us, cpu_sync_block_us) =
            cpu.map_or((0.0, 0.0), |c| (procs[c].sync_us, procs[c].sync_block_us));
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
            (cpu_sync_us, cpu_sync_block_us)
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
        let parts = match cpu {
            Some(_) => crate::engine::Times::from_slice(&[cpu_compute, gpu_compute]),
            None => crate::engine::Times::from_slice(&[gpu_compute]),
        };
        Cand {
            shape: Shape::Offload {
                cpu,
                gpu,
                cc,
                cg,
                gg,
                gpu_tokens: ng,
            },
            parts,
            sync,
            sync_block: sync + (total_block - total),
            copy,
            total,
            sync_rule: "one launch and wait per GPU step (resident, copied, token-assigned rows), weight copies on a copy stream beside the GEMMs, the CPU part beside them",
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
