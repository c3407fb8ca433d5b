//! Preparing an operator at a length: one GEMM per step of every part of
//! every layer and instance (shared where layers, lengths or instances
//! need the same one), the staging buffers grown to fit, and the
//! operator's input.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use hetero_agent::{Backend, GemmSpec, HostBuf};
use hetero_plan::{DType, Decision, GemmShape, LinearOp, OperandOrder, Phase, WeightMode};

use super::Runtime;
use super::layout::{PartLayout, StepLayout};
use crate::exec::{FaultyGemm, Part, Step};
use crate::graphs::GraphRequest;
use crate::weights::{Weights, activation_seed};
use crate::{Error, Result};

/// Identifies a prepared GEMM so that lengths (a padded graph serves many)
/// and layers sharing weights reuse it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct GemmKey {
    op: String,
    layer: u32,
    instance: u32,
    pub proc: usize,
    pub spec: GemmSpec,
    first_col: u32,
    pub upload: bool,
}

/// One operator prepared at one length.
pub(super) struct Prepared {
    pub model_op: usize,
    /// The decision it runs, materialised from its range.
    pub decision: Decision,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub instances: u32,
    /// `[layer][instance]` → parts.
    pub layers: Vec<Vec<Vec<Part>>>,
    /// The parts' shares in words, for reports.
    pub shares: Vec<(usize, String)>,
}

/// What preparing cost one processor, for reports.
#[derive(Debug, Clone, Default)]
pub(super) struct PrepStat {
    pub prepared: usize,
    pub host_us: f64,
    pub reported_us: Option<f64>,
}

/// The operator being prepared.
pub(super) struct OpTarget<'a> {
    /// The plan operator's index.
    pub oi: usize,
    pub op: &'a str,
    pub phase: Phase,
    pub len: u32,
    pub lop: &'a LinearOp,
}

/// One part's processor while its steps are prepared.
pub(super) struct PartTarget {
    pub proc: usize,
    id: String,
    dtype: DType,
    order: OperandOrder,
    /// The processor's graph set takes the weights as an input: one graph
    /// per shape, shared by every layer and instance, each step writing
    /// its own weights before it runs.
    pub weights_input: bool,
}

/// One instance's weights `W[K, N]` in one layer, generated on first need.
struct InstanceWeights<'a> {
    lop: &'a LinearOp,
    layer: u32,
    instance: u32,
    w: Option<Vec<f32>>,
}

impl InstanceWeights<'_> {
    /// Columns `cols` of the weights, `W[K, cols]` row-major: borrowed
    /// when they are all of them (a model's worth is not copied again).
    fn columns(&mut self, weights: &Weights, cols: &Range<usize>) -> Result<Cow<'_, [f32]>> {
        let (lop, layer, instance) = (self.lop, self.layer, self.instance);
        if self.w.is_none() {
            self.w = Some(weights.get(lop, layer, instance)?);
        }
        let w = self.w.as_ref().expect("read above");
        let (k, n) = (lop.k as usize, lop.n as usize);
        if cols.len() == n {
            return Ok(Cow::Borrowed(w));
        }
        let mut s = Vec::with_capacity(k * cols.len());
        for r in 0..k {
            s.extend_from_slice(&w[r * n + cols.start..r * n + cols.end]);
        }
        Ok(Cow::Owned(s))
    }
}

impl Runtime {
    /// Prepares every operator of a phase at a length (all layers and
    /// instances); later runs at that length reuse it all. Refuses first,
    /// allocating nothing, when it would need more memory than the host or
    /// a processor has ([`Error::Memory`]).
    pub fn prepare(&mut self, phase: Phase, len: u32) -> Result<()> {
        let ops = self.phase_ops(phase);
        self.check_memory(phase, len, &ops)?;
        for oi in ops {
            self.prepare_table(oi, len)?;
        }
        Ok(())
    }

    /// Prepares `op` in `phase` at `len`: each of its tables (one per group
    /// of layers where the plan decides per group).
    pub(super) fn prepare_op(&mut self, op: &str, phase: Phase, len: u32) -> Result<()> {
        self.op_of(op, phase, len)?;
        let tables: Vec<usize> = (0..self.plan.ops.len())
            .filter(|&i| self.plan.ops[i].op == op && self.plan.ops[i].phase == phase)
            .collect();
        for oi in tables {
            self.prepare_table(oi, len)?;
        }
        Ok(())
    }

    /// Prepares the plan's table `oi` at `len`: its decision in each layer
    /// of its group.
    fn prepare_table(&mut self, oi: usize, len: u32) -> Result<()> {
        if self.prepared.contains_key(&(oi, len)) {
            return Ok(());
        }
        let (op, phase) = (self.plan.ops[oi].op.clone(), self.plan.ops[oi].phase);
        let op = op.as_str();
        let group = self.plan.ops[oi].layer_range();
        let (d, mi) = self.lookup_table(oi, len)?;
        self.check_memory(phase, len, &[oi])?;
        let lop: LinearOp = self.model.ops[mi].clone();
        let target = OpTarget {
            oi,
            op,
            phase,
            len,
            lop: &lop,
        };
        target.check_decision(&d)?;
        let layouts = self.layout(oi, &d, lop.n)?;
        let mut layers = Vec::with_capacity(group.len());
        for layer in group {
            let layer = self.weights.weight_layer(layer);
            let insts = (0..d.instances)
                .map(|instance| {
                    let mut w = InstanceWeights {
                        lop: &lop,
                        layer,
                        instance,
                        w: None,
                    };
                    layouts
                        .iter()
                        .map(|pl| self.prepare_part(&target, pl, &mut w))
                        .collect::<Result<Vec<Part>>>()
                })
                .collect::<Result<Vec<_>>>()?;
            layers.push(insts);
        }
        let (m, k, n) = (d.rows_m(), lop.k as usize, lop.n as usize);
        let pool = (&self.backends[..], self.host_mem);
        grow(&mut self.output, m as usize * n, &mut self.grown, pool);
        self.prepare_input(oi, op, m, k);
        let shares = layouts.iter().map(|pl| (pl.proc, pl.describe())).collect();
        self.prepared.insert(
            (oi, len),
            Prepared {
                model_op: mi,
                m: m as usize,
                k,
                n,
                instances: d.instances,
                decision: d,
                layers,
                shares,
            },
        );
        Ok(())
    }

    /// One part of one instance: its processor's dtype and operand order,
    /// and a prepared GEMM per step.
    fn prepare_part(
        &mut self,
        op: &OpTarget<'_>,
        pl: &PartLayout,
        w: &mut InstanceWeights<'_>,
    ) -> Result<Part> {
        let proc = pl.proc;
        let target = self.part_target(op.oi, proc);
        let steps = pl
            .steps
            .iter()
            .map(|sl| self.prepare_step(op, &target, sl, w))
            .collect::<Result<Vec<Step>>>()?;
        Ok(Part {
            proc,
            timing: self.backends[proc].processor().timing(),
            predicted_us: pl.predicted_us,
            steps,
            asynchronous: None,
        })
    }

    /// The processor, dtype and operand order of a part of `plan.ops[oi]`
    /// on `plan.processors[proc]`.
    pub(super) fn part_target(&self, oi: usize, proc: usize) -> PartTarget {
        let id = self.plan.processors[proc].clone();
        let dtype = self.plan.dtype(&id).unwrap_or_else(|| {
            let caps = &self.backends[proc].processor().capabilities.dtypes;
            if caps.contains(&DType::F32) || caps.is_empty() {
                DType::F32
            } else {
                caps[0]
            }
        });
        let order = self.plan.ops[oi].order(&id);
        let weights_input =
            (self.plan.graph_set(&id)).is_some_and(|g| g.weights == WeightMode::Input);
        PartTarget {
            proc,
            id,
            dtype,
            order,
            weights_input,
        }
    }

    /// One step: its GEMM (shared or prepared now), the weights it copies
    /// every run, and staging buffers large enough for it.
    fn prepare_step(
        &mut self,
        op: &OpTarget<'_>,
        part: &PartTarget,
        sl: &StepLayout,
        w: &mut InstanceWeights<'_>,
    ) -> Result<Step> {
        let k = op.lop.k as usize;
        let key = op.step_key(part, sl, w.layer, w.instance)?;
        let gi = match self.shared.get(&key) {
            Some(&gi) => gi,
            None => {
                let slice = w.columns(&self.weights, &sl.cols)?;
                self.new_gemm(op, part, sl, key, &slice)?
            }
        };
        let upload = match (sl.upload || part.weights_input) && !self.host_staged.contains(&gi) {
            true => Some(Arc::new(w.columns(&self.weights, &sl.cols)?.into_owned())),
            false => None,
        };
        // Staging buffers, grown here rather than while timed.
        let pool = (&self.backends[..], self.host_mem);
        grow(&mut self.stage.input, sl.pad_to * k, &mut self.grown, pool);
        grow(
            &mut self.stage.output,
            sl.pad_to * sl.cols.len(),
            &mut self.grown,
            pool,
        );
        Ok(Step {
            gemm: gi,
            rows: sl.rows.clone(),
            pad_to: sl.pad_to,
            cols: sl.cols.clone(),
            upload,
            staged: self.host_staged.contains(&gi),
        })
    }

    /// Prepares a GEMM through the processor's graph source with weights
    /// `slice` (zeros where they are copied every run), counts its cost,
    /// and adds it to the arena under `key`.
    fn new_gemm(
        &mut self,
        op: &OpTarget<'_>,
        part: &PartTarget,
        sl: &StepLayout,
        key: GemmKey,
        slice: &[f32],
    ) -> Result<usize> {
        let spec = key.spec;
        // Weights copied every run are prepared as zeros, so that `--check`
        // fails if the copy never happens.
        let zeros;
        let prepared_w: &[f32] = if sl.upload || part.weights_input {
            zeros = vec![0f32; slice.len()];
            &zeros
        } else {
            slice
        };
        let req = GraphRequest {
            op: op.op,
            phase: op.phase,
            layer: key.layer,
            instance: key.instance,
            first_col: key.first_col,
            spec,
        };
        let t = Instant::now();
        let what = format!("{} {} {}", spec.shape, spec.dtype, spec.order);
        let proc = part.proc;
        let fail = |what: String| {
            let processor = part.id.clone();
            move |source: hetero_agent::Error| Error::Prepare {
                processor,
                op: op.op.into(),
                what,
                source: Box::new(source),
            }
        };
        let mut g = self.sources[proc]
            .graph(self.backends[proc].as_mut(), &req, prepared_w)
            .map_err(fail(what.clone()))?;
        let mut staged = false;
        // A graph shared by layers gets each step's weights as it runs.
        if sl.upload && !part.weights_input {
            // Offload copies these weights every run: kept on the host in
            // the processor's format where the backend can, else written
            // before each run.
            let fail = fail(format!("{what}, weights copied every run"));
            match g.host_weights(slice) {
                Ok(()) => staged = true,
                Err(hetero_agent::Error::Unsupported { .. }) => {
                    g.write_weights(slice).map_err(fail)?
                }
                Err(e) => return Err(fail(e)),
            }
        }
        let st = &mut self.prep[proc];
        st.prepared += 1;
        st.host_us += t.elapsed().as_secs_f64() * 1e6;
        if let Some(r) = g.prepare_us() {
            *st.reported_us.get_or_insert(0.0) += r;
        }
        if let Some(f) = self.fault.as_ref().filter(|f| f.processor == part.id) {
            g = Box::new(FaultyGemm {
                inner: g,
                fault: f.clone(),
            });
        }
        self.gemms.push(g);
        let gi = self.gemms.len() - 1;
        if staged {
            self.host_staged.insert(gi);
        }
        self.shared.insert(key, gi);
        Ok(gi)
    }

    /// The operator's input at M rows (random, seeded), in the pool's
    /// memory; shared by every length with the same M.
    fn prepare_input(&mut self, oi: usize, op: &str, m: u32, k: usize) {
        let pool = (&self.backends[..], self.host_mem);
        let seed = self.seed;
        self.inputs.entry((oi, m)).or_insert_with(|| {
            let values =
                hetero_agent::verify::random_vec(m as usize * k, activation_seed(seed, op, m));
            let mut buf = alloc_host(pool, values.len());
            buf.copy_from_slice(&values);
            buf
        });
    }
}

impl OpTarget<'_> {
    /// The GEMM a step runs in `layer` and `instance`, as the key it is
    /// shared under.
    pub(super) fn step_key(
        &self,
        part: &PartTarget,
        sl: &StepLayout,
        layer: u32,
        instance: u32,
    ) -> Result<GemmKey> {
        let shape = GemmShape::new(sl.pad_to as u32, self.lop.k, sl.cols.len() as u32).ok_or_else(
            || Error::PlanModel {
                op: self.op.into(),
                phase: self.phase,
                message: format!("an empty part on `{}` at length {}", part.id, self.len),
            },
        )?;
        let (weights, layer, instance) = match part.weights_input {
            true => (WeightMode::Input, 0, 0),
            false => (WeightMode::Static, layer, instance),
        };
        let spec = GemmSpec {
            shape,
            dtype: part.dtype,
            order: part.order,
            weights,
        };
        Ok(GemmKey {
            op: self.op.into(),
            layer,
            instance,
            proc: part.proc,
            spec,
            first_col: sl.cols.start as u32,
            upload: sl.upload || part.weights_input,
        })
    }

    /// Refuses a decision that runs other GEMMs than the model at its
    /// length (M or instances).
    pub(super) fn check_decision(&self, d: &Decision) -> Result<()> {
        let (op, phase, len, lop) = (self.op, self.phase, self.len, self.lop);
        let (m, instances) = (d.rows_m(), d.instances);
        if let Some((shape, inst)) = lop.gemms(phase, len)
            && (shape.m.get() != m || inst != instances)
        {
            return Err(Error::PlanModel {
                op: op.into(),
                phase,
                message: format!(
                    "at length {len} the plan runs {instances} instance(s) of M = {m}; the model needs {inst} of M = {}",
                    shape.m
                ),
            });
        }
        if instances > lop.count {
            return Err(Error::PlanModel {
                op: op.into(),
                phase,
                message: format!("{instances} instances, the model has {}", lop.count),
            });
        }
        Ok(())
    }
}

/// The backends and the one whose host memory the pool uses.
type Pool<'a> = (&'a [Box<dyn Backend>], Option<usize>);

/// `len` zeros in the pool's memory; on the heap if that allocation fails
/// (the report's `pool.memory` then says `heap`).
fn alloc_host((backends, host_mem): Pool<'_>, len: usize) -> HostBuf {
    host_mem.map_or_else(
        || HostBuf::heap(len),
        |b| HostBuf::for_backend(&*backends[b], len),
    )
}

/// Replaces `buf` by a larger one when it holds fewer than `len` values
/// (the contents are scratch: not kept).
fn grow(buf: &mut HostBuf, len: usize, grown: &mut usize, pool: Pool<'_>) {
    if buf.len() < len {
        *buf = alloc_host(pool, len);
        *grown += 1;
    }
}
