//! End-to-end tests of `hetero chart`: every chart type from fixtures; each
//! file exists and holds the expected series, read back from the SVG.

mod common;
mod synthetic;

use common::*;
use synthetic::*;

fn svg_texts(path: &std::path::Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn dataset_and_fit_report_charts() {
    let t = TempDir::new("chart");
    let ds = t.path().join("ds");
    write_dataset(&ds, &staged_rows());
    let pred = t.path().join("p.ron");
    let report = t.path().join("r.json");
    ok(&[
        "fit",
        ds.to_str().unwrap(),
        "--out",
        pred.to_str().unwrap(),
        "--report",
        report.to_str().unwrap(),
    ]);

    let out = t.path().join("charts");
    let listed = ok(&[
        "chart",
        ds.to_str().unwrap(),
        "--predictor",
        pred.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let stage = out.join("stage-00-npu-sim.svg");
    assert!(listed.contains("stage-00-npu-sim.svg"), "{listed}");
    let svg = svg_texts(&stage);
    // Two series: the measured points and the predictor's line, each in the legend.
    assert!(svg.contains("measured (median)"), "no measured series");
    assert!(svg.contains("predictor"), "no predictor series");
    assert!(svg.contains("SIMULATED"), "simulated data not labelled");
    assert!(
        svg.contains("latency (µs)") && svg.contains("M (elements)"),
        "axis labels"
    );
    assert!(svg.matches("<polyline").count() >= 1);
    let index = std::fs::read_to_string(out.join("index.md")).unwrap();
    assert!(index.contains("stage-00-npu-sim.svg"), "{index}");

    // Same input, same output.
    let again = t.path().join("again");
    ok(&[
        "chart",
        ds.to_str().unwrap(),
        "--predictor",
        pred.to_str().unwrap(),
        "--out",
        again.to_str().unwrap(),
    ]);
    assert_eq!(svg, svg_texts(&again.join("stage-00-npu-sim.svg")));

    let fit_out = t.path().join("fit-charts");
    ok(&[
        "chart",
        report.to_str().unwrap(),
        "--out",
        fit_out.to_str().unwrap(),
    ]);
    let svg = svg_texts(&fit_out.join("predicted-vs-measured.svg"));
    for series in ["exact", "±10 %", "npu-sim f16"] {
        assert!(svg.contains(series), "scatter lacks series {series}");
    }
}

#[test]
fn png_charts_render_when_a_font_exists() {
    let t = TempDir::new("chart-png");
    let ds = t.path().join("ds");
    write_dataset(&ds, &staged_rows());
    let out = t.path().join("png");
    let o = hetero(&[
        "chart",
        ds.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--format",
        "png",
    ]);
    if !o.status.success() && stderr(&o).contains("need a TrueType font") {
        // .ci/run installs fonts-dejavu-core, so this runs there.
        eprintln!(
            "skipping: no TrueType font on this machine ({})",
            stderr(&o).trim()
        );
        return;
    }
    assert!(o.status.success(), "{}", stderr(&o));
    let png = std::fs::read(out.join("stage-00-npu-sim.png")).unwrap();
    assert_eq!(&png[1..4], b"PNG");
}

#[test]
fn chart_bad_input() {
    let t = TempDir::new("chart-bad");
    let junk = t.path().join("junk.json");
    std::fs::write(&junk, "{}").unwrap();
    let e = bad_input(&[
        "chart",
        junk.to_str().unwrap(),
        "--out",
        t.path().join("o").to_str().unwrap(),
    ]);
    assert!(e.contains("junk.json"), "{e}");
    bad_input(&[
        "chart",
        "/nonexistent",
        "--out",
        t.path().join("o").to_str().unwrap(),
    ]);
}
