//! Opening a runtime: the plan against the model, the predictor and the
//! processors it was solved for, then the runtime's empty pools.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicU32;

use hetero_agent::{Backend, HostBuf, Registry};
use hetero_plan::{DType, Fingerprint, ModelSpec, Plan, Predictor, Processor};

use super::{Runtime, RuntimeOptions};
use crate::compiled::Compiled;
use crate::decider::Decider;
use crate::exec::{Fault, Stage};
use crate::graphs::{GraphSource, Prepare};
use crate::weights::{WeightSource, Weights};
use crate::{Error, Result};

impl Runtime {
    /// Loads a plan, refuses one solved for another model (or predictor,
    /// when `opts.predictor` is given), and opens the plan's processors.
    pub fn open(plan_path: &Path, model: ModelSpec, mut opts: RuntimeOptions) -> Result<Runtime> {
        let plan: Plan = hetero_plan::load(plan_path)?;
        if let (Some(dir), None) = (&opts.graphs, opts.open.qnn_soc) {
            // The backend opens for the SoC the graphs were compiled for
            // (the library holds one SoC per process).
            opts.open.qnn_soc = compiled_soc(dir)?;
        }
        let predictor = match &opts.predictor {
            Some(p) => Some(load_predictor(p)?),
            None => None,
        };
        let pfp = predictor.as_ref().map(|(p, n)| p.fingerprint(n.clone()));
        check_fingerprints(plan_path, &plan, pfp.as_ref(), &model)?;
        let backends = open_processors(&plan, &opts)?;
        if let Some((pred, name)) = &predictor {
            for b in &backends {
                check_against_predictor(b.processor(), pred, name)?;
            }
        }
        Runtime::with_backends(plan_path, plan, model, backends, opts)
    }

    /// Builds a runtime over backends opened by the caller, in the order of
    /// the plan's `processors` (an embedding application with its own
    /// backends). The fingerprint is checked as in [`Runtime::open`].
    pub fn with_backends(
        plan_path: &Path,
        plan: Plan,
        model: ModelSpec,
        backends: Vec<Box<dyn Backend>>,
        opts: RuntimeOptions,
    ) -> Result<Runtime> {
        check_fingerprints(plan_path, &plan, None, &model)?;
        check_backends(&plan, &backends)?;
        check_plan_model(&plan, &model)?;
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
        let n = backends.len();
        let mut sources: Vec<Box<dyn GraphSource>> = (0..n)
            .map(|_| Box::new(Prepare) as Box<dyn GraphSource>)
            .collect();
        if let Some(dir) = &opts.graphs {
            let i = compiled_processor(plan_path, &plan)?;
            sources[i] = Box::new(Compiled::open(dir, plan_path, &plan, &opts.open)?);
        }
        let host_mem = pool_memory(&backends);
        let notes = open_notes(&opts.weights, host_mem.map(|b| backends[b].as_ref()));
        Ok(Runtime {
            plan_path: plan_path.to_path_buf(),
            decider: Decider::new(&plan),
            plan,
            model,
            backends,
            weights,
            sources,
            gemms: Vec::new(),
            shared: HashMap::new(),
            host_staged: Default::default(),
            prefetch: Default::default(),
            prepared: HashMap::new(),
            inputs: HashMap::new(),
            output: HostBuf::default(),
            stage: Stage::default(),
            grown: 0,
            host_mem,
            sync: opts.sync,
            fault,
            prep: vec![Default::default(); n],
            seed,
            notes,
        })
    }
}

/// The SoC of the graphs compiled into `dir` (its manifest's `soc`).
fn compiled_soc(dir: &Path) -> Result<Option<u32>> {
    let m = hetero_agent::qnn::read_manifest(dir).map_err(|e| Error::Graphs {
        path: dir.join(hetero_agent::qnn::MANIFEST_FILE),
        field: "format".into(),
        message: e.to_string(),
    })?;
    Ok(Some(m.soc))
}

/// The index of the plan's processor whose graphs compile ahead of time.
fn compiled_processor(plan_path: &Path, plan: &Plan) -> Result<usize> {
    let qnn = crate::compiled::QNN_PROCESSOR;
    match plan.processors.iter().position(|p| p == qnn) {
        Some(i) if plan.graph_set(qnn).is_some() => Ok(i),
        _ => Err(Error::Graphs {
            path: plan_path.to_path_buf(),
            field: "graph_sets".into(),
            message: format!("compiled graphs were given, but the plan prepares no {qnn} graphs"),
        }),
    }
}

/// A predictor file and its file name (what its fingerprint names).
fn load_predictor(path: &Path) -> Result<(Predictor, String)> {
    let pred: Predictor = hetero_plan::load(path)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok((pred, name))
}

/// Refuses a plan solved for another model (or predictor, when given).
fn check_fingerprints(
    plan_path: &Path,
    plan: &Plan,
    predictor: Option<&Fingerprint>,
    model: &ModelSpec,
) -> Result<()> {
    plan.check_inputs(predictor, Some(&model.fingerprint()))
        .map_err(|mismatch| Error::Fingerprint {
            plan: plan_path.to_path_buf(),
            mismatch: Box::new(mismatch),
        })
}

/// Opens the plan's processors, in the plan's order; names the ones this
/// machine opens and the ones it could not when one is missing.
fn open_processors(plan: &Plan, opts: &RuntimeOptions) -> Result<Vec<Box<dyn Backend>>> {
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
    Ok(backends)
}

/// Refuses a processor that is not the one the predictor describes.
fn check_against_predictor(here: &Processor, pred: &Predictor, name: &str) -> Result<()> {
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
    match diff {
        Some(d) => Err(Error::DeviceMismatch {
            id: here.id.clone(),
            message: format!("not the processor the plan was solved for ({name}): {d}"),
        }),
        None => Ok(()),
    }
}

/// Refuses backends that are not the plan's processors, in its order, or
/// cannot run what the plan asks of them (its dtype, static graphs).
fn check_backends(plan: &Plan, backends: &[Box<dyn Backend>]) -> Result<()> {
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
    for (id, b) in plan.processors.iter().zip(backends) {
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
                    DType::list(&p.capabilities.dtypes)
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
    Ok(())
}

/// Refuses a plan whose operators are not the model's (name, K×N, layers).
fn check_plan_model(plan: &Plan, model: &ModelSpec) -> Result<()> {
    for op in &plan.ops {
        let Some(mo) = model.op(&op.op) else {
            return Err(Error::PlanModel {
                op: op.op.clone(),
                phase: op.phase,
                message: format!("the model `{}` has no such operator", model.name),
            });
        };
        // An operator decided per group of layers covers its layers in all
        // its tables together.
        let layers = hetero_plan::layer_count(&plan.ops, &op.op, op.phase);
        if (mo.k, mo.n, mo.layers) != (op.k, op.n, layers) {
            return Err(Error::PlanModel {
                op: op.op.clone(),
                phase: op.phase,
                message: format!(
                    "K×N {}×{} over {} layers in the plan, {}×{} over {} in the model",
                    op.k, op.n, layers, mo.k, mo.n, mo.layers
                ),
            });
        }
    }
    Ok(())
}

/// The first processor without unified memory that allocates host memory
/// for direct copies: its copies are the ones ordinary memory slows down.
fn pool_memory(backends: &[Box<dyn Backend>]) -> Option<usize> {
    backends
        .iter()
        .position(|b| !b.processor().capabilities.unified_memory && b.alloc_host(1).is_ok())
}

/// What every report of this runtime says: what runs, shared weights, the
/// pool's memory.
fn open_notes(weights: &WeightSource, host_mem: Option<&dyn Backend>) -> Vec<String> {
    let mut notes = vec![
        "only the linear operators (GEMMs) run; attention, norms and activations are left out, so TTFT and per-token times cover the GEMMs alone (`hetero generate` runs the whole model)".to_string(),
    ];
    if let WeightSource::Synthetic {
        share_layers: true, ..
    } = weights
    {
        notes.push(
            "--share-weights: every layer runs layer 0's weights and GEMMs (caches may hold them)"
                .into(),
        );
    }
    if let Some(b) = host_mem {
        notes.push(format!(
            "activation buffers are host memory of `{}` (page-locked: every copy to and from it is one DMA)",
            b.processor().id
        ));
    }
    notes
}
