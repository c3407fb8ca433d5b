//! The runtime: a plan, a model, the processors, and everything prepared to
//! run the plan's decisions.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use std::time::Instant;

use hetero_agent::{Backend, Gemm, GemmSpec, HostBuf, OpenOptions, Registry};
use hetero_plan::{
    DType, Decision, GemmShape, LinearOp, ModelSpec, OpRole, OperandOrder, Phase, Plan, Predictor,
    SolverInfo, Strategy, Timing, WeightMode,
};

use crate::check::{self, OutputCheck};
use crate::decider::Decider;
use crate::exec::{self, Fault, FaultyGemm, Part, Sample, Stage, Step, SyncChoice};
use crate::graphs::{GraphRequest, GraphSource, Prepare};
use crate::report::{
    self, CheckReport, DispatchReport, HostReport, OpReport, PartReport, PoolReport,
    ProcessorReport, Report,
};
use crate::weights::{WeightSource, Weights, activation_seed};
use crate::{Error, Result};

/// How to open a runtime.
#[derive(Debug, Clone, Default)]
pub struct RuntimeOptions {
    /// What the backends read when they open (CPU groups, simulator parameters).
    pub open: OpenOptions,
    /// How the host waits for submitted parts.
    pub sync: SyncChoice,
    /// Synthetic or real weights.
    pub weights: WeightSource,
    /// The predictor file the plan was solved with: when given, its
    /// fingerprint and its processors must match.
    pub predictor: Option<PathBuf>,
    /// Testing only: the given processor fails at its n-th execution.
    #[doc(hidden)]
    pub fail_after: Option<(String, u32)>,
}

/// What [`Runtime::run`] runs.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// The phase.
    pub phase: Phase,
    /// Sequence length (prefill) or tokens per step (decode).
    pub len: u32,
    /// Decode steps per pass (ignored in prefill).
    pub steps: u32,
    /// Timed passes, after one untimed warm-up pass.
    pub repeat: u32,
    /// Compare every output of the warm-up pass with the reference.
    pub check: bool,
}

/// The time of one [`Runtime::linear`] call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinearTiming {
    /// The operator's time, µs (see [`OpReport::measured_us`]).
    pub measured_us: f64,
    /// Host wall clock, µs.
    pub wall_us: f64,
    /// Runtime overhead (decider, bookkeeping, submit calls), µs.
    pub dispatch_us: f64,
    /// The plan's prediction, µs.
    pub predicted_us: f64,
}

/// Identifies a prepared GEMM so that lengths (a padded graph serves many)
/// and layers sharing weights reuse it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct GemmKey {
    op: String,
    layer: u32,
    instance: u32,
    proc: usize,
    spec: GemmSpec,
    first_col: u32,
    upload: bool,
}

/// A step before its GEMM is prepared.
#[derive(Debug, Clone)]
struct StepLayout {
    rows: std::ops::Range<usize>,
    pad_to: usize,
    cols: std::ops::Range<usize>,
    upload: bool,
}

#[derive(Debug, Clone)]
struct PartLayout {
    proc: usize,
    predicted_us: f64,
    steps: Vec<StepLayout>,
}

/// One operator prepared at one length.
struct Prepared {
    model_op: usize,
    decision: usize,
    m: usize,
    k: usize,
    n: usize,
    instances: u32,
    /// `[layer][instance]` → parts.
    layers: Vec<Vec<Vec<Part>>>,
    /// The parts' shares in words, for reports.
    shares: Vec<(usize, String)>,
}

#[derive(Debug, Clone, Default)]
struct PrepStat {
    prepared: usize,
    host_us: f64,
    reported_us: Option<f64>,
}

/// A plan ready to run on this machine's processors.
pub struct Runtime {
    plan_path: PathBuf,
    plan: Plan,
    model: ModelSpec,
    decider: Decider,
    backends: Vec<Box<dyn Backend>>,
    weights: Weights,
    sources: Vec<Box<dyn GraphSource>>,
    gemms: Vec<Box<dyn Gemm>>,
    shared: HashMap<GemmKey, usize>,
    /// GEMMs that copy their host-kept weights every run themselves
    /// ([`Gemm::host_weights`]); other upload steps write them each run.
    host_staged: std::collections::HashSet<usize>,
    prepared: HashMap<(usize, u32), Prepared>,
    inputs: HashMap<(usize, u32), HostBuf>,
    output: HostBuf,
    stage: Stage,
    grown: usize,
    /// The backend whose direct-copy host memory the pool's buffers are
    /// ([`Backend::alloc_host`]); the heap when none offers it.
    host_mem: Option<usize>,
    sync: SyncChoice,
    fault: Option<Arc<Fault>>,
    prep: Vec<PrepStat>,
    seed: u64,
    notes: Vec<String>,
}

impl Runtime {
    /// Loads a plan, refuses one solved for another model (or predictor,
    /// when `opts.predictor` is given), and opens the plan's processors.
    pub fn open(plan_path: &Path, model: ModelSpec, opts: RuntimeOptions) -> Result<Runtime> {
        let plan: Plan = hetero_plan::load(plan_path)?;
        let predictor = match &opts.predictor {
            Some(p) => {
                let pred: Predictor = hetero_plan::load(p)?;
                let name = p
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                Some((pred, name))
            }
            None => None,
        };
        let pfp = predictor.as_ref().map(|(p, n)| p.fingerprint(n.clone()));
        plan.check_inputs(pfp.as_ref(), Some(&model.fingerprint()))
            .map_err(|mismatch| Error::Fingerprint {
                plan: plan_path.to_path_buf(),
                mismatch: Box::new(mismatch),
            })?;
        let mut reg = Registry::open(&opts.open, Some(&plan.processors));
        let mut backends = Vec::with_capacity(plan.processors.len());
        for id in &plan.processors {
            let Some(i) = reg.backends.iter().position(|b| b.processor().id == *id) else {
                let all = Registry::open(&opts.open, None);
                return Err(Error::MissingProcessor {
                    id: id.clone(),
                    opened: all.processors().into_iter().map(|p| p.id).collect(),
                    unavailable: all
                        .unavailable
                        .iter()
                        .map(|u| format!("{}: {}", u.backend, u.reason))
                        .collect(),
                });
            };
            backends.push(reg.backends.remove(i));
        }
        if let Some((pred, name)) = &predictor {
            for b in &backends {
                let here = b.processor();
                let Some(there) = pred.processor(&here.id) else {
                    return Err(Error::DeviceMismatch {
                        id: here.id.clone(),
                        message: format!("the predictor `{name}` does not describe it"),
                    });
                };
                let diff = if here.kind != there.kind {
                    Some(format!(
                        "kind {:?} here, {:?} in the predictor",
                        here.kind, there.kind
                    ))
                } else if here.api != there.api {
                    Some(format!(
                        "API {:?} here, {:?} in the predictor",
                        here.api, there.api
                    ))
                } else if here.name != there.name {
                    Some(format!(
                        "`{}` here, `{}` in the predictor",
                        here.name, there.name
                    ))
                } else if here.simulated != there.simulated {
                    Some("simulated here but not in the predictor, or the reverse".into())
                } else {
                    None
                };
                if let Some(d) = diff {
                    return Err(Error::DeviceMismatch {
                        id: here.id.clone(),
                        message: format!("not the processor the plan was solved for ({name}): {d}"),
                    });
                }
            }
        }
        Runtime::with_backends(plan_path, plan, model, backends, opts)
    }

    /// Builds a runtime over backends opened by the caller, in the order of
    /// the plan's `processors` (tests, or an embedding application with its
    /// own backends). The fingerprint is checked as in [`Runtime::open`].
    pub fn with_backends(
        plan_path: &Path,
        plan: Plan,
        model: ModelSpec,
        backends: Vec<Box<dyn Backend>>,
        opts: RuntimeOptions,
    ) -> Result<Runtime> {
        plan.check_inputs(None, Some(&model.fingerprint()))
            .map_err(|mismatch| Error::Fingerprint {
                plan: plan_path.to_path_buf(),
                mismatch: Box::new(mismatch),
            })?;
        if backends.len() != plan.processors.len() {
            return Err(Error::arg(
                "backends",
                format!(
                    "{} given for the plan's {} processors",
                    backends.len(),
                    plan.processors.len()
                ),
            ));
        }
        for (id, b) in plan.processors.iter().zip(&backends) {
            let p = b.processor();
            if p.id != *id {
                return Err(Error::arg(
                    "backends",
                    format!("`{}` given where the plan has `{id}`", p.id),
                ));
            }
            if let Some(d) = plan.dtype(id)
                && !p.capabilities.dtypes.contains(&d)
            {
                return Err(Error::DeviceMismatch {
                    id: id.clone(),
                    message: format!(
                        "the plan runs it in {d}, which it does not support here (it runs {})",
                        p.capabilities
                            .dtypes
                            .iter()
                            .map(|d| d.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                });
            }
            if plan.graph_set(id).is_some() && !p.capabilities.static_graphs {
                return Err(Error::DeviceMismatch {
                    id: id.clone(),
                    message: "the plan prepares static graphs for it, but here it is a dynamic-shape processor".into(),
                });
            }
        }
        for op in &plan.ops {
            let Some(mo) = model.op(&op.op) else {
                return Err(Error::PlanModel {
                    op: op.op.clone(),
                    phase: op.phase,
                    message: format!("the model `{}` has no such operator", model.name),
                });
            };
            if (mo.k, mo.n, mo.layers) != (op.k, op.n, op.layers) {
                return Err(Error::PlanModel {
                    op: op.op.clone(),
                    phase: op.phase,
                    message: format!(
                        "K×N {}×{} over {} layers in the plan, {}×{} over {} in the model",
                        op.k, op.n, op.layers, mo.k, mo.n, mo.layers
                    ),
                });
            }
        }
        let weights = Weights::open(&opts.weights, &model)?;
        let seed = match &opts.weights {
            WeightSource::Synthetic { seed, .. } => *seed,
            WeightSource::Safetensors(_) => 0x5eed,
        };
        let fault = opts.fail_after.as_ref().map(|(p, n)| {
            Arc::new(Fault {
                processor: p.clone(),
                after: *n,
                count: AtomicU32::new(0),
            })
        });
        let mut notes = vec![
            "only the linear operators (GEMMs) run; attention, norms and activations are not modelled, so TTFT and per-token times cover the GEMMs alone".to_string(),
        ];
        if let WeightSource::Synthetic {
            share_layers: true, ..
        } = opts.weights
        {
            notes.push(
                "--share-weights: every layer runs layer 0's weights and GEMMs (caches may hold them)"
                    .into(),
            );
        }
        let n = backends.len();
        let host_mem = pool_memory(&backends);
        if let Some(b) = host_mem {
            notes.push(format!(
                "activation buffers are host memory of `{}` (page-locked: every copy to and from it is one DMA)",
                backends[b].processor().id
            ));
        }
        Ok(Runtime {
            plan_path: plan_path.to_path_buf(),
            decider: Decider::new(&plan),
            plan,
            model,
            backends,
            weights,
            sources: (0..n)
                .map(|_| Box::new(Prepare) as Box<dyn GraphSource>)
                .collect(),
            gemms: Vec::new(),
            shared: HashMap::new(),
            host_staged: Default::default(),
            prepared: HashMap::new(),
            inputs: HashMap::new(),
            output: HostBuf::default(),
            stage: Stage::default(),
            grown: 0,
            host_mem,
            sync: opts.sync,
            fault,
            prep: vec![PrepStat::default(); n],
            seed,
            notes,
        })
    }

    /// Closes the runtime and hands its backends back, in the order of the
    /// plan's processors, so another plan for the same processors can run
    /// on them ([`Runtime::with_backends`]) without opening them again (an
    /// evaluation running one plan per candidate decision).
    pub fn into_backends(self) -> Vec<Box<dyn Backend>> {
        let Runtime {
            backends, gemms, ..
        } = self;
        // Prepared GEMMs go first: their buffers belong to the backends.
        drop(gemms);
        backends
    }

    /// The plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The model.
    pub fn model(&self) -> &ModelSpec {
        &self.model
    }

    /// The decider.
    pub fn decider(&self) -> &Decider {
        &self.decider
    }

    /// Distils a decision tree from every operator table of a phase and
    /// states its agreement with the table (`max_depth: None`: grown fully).
    #[cfg(feature = "tree")]
    pub fn tree_agreement(
        &self,
        phase: Phase,
        max_depth: Option<usize>,
    ) -> Vec<report::TreeReport> {
        self.phase_ops(phase)
            .into_iter()
            .map(|oi| {
                let op = &self.plan.ops[oi];
                let t = crate::decider::tree::DistilledTree::fit(op, max_depth);
                report::TreeReport {
                    op: op.op.clone(),
                    lengths: op.decisions.len(),
                    classes: t.classes.len(),
                    leaves: t.leaves,
                    depth: t.depth,
                    agreement: t.agreement,
                }
            })
            .collect()
    }

    /// Changes how the host waits for submitted parts.
    pub fn set_sync(&mut self, sync: SyncChoice) {
        self.sync = sync;
    }

    /// Where one processor's prepared GEMMs come from (default: [`Prepare`]).
    /// Set it before anything is prepared.
    pub fn set_graph_source(
        &mut self,
        processor: &str,
        source: Box<dyn GraphSource>,
    ) -> Result<()> {
        let i = self.proc_index(processor)?;
        self.sources[i] = source;
        Ok(())
    }

    fn proc_index(&self, id: &str) -> Result<usize> {
        self.plan
            .processors
            .iter()
            .position(|p| p == id)
            .ok_or_else(|| Error::arg("processor", format!("`{id}` is not in the plan")))
    }

    /// The plan operator index, its decision index and the model operator.
    fn lookup(&self, op: &str, phase: Phase, len: u32) -> Result<(usize, usize, usize)> {
        let oi = self
            .decider
            .op_index(op, phase)
            .ok_or_else(|| Error::NoDecision {
                op: op.to_string(),
                phase,
                len,
                covered: format!(
                    "no {phase} table for it; operators with one: {}",
                    self.plan
                        .ops
                        .iter()
                        .filter(|o| o.phase == phase)
                        .map(|o| o.op.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            })?;
        let d = self.decider.decision(&self.plan, oi, len)?;
        let di = self.plan.ops[oi]
            .decisions
            .binary_search_by_key(&d.len, |x| x.len)
            .expect("the decision is in its table");
        let mi = self
            .model
            .ops
            .iter()
            .position(|o| o.name == op)
            .expect("checked when the runtime was built");
        Ok((oi, di, mi))
    }

    /// The operators of a phase, in execution order: the decoder layer's in
    /// model order, the lm_head last.
    fn phase_ops(&self, phase: Phase) -> Vec<usize> {
        let mut ops: Vec<(bool, usize, usize)> = self
            .plan
            .ops
            .iter()
            .enumerate()
            .filter(|(_, o)| o.phase == phase)
            .map(|(i, o)| {
                let mi = self
                    .model
                    .ops
                    .iter()
                    .position(|m| m.name == o.op)
                    .unwrap_or(0);
                (self.model.ops[mi].role == OpRole::LmHead, mi, i)
            })
            .collect();
        ops.sort();
        ops.into_iter().map(|(_, _, i)| i).collect()
    }

    /// Prepares every operator of a phase at a length (all layers and
    /// instances); later runs at that length reuse it all.
    pub fn prepare(&mut self, phase: Phase, len: u32) -> Result<()> {
        for oi in self.phase_ops(phase) {
            let name = self.plan.ops[oi].op.clone();
            self.prepare_op(&name, phase, len)?;
        }
        Ok(())
    }

    fn layout(&self, oi: usize, d: &Decision, n: u32) -> Result<Vec<PartLayout>> {
        let is_static = |p: usize| self.backends[p].processor().capabilities.static_graphs;
        layout(&self.plan, oi, d, n, &is_static)
    }

    fn prepare_op(&mut self, op: &str, phase: Phase, len: u32) -> Result<()> {
        let (oi, di, mi) = self.lookup(op, phase, len)?;
        if self.prepared.contains_key(&(oi, len)) {
            return Ok(());
        }
        let d = self.plan.ops[oi].decisions[di].clone();
        let lop: LinearOp = self.model.ops[mi].clone();
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
        let layouts = self.layout(oi, &d, lop.n)?;
        let (k, n) = (lop.k as usize, lop.n as usize);
        let mut layers = Vec::with_capacity(lop.layers as usize);
        for layer in 0..lop.layers {
            let wl = self.weights.weight_layer(layer);
            let mut insts = Vec::with_capacity(instances as usize);
            for inst in 0..instances {
                let mut w: Option<Vec<f32>> = None;
                let mut parts = Vec::with_capacity(layouts.len());
                for pl in &layouts {
                    let proc = pl.proc;
                    let pid = self.plan.processors[proc].clone();
                    let dtype = self.plan.dtype(&pid).unwrap_or_else(|| {
                        let caps = &self.backends[proc].processor().capabilities.dtypes;
                        if caps.contains(&DType::F32) || caps.is_empty() {
                            DType::F32
                        } else {
                            caps[0]
                        }
                    });
                    let order = self.plan.ops[oi].order(&pid);
                    let mut steps = Vec::with_capacity(pl.steps.len());
                    for sl in &pl.steps {
                        let shape =
                            GemmShape::new(sl.pad_to as u32, k as u32, sl.cols.len() as u32)
                                .ok_or_else(|| Error::PlanModel {
                                    op: op.into(),
                                    phase,
                                    message: format!("an empty part on `{pid}` at length {len}"),
                                })?;
                        let spec = GemmSpec {
                            shape,
                            dtype,
                            order,
                            weights: WeightMode::Static,
                        };
                        let key = GemmKey {
                            op: op.into(),
                            layer: wl,
                            instance: inst,
                            proc,
                            spec,
                            first_col: sl.cols.start as u32,
                            upload: sl.upload,
                        };
                        let slice_of = |w: &[f32]| -> Vec<f32> {
                            if sl.cols.len() == n {
                                return w.to_vec();
                            }
                            let mut s = Vec::with_capacity(k * sl.cols.len());
                            for r in 0..k {
                                s.extend_from_slice(&w[r * n + sl.cols.start..r * n + sl.cols.end]);
                            }
                            s
                        };
                        let needs_w = sl.upload || !self.shared.contains_key(&key);
                        if needs_w && w.is_none() {
                            w = Some(self.weights.get(&lop, wl, inst));
                        }
                        let gi = match self.shared.get(&key) {
                            Some(&gi) => gi,
                            None => {
                                let slice = slice_of(w.as_deref().expect("generated above"));
                                // Weights copied every run are prepared as zeros, so
                                // that `--check` fails if the copy never happens.
                                let zeros;
                                let prepared_w: &[f32] = if sl.upload {
                                    zeros = vec![0f32; slice.len()];
                                    &zeros
                                } else {
                                    &slice
                                };
                                let req = GraphRequest {
                                    op,
                                    phase,
                                    layer: wl,
                                    instance: inst,
                                    first_col: sl.cols.start as u32,
                                    spec,
                                };
                                let t = Instant::now();
                                let what = format!("{} {} {}", spec.shape, spec.dtype, spec.order);
                                let mut g = self.sources[proc]
                                    .graph(self.backends[proc].as_mut(), &req, prepared_w)
                                    .map_err(|source| Error::Prepare {
                                        processor: pid.clone(),
                                        op: op.into(),
                                        what: what.clone(),
                                        source: Box::new(source),
                                    })?;
                                let mut staged = false;
                                if sl.upload {
                                    // Offload copies these weights every run: kept on
                                    // the host in the processor's format where the
                                    // backend can, else written before each run.
                                    let fail = |source| Error::Prepare {
                                        processor: pid.clone(),
                                        op: op.into(),
                                        what: format!("{what}, weights copied every run"),
                                        source: Box::new(source),
                                    };
                                    match g.host_weights(&slice) {
                                        Ok(()) => staged = true,
                                        Err(hetero_agent::Error::Unsupported { .. }) => {
                                            g.write_weights(&slice).map_err(fail)?
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
                                if let Some(f) = self.fault.as_ref().filter(|f| f.processor == pid)
                                {
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
                                gi
                            }
                        };
                        let upload = (sl.upload && !self.host_staged.contains(&gi))
                            .then(|| Arc::new(slice_of(w.as_deref().expect("generated above"))));
                        steps.push(Step {
                            gemm: gi,
                            rows: sl.rows.clone(),
                            pad_to: sl.pad_to,
                            cols: sl.cols.clone(),
                            upload,
                        });
                        // Staging buffers, grown here rather than while timed.
                        let need_in = sl.pad_to * k;
                        let need_out = sl.pad_to * sl.cols.len();
                        let pool = (&self.backends[..], self.host_mem);
                        grow(&mut self.stage.input, need_in, &mut self.grown, pool);
                        grow(&mut self.stage.output, need_out, &mut self.grown, pool);
                    }
                    parts.push(Part {
                        proc,
                        timing: self.backends[proc].processor().timing(),
                        predicted_us: pl.predicted_us,
                        steps,
                        asynchronous: None,
                    });
                }
                insts.push(parts);
            }
            layers.push(insts);
        }
        let pool = (&self.backends[..], self.host_mem);
        grow(&mut self.output, m as usize * n, &mut self.grown, pool);
        let shares = layouts
            .iter()
            .map(|pl| (pl.proc, describe_share(pl)))
            .collect();
        self.inputs.entry((oi, m)).or_insert_with(|| {
            let values =
                hetero_agent::verify::random_vec(m as usize * k, activation_seed(self.seed, op, m));
            let mut buf = alloc_host(pool, values.len());
            buf.copy_from_slice(&values);
            buf
        });
        self.prepared.insert(
            (oi, len),
            Prepared {
                model_op: mi,
                decision: di,
                m: m as usize,
                k,
                n,
                instances,
                layers,
                shares,
            },
        );
        Ok(())
    }

    /// The GEMM dimensions of an operator at a length: rows per instance
    /// (M), input features (K), output features (N), instances per layer.
    pub fn op_dims(&self, op: &str, phase: Phase, len: u32) -> Result<(u32, u32, u32, u32)> {
        let (oi, di, mi) = self.lookup(op, phase, len)?;
        let d = &self.plan.ops[oi].decisions[di];
        let o = &self.model.ops[mi];
        Ok((d.rows_m(), o.k, o.n, d.instances))
    }

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
        let (oi, _, _) = self.lookup(op, phase, len)?;
        let Runtime {
            prepared,
            gemms,
            output: pool_out,
            stage,
            sync,
            plan,
            ..
        } = self;
        let p = prepared.get_mut(&(oi, len)).expect("prepared above");
        let (m, k, n, inst) = (p.m, p.k, p.n, p.instances as usize);
        if layer as usize >= p.layers.len() {
            return Err(Error::arg(
                "layer",
                format!("`{op}` has {} layers, not layer {layer}", p.layers.len()),
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
        let predicted = plan.ops[oi].decisions[p.decision]
            .cost
            .total_with(*sync == SyncChoice::Block);
        let mut t = LinearTiming {
            measured_us: 0.0,
            wall_us: 0.0,
            dispatch_us: 0.0,
            predicted_us: predicted,
        };
        // Merged into the pool's buffer, copied out only on success.
        let mut staged = vec![0f32; inst * m * n];
        for i in 0..inst {
            let parts = &mut p.layers[layer as usize][i];
            let s = exec::run_instance(
                gemms,
                parts,
                &input[i * m * k..(i + 1) * m * k],
                k,
                &mut pool_out[..m * n],
                n,
                stage,
                *sync,
            )
            .map_err(|(proc, source)| Error::Processor {
                processor: plan.processors[proc].clone(),
                op: op.into(),
                layer,
                phase,
                len,
                source: Box::new(source),
            })?;
            staged[i * m * n..(i + 1) * m * n].copy_from_slice(&pool_out[..m * n]);
            t.measured_us += s.measured_us;
            t.wall_us += s.wall_us;
            t.dispatch_us += s.dispatch_us;
        }
        output.copy_from_slice(&staged);
        Ok(t)
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
            return Err(Error::NoDecision {
                op: "any operator".into(),
                phase: spec.phase,
                len: spec.len,
                covered: format!("the plan has no {} tables", spec.phase),
            });
        }
        let t = Instant::now();
        self.prepare(spec.phase, spec.len)?;
        let prepare_wall = t.elapsed().as_secs_f64() * 1e6;
        let steps = if spec.phase == Phase::Decode {
            spec.steps
        } else {
            1
        };
        // Warm-up (and check).
        let mut checks: Vec<(String, OutputCheck, f64)> = Vec::new();
        self.pass(
            &ops,
            spec,
            None,
            if spec.check { Some(&mut checks) } else { None },
        )?;
        let grown_before = self.grown;
        // Timed passes: samples[op][execution], one per layer.
        let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); ops.len()];
        let mut totals = Vec::new();
        let mut walls = Vec::new();
        // The host's speed, around the timed passes (not inside them).
        let mut probes: Vec<f64> = hetero_agent::conditions::host_probe_us()
            .into_iter()
            .collect();
        for _ in 0..spec.repeat {
            for _ in 0..steps {
                let before: Vec<usize> = samples.iter().map(Vec::len).collect();
                let t = Instant::now();
                self.pass(&ops, spec, Some(&mut samples), None)?;
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
        let grown_while_timed = self.grown - grown_before;
        Ok(self.report(
            spec,
            &ops,
            samples,
            totals,
            walls,
            probes,
            checks,
            grown_while_timed,
            prepare_wall,
        ))
    }

    /// One pass over every operator and layer of a phase.
    fn pass(
        &mut self,
        ops: &[usize],
        spec: &RunSpec,
        mut samples: Option<&mut Vec<Vec<Sample>>>,
        mut checks: Option<&mut Vec<(String, OutputCheck, f64)>>,
    ) -> Result<()> {
        let layers = ops
            .iter()
            .map(|&oi| self.plan.ops[oi].layers)
            .max()
            .unwrap_or(0);
        // Decoder layers in order, operators in model order; the lm_head
        // (one layer) sorts last and runs after them.
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
                if !head[j] && l < self.plan.ops[oi].layers {
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
        for (j, layer) in order {
            let oi = ops[j];
            let s = self.run_layer(oi, spec.len, layer, checks.as_deref_mut())?;
            if let Some(samples) = samples.as_deref_mut() {
                samples[j].push(s);
            }
        }
        Ok(())
    }

    /// All instances of one operator in one layer, from the pool's input.
    fn run_layer(
        &mut self,
        oi: usize,
        len: u32,
        layer: u32,
        checks: Option<&mut Vec<(String, OutputCheck, f64)>>,
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
        let mut checks = checks;
        for inst in 0..p.instances as usize {
            let parts = &mut p.layers[layer as usize][inst];
            let s = exec::run_instance(
                gemms,
                parts,
                input,
                k,
                &mut output[..m * n],
                n,
                stage,
                *sync,
            )
            .map_err(|(proc, source)| Error::Processor {
                processor: plan.processors[proc].clone(),
                op: plan.ops[oi].op.clone(),
                layer,
                phase: plan.ops[oi].phase,
                len,
                source: Box::new(source),
            })?;
            if let Some(c) = checks.as_deref_mut() {
                let lop = &model.ops[p.model_op];
                let w = weights.get(lop, weights.weight_layer(layer), inst as u32);
                let blocks: Vec<_> = parts
                    .iter()
                    .flat_map(|pt| pt.steps.iter().map(|s| (s.rows.clone(), s.cols.clone())))
                    .collect();
                let r = check::check((m, k, n), input, &w, &output[..m * n], &blocks);
                let bound = parts
                    .iter()
                    .map(|pt| {
                        let spec = gemms[pt.steps[0].gemm].spec();
                        backends[pt.proc].tolerance(spec.dtype, k as u32)
                    })
                    .fold(0.0, f64::max);
                c.push((
                    format!(
                        "`{}` layer {layer}{} at ({}, {})",
                        lop.name,
                        if p.instances > 1 {
                            format!(" instance {inst}")
                        } else {
                            String::new()
                        },
                        r.worst.0,
                        r.worst.1
                    ),
                    r,
                    bound,
                ));
            }
            total.wall_us += s.wall_us;
            total.measured_us += s.measured_us;
            total.dispatch_us += s.dispatch_us;
            total.submit_us += s.submit_us;
            total.copy_us += s.copy_us;
            total.simulated |= s.simulated;
            total.emulated |= s.emulated;
            if total.parts_us.len() < s.parts_us.len() {
                total.parts_us.resize(s.parts_us.len(), 0.0);
            }
            for (a, b) in total.parts_us.iter_mut().zip(&s.parts_us) {
                *a += b;
            }
        }
        Ok(total)
    }

    #[allow(clippy::too_many_arguments)]
    fn report(
        &self,
        spec: &RunSpec,
        ops: &[usize],
        samples: Vec<Vec<Sample>>,
        totals: Vec<f64>,
        walls: Vec<f64>,
        probes: Vec<f64>,
        checks: Vec<(String, OutputCheck, f64)>,
        grown_while_timed: usize,
        prepare_wall: f64,
    ) -> Report {
        let timing_of = |sim: bool, emu: bool| {
            if sim {
                "simulated"
            } else if emu {
                "emulated"
            } else {
                "measured"
            }
        };
        let blocking = self.sync == SyncChoice::Block;
        let mut per_op = Vec::new();
        let mut predicted_total = 0.0;
        let mut predicted_medians = 0.0;
        let mut all_dispatch = Vec::new();
        let mut all_submit = Vec::new();
        let (mut any_sim, mut any_emu) = (false, false);
        for (j, &oi) in ops.iter().enumerate() {
            let p = &self.prepared[&(oi, spec.len)];
            let op = &self.plan.ops[oi];
            let d = &op.decisions[p.decision];
            let s = &samples[j];
            let col = |f: &dyn Fn(&Sample) -> f64| s.iter().map(f).collect::<Vec<f64>>();
            let measured_each = col(&|x| x.measured_us);
            let measured = report::median(&measured_each);
            let dispatch_each: Vec<f64> = col(&|x| x.dispatch_us / p.instances as f64);
            all_dispatch.extend_from_slice(&dispatch_each);
            let submit_each: Vec<f64> = col(&|x| x.submit_us / p.instances as f64);
            all_submit.extend_from_slice(&submit_each);
            let sim = s.iter().any(|x| x.simulated);
            let emu = s.iter().any(|x| x.emulated);
            any_sim |= sim;
            any_emu |= emu;
            // The plan's prediction with this run's wait.
            let predicted = d.cost.total_with(blocking);
            let parts0 = &p.layers[0][0];
            predicted_medians += predicted * op.layers as f64;
            predicted_total += predicted
                * op.layers as f64
                * parts0
                    .iter()
                    .map(|part| self.mean_over_median(&self.plan.processors[part.proc]))
                    .fold(1.0, f64::max);
            let parts = parts0
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
                    timing: match part.timing {
                        Timing::Real => "real",
                        Timing::Simulated => "simulated",
                        Timing::Emulated => "emulated",
                    }
                    .into(),
                })
                .collect();
            per_op.push(OpReport {
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
                parts,
            });
        }
        let measured = report::median(&totals);
        let op_medians: f64 = per_op.iter().map(|o| o.measured_us * o.layers as f64).sum();
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
            // Seen on the VM (session 36): polled 0.92, blocked 0.47.
            notes.push("--sync poll: each wait sleeps through its part's predicted time less a margin (a tenth on cpu and OpenCL processors, 80 µs on CUDA) before it polls, so a part that ended sooner is seen then: where parts are long, polled ratios do not fall much below 0.9; --sync block shows whether the plan over-predicts".into());
        }
        notes.push(format!(
            "preparing every GEMM for this length took {:.1} ms of host time (not in the totals)",
            prepare_wall / 1e3
        ));
        let host = self.host_report(&probes);
        if let Some(note) = host_note(&host) {
            notes.push(note);
        }
        let check = spec.check.then(|| {
            let failed: Vec<&(String, OutputCheck, f64)> = checks
                .iter()
                .filter(|(_, r, b)| !(r.rel_err.is_finite() && r.rel_err <= *b))
                .collect();
            let worst = checks
                .iter()
                .max_by(|a, b| (a.1.rel_err / a.2).total_cmp(&(b.1.rel_err / b.2)));
            CheckReport {
                outputs: checks.len(),
                passed: checks.len() - failed.len(),
                worst_rel_err: worst.map(|w| w.1.rel_err).unwrap_or(0.0),
                worst: worst.map(|w| w.0.clone()).unwrap_or_default(),
                worst_bound: worst.map(|w| w.2).unwrap_or(0.0),
                failures: failed
                    .iter()
                    .take(20)
                    .map(|(w, r, b)| format!("{w}: error {:.3e} > bound {b:.3e}", r.rel_err))
                    .collect(),
                reference:
                    "host f64 product of the whole operator (agent metric |C-ref| / sum|A||W|)"
                        .into(),
            }
        });
        let processors = self
            .backends
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let pr = b.processor();
                ProcessorReport {
                    id: pr.id.clone(),
                    name: pr.name.clone(),
                    timing: match pr.timing() {
                        Timing::Real => "real",
                        Timing::Simulated => "simulated",
                        Timing::Emulated => "emulated",
                    }
                    .into(),
                    dtype: self
                        .plan
                        .dtype(&pr.id)
                        .map(|d| d.to_string())
                        .unwrap_or_else(|| "f32 (the plan names none)".into()),
                    graphs: self.sources[i].describe(),
                    prepared: self.prep[i].prepared,
                    prepare_host_us: self.prep[i].host_us,
                    prepare_reported_us: self.prep[i].reported_us,
                }
            })
            .collect();
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
            decider: "table (O(1) per operator and length)".into(),
            timing: timing_of(any_sim, any_emu).into(),
            predicted_us: predicted_total,
            predicted_medians_us: predicted_medians,
            measured_us: measured,
            ratio: ratio(measured, predicted_total),
            op_medians_us: op_medians,
            ttft_us: (!decode).then_some(measured),
            per_token_us: per_token,
            tokens_per_s: per_token.map(|p| 1e6 / p),
            wall_us: report::median(&walls),
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
            check,
            processors,
            pool: PoolReport {
                buffers: 2 + 2 + self.inputs.len(),
                bytes: 4
                    * (self.output.len()
                        + self.stage.input.len()
                        + self.stage.output.len()
                        + self.inputs.values().map(|b| b.len()).sum::<usize>()),
                grown_while_timed,
                memory: self.pool_memory_name(),
            },
            tree: None,
            notes,
        }
    }
}

impl Runtime {
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

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { f64::NAN }
}

/// The backends and the one whose host memory the pool uses.
type Pool<'a> = (&'a [Box<dyn Backend>], Option<usize>);

/// The first processor without unified memory that allocates host memory
/// for direct copies: its copies are the ones ordinary memory slows down.
fn pool_memory(backends: &[Box<dyn Backend>]) -> Option<usize> {
    backends
        .iter()
        .position(|b| !b.processor().capabilities.unified_memory && b.alloc_host(1).is_ok())
}

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

fn describe_share(pl: &PartLayout) -> String {
    let s: Vec<String> = pl
        .steps
        .iter()
        .map(|s| {
            let pad = if s.pad_to != s.rows.len() {
                format!(" padded to {}", s.pad_to)
            } else {
                String::new()
            };
            format!(
                "tokens {}..{}{pad}, columns {}..{}{}",
                s.rows.start,
                s.rows.end,
                s.cols.start,
                s.cols.end,
                if s.upload {
                    " (weights copied each run)"
                } else {
                    ""
                }
            )
        })
        .collect();
    s.join("; ")
}

/// How the runtime lays out one decision of `plan.ops[oi]` over an output
/// of `n` columns: per part, its processor and the GEMMs it runs.
/// `is_static(p)`: whether `plan.processors[p]` runs static graphs (padded
/// to a prepared M).
fn layout(
    plan: &Plan,
    oi: usize,
    d: &Decision,
    n: u32,
    is_static: &dyn Fn(usize) -> bool,
) -> Result<Vec<PartLayout>> {
    let op = &plan.ops[oi];
    let m = d.rows_m() as usize;
    let n = n as usize;
    let bad = |message: String| Error::PlanModel {
        op: op.op.clone(),
        phase: op.phase,
        message: format!("at length {}: {message}", d.len),
    };
    let idx = |p: &str| {
        plan.processors
            .iter()
            .position(|q| q == p)
            .expect("the plan validates its processors")
    };
    let predicted = |i: usize| d.cost.parts_us.get(i).copied().unwrap_or(d.cost.total_us);
    let full = |pad: usize| StepLayout {
        rows: 0..m,
        pad_to: pad,
        cols: 0..n,
        upload: false,
    };
    let mut parts = Vec::new();
    match &d.strategy {
        Strategy::Single {
            processor,
            padded_to,
            ..
        } => {
            let p = idx(processor);
            parts.push(PartLayout {
                proc: p,
                predicted_us: predicted(0),
                steps: vec![full(padded_to.map(|g| g as usize).unwrap_or(m))],
            });
        }
        Strategy::RowCut { parts: rp } | Strategy::Hybrid { parts: rp, .. } => {
            let hybrid = match &d.strategy {
                Strategy::Hybrid { padded_to, .. } => Some(*padded_to as usize),
                _ => None,
            };
            let mut c = 0usize;
            for (i, part) in rp.iter().enumerate() {
                let p = idx(&part.processor);
                let r = part.rows as usize;
                let pad = match part.graph {
                    Some(g) => g as usize,
                    None if is_static(p) => hybrid.unwrap_or(m),
                    None => m,
                };
                if r > 0 {
                    parts.push(PartLayout {
                        proc: p,
                        predicted_us: predicted(i),
                        steps: vec![StepLayout {
                            rows: 0..m,
                            pad_to: pad,
                            cols: c..c + r,
                            upload: false,
                        }],
                    });
                }
                c += r;
            }
        }
        Strategy::SeqCut { parts: sp } => {
            let mut t = 0usize;
            for (i, part) in sp.iter().enumerate() {
                let p = idx(&part.processor);
                let tokens = part.tokens as usize;
                let mut steps = Vec::new();
                if part.graphs.is_empty() {
                    if tokens > 0 {
                        steps.push(StepLayout {
                            rows: t..t + tokens,
                            pad_to: tokens,
                            cols: 0..n,
                            upload: false,
                        });
                    }
                } else {
                    let mut s = t;
                    for &g in &part.graphs {
                        let g = g as usize;
                        let e = (s + g).min(t + tokens);
                        steps.push(StepLayout {
                            rows: s..e,
                            pad_to: g,
                            cols: 0..n,
                            upload: false,
                        });
                        s = e;
                    }
                }
                if !steps.is_empty() {
                    parts.push(PartLayout {
                        proc: p,
                        predicted_us: predicted(i),
                        steps,
                    });
                }
                t += tokens;
            }
        }
        Strategy::Chunked {
            processor,
            chunk,
            chunks,
        } => {
            let (c, k) = (*chunk as usize, *chunks as usize);
            if c * k < m {
                return Err(bad(format!("{k} chunks of {c} do not cover M = {m}")));
            }
            let steps = (0..k)
                .map(|i| StepLayout {
                    rows: (i * c).min(m)..((i + 1) * c).min(m),
                    pad_to: c,
                    cols: 0..n,
                    upload: false,
                })
                .filter(|s| !s.rows.is_empty())
                .collect();
            parts.push(PartLayout {
                proc: idx(processor),
                predicted_us: predicted(0),
                steps,
            });
        }
        Strategy::Offload {
            cpu,
            gpu,
            cc_rows,
            cg_rows,
            gg_rows,
            gpu_tokens,
        } => {
            // Columns in the order CC | CG | GG.
            let (cc, cg, gg) = (*cc_rows as usize, *cg_rows as usize, *gg_rows as usize);
            let gt = *gpu_tokens as usize;
            if cc > 0 && m > gt {
                parts.push(PartLayout {
                    proc: idx(cpu),
                    predicted_us: predicted(0),
                    steps: vec![StepLayout {
                        rows: gt..m,
                        pad_to: m - gt,
                        cols: 0..cc,
                        upload: false,
                    }],
                });
            }
            let mut steps = Vec::new();
            if gg > 0 {
                steps.push(StepLayout {
                    rows: 0..m,
                    pad_to: m,
                    cols: cc + cg..cc + cg + gg,
                    upload: false,
                });
            }
            if cg > 0 {
                steps.push(StepLayout {
                    rows: 0..m,
                    pad_to: m,
                    cols: cc..cc + cg,
                    upload: true,
                });
            }
            if gt > 0 && cc > 0 {
                steps.push(StepLayout {
                    rows: 0..gt,
                    pad_to: gt,
                    cols: 0..cc,
                    upload: true,
                });
            }
            if !steps.is_empty() {
                parts.push(PartLayout {
                    proc: idx(gpu),
                    predicted_us: predicted(1),
                    steps,
                });
            }
        }
    }
    for p in &parts {
        for s in &p.steps {
            if s.pad_to < s.rows.len() || s.cols.end > n || s.rows.end > m {
                return Err(bad(format!(
                    "a part on `{}` covers rows {:?} and columns {:?} with a graph of M = {}, outside M = {m}, N = {n}",
                    plan.processors[p.proc], s.rows, s.cols, s.pad_to
                )));
            }
        }
    }
    Ok(parts)
}

/// One GEMM a plan runs: [`plan_gemms`].
#[derive(Debug, Clone, PartialEq)]
pub struct PlanGemm {
    /// The model operator.
    pub op: String,
    /// The processor that runs it.
    pub processor: String,
    /// M (padded to a prepared graph where the processor runs static
    /// graphs) × K × the columns of its share.
    pub shape: GemmShape,
    /// The processor's dtype in the plan (f32 where the plan names none).
    pub dtype: DType,
    /// The processor's operand order for the operator.
    pub order: OperandOrder,
}

/// The GEMMs `plan` runs for every operator of `phase` at length `len`, as
/// [`Runtime`] lays them out: each part's steps, one GEMM each (an offload
/// decision's GPU part runs its resident and its copied rows apart). What
/// `hetero profile --plan` measures. A processor runs static graphs where
/// the plan prepares graphs for it.
pub fn plan_gemms(plan: &Plan, phase: Phase, len: u32) -> Result<Vec<PlanGemm>> {
    let decider = Decider::new(plan);
    let is_static = |p: usize| {
        plan.graph_sets
            .iter()
            .any(|g| g.processor == plan.processors[p])
    };
    let mut out = Vec::new();
    for (oi, op) in plan.ops.iter().enumerate() {
        if op.phase != phase {
            continue;
        }
        let d = decider.decision(plan, oi, len)?;
        for part in layout(plan, oi, d, op.n, &is_static)? {
            let processor = plan.processors[part.proc].clone();
            let dtype = plan.dtype(&processor).unwrap_or(DType::F32);
            let order = op.order(&processor);
            for step in &part.steps {
                let shape = GemmShape::new(step.pad_to as u32, op.k, step.cols.len() as u32)
                    .ok_or_else(|| Error::PlanModel {
                        op: op.op.clone(),
                        phase,
                        message: format!(
                            "at length {len}: a part of {}x{}x{}",
                            step.pad_to,
                            op.k,
                            step.cols.len()
                        ),
                    })?;
                out.push(PlanGemm {
                    op: op.op.clone(),
                    processor: processor.clone(),
                    shape,
                    dtype,
                    order,
                });
            }
        }
    }
    Ok(out)
}

/// A decision in words.
pub fn label(s: &Strategy, m: u32) -> String {
    match s {
        Strategy::Single {
            processor,
            padded_to: Some(g),
            ..
        } if *g > m => format!("{processor} padded to {g}"),
        Strategy::Single {
            processor,
            online_prepare: true,
            ..
        } => format!("{processor} (online prepare)"),
        Strategy::Single { processor, .. } => format!("{processor} alone"),
        Strategy::RowCut { parts } => format!(
            "rows {}",
            parts
                .iter()
                .map(|p| format!("{} {}", p.processor, p.rows))
                .collect::<Vec<_>>()
                .join(" / ")
        ),
        Strategy::Hybrid { padded_to, parts } => format!(
            "rows {} (padded to {padded_to})",
            parts
                .iter()
                .map(|p| format!("{} {}", p.processor, p.rows))
                .collect::<Vec<_>>()
                .join(" / ")
        ),
        Strategy::SeqCut { parts } => format!(
            "tokens {}",
            parts
                .iter()
                .map(|p| if p.graphs.is_empty() {
                    format!("{} {}", p.processor, p.tokens)
                } else {
                    format!(
                        "{} [{}]",
                        p.processor,
                        p.graphs
                            .iter()
                            .map(u32::to_string)
                            .collect::<Vec<_>>()
                            .join("+")
                    )
                })
                .collect::<Vec<_>>()
                .join(" + ")
        ),
        Strategy::Chunked {
            processor,
            chunk,
            chunks,
        } => format!("{processor} {chunks} chunks of {chunk}"),
        Strategy::Offload {
            cc_rows,
            cg_rows,
            gg_rows,
            gpu_tokens,
            ..
        } => format!("offload cc {cc_rows} / cg {cg_rows} / gg {gg_rows}, {gpu_tokens} gpu tokens"),
    }
}

/// Opens a file-system path for a plan's model config: a Hugging Face
/// `config.json`, or a model spec written by `hetero model show --json`.
pub fn load_model(path: &Path) -> Result<ModelSpec> {
    Ok(hetero_plan::hf::load_config(path)?)
}

/// How far the host's speed may differ from the profile's before the
/// report says so.
const HOST_SPEED_TOLERANCE: f64 = 0.1;

/// What one timed total covers: a prefill pass or a decode step.
fn unit(phase: Phase) -> &'static str {
    if phase == Phase::Decode {
        "step"
    } else {
        "pass"
    }
}

/// How far a pass or step may run above its operators' medians summed
/// before the report says why.
const OUTLIER_TOLERANCE: f64 = 0.02;

/// A note when the measured pass or step (`measured`, the median of the
/// totals) is above its operators' medians summed (`op_medians`):
/// executions far slower than their median count in every total but in
/// no operator's median. `slowest`: the operator whose slowest execution
/// was the most above its median, and by how much.
fn outlier_note(
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
fn host_note(h: &HostReport) -> Option<String> {
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

#[cfg(test)]
mod tests;
