//! Plans and models built in code for the unit tests.

use hetero_plan::{
    CostBreakdown, Decision, DenseOpPlan, Fingerprint, LinearOp, MRule, ModelSpec, OpPlan, OpRole,
    Phase, Plan, ProcessorDType, RowPart, SchemaVersion, Strategy,
};

pub fn single(p: &str) -> Strategy {
    Strategy::Single {
        processor: p.into(),
        padded_to: None,
        online_prepare: false,
    }
}

pub fn row_cut(parts: &[(&str, u32)]) -> Strategy {
    Strategy::RowCut {
        parts: parts
            .iter()
            .map(|(p, r)| RowPart {
                processor: (*p).into(),
                rows: *r,
                graph: None,
            })
            .collect(),
    }
}

pub fn linear(name: &str, k: u32, n: u32) -> LinearOp {
    LinearOp {
        name: name.into(),
        hf_name: format!("mlp.{name}"),
        role: OpRole::Mlp,
        k,
        n,
        count: 1,
        active: 1,
        layers: 1,
        prefill_m: MRule::Tokens,
        decode_m: MRule::Tokens,
    }
}

/// 100 µs a part, 5 µs to poll for the last (25 µs to block for it).
fn cost(parts: usize) -> CostBreakdown {
    CostBreakdown {
        parts_us: vec![100.0; parts.max(1)],
        sync_us: 5.0,
        sync_block_us: Some(25.0),
        copy_us: 0.0,
        total_us: 105.0,
    }
}

/// One operator's decision table: name, phase, (length, strategy) pairs.
pub type Table<'a> = (&'a str, Phase, Vec<(u32, Strategy)>);

/// A plan whose operators have the given decision tables (K = N = 1024).
pub fn plan_with(ops: Vec<Table<'_>>) -> Plan {
    Plan {
        schema_version: SchemaVersion,
        model: Fingerprint::of_bytes("m", b"m"),
        predictor: Fingerprint::of_bytes("p", b"p"),
        processors: vec!["cpu:0".into(), "npu-sim".into()],
        dtypes: vec![],
        solver: None,
        notes: vec![],
        graph_sets: vec![],
        non_gemm: None,
        ops: ops
            .into_iter()
            .map(|(name, phase, table)| {
                OpPlan::from_dense(DenseOpPlan {
                    op: name.into(),
                    phase,
                    k: 1024,
                    n: 1024,
                    layers: 1,
                    orders: vec![],
                    decisions: table
                        .into_iter()
                        .map(|(len, strategy)| Decision {
                            len,
                            m: None,
                            instances: 1,
                            cost: cost(strategy.processors().len()),
                            strategy,
                            runner_up: None,
                        })
                        .collect(),
                })
            })
            .collect(),
    }
}

/// A tiny llama: hidden 64, 2 layers, 4 heads (2 KV), FFN 96, vocab 80.
pub fn tiny_model() -> ModelSpec {
    let cfg = hetero_test_support::TINY_LLAMA;
    hetero_plan::hf::from_str(std::path::Path::new("tiny.json"), cfg, "tiny").unwrap()
}

/// A plan for [`tiny_model`] with one table per operator and phase,
/// `decide(op, phase, len, m, n)` choosing each decision.
pub fn tiny_plan(
    model: &ModelSpec,
    processors: &[&str],
    lens: &[(Phase, Vec<u32>)],
    decide: impl Fn(&LinearOp, Phase, u32, u32) -> Strategy,
) -> Plan {
    let mut ops = Vec::new();
    for (phase, ls) in lens {
        for op in &model.ops {
            let decisions = ls
                .iter()
                .map(|&len| {
                    let (shape, instances) = op.gemms(*phase, len).unwrap();
                    let m = shape.m.get();
                    let strategy = decide(op, *phase, len, m);
                    Decision {
                        len,
                        m: (m != len).then_some(m),
                        instances,
                        cost: cost(strategy.processors().len()),
                        strategy,
                        runner_up: None,
                    }
                })
                .collect();
            ops.push(OpPlan::from_dense(DenseOpPlan {
                op: op.name.clone(),
                phase: *phase,
                k: op.k,
                n: op.n,
                layers: op.layers,
                orders: vec![],
                decisions,
            }));
        }
    }
    Plan {
        schema_version: SchemaVersion,
        model: model.fingerprint(),
        predictor: Fingerprint::of_bytes("p", b"p"),
        processors: processors.iter().map(|p| p.to_string()).collect(),
        dtypes: processors
            .iter()
            .map(|p| ProcessorDType {
                processor: p.to_string(),
                dtype: hetero_plan::DType::F32,
            })
            .collect(),
        solver: None,
        notes: vec![],
        graph_sets: vec![],
        non_gemm: None,
        ops,
    }
}
