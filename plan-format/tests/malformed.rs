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
            assert_eq!(field, "ops[0].decisions[0].strategy.parts");
            assert!(message.contains("1535"), "{message}");
        }
        e => panic!("unexpected {e}"),
    }
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
