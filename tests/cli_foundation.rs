//! End-to-end tests of the Foundation commands: `hetero --help`,
//! `hetero model show`, `hetero schema`.

mod common;

use common::*;

#[test]
fn help_lists_subcommands_and_each_has_an_example() {
    let help = HETERO.ok(&["--help"]);
    for sub in ["model", "schema", "fit", "predict", "chart"] {
        assert!(help.contains(sub), "--help lacks {sub}:\n{help}");
    }
    for args in [
        &["model", "--help"][..],
        &["model", "show", "--help"][..],
        &["schema", "--help"][..],
        &["fit", "--help"][..],
        &["predict", "--help"][..],
        &["chart", "--help"][..],
    ] {
        let h = HETERO.ok(args);
        assert!(
            h.contains("Example"),
            "{args:?} --help has no example:\n{h}"
        );
    }
}

#[test]
fn model_show_table() {
    let out = HETERO.ok(&["model", "show", "datasets/models/qwen2.5-1.5b.json"]);
    assert!(out.contains("ffn_down"), "{out}");
    assert!(out.contains("8960"), "{out}");
    assert!(out.contains("1543569408"), "{out}");
}

#[test]
fn model_show_json_fields_and_golden() {
    let out = HETERO.ok(&[
        "model",
        "show",
        "datasets/models/qwen2.5-1.5b.json",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["layers"], 28);
    assert_eq!(v["linear_params_per_token"], 1_543_569_408u64);
    assert_eq!(v["linear_params_stored"], 1_543_569_408u64);
    let ops = v["ops"].as_array().unwrap();
    let down = ops.iter().find(|o| o["name"] == "ffn_down").unwrap();
    assert_eq!(
        (down["k"].as_u64(), down["n"].as_u64()),
        (Some(8960), Some(1536))
    );
    assert_eq!(down["count"], 1);
    golden("model-show-qwen2.5-1.5b.json", &out);
}

#[test]
fn every_bundled_model_shows() {
    for entry in std::fs::read_dir(root().join("datasets/models")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            let out = HETERO.ok(&["model", "show", path.to_str().unwrap(), "--json"]);
            let v: serde_json::Value = serde_json::from_str(&out).unwrap();
            assert!(v["linear_params_per_token"].as_u64().unwrap() > 0);
        }
    }
}

#[test]
fn model_show_bad_input_exits_2() {
    let t = temp_dir("bad-model");
    let e = HETERO.bad_input(&["model", "show", "/nonexistent/config.json"]);
    assert!(e.contains("/nonexistent/config.json"), "{e}");

    let invalid = t.path().join("invalid.json");
    std::fs::write(
        &invalid,
        "{\n  \"model_type\": \"llama\",\n  \"hidden_size\": ,\n}",
    )
    .unwrap();
    let e = HETERO.bad_input(&["model", "show", invalid.to_str().unwrap()]);
    assert!(e.contains("invalid.json:3:"), "{e}");

    let missing = t.path().join("missing.json");
    std::fs::write(&missing, r#"{"model_type": "qwen2", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128}"#).unwrap();
    let e = HETERO.bad_input(&["model", "show", missing.to_str().unwrap()]);
    assert!(
        e.contains("missing.json") && e.contains("vocab_size"),
        "{e}"
    );

    let unknown = t.path().join("unknown.json");
    std::fs::write(&unknown, r#"{"model_type": "gpt_neox"}"#).unwrap();
    let e = HETERO.bad_input(&["model", "show", unknown.to_str().unwrap()]);
    assert!(e.contains("gpt_neox") && e.contains("mixtral"), "{e}");

    // Nothing was written next to the inputs.
    let names: Vec<_> = std::fs::read_dir(t.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 3, "{names:?}");
}

#[test]
fn unknown_flag_exits_2() {
    HETERO.bad_input(&["model", "show", "--frobnicate"]);
}

#[test]
fn schema_exports_every_format() {
    let t = temp_dir("schema");
    let out = HETERO.ok(&["schema", "--out", t.path().to_str().unwrap()]);
    assert_eq!(out.lines().count(), 9, "{out}");
    for line in out.lines() {
        let text = std::fs::read_to_string(line).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert!(v.get("$schema").is_some(), "{line}");
        let name = std::path::Path::new(line)
            .file_name()
            .unwrap()
            .to_str()
            .unwrap();
        golden(&format!("schema/{name}"), &text);
    }
    let plan = HETERO.ok(&["schema", "plan"]);
    assert!(plan.contains("\"decisions\""));
    HETERO.bad_input(&["schema"]);
    HETERO.bad_input(&["schema", "nonsense"]);
}
