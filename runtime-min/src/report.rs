//! What a run reports: per operator predicted against measured, totals per
//! phase, dispatch overhead, the check, and where every time came from.

use serde::Serialize;

/// Median of a list (0 for an empty one).
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        0.5 * (s[n / 2 - 1] + s[n / 2])
    }
}

/// A quantile (nearest rank) of a list.
pub fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let i = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1;
    s[i]
}

/// A processor the run used.
#[derive(Debug, Clone, Serialize)]
pub struct ProcessorReport {
    /// Id.
    pub id: String,
    /// Description.
    pub name: String,
    /// `real`, `simulated` (a timing model) or `emulated`.
    pub timing: String,
    /// The dtype the plan runs it in.
    pub dtype: String,
    /// Where its prepared GEMMs came from.
    pub graphs: String,
    /// Per GEMM, whether it was loaded (compiled ahead of time) or
    /// prepared at run time, where its source mixes the two.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub graph_origins: Vec<crate::graphs::GraphOrigin>,
    /// GEMMs prepared (or loaded) for this run.
    pub prepared: usize,
    /// Host time spent preparing them, µs.
    pub prepare_host_us: f64,
    /// Prepare time the backend reports for static graphs (simulated for npu-sim), µs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prepare_reported_us: Option<f64>,
    /// Bytes of its own memory that GEMMs keeping their weights on the
    /// host share to receive them (a GPU's staging ring), beside the
    /// resident weights.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub staging_bytes: Option<u64>,
}

/// One part of an operator's decision.
#[derive(Debug, Clone, Serialize)]
pub struct PartReport {
    /// Processor id.
    pub processor: String,
    /// What it computes, in words (`rows 0..768`, `tokens 0..512 in graphs 512`).
    pub share: String,
    /// The GEMMs it runs one after the other, `MxKxN` (M padded to the graph).
    pub gemms: Vec<String>,
    /// The plan's prediction of the part, µs.
    pub predicted_us: f64,
    /// The median time the backend reported for the part, µs (device timer,
    /// simulator model, or host clock from submit to observed completion).
    pub measured_us: f64,
    /// `real`, `simulated` or `emulated`.
    pub timing: String,
}

/// One operator of the phase.
#[derive(Debug, Clone, Serialize)]
pub struct OpReport {
    /// Canonical name.
    pub op: String,
    /// Layers that run it.
    pub layers: u32,
    /// Instances per layer (active experts).
    pub instances: u32,
    /// Rows per instance.
    pub m: u32,
    /// Input features.
    pub k: u32,
    /// Output features.
    pub n: u32,
    /// Strategy family.
    pub strategy: String,
    /// The decision in words.
    pub label: String,
    /// The plan's cost of one layer's worth, µs.
    pub predicted_us: f64,
    /// Median over executions of one layer's worth, µs. Real-only operators:
    /// the host wall clock. With a simulated or emulated part: the real
    /// overheads plus the overlapped part times (see `timing`).
    pub measured_us: f64,
    /// `measured_us / predicted_us`.
    pub ratio: f64,
    /// Mean over executions of one layer's worth, µs: what a sum of many
    /// executions grows with. Above `measured_us` where some executions
    /// ran far slower than the median (a core taken away for a while).
    pub mean_us: f64,
    /// The slowest execution of one layer's worth, µs.
    pub max_us: f64,
    /// Median host wall clock of one layer's worth, µs. With a simulated
    /// part it includes the host computing the simulated product: not a
    /// latency of any processor.
    pub wall_us: f64,
    /// Median runtime overhead per execution: the runtime's own code
    /// (decider and pool lookups, bookkeeping), outside every backend call, µs.
    pub dispatch_us: f64,
    /// Median time inside the backends' submit calls per execution, µs.
    pub submit_us: f64,
    /// Median time copying inputs and merging outputs, µs.
    pub copy_us: f64,
    /// The plan's copy term of one layer's worth (its share of
    /// `predicted_us`), µs.
    pub predicted_copy_us: f64,
    /// `measured` (every part real), `simulated` or `emulated`.
    pub timing: String,
    /// Executions measured.
    pub samples: usize,
    /// The parts.
    pub parts: Vec<PartReport>,
}

/// The `--check` outcome.
#[derive(Debug, Clone, Serialize)]
pub struct CheckReport {
    /// Outputs compared (every operator × layer × instance once).
    pub outputs: usize,
    /// Outputs within their bound.
    pub passed: usize,
    /// Largest normalised error seen.
    pub worst_rel_err: f64,
    /// Where, in words.
    pub worst: String,
    /// The bound of the worst output (its dtype's, at its K).
    pub worst_bound: f64,
    /// Every output over its bound, in words (at most 20).
    pub failures: Vec<String>,
    /// What the reference is.
    pub reference: String,
}

/// Dispatch overhead over every operator execution.
#[derive(Debug, Clone, Serialize)]
pub struct DispatchReport {
    /// Median per execution, µs.
    pub median_us: f64,
    /// 90th percentile, µs.
    pub p90_us: f64,
    /// Largest, µs.
    pub max_us: f64,
    /// Executions.
    pub samples: usize,
    /// Median time inside the backends' submit calls per execution, µs.
    pub submit_median_us: f64,
    /// Its 90th percentile, µs.
    pub submit_p90_us: f64,
}

/// The host CPU's speed during the run against the profile's
/// ([`hetero_agent::conditions::host_probe_us`]).
#[derive(Debug, Clone, Serialize)]
pub struct HostReport {
    /// The probe during the run, µs: the median of one before the timed
    /// passes and one after each repeat.
    pub probe_us: f64,
    /// The probe while the plan's processors were profiled, µs (from the
    /// plan; absent from plans solved before it was recorded).
    pub profiled_probe_us: Option<f64>,
    /// The host's speed during the run as a share of its speed when
    /// profiled: `profiled_probe_us / probe_us` (below 1: slower now).
    /// Host-side costs (launch, copies, submit, synchronisation) move
    /// with it, the device's kernels do not.
    pub speed: Option<f64>,
}

/// A whole run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The plan file.
    pub plan: String,
    /// The model.
    pub model: String,
    /// `prefill` or `decode`.
    pub phase: String,
    /// Sequence length (prefill) or tokens per step (decode).
    pub len: u32,
    /// Decode steps per pass (1 in prefill).
    pub steps: u32,
    /// Timed passes.
    pub repeat: u32,
    /// `poll` or `block`.
    pub sync: String,
    /// The decider.
    pub decider: String,
    /// `measured`, or `simulated` / `emulated` when some operator has such a part.
    pub timing: String,
    /// The plan's prediction for one pass (prefill) or one step (decode),
    /// µs: each operator's cost times its layers, scaled by the largest
    /// mean over median of its processors' profiled runs (the plan's
    /// `solver.mean_over_median`; 1 where it has none), summed.
    pub predicted_us: f64,
    /// The same sum of the operators' costs, unscaled: medians, µs.
    pub predicted_medians_us: f64,
    /// Median measured time of one pass (prefill) or one step (decode), µs.
    pub measured_us: f64,
    /// `measured_us / predicted_us`.
    pub ratio: f64,
    /// The operators' medians summed (`measured_us × layers` over
    /// `per_op`): one pass or step as if every execution took its median,
    /// µs. `measured_us` above it means some executions ran far slower
    /// than their medians; the plan predicts medians.
    pub op_medians_us: f64,
    /// Prefill: time to first token from the linear operators alone, µs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_us: Option<f64>,
    /// Decode: time per token, µs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_token_us: Option<f64>,
    /// Decode: tokens per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_per_s: Option<f64>,
    /// Median host wall clock of one pass or step, µs.
    pub wall_us: f64,
    /// Dispatch overhead per operator execution.
    pub dispatch: DispatchReport,
    /// The host CPU's speed, now and when profiled.
    pub host: HostReport,
    /// Per operator.
    pub per_op: Vec<OpReport>,
    /// The check, when asked for.
    pub check: Option<CheckReport>,
    /// Processors.
    pub processors: Vec<ProcessorReport>,
    /// Buffers of the pool: count and bytes; allocations made during timed passes.
    pub pool: PoolReport,
    /// With `--tree`: per operator, the agreement of a decision tree
    /// distilled from its table with the table.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tree: Option<Vec<TreeReport>>,
    /// What the numbers leave out, and assumptions.
    pub notes: Vec<String>,
}

/// A decision tree distilled from one operator's table.
#[derive(Debug, Clone, Serialize)]
pub struct TreeReport {
    /// Operator.
    pub op: String,
    /// Lengths in the table.
    pub lengths: usize,
    /// Distinct strategies (classes).
    pub classes: usize,
    /// Leaves of the tree.
    pub leaves: usize,
    /// Depth of the tree.
    pub depth: usize,
    /// Share of the table's lengths where the tree picks the table's strategy.
    pub agreement: f64,
}

/// The buffer pool.
#[derive(Debug, Clone, Serialize)]
pub struct PoolReport {
    /// Buffers.
    pub buffers: usize,
    /// Bytes they hold.
    pub bytes: usize,
    /// Buffers grown during the timed passes (0: every layer reused them).
    pub grown_while_timed: usize,
    /// Where the buffers live: `heap`, or the processor whose direct-copy
    /// host memory they are (page-locked memory of a discrete GPU).
    pub memory: String,
}

pub(crate) fn fmt_us(us: f64) -> String {
    if us >= 1e6 {
        format!("{:.2} s", us / 1e6)
    } else if us >= 1e3 {
        format!("{:.2} ms", us / 1e3)
    } else {
        format!("{us:.1} µs")
    }
}

impl Report {
    /// The report as a table for people.
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{} {} len {}{} on {} — sync {}, {} timed pass(es), decider {}",
            self.model,
            self.phase,
            self.len,
            if self.phase == "decode" {
                format!(" × {} steps", self.steps)
            } else {
                String::new()
            },
            self.processors
                .iter()
                .map(|p| if p.timing == "real" {
                    p.id.clone()
                } else {
                    format!("{} ({})", p.id, p.timing)
                })
                .collect::<Vec<_>>()
                .join(", "),
            self.sync,
            self.repeat,
            self.decider,
        );
        let _ = writeln!(
            s,
            "{:<14} {:>6} {:<10} {:>11} {:>11} {:>6} {:>9}  decision",
            "op", "layers", "strategy", "predicted", "measured", "ratio", "dispatch"
        );
        for o in &self.per_op {
            let _ = writeln!(
                s,
                "{:<14} {:>6} {:<10} {:>11} {:>11} {:>6.2} {:>9}  {}{}",
                o.op,
                o.layers,
                o.strategy,
                fmt_us(o.predicted_us),
                fmt_us(o.measured_us),
                o.ratio,
                fmt_us(o.dispatch_us),
                o.label,
                if o.timing == "measured" {
                    String::new()
                } else {
                    format!(" [{}]", o.timing)
                }
            );
        }
        let what = if self.phase == "prefill" {
            "pass"
        } else {
            "step"
        };
        let _ = writeln!(
            s,
            "{what}: predicted {}, measured {} ({:.2}×; the operators' medians sum to {}){}",
            fmt_us(self.predicted_us),
            fmt_us(self.measured_us),
            self.ratio,
            fmt_us(self.op_medians_us),
            if self.timing == "measured" {
                String::new()
            } else {
                format!(" [{}: includes model times, not a latency]", self.timing)
            }
        );
        if let Some(t) = self.ttft_us {
            let _ = writeln!(s, "TTFT (linear operators): {}", fmt_us(t));
        }
        if let (Some(p), Some(r)) = (self.per_token_us, self.tokens_per_s) {
            let _ = writeln!(s, "per token: {}, {r:.1} tokens/s", fmt_us(p));
        }
        let _ = writeln!(
            s,
            "dispatch per operator: median {}, p90 {}, max {} over {} executions (runtime code); backend submit calls: median {}, p90 {}",
            fmt_us(self.dispatch.median_us),
            fmt_us(self.dispatch.p90_us),
            fmt_us(self.dispatch.max_us),
            self.dispatch.samples,
            fmt_us(self.dispatch.submit_median_us),
            fmt_us(self.dispatch.submit_p90_us),
        );
        for p in self
            .processors
            .iter()
            .filter(|p| !p.graph_origins.is_empty())
        {
            let _ = writeln!(s, "{} graphs: {}", p.id, p.graphs);
        }
        for p in &self.processors {
            if let Some(b) = p.staging_bytes {
                let _ = writeln!(
                    s,
                    "{} staging ring: {} of its memory for the weights copied every run, beside the resident weights",
                    p.id,
                    crate::runtime::bytes(b as u128)
                );
            }
        }
        let _ = writeln!(
            s,
            "host speed probe: {:.2} µs{}",
            self.host.probe_us,
            match (self.host.profiled_probe_us, self.host.speed) {
                (Some(p), Some(v)) => format!(" ({p:.2} µs when profiled: {v:.2}× that speed)"),
                _ => " (the plan records none from its profile)".into(),
            }
        );
        if let Some(c) = &self.check {
            let _ = writeln!(
                s,
                "check: {} of {} outputs within bound (worst {:.2e} at {}, bound {:.2e}; {})",
                c.passed, c.outputs, c.worst_rel_err, c.worst, c.worst_bound, c.reference
            );
            for f in &c.failures {
                let _ = writeln!(s, "  FAILED {f}");
            }
        }
        if let Some(t) = &self.tree {
            for r in t {
                let _ = writeln!(
                    s,
                    "tree {}: {} strategies over {} lengths, {} leaves, depth {}: agrees with the table at {:.1} % of lengths",
                    r.op,
                    r.classes,
                    r.lengths,
                    r.leaves,
                    r.depth,
                    100.0 * r.agreement
                );
            }
        }
        for n in &self.notes {
            let _ = writeln!(s, "note: {n}");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_quantile() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
        assert_eq!(
            quantile(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0], 0.9),
            9.0
        );
        assert_eq!(quantile(&[5.0], 0.9), 5.0);
    }
}
