//! Executing prepared operators: one operator for an embedding engine
//! ([`Runtime::linear`]), or a whole phase, warm-up and timed passes
//! ([`Runtime::run`]).

use std::time::Instant;

use hetero_agent::{Backend, Gemm};
use hetero_plan::{LinearOp, OpRole, Phase, Plan};

use super::{LinearTiming, RunSpec, Runtime};
use crate::check::{self, OutputCheck};
use crate::exec::{self, Failure, Part, Sample, SyncChoice};
use crate::report::Report;
use crate::{Error, Result};

/// One output of the warm-up pass compared with the host reference.
pub(super) struct CheckedOutput {
    /// Which output, and where its worst element is.
    pub what: String,
    pub result: OutputCheck,
    /// The largest error its processors' dtypes allow.
    pub bound: f64,
}

/// What one run measured, for its report.
pub(super) struct Measured {
    /// Per operator, one sample per execution (one per layer and pass).
    pub samples: Vec<Vec<Sample>>,
    /// Per timed pass (or decode step), the operators' times summed.
    pub totals: Vec<f64>,
    /// Per timed pass (or decode step), the host wall clock.
    pub walls: Vec<f64>,
    /// The host speed probe, around the timed passes.
    pub probes: Vec<f64>,
    /// The warm-up pass's outputs, when checked.
    pub checks: Vec<CheckedOutput>,
    /// Pool buffers replaced during the timed passes.
    pub grown_while_timed: usize,
    /// Host time preparing every GEMM of the length, µs.
    pub prepare_wall: f64,
}

impl Runtime {
    /// Runs one operator of one layer at a length on `input`
    /// (`instances × M × K`, row-major) into `output` (`instances × M × N`),
    /// as the plan decides; prepares it on first use. `output` is written
    /// only when every part succeeded.
    pub fn linear(
        &mut self,
        op: &str,
        phase: Phase,
        layer: u32,
        len: u32,
        input: &[f32],
        output: &mut [f32],
    ) -> Result<LinearTiming> {
        self.prepare_op(op, phase, len)?;
        let oi = self.op_of_layer(op, phase, layer, len)?;
        let first = self.plan.ops[oi].first_layer;
        let Runtime {
            prepared,
            gemms,
            output: pool_out,
            stage,
            sync,
            plan,
            prefetch,
            ..
        } = self;
        let p = prepared.get_mut(&(oi, len)).expect("prepared above");
        let (m, k, n, inst) = (p.m, p.k, p.n, p.instances as usize);
        // The table's group of layers starts at `first`.
        let at = layer.saturating_sub(first) as usize;
        if at >= p.layers.len() {
            return Err(Error::arg(
                "layer",
                format!(
                    "`{op}` has {} layers, not layer {layer}",
                    first as usize + p.layers.len()
                ),
            ));
        }
        if input.len() != inst * m * k || output.len() != inst * m * n {
            return Err(Error::arg(
                "buffers",
                format!(
                    "`{op}` at length {len} takes {inst}×{m}×{k} inputs and {inst}×{m}×{n} outputs; got {} and {}",
                    input.len(),
                    output.len()
                ),
            ));
        }
        let predicted = p.decision.cost.total_with(*sync == SyncChoice::Block);
        let mut total = Sample::default();
        // Merged into the pool's buffer, copied out only on success.
        let mut staged = vec![0f32; inst * m * n];
        for i in 0..inst {
            let parts = &mut p.layers[at][i];
            let s = exec::run_instance(
                gemms,
                parts,
                &input[i * m * k..(i + 1) * m * k],
                k,
                &mut pool_out[..m * n],
                n,
                stage,
                *sync,
                prefetch,
            )
            .map_err(processor_error(plan, oi, layer, len))?;
            staged[i * m * n..(i + 1) * m * n].copy_from_slice(&pool_out[..m * n]);
            total.add(&s);
        }
        output.copy_from_slice(&staged);
        Ok(LinearTiming {
            measured_us: total.measured_us,
            wall_us: total.wall_us,
            dispatch_us: total.dispatch_us,
            predicted_us: predicted,
        })
    }

    /// Compares `output`, written by [`Runtime::linear`] for the same
    /// operator, layer and length from `input`, with the host's f64
    /// reference of the whole product (the worst of its instances).
    pub fn check_linear(
        &self,
        op: &str,
        phase: Phase,
        layer: u32,
        len: u32,
        input: &[f32],
        output: &[f32],
    ) -> Result<crate::model::LinearCheck> {
        let oi = self.op_of_layer(op, phase, layer, len)?;
        let at = layer.saturating_sub(self.plan.ops[oi].first_layer) as usize;
        let p = self.prepared.get(&(oi, len)).ok_or_else(|| {
            Error::arg(
                "check",
                format!("`{op}` has not run at {phase} length {len}"),
            )
        })?;
        let (m, k, n) = (p.m, p.k, p.n);
        let lop = &self.model.ops[p.model_op];
        let mut worst: Option<crate::model::LinearCheck> = None;
        for (i, parts) in p.layers[at].iter().enumerate() {
            let w = self
                .weights
                .get(lop, self.weights.weight_layer(layer), i as u32)?;
            let (a, c) = (&input[i * m * k..][..m * k], &output[i * m * n..][..m * n]);
            let result = check_parts(parts, (m, k, n), a, &w, c);
            let instance = (p.instances > 1).then_some(i);
            let this = crate::model::LinearCheck {
                what: format!(
                    "{phase} {}",
                    output_name(lop, layer, instance, result.worst)
                ),
                bound: parts_bound(&self.gemms, &self.backends, parts, k),
                result,
            };
            if worst
                .as_ref()
                .is_none_or(|w| this.result.rel_err / this.bound > w.result.rel_err / w.bound)
            {
                worst = Some(this);
            }
        }
        Ok(worst.expect("an operator has at least one instance"))
    }

    /// Prepares and runs a phase: one untimed warm-up pass (checked when
    /// asked), then `repeat` timed passes; reports predicted against measured.
    pub fn run(&mut self, spec: &RunSpec) -> Result<Report> {
        if spec.len == 0 || spec.repeat == 0 || spec.steps == 0 {
            return Err(Error::arg(
                "run",
                "the length, the steps and the repeat count must be at least 1",
            ));
        }
        let ops = self.phase_ops(spec.phase);
        if ops.is_empty() {
            let phase = spec.phase;
            let why = format!("the plan has no {phase} operators; solve it with `--phase {phase}`");
            return Err(Error::arg("--phase", why));
        }
        let t = Instant::now();
        self.prepare(spec.phase, spec.len)?;
        let prepare_wall = t.elapsed().as_secs_f64() * 1e6;
        self.seed_prefetch(&ops, spec.len);
        // Warm-up (and check).
        let mut checks = Vec::new();
        self.pass(
            &ops,
            spec,
            None,
            if spec.check { Some(&mut checks) } else { None },
        )?;
        let mut measured = self.timed_passes(&ops, spec)?;
        measured.checks = checks;
        measured.prepare_wall = prepare_wall;
        Ok(self.report(spec, &ops, measured))
    }

    /// The timed passes of a run (decode: `steps` per pass), with the
    /// host's speed probed around them (not inside them).
    fn timed_passes(&mut self, ops: &[usize], spec: &RunSpec) -> Result<Measured> {
        let steps = if spec.phase == Phase::Decode {
            spec.steps
        } else {
            1
        };
        let grown_before = self.grown;
        let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); ops.len()];
        let mut totals = Vec::new();
        let mut walls = Vec::new();
        let mut probes: Vec<f64> = hetero_agent::conditions::host_probe_us()
            .into_iter()
            .collect();
        for _ in 0..spec.repeat {
            for _ in 0..steps {
                let before: Vec<usize> = samples.iter().map(Vec::len).collect();
                let t = Instant::now();
                self.pass(ops, spec, Some(&mut samples), None)?;
                walls.push(t.elapsed().as_secs_f64() * 1e6);
                totals.push(
                    samples
                        .iter()
                        .zip(&before)
                        .flat_map(|(s, &b)| s[b..].iter().map(|x| x.measured_us))
                        .sum::<f64>(),
                );
            }
            probes.extend(hetero_agent::conditions::host_probe_us());
        }
        Ok(Measured {
            samples,
            totals,
            walls,
            probes,
            checks: Vec::new(),
            grown_while_timed: self.grown - grown_before,
            prepare_wall: 0.0,
        })
    }

    /// One pass over every operator and layer of a phase.
    fn pass(
        &mut self,
        ops: &[usize],
        spec: &RunSpec,
        mut samples: Option<&mut Vec<Vec<Sample>>>,
        mut checks: Option<&mut Vec<CheckedOutput>>,
    ) -> Result<()> {
        for (j, layer) in self.pass_order(ops) {
            let s = self.run_layer(ops[j], spec.len, layer, checks.as_deref_mut())?;
            if let Some(samples) = samples.as_deref_mut() {
                samples[j].push(s);
            }
        }
        Ok(())
    }

    /// Seeds the successors of the GEMMs with host weights from the pass
    /// order (`ops` prepared at `len`): instances in order, and per
    /// instance its parts' steps in order, as the executor submits them on
    /// each processor.
    fn seed_prefetch(&mut self, ops: &[usize], len: u32) {
        let mut order = Vec::new();
        for (j, layer) in self.pass_order(ops) {
            let p = &self.prepared[&(ops[j], len)];
            let at = layer - self.plan.ops[ops[j]].first_layer;
            for parts in &p.layers[at as usize] {
                for part in parts {
                    order.extend(
                        part.steps
                            .iter()
                            .filter(|s| s.staged)
                            .map(|s| (part.proc, s.gemm)),
                    );
                }
            }
        }
        self.prefetch.seed(&order);
    }

    /// The order of a pass, as (index into `ops`, layer): decoder layers in
    /// order, operators in model order; the lm_head (one layer) sorts last
    /// and runs after them.
    fn pass_order(&self, ops: &[usize]) -> Vec<(usize, u32)> {
        let layers = ops
            .iter()
            .map(|&oi| self.plan.ops[oi].layer_range().end)
            .max()
            .unwrap_or(0);
        let head: Vec<bool> = ops
            .iter()
            .map(|&oi| {
                self.model
                    .op(&self.plan.ops[oi].op)
                    .is_some_and(|o| o.role == OpRole::LmHead)
            })
            .collect();
        let mut order: Vec<(usize, u32)> = Vec::new();
        for l in 0..layers {
            for (j, &oi) in ops.iter().enumerate() {
                // A table decides the layers of its group only.
                if !head[j] && self.plan.ops[oi].covers_layer(l) {
                    order.push((j, l));
                }
            }
        }
        order.extend(
            head.iter()
                .enumerate()
                .filter(|(_, h)| **h)
                .map(|(j, _)| (j, 0)),
        );
        order
    }

    /// All instances of one operator in one layer, from the pool's input.
    fn run_layer(
        &mut self,
        oi: usize,
        len: u32,
        layer: u32,
        mut checks: Option<&mut Vec<CheckedOutput>>,
    ) -> Result<Sample> {
        let Runtime {
            prepared,
            gemms,
            inputs,
            output,
            stage,
            sync,
            plan,
            model,
            weights,
            backends,
            prefetch,
            ..
        } = self;
        // The lookups count as dispatch.
        let t_lookup = Instant::now();
        let p = prepared
            .get_mut(&(oi, len))
            .expect("prepared before the pass");
        let (m, k, n) = (p.m, p.k, p.n);
        let input = &inputs[&(oi, m as u32)];
        let lookup_us = t_lookup.elapsed().as_secs_f64() * 1e6;
        let mut total = Sample {
            wall_us: lookup_us,
            measured_us: lookup_us,
            dispatch_us: lookup_us,
            ..Sample::default()
        };
        for inst in 0..p.instances as usize {
            let at = layer - plan.ops[oi].first_layer;
            let parts = &mut p.layers[at as usize][inst];
            let s = exec::run_instance(
                gemms,
                parts,
                input,
                k,
                &mut output[..m * n],
                n,
                stage,
                *sync,
                prefetch,
            )
            .map_err(processor_error(plan, oi, layer, len))?;
            if let Some(c) = checks.as_deref_mut() {
                let lop = &model.ops[p.model_op];
                let w = weights.get(lop, weights.weight_layer(layer), inst as u32)?;
                let result = check_parts(parts, (m, k, n), input, &w, &output[..m * n]);
                let instance = (p.instances > 1).then_some(inst);
                c.push(CheckedOutput {
                    what: output_name(lop, layer, instance, result.worst),
                    bound: parts_bound(gemms, backends, parts, k),
                    result,
                });
            }
            total.add(&s);
        }
        Ok(total)
    }
}

/// The error of a part that failed while running `plan.ops[oi]`.
fn processor_error(plan: &Plan, oi: usize, layer: u32, len: u32) -> impl FnOnce(Failure) -> Error {
    move |(proc, source)| Error::Processor {
        processor: plan.processors[proc].clone(),
        op: plan.ops[oi].op.clone(),
        layer,
        phase: plan.ops[oi].phase,
        len,
        source: Box::new(source),
    }
}

/// An instance's merged output against the host reference, per block its
/// parts wrote.
fn check_parts(
    parts: &[Part],
    dims: (usize, usize, usize),
    input: &[f32],
    w: &[f32],
    output: &[f32],
) -> OutputCheck {
    let blocks: Vec<_> = parts
        .iter()
        .flat_map(|pt| pt.steps.iter().map(|s| (s.rows.clone(), s.cols.clone())))
        .collect();
    check::check(dims, input, w, output, &blocks)
}

/// The largest error the parts' processors allow in their dtypes at `k`.
fn parts_bound(
    gemms: &[Box<dyn Gemm>],
    backends: &[Box<dyn Backend>],
    parts: &[Part],
    k: usize,
) -> f64 {
    parts
        .iter()
        .map(|pt| {
            let spec = gemms[pt.steps[0].gemm].spec();
            backends[pt.proc].tolerance(spec.dtype, k as u32)
        })
        .fold(0.0, f64::max)
}

/// "`op` layer L[ instance I] at (row, column)".
fn output_name(
    lop: &LinearOp,
    layer: u32,
    instance: Option<usize>,
    worst: (usize, usize),
) -> String {
    format!(
        "`{}` layer {layer}{} at ({}, {})",
        lop.name,
        instance
            .map(|i| format!(" instance {i}"))
            .unwrap_or_default(),
        worst.0,
        worst.1
    )
}
