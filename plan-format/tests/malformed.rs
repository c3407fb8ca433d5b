//! Bad input is refused with the file, the field path and the line:column.

use std::path::Path;

use hetero_plan::{Error, Format, ModelSpec, Plan, SweepSpec, hf, load, load_str};

fn parse_err<T: serde::de::DeserializeOwned + hetero_plan::Validate + std::fmt::Debug>(
    text: &str,
    format: Format,
) -> Error {
    load_str::<T>(Path::new("bad.file"), text, format).unwrap_err()
}

#[test]
fn json_type_error_names_field_and_position() {
    let text = r#"{
  "schema_version": 1,
  "cases": [
    {"id": "a", "processor": "cpu:0", "shape": {"m": 1, "k": "x", "n": 3}, "dtype": "f32"}
  ]
}"#;
    match parse_err::<SweepSpec>(text, Format::Json) {
        Error::Parse {
            field,
            line,
            column,
            ..
        } => {
            assert_eq!(field, "cases[0].shape.k");
            assert_eq!(line, 4);
            assert!(column > 40, "column {column}");
        }
        e => panic!("unexpected {e}"),
    }
}

#[test]
fn zero_dimension_is_refused_while_parsing() {
    let text = r#"{"schema_version": 1, "cases": [{"id": "a", "processor": "cpu:0",
        "shape": {"m": 0, "k": 2, "n": 3}, "dtype": "f32"}]}"#;
    let e = parse_err::<SweepSpec>(text, Format::Json);
    let msg = e.to_string();
    assert!(msg.contains("cases[0].shape.m"), "{msg}");
    assert!(msg.contains("bad.file:2:"), "{msg}");
}

#[test]
fn unknown_dtype_lists_nothing_silently() {
    let text = r#"{"schema_version": 1, "cases": [{"id": "a", "processor": "cpu:0",
        "shape": {"m": 1, "k": 2, "n": 3}, "dtype": "f8"}]}"#;
    let msg = parse_err::<SweepSpec>(text, Format::Json).to_string();
    assert!(
        msg.contains("cases[0].dtype") && msg.contains("f8"),
        "{msg}"
    );
}

#[test]
fn wrong_schema_version_is_refused_with_position() {
    let e = parse_err::<SweepSpec>(
        "{\n  \"schema_version\": 7,\n  \"cases\": []\n}",
        Format::Json,
    );
    // serde_json reports the position just after the offending value.
    assert!(matches!(e, Error::Parse { line: 2, .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("schema_version"), "{msg}");
    assert!(msg.contains("unsupported schema_version 7"), "{msg}");
}

#[test]
fn missing_field_is_named() {
    let msg = parse_err::<SweepSpec>(
        r#"{"schema_version": 1, "cases": [{"id": "a", "processor": "cpu:0", "dtype": "f32"}]}"#,
        Format::Json,
    )
    .to_string();
    assert!(msg.contains("missing field `shape`"), "{msg}");
    assert!(msg.contains("cases[0]"), "{msg}");
}

#[test]
fn trailing_garbage_is_refused() {
    let e = parse_err::<SweepSpec>("{\"schema_version\": 1} x", Format::Json);
    assert!(matches!(e, Error::Parse { line: 1, .. }), "{e}");
}

#[test]
fn ron_errors_carry_line_and_column() {
    let text = "(\n  schema_version: 1,\n  cases: [\n    (id: \"a\", processor: \"cpu:0\", shape: (m: 1, k: -2, n: 3), dtype: f32),\n  ],\n)\n";
    match parse_err::<SweepSpec>(text, Format::Ron) {
        Error::Parse {
            field,
            line,
            column,
            ..
        } => {
            assert_eq!(field, "cases[0].shape.k");
            assert_eq!(line, 4);
            assert!(column > 30, "column {column}");
        }
        e => panic!("unexpected {e}"),
    }
}

#[test]
fn cross_field_validation_names_the_field() {
    // A row cut whose rows do not add up to N.
    let good = hetero_plan::to_string(&golden_plan(), Format::Json).unwrap();
    let bad = good.replacen("\"rows\": 256", "\"rows\": 255", 1);
    assert_ne!(good, bad);
    match parse_err::<Plan>(&bad, Format::Json) {
        Error::Invalid { field, message, .. } => {
            assert_eq!(field, "ops[0].ranges[0].strategy.parts");
            assert!(message.contains("1535"), "{message}");
        }
        e => panic!("unexpected {e}"),
    }
}

/// A plan whose table has a flat run, a sequence cut whose GPU part takes
/// the rest of M, and a sparse tail: three spans, four ranges.
fn ranged_plan() -> Plan {
    use hetero_plan::{CostBreakdown, Decision, DenseOpPlan, OpPlan, SeqPart, Strategy};
    let single = Strategy::Single {
        processor: "npu-sim".into(),
        padded_to: Some(256),
        online_prepare: false,
    };
    let seq = |len: u32| Strategy::SeqCut {
        parts: vec![
            SeqPart {
                processor: "npu-sim".into(),
                tokens: 256,
                graphs: vec![256],
            },
            SeqPart {
                processor: "cpu:0".into(),
                tokens: len - 256,
                graphs: vec![],
            },
        ],
    };
    let lens = (1..=300).chain([512, 1024]);
    let decisions = lens
        .map(|len| Decision {
            len,
            m: None,
            instances: 1,
            strategy: if len <= 256 { single.clone() } else { seq(len) },
            cost: CostBreakdown {
                parts_us: if len <= 256 {
                    vec![100.0]
                } else {
                    vec![100.0, len as f64]
                },
                sync_us: 0.0,
                sync_block_us: None,
                copy_us: 0.0,
                total_us: 100.0 + len as f64,
            },
            runner_up: None,
        })
        .collect();
    let mut plan = golden_plan();
    plan.ops = vec![OpPlan::from_dense(DenseOpPlan {
        op: "ffn_down".into(),
        phase: hetero_plan::Phase::Prefill,
        k: 8960,
        n: 1536,
        layers: 28,
        orders: vec![],
        decisions,
    })];
    plan
}

/// Loads `plan` written in both formats; the field and message of its
/// refusal (the same in both).
fn refused_range(plan: &Plan) -> (String, String) {
    let mut seen = vec![];
    for format in [Format::Ron, Format::Json] {
        let text = hetero_plan::to_string(plan, format).unwrap();
        match parse_err::<Plan>(&text, format) {
            e @ Error::Invalid { .. } => {
                assert!(e.to_string().starts_with("bad.file:"), "{e}");
                let Error::Invalid { field, message, .. } = e else {
                    unreachable!()
                };
                seen.push((field, message));
            }
            e => panic!("unexpected {e}"),
        }
    }
    assert_eq!(seen[0], seen[1]);
    seen.remove(0)
}

#[test]
fn malformed_ranges_are_refused_naming_the_range() {
    let good = ranged_plan();
    let op = &good.ops[0];
    assert_eq!(op.ranges.len(), 4, "{:#?}", op.ranges);
    assert_eq!(op.spans.len(), 3);
    let text = hetero_plan::to_string(&good, Format::Ron).unwrap();
    load_str::<Plan>(Path::new("good.ron"), &text, Format::Ron).unwrap();

    // Overlap: the sequence cut starts inside the flat run.
    let mut p = good.clone();
    p.ops[0].ranges[0].to = 260;
    p.ops[0].ranges[0].costs.last_mut().unwrap().len = 260;
    let (field, msg) = refused_range(&p);
    assert_eq!(field, "ops[0].ranges[1]");
    assert!(
        msg.contains("257..=260") && msg.contains("ranges[0]"),
        "{msg}"
    );

    // Gap inside a span.
    let mut p = good.clone();
    p.ops[0].ranges[0].to = 250;
    p.ops[0].ranges[0].costs.last_mut().unwrap().len = 250;
    let (field, msg) = refused_range(&p);
    assert_eq!(field, "ops[0].ranges[1]");
    assert!(msg.contains("251..=256") && msg.contains("gap"), "{msg}");

    // A span whose lengths no range covers.
    let mut p = good.clone();
    p.ops[0].ranges.pop();
    let (field, msg) = refused_range(&p);
    assert_eq!(field, "ops[0].ranges[2]");
    assert!(msg.contains("1024..=1024"), "{msg}");

    // from > to.
    let mut p = good.clone();
    p.ops[0].ranges[2].to = 500;
    let (field, msg) = refused_range(&p);
    assert_eq!(field, "ops[0].ranges[2]");
    assert!(msg.contains("after to 500"), "{msg}");

    // A remainder that is not positive: the GPU takes M − 256 from 256 on.
    let mut p = good.clone();
    p.ops[0].ranges[0].to = 255;
    p.ops[0].ranges[0].costs.last_mut().unwrap().len = 255;
    let r = &mut p.ops[0].ranges[1];
    r.from = 256;
    r.costs[0].len = 256;
    let (field, msg) = refused_range(&p);
    assert_eq!(field, "ops[0].ranges[1].follow");
    assert!(
        msg.contains("M − 256") && msg.contains("length 256"),
        "{msg}"
    );

    // Parts that do not add up to M at `from`.
    let mut p = good.clone();
    if let hetero_plan::Strategy::SeqCut { parts } = &mut p.ops[0].ranges[1].strategy {
        parts[1].tokens = 7;
    }
    let (field, msg) = refused_range(&p);
    assert_eq!(field, "ops[0].ranges[1].strategy.parts");
    assert!(msg.contains("not M = 257"), "{msg}");

    // Cost knots that do not reach the end of their range.
    let mut p = good.clone();
    p.ops[0].ranges[1].costs.last_mut().unwrap().len = 299;
    let (field, _) = refused_range(&p);
    assert_eq!(field, "ops[0].ranges[1].costs");
}

#[test]
fn schema_2_tables_with_lengths_out_of_order_are_refused() {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/plan-v2.ron"),
    )
    .unwrap();
    let bad = text.replacen("len: 300", "len: 299", 1);
    assert_ne!(bad, text);
    let e = parse_err::<Plan>(&bad, Format::Ron);
    let msg = e.to_string();
    assert!(
        msg.contains("ops[0]") && msg.contains("decisions[1].len"),
        "{msg}"
    );
}

fn golden_plan() -> Plan {
    load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/plan.json")).unwrap()
}

#[test]
fn unknown_extension_and_missing_file() {
    assert!(matches!(
        load::<ModelSpec>(Path::new("model.yaml")),
        Err(Error::UnknownFormat { .. })
    ));
    let e = load::<ModelSpec>(Path::new("/nonexistent/model.json")).unwrap_err();
    assert!(e.is_bad_input());
    assert!(e.to_string().contains("/nonexistent/model.json"));
}

#[test]
fn hf_config_errors() {
    let p = Path::new("config.json");
    let e = hf::from_str(p, r#"{"model_type": "gpt2", "hidden_size": 8}"#, "x").unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("gpt2") && msg.contains("llama") && msg.contains("qwen2_moe"),
        "{msg}"
    );

    let e = hf::from_str(p, r#"{"model_type": "llama", "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2, "vocab_size": 10}"#, "x").unwrap_err();
    assert!(
        e.to_string()
            .contains("missing required field `intermediate_size`"),
        "{e}"
    );

    let e = hf::from_str(
        p,
        "{\n  \"model_type\": \"llama\",\n  \"hidden_size\": \"big\"\n}",
        "x",
    )
    .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("config.json:3:") && msg.contains("hidden_size"),
        "{msg}"
    );

    let e = hf::from_str(p, "{ not json", "x").unwrap_err();
    assert!(e.to_string().starts_with("config.json:1:"), "{e}");

    let e = hf::from_str(p, r#"{"hidden_size": 8}"#, "x").unwrap_err();
    assert!(e.to_string().contains("model_type"), "{e}");
}

/// An operator's tables in a phase must cover its layers once, end to end:
/// a gap, an overlap, a second table of the same layers, or another layer
/// count in the other phase is refused naming the table.
#[test]
fn layer_groups_that_do_not_partition_the_layers_are_refused() {
    let base = ranged_plan();
    let split = |first: u32, layers: u32| hetero_plan::OpPlan {
        first_layer: first,
        layers,
        ..base.ops[0].clone()
    };
    let mut plan = base.clone();
    plan.ops = vec![split(0, 10), split(10, 18)];
    assert_eq!(refused_or_ok(&plan), None);
    for (ops, field, words) in [
        (
            vec![split(0, 10), split(12, 16)],
            "ops[1].first_layer",
            "leaves layers",
        ),
        (
            vec![split(0, 10), split(8, 20)],
            "ops[1].first_layer",
            "overlaps",
        ),
        (
            vec![split(0, 28), split(0, 28)],
            "ops[1].first_layer",
            "overlaps",
        ),
        (vec![split(5, 23)], "ops[0].first_layer", "leaves layers"),
        (
            vec![split(0, 10), split(10, 0)],
            "ops[1].layers",
            "no layer",
        ),
    ] {
        plan.ops = ops;
        let (f, m) = refused_range(&plan);
        assert_eq!(f, field, "{m}");
        assert!(m.contains(words), "{m}");
    }
    let decode = hetero_plan::OpPlan {
        phase: hetero_plan::Phase::Decode,
        ..split(0, 20)
    };
    plan.ops = vec![split(0, 10), split(10, 18), decode];
    let (f, m) = refused_range(&plan);
    assert_eq!(f, "ops[2].layers", "{m}");
    assert!(m.contains("28 layers in prefill and 20 in decode"), "{m}");
}

/// `None` where `plan` loads, else its refusal.
fn refused_or_ok(plan: &Plan) -> Option<String> {
    let text = hetero_plan::to_string(plan, Format::Json).unwrap();
    load_str::<Plan>(Path::new("ok.json"), &text, Format::Json)
        .err()
        .map(|e| e.to_string())
}
