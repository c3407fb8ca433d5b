//! A plan written by the solver runs end to end on cpu:0 and npu-sim, and
//! every output passes the check; a predictor that is not the plan's is refused.

mod common;

use hetero_plan::Phase;
use hetero_runtime::{Error, RunSpec, Runtime, RuntimeOptions, SyncChoice};

#[test]
fn a_solved_plan_runs_every_phase_and_passes_the_check() {
    let dir = hetero_test_support::temp_dir("solved");
    let (config, plan, pred) = common::solved(dir.path());
    let model = hetero_plan::hf::load_config(&config).unwrap();
    let p: hetero_plan::Plan = hetero_plan::load(&plan).unwrap();
    let kinds: std::collections::BTreeSet<String> = p
        .ops
        .iter()
        .flat_map(|o| o.ranges.iter().map(|r| r.strategy.kind().to_string()))
        .collect();
    eprintln!("strategies in the solved plan: {kinds:?}");
    for sync in [SyncChoice::Poll, SyncChoice::Block] {
        let mut rt = Runtime::open(
            &plan,
            model.clone(),
            RuntimeOptions {
                sync,
                predictor: Some(pred.clone()),
                ..Default::default()
            },
        )
        .unwrap();
        for (phase, len) in [
            (Phase::Prefill, 13),
            (Phase::Prefill, 4),
            (Phase::Decode, 1),
        ] {
            let r = rt
                .run(&RunSpec {
                    phase,
                    len,
                    steps: 2,
                    repeat: 2,
                    check: true,
                })
                .unwrap();
            let c = r.check.as_ref().unwrap();
            assert_eq!(c.passed, c.outputs, "{phase} {len}: {:?}", c.failures);
            assert_eq!(c.outputs, 15);
            let json = serde_json::to_value(&r).unwrap();
            for key in ["predicted_us", "measured_us", "per_op", "check"] {
                assert!(json.get(key).is_some(), "{key} missing");
            }
        }
    }
}

#[test]
fn a_predictor_other_than_the_plans_is_refused() {
    let dir = hetero_test_support::temp_dir("otherpred");
    let (config, plan, pred) = common::solved(dir.path());
    let mut p: hetero_plan::Predictor = hetero_plan::load(&pred).unwrap();
    p.overheads.clear();
    let other = dir.path().join("other.ron");
    hetero_plan::save(&other, &p).unwrap();
    let model = hetero_plan::hf::load_config(&config).unwrap();
    let e = Runtime::open(
        &plan,
        model,
        RuntimeOptions {
            predictor: Some(other),
            ..Default::default()
        },
    )
    .err()
    .unwrap();
    assert!(
        matches!(e, Error::Fingerprint { .. }) && e.is_bad_input(),
        "{e}"
    );
    assert!(e.to_string().contains("predictor"), "{e}");
}
