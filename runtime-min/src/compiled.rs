//! Graphs compiled ahead of time for a plan: [`compile_plan`] (behind
//! `hetero compile`) builds every static graph the plan runs as a QNN
//! context binary, and [`Compiled`] is the [`GraphSource`] that loads them
//! when the runtime asks (`hetero run --graphs DIR`, the C API's `graphs`,
//! [`RuntimeOptions::graphs`](crate::RuntimeOptions::graphs)).
//!
//! The folder's manifest (`qnn-graphs.json`, written last, through a
//! temporary file) records what the graphs were compiled for, and loading
//! checks all of it before a graph runs; a mismatch is bad input (exit 2)
//! naming the folder, the graph and the field:
//! - the plan: its model and predictor fingerprints and a fingerprint of
//!   its graph sets (`plan.model`, `plan.predictor`, `plan.graph_sets`);
//! - the QNN library: the build that compiled must be the build that loads
//!   (`qnn_build`);
//! - per graph: its operator share (operator, layer, instance, first
//!   column), shape, dtype and order (the key it is found by), the SHA-256
//!   of the weights baked in against the weights this run uses
//!   (`weights_sha256`), and the SHA-256 of its context binary
//!   (`binary_sha256`).
//!
//! The user's plan is never rewritten: the manifest points at the plan,
//! not the reverse. A graph the runtime needs that the folder lacks is
//! prepared at run time (the fallback), and the report says per graph
//! which it was.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use hetero_agent::qnn::{
    Compiler, ContextLoader, GraphEntry, MANIFEST_FILE, Manifest, PlanBinding, PlanGraph,
    weights_sha256,
};
use hetero_agent::{Backend, Error as AgentError, Gemm, GemmSpec, OpenOptions};
use hetero_plan::{Fingerprint, ModelSpec, Plan, WeightMode};

use crate::graphs::{GraphOrigin, GraphRequest, GraphSource};
use crate::runtime::{StaticGraph, plan_static_graphs};
use crate::weights::{WeightSource, Weights};
use crate::{Error, Result};

/// The only processor whose graphs compile ahead of time.
pub const QNN_PROCESSOR: &str = hetero_agent::qnn::PROCESSOR_ID;

/// What [`compile_plan`] needs besides the plan and the model.
#[derive(Debug, Clone)]
pub struct CompileOptions {
    /// Where the QNN library is (`qnn_lib_dir`), and other backend options.
    pub open: OpenOptions,
    /// The weights to bake in: those the plan will run with.
    pub weights: WeightSource,
    /// The SoC model to compile for (QNN's socModel, e.g. 57 = SM8650).
    pub soc: u32,
}

/// The plan's identity as a manifest records it.
fn binding(plan_path: &Path, plan: &Plan, weights: &WeightSource) -> PlanBinding {
    PlanBinding {
        file: plan_path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        model: plan.model.clone(),
        predictor: plan.predictor.clone(),
        graph_sets: Fingerprint::of("graph_sets", &plan.graph_sets),
        weights: match weights {
            WeightSource::Synthetic { seed, share_layers } => format!(
                "synthetic seed {seed:#x}{}",
                if *share_layers { ", layers shared" } else { "" }
            ),
            WeightSource::Safetensors(p) => format!("safetensors {}", p.display()),
        },
    }
}

fn agent(what: impl Into<String>) -> impl FnOnce(AgentError) -> Error {
    let what = what.into();
    move |source| Error::Agent {
        what,
        source: Box::new(source),
    }
}

/// The plan's static graphs, refusing a plan without any or with a graph
/// set on another processor than `qnn:htp`.
fn qnn_graphs(plan_path: &Path, plan: &Plan) -> Result<Vec<StaticGraph>> {
    if plan.graph_sets.is_empty() {
        return Err(Error::Graphs {
            path: plan_path.to_path_buf(),
            field: "graph_sets".into(),
            message: "the plan prepares no static graphs: nothing to compile".into(),
        });
    }
    if let Some((i, g)) = plan
        .graph_sets
        .iter()
        .enumerate()
        .find(|(_, g)| g.processor != QNN_PROCESSOR)
    {
        return Err(Error::Graphs {
            path: plan_path.to_path_buf(),
            field: format!("graph_sets[{i}].processor"),
            message: format!(
                "`{}`: only {QNN_PROCESSOR} graphs compile ahead of time",
                g.processor
            ),
        });
    }
    plan_static_graphs(plan)
}

/// Compiles every static graph `plan_path` runs (every layer and instance,
/// with the weights of `opts.weights`) into `out`, one context binary each,
/// then writes the manifest. `progress(done, total)` is called after each
/// graph. Returns the manifest.
pub fn compile_plan(
    plan_path: &Path,
    model: &ModelSpec,
    opts: &CompileOptions,
    out: &Path,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Manifest> {
    let plan: Plan = hetero_plan::load(plan_path)?;
    plan.check_inputs(None, Some(&model.fingerprint()))
        .map_err(|mismatch| Error::Fingerprint {
            plan: plan_path.to_path_buf(),
            mismatch: Box::new(mismatch),
        })?;
    let graphs = qnn_graphs(plan_path, &plan)?;
    let weights = Weights::open(&opts.weights, model)?;
    let total: usize = graphs
        .iter()
        .map(|g| layers_of(&weights, g.layers).len() * g.instances as usize)
        .sum();
    let mut compiler = Compiler::open(&opts.open, opts.soc, out).map_err(agent(format!(
        "opening {QNN_PROCESSOR} to compile for SoC {}",
        opts.soc
    )))?;
    let mut done = 0;
    for (op, of_op) in by_op(&graphs) {
        let lop = model.op(op).ok_or_else(|| Error::PlanModel {
            op: op.into(),
            phase: plan
                .ops
                .iter()
                .find(|o| o.op == op)
                .expect("a plan operator")
                .phase,
            message: format!("the model `{}` has no such operator", model.name),
        })?;
        for layer in layers_of(&weights, lop.layers) {
            let instances = of_op.iter().map(|g| g.instances).max().unwrap_or(1);
            for instance in 0..instances {
                let w = weights.get(lop, layer, instance)?;
                for g in of_op.iter().filter(|g| instance < g.instances) {
                    let slice = columns(&w, lop.n as usize, g.first_col, g.spec.shape.n.get());
                    let plan_graph = PlanGraph {
                        op: op.into(),
                        layer,
                        instance,
                        first_col: g.first_col,
                        weights_sha256: weights_sha256(&slice),
                    };
                    compiler
                        .add(&g.spec, &slice, None, Some(plan_graph))
                        .map_err(agent(format!(
                            "compiling `{op}` layer {layer} ({} {} {})",
                            g.spec.shape, g.spec.dtype, g.spec.order
                        )))?;
                    done += 1;
                    progress(done, total);
                }
            }
        }
    }
    compiler
        .finish(Some(binding(plan_path, &plan, &opts.weights)))
        .map_err(agent(format!(
            "writing {}",
            out.join(MANIFEST_FILE).display()
        )))
}

/// The layers whose weights differ (one when layers share weights).
fn layers_of(weights: &Weights, layers: u32) -> Vec<u32> {
    let mut v: Vec<u32> = (0..layers).map(|l| weights.weight_layer(l)).collect();
    v.dedup();
    v
}

/// The graphs grouped by operator, in the plan's order.
fn by_op(graphs: &[StaticGraph]) -> Vec<(&str, Vec<&StaticGraph>)> {
    let mut out: Vec<(&str, Vec<&StaticGraph>)> = Vec::new();
    for g in graphs {
        match out.iter_mut().find(|(op, _)| *op == g.op) {
            Some((_, v)) => v.push(g),
            None => out.push((&g.op, vec![g])),
        }
    }
    out
}

/// Columns `first..first + cols` of a row-major `W[K, n]`.
fn columns(w: &[f32], n: usize, first: u32, cols: u32) -> Vec<f32> {
    let (first, cols) = (first as usize, cols as usize);
    if first == 0 && cols == n {
        return w.to_vec();
    }
    w.chunks_exact(n)
        .flat_map(|row| &row[first..first + cols])
        .copied()
        .collect()
}

/// What finds a graph in the manifest: the runtime's request.
type Key = (String, u32, u32, u32, GemmSpec);

/// The graphs of a folder compiled for a plan, loaded as the runtime asks
/// for them; what the folder lacks is prepared (and reported so).
pub struct Compiled {
    dir: PathBuf,
    loader: ContextLoader,
    index: HashMap<Key, usize>,
    origins: Vec<GraphOrigin>,
}

impl Compiled {
    /// Opens the folder `dir` for the plan at `plan_path`: reads the
    /// manifest and refuses one compiled for another plan or QNN build.
    pub fn open(dir: &Path, plan_path: &Path, plan: &Plan, open: &OpenOptions) -> Result<Compiled> {
        let manifest_path = dir.join(MANIFEST_FILE);
        let bad = |field: &str, message: String| Error::Graphs {
            path: manifest_path.clone(),
            field: field.into(),
            message,
        };
        let loader = ContextLoader::open(open, dir).map_err(|e| match e {
            AgentError::BadRequest { field, message } => bad(&field, message),
            e => agent(format!("opening {}", dir.display()))(e),
        })?;
        let m = loader.manifest();
        let Some(b) = &m.plan else {
            return Err(bad(
                "plan",
                "compiled for a list of shapes (hetero-agent compile), not for a plan: \
                 compile with `hetero compile PLAN`"
                    .into(),
            ));
        };
        let here = binding(plan_path, plan, &WeightSource::default());
        for (field, theirs, ours) in [
            ("plan.model", &b.model, &here.model),
            ("plan.predictor", &b.predictor, &here.predictor),
            ("plan.graph_sets", &b.graph_sets, &here.graph_sets),
        ] {
            if !theirs.matches(ours) {
                return Err(bad(
                    field,
                    format!(
                        "compiled for plan `{}` ({} sha256 {}), but `{}` has sha256 {}: \
                         compile again for this plan",
                        b.file,
                        theirs.name,
                        short(&theirs.sha256),
                        plan_path.display(),
                        short(&ours.sha256)
                    ),
                ));
            }
        }
        if m.qnn_build != loader.qnn_build() {
            return Err(bad(
                "qnn_build",
                format!(
                    "compiled with QNN {}, but the library here is QNN {}: compile again with it",
                    m.qnn_build,
                    loader.qnn_build()
                ),
            ));
        }
        let mut index = HashMap::new();
        for (i, g) in m.graphs.iter().enumerate() {
            let Some(pg) = &g.plan_graph else {
                return Err(bad(
                    &format!("graphs[{i}].plan_graph"),
                    format!("`{}` does not say which operator share it is", g.file),
                ));
            };
            let key = (pg.op.clone(), pg.layer, pg.instance, pg.first_col, g.spec());
            index.insert(key, i);
        }
        Ok(Compiled {
            dir: dir.to_path_buf(),
            loader,
            index,
            origins: Vec::new(),
        })
    }

    /// Loads one graph after checking its weights and binary.
    fn load(&self, i: usize, weights: &[f32]) -> hetero_agent::Result<Box<dyn Gemm>> {
        let e: &GraphEntry = &self.loader.manifest().graphs[i];
        let pg = e.plan_graph.as_ref().expect("checked at open");
        let bad = |field: &str, message: String| AgentError::BadRequest {
            field: format!(
                "{}: graphs[{i}] ({}).{field}",
                self.dir.join(MANIFEST_FILE).display(),
                e.file
            ),
            message,
        };
        // A graph whose weights are an input holds none: each run writes
        // them, so only a baked-in graph's weights are checked.
        let sha = weights_sha256(weights);
        if e.spec().weights != WeightMode::Input && sha != pg.weights_sha256 {
            return Err(bad(
                "weights_sha256",
                format!(
                    "`{}` layer {} was compiled with other weights ({}) than this run's \
                     ({}): compile again with the same --weights/--seed",
                    pg.op,
                    pg.layer,
                    short(&pg.weights_sha256),
                    short(&sha)
                ),
            ));
        }
        Ok(Box::new(self.loader.load(e)?))
    }
}

fn short(sha: &str) -> &str {
    &sha[..sha.len().min(12)]
}

impl GraphSource for Compiled {
    fn graph(
        &mut self,
        backend: &mut dyn Backend,
        req: &GraphRequest<'_>,
        weights: &[f32],
    ) -> hetero_agent::Result<Box<dyn Gemm>> {
        let key = (
            req.op.to_string(),
            req.layer,
            req.instance,
            req.first_col,
            req.spec,
        );
        let found = self.index.get(&key).copied();
        let g = match found {
            Some(i) => self.load(i, weights)?,
            None => backend.prepare(&req.spec, weights)?,
        };
        self.origins.push(GraphOrigin {
            op: req.op.to_string(),
            layer: req.layer,
            instance: req.instance,
            first_col: req.first_col,
            gemm: format!("{} {} {}", req.spec.shape, req.spec.dtype, req.spec.order),
            source: if found.is_some() {
                "loaded"
            } else {
                "prepared"
            }
            .into(),
            file: found.map(|i| self.loader.manifest().graphs[i].file.clone()),
        });
        Ok(g)
    }

    fn describe(&self) -> String {
        let loaded = self.origins.iter().filter(|o| o.source == "loaded").count();
        format!(
            "compiled graphs in {}: {loaded} loaded, {} prepared at run time",
            self.dir.display(),
            self.origins.len() - loaded
        )
    }

    fn origins(&self) -> Vec<GraphOrigin> {
        self.origins.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_cut_a_row_major_matrix() {
        let w: Vec<f32> = (0..12).map(|i| i as f32).collect(); // 3 × 4
        assert_eq!(columns(&w, 4, 0, 4), w);
        assert_eq!(columns(&w, 4, 1, 2), vec![1.0, 2.0, 5.0, 6.0, 9.0, 10.0]);
    }

    #[test]
    fn shared_layers_compile_once() {
        let shared = Weights::Synthetic {
            seed: 1,
            share_layers: true,
        };
        assert_eq!(layers_of(&shared, 4), vec![0]);
        let own = Weights::Synthetic {
            seed: 1,
            share_layers: false,
        };
        assert_eq!(layers_of(&own, 3), vec![0, 1, 2]);
    }
}
