//! End-to-end tests of `hetero fit` and `hetero predict` on datasets written
//! into temporary folders. The rows are synthetic and marked simulated.

mod common;
mod synthetic;

use common::*;
use hetero_plan::*;
use synthetic::*;

#[test]
fn fit_then_predict() {
    let t = temp_dir("fit");
    let ds = t.path().join("ds");
    write_dataset(&ds, &staged_rows());
    let pred = t.path().join("p.ron");
    let report = t.path().join("r.json");
    let out = HETERO.ok(&[
        "fit",
        ds.to_str().unwrap(),
        "--out",
        pred.to_str().unwrap(),
        "--report",
        report.to_str().unwrap(),
    ]);
    assert!(out.contains("npu-sim"), "{out}");
    assert!(out.contains("simulated"), "{out}");
    assert!(out.contains("measured shapes kept"), "{out}");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let e = &r["entries"][0];
    for field in [
        "processor",
        "model",
        "mape",
        "within_10pct",
        "within_20pct",
        "samples",
    ] {
        assert!(!e[field].is_null(), "report lacks {field}: {e}");
    }
    assert!(e["mape"].as_f64().unwrap() < 2.0, "{e}");

    let p: Predictor = load(&pred).unwrap();
    assert_eq!(p.models.len(), 1);
    let prep = p.overheads("npu-sim").prepare.expect("prepare cost fitted");
    assert!((prep.alpha_us - 1000.0).abs() < 1.0, "{prep:?}");

    let predict = |pred: &std::path::Path, shape: &str| {
        let json = HETERO.ok(&[
            "predict",
            pred.to_str().unwrap(),
            "--processor",
            "npu-sim",
            "--shape",
            shape,
            "--order",
            "transposed",
            "--json",
        ]);
        serde_json::from_str::<serde_json::Value>(&json).unwrap()
    };
    let v = predict(&pred, "300x512x512");
    let us = v["predicted_us"].as_f64().unwrap();
    let want = staged_us(300, 512, 512);
    assert!(
        (us / want - 1.0).abs() < 0.05,
        "predicted {us}, staged {want}"
    );
    assert_eq!(v["timing"], "simulated");
    assert_eq!(v["source"], "model", "300 rows were not profiled");

    // A profiled shape (295 rows) is answered with its measured median,
    // unless the predictor was fitted with --model-only.
    let v = predict(&pred, "295x512x512");
    assert_eq!(v["source"], "measured", "{v}");
    assert_eq!(v["predicted_us"].as_f64(), Some(staged_us(295, 512, 512)));
    let model_us = v["model_us"].as_f64().unwrap();
    let only = t.path().join("model-only.ron");
    HETERO.ok(&[
        "fit",
        ds.to_str().unwrap(),
        "--out",
        only.to_str().unwrap(),
        "--model-only",
    ]);
    let v = predict(&only, "295x512x512");
    assert_eq!(v["source"], "model", "{v}");
    assert_eq!(v["predicted_us"].as_f64(), Some(model_us));
}

#[test]
fn bad_datasets_exit_2_and_write_nothing() {
    let t = temp_dir("fit-bad");
    let out = t.path().join("p.ron");
    let run = |ds: &std::path::Path| {
        HETERO.bad_input(&["fit", ds.to_str().unwrap(), "--out", out.to_str().unwrap()])
    };

    let mut rows = staged_rows();
    rows[5].median_us = None; // NaN in the source serialises as null
    let nan = t.path().join("nan");
    write_dataset(&nan, &rows);
    let e = run(&nan);
    assert!(e.contains(&rows[5].case_id) && e.contains("NaN"), "{e}");

    rows[5].median_us = Some(0.0);
    let zero = t.path().join("zero");
    write_dataset(&zero, &rows);
    assert!(run(&zero).contains("positive"));

    let empty = t.path().join("empty");
    write_dataset(&empty, &[]);
    assert!(run(&empty).contains("too few usable rows"));

    let small = t.path().join("small");
    write_dataset(&small, &staged_rows()[..5]);
    assert!(run(&small).contains("too few usable rows"));

    let e = run(&t.path().join("missing"));
    assert!(e.contains("missing"), "{e}");
    assert!(!out.exists(), "a predictor was written for bad input");
}

#[test]
fn predict_bad_input() {
    let e = HETERO.bad_input(&[
        "predict",
        "plan-format/tests/golden/predictor.ron",
        "--processor",
        "gpu:9",
        "--shape",
        "1x2x3",
    ]);
    assert!(e.contains("gpu:9") && e.contains("cpu:0"), "{e}");
    HETERO.bad_input(&[
        "predict",
        "plan-format/tests/golden/predictor.ron",
        "--processor",
        "cpu:0",
        "--shape",
        "0x2x3",
    ]);
    HETERO.bad_input(&[
        "predict",
        "/nonexistent.ron",
        "--processor",
        "cpu:0",
        "--shape",
        "1x2x3",
    ]);
}

#[test]
fn max_cv_leaves_noisy_rows_out_and_counts_them() {
    let t = temp_dir("fit-cv");
    let ds = t.path().join("ds");
    let mut rows = staged_rows();
    for (i, r) in rows.iter_mut().enumerate() {
        r.cv = Some(if i % 10 == 0 { 0.5 } else { 0.01 });
    }
    let noisy = rows.iter().filter(|r| r.cv == Some(0.5)).count();
    write_dataset(&ds, &rows);
    let pred = t.path().join("p.ron");
    let report = t.path().join("r.json");
    let out = HETERO.ok(&[
        "fit",
        ds.to_str().unwrap(),
        "--out",
        pred.to_str().unwrap(),
        "--report",
        report.to_str().unwrap(),
        "--max-cv",
        "0.1",
    ]);
    assert!(
        out.contains(&format!(
            "left out npu-sim f16: {noisy} row(s) with cv above 0.1"
        )),
        "{out}"
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(r["max_cv"], 0.1);
    let e = &r["entries"][0];
    assert_eq!(e["excluded_noisy"], noisy);
    assert_eq!(e["samples"], rows.len() - noisy);
    assert!(e["by_cv"].as_array().is_some_and(|b| !b.is_empty()), "{e}");

    for bad in ["0", "-1", "NaN"] {
        let e = HETERO.bad_input(&[
            "fit",
            ds.to_str().unwrap(),
            "--out",
            pred.to_str().unwrap(),
            &format!("--max-cv={bad}"),
        ]);
        assert!(e.contains("--max-cv"), "{e}");
    }
}

/// The staged rows again, every third one 30 % slower: a second "run" that
/// agrees with the first within ±10 % on two cases in three.
fn retest_rows() -> Vec<MeasurementRow> {
    let mut rows = staged_rows();
    for r in rows.iter_mut().step_by(3) {
        r.median_us = r.median_us.map(|v| v * 1.3);
    }
    rows
}

#[test]
fn a_second_profile_is_compared_and_tests_the_predictor() {
    let t = temp_dir("fit-test");
    let (a, b) = (t.path().join("a"), t.path().join("b"));
    write_dataset(&a, &staged_rows());
    write_dataset(&b, &retest_rows());
    let n = staged_rows().len();
    let slower = n.div_ceil(3);

    let json = HETERO.ok(&[
        "dataset",
        "compare",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let g = &v[0];
    assert_eq!(g["processor"], "npu-sim");
    assert_eq!(g["pairs"].as_u64().unwrap() as usize, n);
    let agree = g["within_10pct"].as_f64().unwrap();
    assert!((agree - (n - slower) as f64 / n as f64).abs() < 1e-9, "{g}");
    assert!(
        (g["worst"][0]["diff_pct"].as_f64().unwrap() - 30.0).abs() < 1e-6,
        "{g}"
    );
    let table = HETERO.ok(&[
        "dataset",
        "compare",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
    ]);
    assert!(
        table.contains("npu-sim") && table.contains("66.7%"),
        "{table}"
    );

    let pred = t.path().join("p.ron");
    let report = t.path().join("r.json");
    let out = HETERO.ok(&[
        "fit",
        a.to_str().unwrap(),
        "--out",
        pred.to_str().unwrap(),
        "--report",
        report.to_str().unwrap(),
        "--test",
        b.to_str().unwrap(),
    ]);
    assert!(out.contains("tested on"), "{out}");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let e = &r["test"]["entries"][0];
    assert_eq!(e["score"]["samples"].as_u64().unwrap() as usize, n);
    assert!(
        e["unseen"].is_null(),
        "the same shapes: nothing unseen: {e}"
    );
    // The predictor follows the first run (MAPE under 2 % there), so on the
    // second it misses the slower third by about 23 % and no more.
    let within = e["score"]["within_10pct"].as_f64().unwrap();
    assert!(
        (within - agree).abs() < 0.05,
        "within {within}, agreement {agree}"
    );
    assert!(e["worst"][0]["error_pct"].as_f64().unwrap() < -15.0, "{e}");
    assert_eq!(
        r["test"]["agreement"][0]["pairs"].as_u64().unwrap() as usize,
        n
    );
}

#[test]
fn a_second_profile_with_nothing_in_common_exits_2() {
    let t = temp_dir("fit-test-bad");
    let (a, b) = (t.path().join("a"), t.path().join("b"));
    write_dataset(&a, &staged_rows());
    let mut other = staged_rows();
    for r in &mut other {
        r.processor = "npu-sim:1".into();
        r.case_id = format!("other/{}", r.case_id);
    }
    write_dataset(&b, &other);
    let e = HETERO.bad_input(&[
        "dataset",
        "compare",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
    ]);
    assert!(e.contains("no usable case"), "{e}");
    let pred = t.path().join("p.ron");
    let e = HETERO.bad_input(&[
        "fit",
        a.to_str().unwrap(),
        "--out",
        pred.to_str().unwrap(),
        "--test",
        b.to_str().unwrap(),
    ]);
    assert!(
        e.contains("no usable row for a fitted processor") && e.contains("npu-sim/f16"),
        "{e}"
    );
    assert!(!pred.exists(), "a predictor was written for bad input");
}

/// A row marked verified whose error is far above its tolerance
/// contradicts itself: the dataset is refused, as JSON Lines (naming the
/// line) and as Parquet (naming the row), with the field.
#[test]
fn a_verified_row_above_its_tolerance_is_refused_at_load() {
    let t = temp_dir("fit-verified");
    let out = t.path().join("p.ron");
    let fit = |ds: &std::path::Path| {
        HETERO.bad_input(&["fit", ds.to_str().unwrap(), "--out", out.to_str().unwrap()])
    };
    let mut rows = staged_rows();
    rows[4].rel_err = Some(0.5);
    let jsonl = t.path().join("jsonl");
    write_dataset(&jsonl, &rows);
    let e = fit(&jsonl);
    assert!(
        e.contains("measurements.jsonl: line 5: field `rel_err`: 0.5 is above"),
        "{e}"
    );
    let parquet = t.path().join("parquet");
    let ds = hetero_profiler::Dataset {
        profile: Some(load(&jsonl.join("device.json")).unwrap()),
        measurements: rows,
        ..Default::default()
    };
    ds.save(&parquet).unwrap();
    let e = fit(&parquet);
    assert!(
        e.contains("measurements.parquet: row 4: field `rel_err`") && e.contains("verified"),
        "{e}"
    );
    HETERO.bad_input(&["dataset", "show", parquet.to_str().unwrap()]);
    assert!(!out.exists(), "a predictor was written for bad input");
}

/// A predictor whose roofline peak is negative, not a number or 0 is
/// refused by `hetero predict` in RON and JSON, naming the file and field.
#[test]
fn predict_refuses_a_predictor_with_a_meaningless_peak() {
    let t = temp_dir("predict-peak");
    let mut p: Predictor = load(std::path::Path::new(
        "plan-format/tests/golden/predictor.ron",
    ))
    .unwrap();
    p.models[0].model = LatencyModel::Roofline {
        peak_gflops: 1234.5,
        bw_gbps: 50.0,
        launch_us: 4.0,
    };
    let field = "models[0].model.roofline.peak_gflops";
    for (name, from, bads) in [
        ("p.ron", "peak_gflops: 1234.5", &["-1.0", "NaN", "0.0"][..]),
        ("p.json", "\"peak_gflops\": 1234.5", &["-1.0", "0"][..]),
    ] {
        let path = t.path().join(name);
        let good = to_string(&p, Format::of_path(&path).unwrap()).unwrap();
        for bad in bads {
            let key = from.split(':').next().unwrap();
            std::fs::write(&path, good.replace(from, &format!("{key}: {bad}"))).unwrap();
            let e = HETERO.bad_input(&[
                "predict",
                path.to_str().unwrap(),
                "--processor",
                "cpu:0",
                "--shape",
                "64x4096x4096",
            ]);
            assert!(
                e.contains(path.to_str().unwrap()) && e.contains(field),
                "{name} {bad}: {e}"
            );
        }
    }
}
