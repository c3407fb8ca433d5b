//! One validation path for RON and JSON: a cost or a model parameter that is
//! not a finite number in its range, a verified row above its tolerance, a
//! plan without operators and text that is not UTF-8 are refused, naming
//! the file, the field and (where the format has one) the line:column.

use std::path::{Path, PathBuf};

use hetero_plan::{
    Error, Format, LatencyModel, MeasurementRow, Plan, Predictor, Validate, hf, load, load_str,
    to_string,
};

fn golden(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

fn golden_text(name: &str) -> String {
    std::fs::read_to_string(golden(name)).unwrap()
}

/// `text` with its one `from` replaced by `to`.
fn edited(text: &str, from: &str, to: &str) -> String {
    assert_eq!(text.matches(from).count(), 1, "`{from}` is not unique");
    text.replace(from, to)
}

/// The 1-based line holding `needle` in `text`.
fn line_of(text: &str, needle: &str) -> usize {
    text.lines().position(|l| l.contains(needle)).unwrap() + 1
}

/// Loads `text` as a `T` and expects a parse error at `field` on `line`
/// (serde_json reports the position just after the value, which for the
/// last field of an object is the next line).
fn refused_at<T>(text: &str, format: Format, field: &str, line: usize) -> String
where
    T: serde::de::DeserializeOwned + Validate + std::fmt::Debug,
{
    let e = load_str::<T>(Path::new("bad.file"), text, format).unwrap_err();
    match &e {
        Error::Parse {
            field: f, line: l, ..
        } => {
            assert_eq!(f, field, "{e}");
            let after = format == Format::Json && *l == line + 1;
            assert!(*l == line || after, "line {line}: {e}");
        }
        _ => panic!("expected a parse error, got {e}"),
    }
    let msg = e.to_string();
    assert!(msg.starts_with("bad.file:") && msg.contains(field), "{msg}");
    msg
}

#[test]
fn bad_costs_are_refused_in_ron_and_json_alike() {
    let field = "ops[0].ranges[0].costs[0].cost.total_us";
    let ron = golden_text("plan.ron");
    let line = line_of(&ron, "total_us: 925.0");
    for bad in ["NaN", "-405.4", "1e400", "inf"] {
        let text = edited(&ron, "total_us: 925.0", &format!("total_us: {bad}"));
        let msg = refused_at::<Plan>(&text, Format::Ron, field, line);
        assert!(msg.contains("finite number at least 0"), "{msg}");
    }
    let json = golden_text("plan.json");
    let line = line_of(&json, "\"total_us\": 925.0");
    for bad in ["NaN", "-405.4", "1e400"] {
        let text = edited(
            &json,
            "\"total_us\": 925.0",
            &format!("\"total_us\": {bad}"),
        );
        refused_at::<Plan>(&text, Format::Json, field, line);
    }
    // An element of a list and a value of a map are named too.
    let text = edited(
        &ron,
        "parts_us: [900.0, 880.0]",
        "parts_us: [900.0, -880.0]",
    );
    let line = line_of(&ron, "parts_us: [900.0, 880.0]");
    refused_at::<Plan>(
        &text,
        Format::Ron,
        "ops[0].ranges[0].costs[0].cost.parts_us[1]",
        line,
    );
    let text = edited(&json, "\"cpu:0\": 1.0312", "\"cpu:0\": 0.0");
    let line = line_of(&json, "\"cpu:0\": 1.0312");
    let msg = refused_at::<Plan>(&text, Format::Json, "solver.mean_over_median.cpu:0", line);
    assert!(msg.contains("above 0"), "{msg}");
}

/// The golden predictor with a roofline model for its first processor.
fn roofline_predictor(format: Format) -> String {
    let mut p: Predictor = load(&golden("predictor.ron")).unwrap();
    p.models[0].model = LatencyModel::Roofline {
        peak_gflops: 1234.5,
        bw_gbps: 50.0,
        launch_us: 4.0,
    };
    to_string(&p, format).unwrap()
}

#[test]
fn bad_model_parameters_name_the_field_in_ron_and_json() {
    let field = "models[0].model.roofline.peak_gflops";
    let ron = roofline_predictor(Format::Ron);
    let line = line_of(&ron, "peak_gflops: 1234.5");
    for bad in ["-1.0", "NaN", "0.0", "inf"] {
        let text = edited(&ron, "peak_gflops: 1234.5", &format!("peak_gflops: {bad}"));
        let msg = refused_at::<Predictor>(&text, Format::Ron, field, line);
        assert!(msg.contains("finite number above 0"), "{msg}");
    }
    let json = roofline_predictor(Format::Json);
    let line = line_of(&json, "\"peak_gflops\": 1234.5");
    for bad in ["-1.0", "0", "1e999"] {
        let text = edited(
            &json,
            "\"peak_gflops\": 1234.5",
            &format!("\"peak_gflops\": {bad}"),
        );
        refused_at::<Predictor>(&text, Format::Json, field, line);
    }
    // A negative launch cost and a fitted intercept that is not a number.
    let text = edited(&ron, "launch_us: 4.0", "launch_us: -3.0");
    let line = line_of(&ron, "launch_us: 4.0");
    refused_at::<Predictor>(
        &text,
        Format::Ron,
        "models[0].model.roofline.launch_us",
        line,
    );
    let text = golden_text("predictor.ron");
    let line = line_of(&text, "alpha_us: 12.5");
    let bad = edited(&text, "alpha_us: 12.5", "alpha_us: NaN");
    refused_at::<Predictor>(&bad, Format::Ron, "models[0].model.linear.alpha_us", line);
}

#[test]
fn a_plan_without_operators_or_decisions_is_refused_by_field() {
    let mut plan: Plan = load(&golden("plan.ron")).unwrap();
    plan.ops[0].ranges.clear();
    let (field, msg) = plan.validate().unwrap_err();
    assert_eq!(field, "ops[0].ranges");
    assert!(msg.contains("no decisions"), "{msg}");
    plan.ops.clear();
    let text = to_string(&plan, Format::Json).unwrap();
    let e = load_str::<Plan>(Path::new("empty.json"), &text, Format::Json).unwrap_err();
    let msg = e.to_string();
    assert_eq!(
        msg,
        "empty.json: field `ops`: the plan has no operators; solve it again for a model"
    );
}

/// A row parsed from the golden rows, made verified with `rel_err` and
/// `tolerance` as given.
fn verified_row(rel_err: f64, tolerance: f64) -> MeasurementRow {
    let v: serde_json::Value = serde_json::from_str(&golden_text("rows.json")).unwrap();
    let mut r: MeasurementRow = serde_json::from_value(v["measurements"][0].clone()).unwrap();
    r.verified = true;
    r.rel_err = Some(rel_err);
    r.tolerance = Some(tolerance);
    r
}

#[test]
fn a_verified_row_above_its_tolerance_contradicts_itself() {
    assert_eq!(verified_row(1e-4, 1e-2).validate(), Ok(()));
    let (field, msg) = verified_row(0.5, 1e-2).validate().unwrap_err();
    assert_eq!(field, "rel_err");
    assert!(msg.contains("0.5") && msg.contains("0.01"), "{msg}");
    let (field, _) = verified_row(f64::NAN, 1e-2).validate().unwrap_err();
    assert_eq!(field, "rel_err");
    let (field, _) = verified_row(0.0, -1.0).validate().unwrap_err();
    assert_eq!(field, "tolerance");
    // A row that does not claim to be verified may hold any error.
    let mut r = verified_row(0.5, 1e-2);
    r.verified = false;
    assert_eq!(r.validate(), Ok(()));
}

/// Writes `bytes` to a fresh file `name` and returns its path.
fn temp_file(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hetero-checked-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn text_that_is_not_utf8_gives_the_byte_offset() {
    let mut bytes = golden_text("plan.ron").into_bytes();
    // Line 3, after `  model: (\n    name: "` : a stray Latin-1 byte.
    let at = golden_text("plan.ron").find("Qwen").unwrap();
    bytes.insert(at, 0xe9);
    let path = temp_file("plan.ron", &bytes);
    let e = load::<Plan>(&path).unwrap_err();
    match e {
        Error::NotUtf8 {
            offset,
            byte,
            line,
            column,
            ..
        } => {
            assert_eq!((offset, byte), (at, 0xe9));
            assert_eq!(line, line_of(&golden_text("plan.ron"), "Qwen"));
            assert_eq!(column, 12, "after `    name: \"`");
        }
        e => panic!("expected NotUtf8, got {e}"),
    }
    assert!(e_string(&path).contains(&format!("byte offset {at}")));
    // Model configs read the same way.
    let config = temp_file("config.json", b"{\"model_type\": \"llama\xff\"}");
    let e = hf::load_config(&config).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("config.json:1:22") && msg.contains("byte offset 21"),
        "{msg}"
    );
    assert!(e.is_bad_input());
}

fn e_string(path: &Path) -> String {
    load::<Plan>(path).unwrap_err().to_string()
}
