//! The decider's lookups over a plan's ranges agree with the dense table
//! (one decision per length) at every length, for a plan the solver wrote
//! and for the same plan read from a file of schema version 2.

use std::path::Path;

use hetero_plan::{Decision, Fingerprint, Format, Phase, Plan, Predictor, load, load_str};
use hetero_runtime::Decider;
use hetero_solver::{GraphChoice, Settings};

fn solved() -> Plan {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let pred: Predictor = load(&root.join("tests/fixtures/predictors/soc-npu-gpu.ron")).unwrap();
    let model =
        hetero_plan::hf::load_config(&root.join("datasets/models/llama-3.1-8b.json")).unwrap();
    let settings = Settings {
        phases: vec![Phase::Prefill, Phase::Decode],
        prefill_lengths: (1..=2048).collect(),
        decode_lengths: (1..=8).collect(),
        graphs: GraphChoice::Auto,
        prepare_budget_us: Some(600e6),
        ..Settings::default()
    };
    hetero_solver::solve(&pred, Fingerprint::of_bytes("p", b"p"), &model, &settings).unwrap()
}

/// Every length from 0 to past the last: the decider's decision where the
/// dense table has one (`same` compares them), an error elsewhere.
fn agree(plan: &Plan, dense: &[Vec<Decision>], same: impl Fn(&Decision, &Decision) -> bool) {
    let decider = Decider::new(plan);
    for (oi, (op, table)) in plan.ops.iter().zip(dense).enumerate() {
        assert_eq!(decider.op_index(&op.op, op.phase), Some(oi));
        let last = table.last().unwrap().len;
        let mut next = table.iter().peekable();
        for len in 0..=last + 2 {
            let got = decider.decision(plan, oi, len);
            match next.next_if(|d| d.len == len) {
                Some(want) => {
                    let got = got.unwrap_or_else(|e| panic!("{} len {len}: {e}", op.op));
                    assert!(
                        same(&got, want),
                        "{} {} len {len}: {got:?} vs {want:?}",
                        op.op,
                        op.phase
                    );
                    assert_eq!(got.strategy, want.strategy);
                }
                None => assert!(got.is_err(), "{} len {len} is not in the table", op.op),
            }
        }
    }
}

#[test]
fn lookups_agree_with_the_dense_table_at_every_length() {
    let plan = solved();
    let ranges: usize = plan.ops.iter().map(|o| o.ranges.len()).sum();
    let dense: Vec<Vec<Decision>> = plan.ops.iter().map(|o| o.decisions().collect()).collect();
    let decisions: usize = dense.iter().map(Vec::len).sum();
    assert_eq!(decisions, plan.ops.len() / 2 * (2048 + 8));
    assert!(
        ranges * 10 < decisions,
        "{ranges} ranges for {decisions} decisions"
    );
    agree(&plan, &dense, |a, b| a == b);

    // The same table in a file of schema version 2 compacts as it loads.
    let mut v = serde_json::to_value(&plan).unwrap();
    v["schema_version"] = 2.into();
    for (o, table) in v["ops"].as_array_mut().unwrap().iter_mut().zip(&dense) {
        let o = o.as_object_mut().unwrap();
        o.remove("spans");
        o.remove("ranges");
        o.insert("decisions".into(), serde_json::to_value(table).unwrap());
    }
    let text = serde_json::to_string(&v).unwrap();
    let old: Plan = load_str(Path::new("old.json"), &text, Format::Json).unwrap();
    agree(&old, &dense, Decision::agrees_with);
}
