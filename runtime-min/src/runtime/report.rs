//! Reporting a run: per operator and in total, the plan's prediction
//! against the measured medians, the dispatch overhead, the host's speed,
//! the output check, the processors and the activation pool, with notes
//! that say how to read them.

use hetero_plan::{Phase, SolverInfo, Timing};

use super::execute::{CheckedOutput, Measured};
use super::prepare::Prepared;
use super::{RunSpec, Runtime, label};
use crate::exec::{Sample, SyncChoice};
use crate::report::{
    self, CheckReport, DispatchReport, HostReport, OpReport, PartReport, PoolReport,
    ProcessorReport, Report,
};

/// How far the host's speed may differ from the profile's before the
/// report says so.
const HOST_SPEED_TOLERANCE: f64 = 0.1;

/// How far a pass or step may run above its operators' medians summed
/// before the report says why.
const OUTLIER_TOLERANCE: f64 = 0.02;

/// One operator's report, with what the run's totals gather from it.
struct OpSummary {
    report: OpReport,
    /// The prediction over all layers, scaled by its processors' largest
    /// mean over median.
    predicted_scaled: f64,
    /// Per execution, dispatch and submit time per instance.
    dispatch_each: Vec<f64>,
    submit_each: Vec<f64>,
    simulated: bool,
    emulated: bool,
}

/// A run's totals, as its notes read them.
#[derive(Clone, Copy)]
struct Totals {
    /// The median pass or step.
    measured: f64,
    /// The operators' medians summed over their layers.
    op_medians: f64,
    /// The plan's prediction, scaled by mean over median.
    predicted: f64,
    /// The plan's median costs summed.
    predicted_medians: f64,
    simulated: bool,
    emulated: bool,
}

impl Runtime {
    pub(super) fn report(&self, spec: &RunSpec, ops: &[usize], m: Measured) -> Report {
        let summaries: Vec<OpSummary> = ops
            .iter()
            .zip(&m.samples)
            .map(|(&oi, s)| self.op_summary(oi, &self.prepared[&(oi, spec.len)], s))
            .collect();
        let predicted_total: f64 = summaries.iter().map(|o| o.predicted_scaled).sum();
        let predicted_medians: f64 = summaries
            .iter()
            .map(|o| o.report.predicted_us * o.report.layers as f64)
            .sum();
        let all_dispatch: Vec<f64> = summaries
            .iter()
            .flat_map(|o| o.dispatch_each.clone())
            .collect();
        let all_submit: Vec<f64> = summaries
            .iter()
            .flat_map(|o| o.submit_each.clone())
            .collect();
        let any_sim = summaries.iter().any(|o| o.simulated);
        let any_emu = summaries.iter().any(|o| o.emulated);
        let per_op: Vec<OpReport> = summaries.into_iter().map(|o| o.report).collect();
        let measured = report::median(&m.totals);
        let op_medians: f64 = per_op.iter().map(|o| o.measured_us * o.layers as f64).sum();
        let host = self.host_report(&m.probes);
        let totals = Totals {
            measured,
            op_medians,
            predicted: predicted_total,
            predicted_medians,
            simulated: any_sim,
            emulated: any_emu,
        };
        let notes = self.notes(spec, &per_op, &totals, &host, m.prepare_wall);
        let decode = spec.phase == Phase::Decode;
        let per_token = decode.then(|| measured / spec.len as f64);
        Report {
            plan: self.plan_path.display().to_string(),
            model: self.model.name.clone(),
            phase: spec.phase.to_string(),
            len: spec.len,
            steps: if decode { spec.steps } else { 1 },
            repeat: spec.repeat,
            sync: self.sync.as_str().into(),
            decider: "ranges (O(log ranges) per operator and length)".into(),
            timing: timing_of(any_sim, any_emu).into(),
            predicted_us: predicted_total,
            predicted_medians_us: predicted_medians,
            measured_us: measured,
            ratio: ratio(measured, predicted_total),
            op_medians_us: op_medians,
            ttft_us: (!decode).then_some(measured),
            per_token_us: per_token,
            tokens_per_s: per_token.map(|p| 1e6 / p),
            wall_us: report::median(&m.walls),
            dispatch: DispatchReport {
                median_us: report::median(&all_dispatch),
                p90_us: report::quantile(&all_dispatch, 0.9),
                max_us: all_dispatch.iter().cloned().fold(0.0, f64::max),
                samples: all_dispatch.len(),
                submit_median_us: report::median(&all_submit),
                submit_p90_us: report::quantile(&all_submit, 0.9),
            },
            host,
            per_op,
            check: spec.check.then(|| check_report(&m.checks)),
            processors: self.processor_reports(),
            pool: self.pool_report(m.grown_while_timed),
            tree: None,
            notes,
        }
    }

    /// One operator's medians over its executions `s`, against the plan's
    /// prediction with this run's wait.
    fn op_summary(&self, oi: usize, p: &Prepared, s: &[Sample]) -> OpSummary {
        let op = &self.plan.ops[oi];
        let d = &p.decision;
        let col = |f: &dyn Fn(&Sample) -> f64| s.iter().map(f).collect::<Vec<f64>>();
        let measured_each = col(&|x| x.measured_us);
        let measured = report::median(&measured_each);
        let dispatch_each: Vec<f64> = col(&|x| x.dispatch_us / p.instances as f64);
        let submit_each: Vec<f64> = col(&|x| x.submit_us / p.instances as f64);
        let sim = s.iter().any(|x| x.simulated);
        let emu = s.iter().any(|x| x.emulated);
        let predicted = d.cost.total_with(self.sync == SyncChoice::Block);
        let parts0 = &p.layers[0][0];
        let predicted_scaled = predicted
            * op.layers as f64
            * parts0
                .iter()
                .map(|part| self.mean_over_median(&self.plan.processors[part.proc]))
                .fold(1.0, f64::max);
        let report = OpReport {
            op: op.op.clone(),
            layers: op.layers,
            instances: p.instances,
            m: p.m as u32,
            k: p.k as u32,
            n: p.n as u32,
            strategy: d.strategy.kind().to_string(),
            label: label(&d.strategy, p.m as u32),
            predicted_us: predicted,
            measured_us: measured,
            ratio: ratio(measured, predicted),
            mean_us: measured_each.iter().sum::<f64>() / measured_each.len().max(1) as f64,
            max_us: measured_each.iter().copied().fold(0.0, f64::max),
            wall_us: report::median(&col(&|x| x.wall_us)),
            dispatch_us: report::median(&dispatch_each),
            submit_us: report::median(&submit_each),
            copy_us: report::median(&col(&|x| x.copy_us)),
            predicted_copy_us: d.cost.copy_us,
            timing: timing_of(sim, emu).into(),
            samples: s.len(),
            parts: self.part_reports(p, s),
        };
        OpSummary {
            report,
            predicted_scaled,
            dispatch_each,
            submit_each,
            simulated: sim,
            emulated: emu,
        }
    }

    /// The parts of an operator (as layer 0 runs them), each with its
    /// median time over the executions `s`.
    fn part_reports(&self, p: &Prepared, s: &[Sample]) -> Vec<PartReport> {
        p.layers[0][0]
            .iter()
            .enumerate()
            .map(|(i, part)| PartReport {
                processor: self.plan.processors[part.proc].clone(),
                share: p.shares.get(i).map(|x| x.1.clone()).unwrap_or_default(),
                gemms: part
                    .steps
                    .iter()
                    .map(|st| self.gemms[st.gemm].spec().shape.to_string())
                    .collect(),
                predicted_us: part.predicted_us,
                measured_us: report::median(
                    &s.iter()
                        .map(|x| x.parts_us.get(i).copied().unwrap_or(0.0))
                        .collect::<Vec<_>>(),
                ),
                timing: timing_word(part.timing).into(),
            })
            .collect()
    }

    /// The report's notes: the runtime's own, then what this run's figures
    /// need said about them.
    fn notes(
        &self,
        spec: &RunSpec,
        per_op: &[OpReport],
        t: &Totals,
        host: &HostReport,
        prepare_wall: f64,
    ) -> Vec<String> {
        let Totals {
            measured,
            op_medians,
            predicted: predicted_total,
            predicted_medians,
            simulated: any_sim,
            emulated: any_emu,
        } = *t;
        let mut notes = self.notes.clone();
        let slowest = per_op
            .iter()
            .filter(|o| o.measured_us > 0.0)
            .max_by(|a, b| (a.max_us / a.measured_us).total_cmp(&(b.max_us / b.measured_us)))
            .map(|o| (o.op.as_str(), o.max_us / o.measured_us));
        notes.extend(outlier_note(spec.phase, measured, op_medians, slowest));
        if (predicted_total - predicted_medians).abs() > 1e-9 * predicted_medians {
            notes.push(format!(
                "the predicted {} ({}) is the operators' median costs summed ({}), each scaled by the largest mean / median of its processors' profiled runs ({}): a total counts the runs far slower than the rest, a median does not",
                unit(spec.phase),
                report::fmt_us(predicted_total),
                report::fmt_us(predicted_medians),
                self.plan
                    .solver
                    .as_ref()
                    .map(SolverInfo::mean_over_median_words)
                    .unwrap_or_default(),
            ));
        }
        if any_sim {
            notes.push("operators marked simulated include npu-sim parts: their time is the simulator's model (not a measurement), overlapped with the real parts; their host wall time is the CPU computing the simulated product, not an NPU latency".into());
        }
        if any_emu {
            notes.push("operators marked emulated ran on an emulator: results are real, times are not the processor's".into());
        }
        if spec.check {
            notes.push("--check compares the untimed warm-up pass; the timed passes run the same prepared GEMMs on the same inputs".into());
        }
        if self.sync == SyncChoice::Poll {
            notes.push("--sync poll: each wait sleeps through its part's predicted time less a margin (a tenth on cpu, OpenCL and QNN processors, 80 µs on CUDA) before it polls, so a part that ended sooner is seen then: where parts are long, polled ratios do not fall much below 0.9; --sync block shows whether the plan over-predicts".into());
        }
        notes.push(format!(
            "preparing every GEMM for this length took {:.1} ms of host time (not in the totals)",
            prepare_wall / 1e3
        ));
        notes.extend(host_note(host));
        notes
    }

    /// Every processor: its timing, dtype, graph source and what preparing
    /// its GEMMs cost.
    /// Per processor that holds a staging ring
    /// ([`Backend::staging_bytes`](hetero_agent::Backend::staging_bytes)),
    /// its id and the ring's bytes now.
    pub fn staging_bytes(&self) -> Vec<(String, u64)> {
        self.backends
            .iter()
            .filter_map(|b| Some((b.processor().id.clone(), b.staging_bytes()?)))
            .collect()
    }

    fn processor_reports(&self) -> Vec<ProcessorReport> {
        self.backends
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let pr = b.processor();
                ProcessorReport {
                    id: pr.id.clone(),
                    name: pr.name.clone(),
                    timing: timing_word(pr.timing()).into(),
                    dtype: self
                        .plan
                        .dtype(&pr.id)
                        .map(|d| d.to_string())
                        .unwrap_or_else(|| "f32 (the plan names none)".into()),
                    graphs: self.sources[i].describe(),
                    graph_origins: self.sources[i].origins(),
                    prepared: self.prep[i].prepared,
                    prepare_host_us: self.prep[i].host_us,
                    prepare_reported_us: self.prep[i].reported_us,
                    staging_bytes: b.staging_bytes(),
                }
            })
            .collect()
    }

    /// The activation pool: its buffers, their size and memory.
    fn pool_report(&self, grown_while_timed: usize) -> PoolReport {
        PoolReport {
            buffers: 2 + 2 + self.inputs.len(),
            bytes: 4
                * (self.output.len()
                    + self.stage.input.len()
                    + self.stage.output.len()
                    + self.inputs.values().map(|b| b.len()).sum::<usize>()),
            grown_while_timed,
            memory: self.pool_memory_name(),
        }
    }

    /// A processor's mean over median from the plan (1 where it has none).
    fn mean_over_median(&self, processor: &str) -> f64 {
        self.plan
            .solver
            .as_ref()
            .and_then(|s| s.mean_over_median.get(processor))
            .copied()
            .filter(|f| f.is_finite() && *f > 0.0)
            .unwrap_or(1.0)
    }

    /// The run's host probe against the one the plan records.
    fn host_report(&self, probes: &[f64]) -> HostReport {
        let probe_us = report::median(probes);
        let profiled = self.plan.solver.as_ref().and_then(|s| s.host_probe_us);
        HostReport {
            probe_us,
            profiled_probe_us: profiled,
            speed: profiled.filter(|_| probe_us > 0.0).map(|p| p / probe_us),
        }
    }

    /// `heap`, or the processor whose host memory the pool's buffers are.
    fn pool_memory_name(&self) -> String {
        let all = [&self.output, &self.stage.input, &self.stage.output]
            .into_iter()
            .chain(self.inputs.values())
            .filter(|b| !b.is_empty())
            .all(|b| b.is_backend_memory());
        match self.host_mem {
            Some(b) if all => format!("{} host memory", self.plan.processors[b]),
            Some(b) => format!(
                "heap, partly {} host memory (an allocation failed)",
                self.plan.processors[b]
            ),
            None => "heap".into(),
        }
    }
}

/// The warm-up pass's outputs against their bounds: how many passed, the
/// worst relative to its bound, and the first failures.
fn check_report(checks: &[CheckedOutput]) -> CheckReport {
    let failed: Vec<&CheckedOutput> = checks
        .iter()
        .filter(|c| !(c.result.rel_err.is_finite() && c.result.rel_err <= c.bound))
        .collect();
    let worst = checks
        .iter()
        .max_by(|a, b| (a.result.rel_err / a.bound).total_cmp(&(b.result.rel_err / b.bound)));
    CheckReport {
        outputs: checks.len(),
        passed: checks.len() - failed.len(),
        worst_rel_err: worst.map(|w| w.result.rel_err).unwrap_or(0.0),
        worst: worst.map(|w| w.what.clone()).unwrap_or_default(),
        worst_bound: worst.map(|w| w.bound).unwrap_or(0.0),
        failures: failed
            .iter()
            .take(20)
            .map(|c| {
                format!(
                    "{}: error {:.3e} > bound {:.3e}",
                    c.what, c.result.rel_err, c.bound
                )
            })
            .collect(),
        reference: "host f64 product of the whole operator (agent metric |C-ref| / sum|A||W|)"
            .into(),
    }
}

/// `simulated` where any part is, else `emulated` where any part is, else
/// `measured`.
fn timing_of(sim: bool, emu: bool) -> &'static str {
    if sim {
        "simulated"
    } else if emu {
        "emulated"
    } else {
        "measured"
    }
}

/// A processor's or part's timing in the report's words.
fn timing_word(t: Timing) -> &'static str {
    match t {
        Timing::Real => "real",
        Timing::Simulated => "simulated",
        Timing::Emulated => "emulated",
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { f64::NAN }
}

/// What one timed total covers: a prefill pass or a decode step.
fn unit(phase: Phase) -> &'static str {
    if phase == Phase::Decode {
        "step"
    } else {
        "pass"
    }
}

/// A note when the measured pass or step (`measured`, the median of the
/// totals) is above its operators' medians summed (`op_medians`):
/// executions far slower than their median count in every total but in
/// no operator's median. `slowest`: the operator whose slowest execution
/// was the most above its median, and by how much.
pub(super) fn outlier_note(
    phase: Phase,
    measured: f64,
    op_medians: f64,
    slowest: Option<(&str, f64)>,
) -> Option<String> {
    if op_medians <= 0.0 || measured <= op_medians * (1.0 + OUTLIER_TOLERANCE) {
        return None;
    }
    Some(format!(
        "the measured {} is {:.1} % above its operators' medians summed: some executions ran far slower than their medians{}; every total holds them and no operator's median does",
        unit(phase),
        (measured / op_medians - 1.0) * 100.0,
        slowest
            .map(|(op, x)| format!(" (the slowest, of {op}, at {x:.1}× its median)"))
            .unwrap_or_default()
    ))
}

/// A note when the host ran at another speed than when it was profiled.
pub(super) fn host_note(h: &HostReport) -> Option<String> {
    let (speed, then) = (h.speed?, h.profiled_probe_us?);
    if (speed - 1.0).abs() <= HOST_SPEED_TOLERANCE {
        return None;
    }
    Some(format!(
        "the host CPU ran at {speed:.2}× the speed it had when profiled (speed probe {:.2} µs, {then:.2} µs then): host-side costs (launch, copies, submit, synchronisation) are {} than the plan assumes, the kernels are not",
        h.probe_us,
        if speed < 1.0 { "higher" } else { "lower" }
    ))
}
