//! The assembly step: graph sets, the offload placement, the expected
//! prefill latency and the notes, written down as the plan.

use std::collections::{BTreeSet, HashMap};

use hetero_plan::{
    DenseOpPlan, Fingerprint, GraphSet, LinearOp, ModelSpec, OffloadPlacement, OpPlan, Phase, Plan,
    ProcessorDType, Resident, RowGraph, SchemaVersion, SolverInfo, Strategy,
};

use rayon::prelude::*;

use super::graph_sets::prepare_budget;
use super::round2;
use crate::engine::{OffloadSetup, Proc, Setup, StaticGraphs, last_token_only};
use crate::oracle::LatencyOracle;
use crate::residency;
use crate::settings::{Distribution, Settings, fmt_bytes};

/// What the plan is assembled from.
pub(super) struct Solved<'x, 'a> {
    pub setup: &'x Setup<'a>,
    pub ops: &'x [&'x LinearOp],
    /// Per table, its first layer and one decision per length; compacted
    /// into ranges as the plan is written.
    pub plan_ops: super::cells::SolvedOps,
    pub dist: Option<Distribution>,
    pub notes: Vec<String>,
}

/// Writes the plan down: the decision tables compacted into ranges.
pub(super) fn plan<O: LatencyOracle + ?Sized>(
    oracle: &O,
    predictor: Fingerprint,
    model: &ModelSpec,
    settings: &Settings,
    solved: Solved,
) -> Plan {
    let Solved {
        setup,
        ops,
        plan_ops,
        dist,
        mut notes,
    } = solved;
    let (first_layers, plan_ops): (Vec<u32>, Vec<DenseOpPlan>) = plan_ops.into_iter().unzip();
    let graph_sets = setup
        .graphs
        .iter()
        .map(|g| graph_set(setup, g, ops, &plan_ops))
        .collect();
    let expected = dist
        .as_ref()
        .map(|d| expected_prefill(&plan_ops, d, &settings.prefill_lengths));
    let offload = setup
        .offload
        .as_ref()
        .map(|o| offload_placement(setup, o, ops, settings));
    if let Some(o) = &offload {
        notes.push(format!(
            "offload: {} of weights resident on {} (budget {})",
            fmt_bytes(o.resident_bytes),
            o.gpu,
            fmt_bytes(o.gpu_mem_budget)
        ));
    } else if setup.procs.iter().any(|p| !p.unified && !p.static_graphs) {
        notes.push("discrete processors are assumed to hold every weight; give --gpu-mem-budget for offload mode".into());
    }
    let mut seen = BTreeSet::new();
    notes.retain(|n| seen.insert(n.clone()));
    let procs = &setup.procs;
    Plan {
        schema_version: SchemaVersion,
        model: model.fingerprint(),
        predictor,
        processors: procs.iter().map(|p| p.id.clone()).collect(),
        dtypes: procs
            .iter()
            .map(|p| ProcessorDType {
                processor: p.id.clone(),
                dtype: p.dtype,
            })
            .collect(),
        solver: Some(SolverInfo {
            version: env!("CARGO_PKG_VERSION").into(),
            row_align: settings.row_align,
            prompt_lengths: dist.as_ref().map_or_else(String::new, |d| d.name.clone()),
            expected_prefill_us: expected.map(round2),
            prepare_budget_us: (!setup.graphs.is_empty()).then_some(prepare_budget(settings)),
            graph_mem_budget: settings.graph_mem_budget,
            offload,
            host_probe_us: host_probe_us(oracle, procs),
            mean_over_median: procs
                .iter()
                .filter_map(|p| {
                    let f = oracle.overheads(&p.id).mean_over_median?;
                    Some((p.id.clone(), (f * 1e4).round() / 1e4))
                })
                .collect(),
        }),
        notes,
        graph_sets,
        non_gemm: None,
        ops: plan_ops
            .into_par_iter()
            .zip(first_layers)
            .map(|(d, first_layer)| OpPlan {
                first_layer,
                ..OpPlan::from_dense(d)
            })
            .collect(),
    }
}

/// The host's speed probe behind the plan: the median over the plan's
/// processors of their profiles' probes (`None` where no profile had one).
fn host_probe_us<O: LatencyOracle + ?Sized>(oracle: &O, procs: &[Proc]) -> Option<f64> {
    let probes: Vec<f64> = procs
        .iter()
        .filter_map(|p| oracle.overheads(&p.id).host_probe_us)
        .collect();
    hetero_plan::Stats::from_samples(&probes).map(|s| round2(s.median_us))
}

/// Offload mode's placement: the strategy, and the rows of each operator
/// resident on the GPU per group of layers, with the bytes they take.
fn offload_placement(
    setup: &Setup,
    o: &OffloadSetup,
    ops: &[&LinearOp],
    settings: &Settings,
) -> OffloadPlacement {
    let resident = ops
        .iter()
        .flat_map(|op| {
            let whole = o.groups(op).len() == 1;
            o.groups(op)
                .into_iter()
                .filter(|g| g.rows > 0)
                .map(move |g| Resident {
                    op: op.name.clone(),
                    rows: g.rows,
                    first_layer: g.first,
                    layers: (!whole).then_some(g.layers),
                })
        })
        .collect();
    OffloadPlacement {
        cpu: o
            .cpu
            .map_or_else(String::new, |c| setup.procs[c].id.clone()),
        gpu: setup.procs[o.gpu].id.clone(),
        gpu_mem_budget: settings.gpu_mem_budget.unwrap_or(0),
        resident_bytes: residency::resident_bytes(setup, ops, &o.resident) as u64,
        strategy: Some(o.strategy.name().into()),
        resident,
    }
}

/// The graphs a static processor must prepare: a full graph of every
/// operator at every size, plus the row-share graphs decisions use.
fn graph_set(
    setup: &Setup,
    g: &StaticGraphs,
    ops: &[&LinearOp],
    plan_ops: &[DenseOpPlan],
) -> GraphSet {
    let sp = &setup.procs[g.p];
    // Every share a decision uses: a size may have two (the hybrid takes
    // the one cheapest at its length).
    let mut rows: BTreeSet<(String, Phase, u32, u32)> = BTreeSet::new();
    for op in plan_ops {
        for d in &op.decisions {
            if let Strategy::RowCut { parts } | Strategy::Hybrid { parts, .. } = &d.strategy {
                for p in parts.iter().filter(|p| p.processor == sp.id) {
                    if let Some(size) = p.graph {
                        rows.insert((op.op.clone(), op.phase, size, p.rows));
                    }
                }
            }
        }
    }
    let mut prepare_us = 0.0;
    let mut bytes = 0.0;
    let mut add = |(u, b): (f64, f64)| {
        prepare_us += u;
        bytes += b;
    };
    let prefill_planned = plan_ops.iter().any(|o| o.phase == Phase::Prefill);
    for o in ops {
        let mut sizes: Vec<u32> = g.decode.clone();
        if prefill_planned {
            if last_token_only(o, Phase::Prefill) {
                sizes.push(1);
            } else {
                sizes.extend(&g.prefill);
            }
        }
        sizes.sort_unstable();
        sizes.dedup();
        for m in sizes {
            add(sp.op_graphs(o, m, o.n));
        }
    }
    let row_graphs: Vec<RowGraph> = rows
        .into_iter()
        .map(|(op, phase, size, r)| {
            let o = ops.iter().find(|o| o.name == op).expect("planned op");
            add(sp.op_graphs(o, size, r));
            RowGraph {
                op,
                phase,
                size,
                rows: r,
            }
        })
        .collect();
    GraphSet {
        processor: sp.id.clone(),
        sizes: g.prefill.clone(),
        decode_sizes: g.decode.clone(),
        row_graphs,
        weights: sp.graph_weights,
        prepare_us: round2(prepare_us),
        bytes: bytes as u64,
    }
}

/// Expected prefill latency: over the distribution, the sum over every
/// operator and layer of the decision the runtime would use (the next
/// solved length at or above the prompt's).
fn expected_prefill(ops: &[DenseOpPlan], dist: &Distribution, solved: &[u32]) -> f64 {
    let per_len: HashMap<u32, f64> = solved
        .iter()
        .map(|&l| {
            let t: f64 = ops
                .iter()
                .filter(|o| o.phase == Phase::Prefill)
                .filter_map(|o| o.at(l).map(|d| d.cost.total_us * o.layers as f64))
                .sum();
            (l, t)
        })
        .collect();
    dist.points
        .iter()
        .filter_map(|&(l, p)| {
            let i = solved.partition_point(|&s| s < l);
            solved.get(i).map(|s| p * per_len[s])
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use hetero_plan::{
        Fingerprint, ModelSpec, Phase, Predictor, Validate, compact, cost_tolerance, expand, hf,
    };

    use crate::{GraphChoice, LatencyOracle, Settings, solve_with_tables, synthetic};

    fn root() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
    }

    fn model(name: &str) -> ModelSpec {
        let r = root();
        let p = [
            r.join("datasets/models").join(name),
            r.join("tests/fixtures/configs").join(name),
        ]
        .into_iter()
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("no config {name}"));
        hf::load_config(&p).unwrap()
    }

    fn settings(prefill: u32, budget: Option<u64>) -> Settings {
        Settings {
            phases: vec![Phase::Prefill, Phase::Decode],
            prefill_lengths: (1..=prefill).collect(),
            decode_lengths: (1..=8).collect(),
            graphs: GraphChoice::Auto,
            prepare_budget_us: Some(600e6),
            gpu_mem_budget: budget,
            ..Settings::default()
        }
    }

    /// Solves, and checks every decision of the dense solve against the
    /// plan's ranges: strategy, M and instances exactly, every cost within
    /// the tolerance. Returns (decisions, ranges).
    fn check_lossless<O: LatencyOracle>(oracle: &O, m: &ModelSpec, s: &Settings) -> (usize, usize) {
        let fp = Fingerprint::of_bytes("p", b"p");
        let (plan, dense, _) = solve_with_tables(oracle, fp, m, s).unwrap();
        plan.validate().unwrap();
        assert_eq!(dense.len(), plan.ops.len());
        let (mut decisions, mut ranges) = (0, 0);
        for (table, op) in dense.iter().zip(&plan.ops) {
            assert_eq!(op.length_count(), table.decisions.len());
            assert_eq!(op.ranges, compact(&table.decisions));
            let back = expand(&op.ranges);
            assert_eq!(back.len(), table.decisions.len());
            for ((want, got), at) in table.decisions.iter().zip(&back).zip(op.decisions()) {
                let what = format!("{} {} len {}", op.op, op.phase, want.len);
                assert_eq!(got, &at, "{what}");
                assert_eq!(
                    (got.len, got.m, got.instances, &got.strategy),
                    (want.len, want.m, want.instances, &want.strategy),
                    "{what}"
                );
                assert!(got.agrees_with(want), "{what}: {got:?} vs {want:?}");
                let tol = cost_tolerance(want.cost.total_us);
                assert!(
                    (got.cost.total_us - want.cost.total_us).abs() <= tol,
                    "{what}"
                );
            }
            decisions += table.decisions.len();
            ranges += op.ranges.len();
        }
        (decisions, ranges)
    }

    #[test]
    fn plans_expand_to_the_dense_solve_on_simulated_processors() {
        let dev = synthetic::paper_like_npu_gpu();
        for name in [
            "llama-3.1-8b.json",
            "qwen2.5-1.5b.json",
            "qwen1.5-moe-a2.7b.json",
        ] {
            let (d, r) = check_lossless(&dev, &model(name), &settings(1500, None));
            assert!(r * 4 < d, "{name}: {r} ranges for {d} decisions");
        }
        let host = synthetic::discrete_cpu_gpu();
        check_lossless(
            &host,
            &model("qwen2.5-1.5b.json"),
            &settings(900, Some(1 << 29)),
        );
    }

    #[test]
    fn plans_expand_to_the_dense_solve_with_fixture_and_fitted_like_predictors() {
        let path = root().join("tests/fixtures/predictors/soc-npu-gpu.ron");
        let fixture: Predictor = hetero_plan::load(&path).unwrap();
        let m = model("llama-3.1-8b.json");
        check_lossless(&fixture, &m, &settings(2048, None));
        for name in ["soc-npu-gpu.ron", "discrete-cpu-gpu.ron"] {
            let fitted = crate::tests::tree_predictor(name);
            check_lossless(&fitted, &model("qwen2.5-1.5b.json"), &settings(1200, None));
        }
    }
}
