//! End-to-end tests of `hetero chart`: every chart type from fixtures; each
//! file exists and holds the expected series, read back from the SVG.

mod common;
mod synthetic;

use common::*;
use synthetic::*;

fn svg_texts(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn dataset_and_fit_report_charts() {
    let t = temp_dir("chart");
    let ds = t.path().join("ds");
    write_dataset(&ds, &staged_rows());
    let pred = t.path().join("p.ron");
    let report = t.path().join("r.json");
    HETERO.ok(&[
        "fit",
        ds.to_str().unwrap(),
        "--out",
        pred.to_str().unwrap(),
        "--report",
        report.to_str().unwrap(),
    ]);

    let out = t.path().join("charts");
    let listed = HETERO.ok(&[
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
        svg.contains("latency (µs") && svg.contains("M (elements"),
        "axis labels (with units; `, log scale` where it is one)"
    );
    assert!(svg.matches("<polyline").count() >= 1);
    let index = std::fs::read_to_string(out.join("index.md")).unwrap();
    assert!(index.contains("stage-00-npu-sim.svg"), "{index}");

    // Same input, same output.
    let again = t.path().join("again");
    HETERO.ok(&[
        "chart",
        ds.to_str().unwrap(),
        "--predictor",
        pred.to_str().unwrap(),
        "--out",
        again.to_str().unwrap(),
    ]);
    assert_eq!(svg, svg_texts(&again.join("stage-00-npu-sim.svg")));

    let fit_out = t.path().join("fit-charts");
    HETERO.ok(&[
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
    let t = temp_dir("chart-png");
    let ds = t.path().join("ds");
    write_dataset(&ds, &staged_rows());
    let out = t.path().join("png");
    let o = HETERO.run(&[
        "chart",
        ds.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--format",
        "png",
    ]);
    if !o.status.success() && stderr(&o).contains("need a TrueType font") {
        // .ci/run installs fonts-dejavu-core, so this runs there.
        skip!(
            FONT,
            "no TrueType font on this machine ({})",
            stderr(&o).trim()
        );
    }
    assert!(o.status.success(), "{}", stderr(&o));
    let png = std::fs::read(out.join("stage-00-npu-sim.png")).unwrap();
    assert_eq!(&png[1..4], b"PNG");
}

#[test]
fn chart_bad_input() {
    let t = temp_dir("chart-bad");
    let junk = t.path().join("junk.json");
    std::fs::write(&junk, "{}").unwrap();
    let e = HETERO.bad_input(&[
        "chart",
        junk.to_str().unwrap(),
        "--out",
        t.path().join("o").to_str().unwrap(),
    ]);
    assert!(e.contains("junk.json"), "{e}");
    HETERO.bad_input(&[
        "chart",
        "/nonexistent",
        "--out",
        t.path().join("o").to_str().unwrap(),
    ]);
}

// ---------------------------------------------------------------------------
// Plan charts and the runtime report.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use hetero_plan::{Phase, Plan, Strategy, StrategyKind};

const SOC: &str = "tests/fixtures/predictors/soc-npu-gpu.ron";
const QWEN3: &str = "tests/fixtures/configs/qwen3-0.6b.json";

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A small plan on the simulated SoC: prefill 1..=96 with graphs 32 and 64,
/// decode 1..=2.
fn soc_plan(dir: &Path) -> PathBuf {
    let plan = dir.join("plan.ron");
    HETERO.ok(&[
        "solve",
        "--predictor",
        SOC,
        "--model",
        QWEN3,
        "--out",
        s(&plan),
        "--lengths",
        "1..96",
        "--npu-graphs",
        "32,64",
        "--decode-lengths",
        "1..2",
    ]);
    plan
}

/// The colours `hetero chart` gives each strategy family (src/chart/draw_plan.rs).
fn kind_colour(k: StrategyKind) -> &'static str {
    match k {
        StrategyKind::Single => "#0072B2",
        StrategyKind::RowCut => "#E69F00",
        StrategyKind::ThreeWay => "#D55E00",
        StrategyKind::SeqCut => "#009E73",
        StrategyKind::MultiSeq => "#56B4E9",
        StrategyKind::Hybrid => "#CC79A7",
        StrategyKind::Chunked => "#8C7D00",
        StrategyKind::Offload => "#6E50A0",
        StrategyKind::Pipe => "#005A46",
    }
}

const ALL_KINDS: [StrategyKind; 9] = [
    StrategyKind::Single,
    StrategyKind::RowCut,
    StrategyKind::ThreeWay,
    StrategyKind::SeqCut,
    StrategyKind::MultiSeq,
    StrategyKind::Hybrid,
    StrategyKind::Chunked,
    StrategyKind::Offload,
    StrategyKind::Pipe,
];

/// The SVG cut into the header (before the first panel) and one segment
/// per panel, found by the panel captions `OP (K ...`.
fn panels<'a>(svg: &'a str, ops: &[&str]) -> (&'a str, Vec<&'a str>) {
    let mut at: Vec<usize> = ops
        .iter()
        .map(|op| {
            svg.find(&format!("\n{op} (K "))
                .unwrap_or_else(|| panic!("no panel titled {op}"))
        })
        .collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "panels out of order");
    let header = &svg[..at[0]];
    at.push(svg.len());
    (header, at.windows(2).map(|w| &svg[w[0]..w[1]]).collect())
}

/// Strategy families whose colour is drawn (stroke or fill) in a segment.
fn kinds_drawn(seg: &str) -> BTreeSet<&'static str> {
    ALL_KINDS
        .iter()
        .map(|k| kind_colour(*k))
        .filter(|c| {
            seg.contains(&format!("stroke=\"{c}\"")) || seg.contains(&format!("fill=\"{c}\""))
        })
        .collect()
}

fn ops_of(plan: &Plan, phase: Phase) -> Vec<&str> {
    plan.ops
        .iter()
        .filter(|o| o.phase == phase)
        .map(|o| o.op.as_str())
        .collect()
}

fn read_dir_bytes(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn plan_partition_charts_hold_one_panel_per_operator_coloured_by_strategy() {
    let t = temp_dir("chart-plan");
    let plan_path = soc_plan(t.path());
    let plan: Plan = hetero_plan::load(&plan_path).unwrap();
    let out = t.path().join("charts");
    let o = HETERO.run(&["chart", s(&plan_path), "--out", s(&out)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("give --predictor and --model"),
        "no hint about re-evaluation: {}",
        stderr(&o)
    );
    let listed = stdout(&o);
    for f in [
        "partition-prefill.svg",
        "partition-decode.svg",
        "latency-prefill.svg",
        "latency-decode.svg",
        "index.md",
    ] {
        assert!(out.join(f).is_file(), "{f} missing; listed:\n{listed}");
    }
    let index = std::fs::read_to_string(out.join("index.md")).unwrap();
    assert_eq!(
        index.lines().filter(|l| l.starts_with("- [")).count(),
        4,
        "{index}"
    );
    assert!(index.contains("npu-sim graphs at 32, 64"), "{index}");

    for phase in [Phase::Prefill, Phase::Decode] {
        let svg = svg_texts(&out.join(format!("partition-{phase}.svg")));
        let ops = ops_of(&plan, phase);
        let (header, segs) = panels(&svg, &ops);
        assert!(header.contains(&format!("Partition of every operator ({phase})")));
        for p in &plan.processors {
            assert!(
                header.contains(&format!("share on {p}")),
                "legend lacks {p}"
            );
        }
        assert!(header.contains("prepared npu-sim graph sizes (M)"));
        assert!(svg.contains("share of the output (%)"), "y axis label");
        let all: BTreeSet<&str> = ops
            .iter()
            .flat_map(|op| plan.op(op, phase).unwrap().decisions())
            .map(|d| kind_colour(d.strategy.kind()))
            .collect();
        // One legend swatch per family the phase uses.
        assert_eq!(kinds_drawn(header), all, "{phase} legend");
        for (op, seg) in ops.iter().zip(&segs) {
            let want: BTreeSet<&str> = plan
                .op(op, phase)
                .unwrap()
                .decisions()
                .map(|d| kind_colour(d.strategy.kind()))
                .collect();
            assert_eq!(kinds_drawn(seg), want, "{phase} {op}: series by strategy");
        }
        // The graph sizes are labelled in the prefill panels.
        if phase == Phase::Prefill {
            for seg in &segs {
                assert!(seg.contains("\n32\n</text>") && seg.contains("\n64\n</text>"));
            }
        }
    }
    // Without the predictor the latency chart draws what the plan stores.
    let svg = svg_texts(&out.join("latency-prefill.svg"));
    assert!(svg.contains("runner-up stored in the plan"));
    assert!(svg.contains("latency, one layer (µs)"));
}

/// The candidate of `plan explain` as the chart names it: family,
/// processors and, alone, how one processor runs.
fn candidate(s: &Strategy) -> (&'static str, Vec<String>, u8) {
    let how = match s {
        Strategy::Single {
            padded_to: Some(_), ..
        } => 1,
        Strategy::Single {
            online_prepare: true,
            ..
        } => 2,
        _ => 0,
    };
    (
        s.kind().as_str(),
        s.processors().into_iter().map(String::from).collect(),
        how,
    )
}

#[test]
fn plan_latency_curves_draw_every_candidate_and_are_deterministic() {
    let t = temp_dir("chart-latency");
    let plan_path = soc_plan(t.path());
    let plan: Plan = hetero_plan::load(&plan_path).unwrap();
    let predictor: hetero_plan::Predictor = hetero_plan::load(&root().join(SOC)).unwrap();
    let model = hetero_plan::hf::load_config(&root().join(QWEN3)).unwrap();
    let args = |out: &Path| -> Vec<String> {
        [
            "chart",
            s(&plan_path),
            "--predictor",
            SOC,
            "--model",
            QWEN3,
            "--out",
            s(out),
        ]
        .map(String::from)
        .to_vec()
    };
    let out = t.path().join("a");
    let a: Vec<String> = args(&out);
    HETERO.ok(&a.iter().map(String::as_str).collect::<Vec<_>>());

    for phase in [Phase::Prefill, Phase::Decode] {
        let svg = svg_texts(&out.join(format!("latency-{phase}.svg")));
        let ops = ops_of(&plan, phase);
        let (header, segs) = panels(&svg, &ops);
        let mut keys = BTreeSet::new();
        for (op, seg) in ops.iter().zip(&segs) {
            // Every length of this small plan is re-evaluated (fewer than --samples).
            let mut kinds = BTreeSet::new();
            for d in plan.op(op, phase).unwrap().decisions() {
                let e =
                    hetero_solver::explain(&predictor, &model, &plan, op, phase, d.len).unwrap();
                for c in e.candidates.iter().filter(|c| c.total_us.is_finite()) {
                    kinds.insert(kind_colour(c.kind));
                    keys.insert(candidate(&c.strategy));
                }
            }
            assert_eq!(
                kinds_drawn(seg),
                kinds,
                "{phase} {op}: one colour per family"
            );
            // The chosen line underneath: black, translucent, wide.
            assert!(
                seg.contains("opacity=\"0.25\" stroke=\"#000000\" stroke-width=\"11\"")
                    || seg.contains("opacity=\"0.25\" fill=\"#000000\""),
                "{phase} {op}: no highlighted choice"
            );
        }
        // One legend entry per candidate, named as `plan explain` names families.
        let entries = header
            .match_indices("</text>")
            .filter(|(i, _)| {
                let start = header[..*i].rfind('>').unwrap() + 1;
                let text = header[start..*i].trim();
                ALL_KINDS
                    .iter()
                    .any(|k| text.starts_with(&format!("{}: ", k.as_str())))
            })
            .count();
        assert_eq!(entries, keys.len(), "{phase}: legend entries {keys:?}");
        assert!(header.contains("chosen by the plan"));
    }
    let index = std::fs::read_to_string(out.join("index.md")).unwrap();
    assert!(
        index.contains("candidates re-evaluated with the predictor"),
        "{index}"
    );

    // Same input, same bytes: every file, SVG and PNG.
    let again = t.path().join("b");
    HETERO.ok(&args(&again).iter().map(String::as_str).collect::<Vec<_>>());
    let (x, y) = (read_dir_bytes(&out), read_dir_bytes(&again));
    assert_eq!(x.len(), 5);
    for ((fa, ba), (fb, bb)) in x.iter().zip(&y) {
        assert_eq!(fa, fb);
        assert!(ba == bb, "{fa} differs between two runs");
    }
}

#[test]
fn plan_chart_needs_both_predictor_and_model_and_the_right_ones() {
    let t = temp_dir("chart-plan-bad");
    let plan_path = soc_plan(t.path());
    let out = t.path().join("o");
    let e = HETERO.bad_input(&["chart", s(&plan_path), "--predictor", SOC, "--out", s(&out)]);
    assert!(e.contains("--model") && e.contains("needs both"), "{e}");
    let e = HETERO.bad_input(&["chart", s(&plan_path), "--model", QWEN3, "--out", s(&out)]);
    assert!(
        e.contains("--predictor") && e.contains("soc-npu-gpu.ron"),
        "{e}"
    );
    let e = HETERO.bad_input(&[
        "chart",
        s(&plan_path),
        "--predictor",
        "tests/fixtures/predictors/discrete-cpu-gpu.ron",
        "--model",
        QWEN3,
        "--out",
        s(&out),
    ]);
    assert!(e.contains("solved for predictor"), "{e}");
    let e = HETERO.bad_input(&[
        "chart",
        s(&plan_path),
        "--predictor",
        SOC,
        "--model",
        "datasets/models/qwen2.5-1.5b.json",
        "--out",
        s(&out),
    ]);
    assert!(e.contains("solved for model"), "{e}");
    // A broken plan names its file and field.
    let broken = t.path().join("broken.ron");
    let text = std::fs::read_to_string(&plan_path).unwrap();
    std::fs::write(&broken, text.replacen("processors:", "processorz:", 1)).unwrap();
    let e = HETERO.bad_input(&["chart", s(&broken), "--out", s(&out)]);
    assert!(e.contains("broken.ron"), "{e}");
    let help = HETERO.ok(&["chart", "--help"]);
    assert!(
        help.contains("--model") && help.contains("every candidate"),
        "{help}"
    );
}

/// A plan for a tiny model on cpu:0 and npu-sim (which this machine has),
/// its config, and the JSON report of `hetero run` at prefill length 13.
fn run_report(dir: &Path) -> PathBuf {
    let dir = &dir.join("run");
    std::fs::create_dir_all(dir).unwrap();
    use hetero_plan::DType;
    let (config, model, pred) = tiny_cpu_npu(dir);
    let settings = hetero_solver::Settings {
        phases: vec![Phase::Prefill],
        prefill_lengths: (1..=16).collect(),
        graphs: hetero_solver::GraphChoice::Sizes(vec![4, 8, 16]),
        row_align: 16,
        dtypes: vec![(None, DType::F32)],
        ..Default::default()
    };
    let plan =
        hetero_solver::solve(&pred, pred.fingerprint("predictor.ron"), &model, &settings).unwrap();
    let plan_path = dir.join("plan.ron");
    hetero_plan::save(&plan_path, &plan).unwrap();
    let report = dir.join("run.json");
    HETERO.ok(&[
        "run",
        s(&plan_path),
        "--model",
        s(&config),
        "--phase",
        "prefill",
        "--len",
        "13",
        "--repeat",
        "2",
        "--out",
        s(&report),
    ]);
    report
}

#[test]
fn runtime_report_scatter_has_operators_parts_and_bands() {
    let t = temp_dir("chart-run");
    let report = run_report(t.path());
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let ops = v["per_op"].as_array().unwrap();
    let mut procs: Vec<String> = ops
        .iter()
        .flat_map(|o| o["parts"].as_array().unwrap().iter())
        .map(|p| p["processor"].as_str().unwrap().to_string())
        .collect();
    procs.sort();
    procs.dedup();
    let out = t.path().join("charts");
    HETERO.ok(&["chart", s(&report), "--out", s(&out)]);
    let svg = svg_texts(&out.join("run-predicted-vs-measured.svg"));
    for want in [
        "exact",
        "±10 %",
        "operator (all its parts, one layer)",
        "measured latency (µs)",
        "predicted latency (µs)",
    ] {
        assert!(svg.contains(want), "lacks {want}");
    }
    for p in &procs {
        assert!(svg.contains(&format!("part on {p}")), "legend lacks {p}");
    }
    if procs.iter().any(|p| p == "npu-sim") {
        assert!(
            svg.contains("part on npu-sim (SIMULATED)"),
            "npu-sim not labelled simulated"
        );
    }
    // One black ring per operator, plus the legend's, and its name.
    let rings = svg
        .split("<circle")
        .skip(1)
        .filter(|c| {
            let c = c.split("/>").next().unwrap();
            c.contains("stroke=\"#000000\"") && c.contains("fill=\"none\"")
        })
        .count();
    assert_eq!(rings, ops.len() + 1);
    let named = ops
        .iter()
        .filter(|o| svg.contains(&format!("\n{}\n</text>", o["op"].as_str().unwrap())))
        .count();
    assert!(named >= 1, "no operator labelled");
    let index = std::fs::read_to_string(out.join("index.md")).unwrap();
    assert!(
        index.contains("runtime report (prefill at length 13)"),
        "{index}"
    );
    // A report is not charted with a predictor.
    HETERO.bad_input(&["chart", s(&report), "--predictor", SOC, "--out", s(&out)]);
}

#[test]
fn every_chart_type_renders_as_png() {
    let t = temp_dir("chart-png-all");
    let plan_path = soc_plan(t.path());
    let report = run_report(t.path());
    let out = t.path().join("png");
    let o = HETERO.run(&[
        "chart",
        s(&plan_path),
        "--predictor",
        SOC,
        "--model",
        QWEN3,
        "--out",
        s(&out),
        "--format",
        "png",
    ]);
    if !o.status.success() && stderr(&o).contains("need a TrueType font") {
        skip!(
            FONT,
            "no TrueType font on this machine ({})",
            stderr(&o).trim()
        );
    }
    assert!(o.status.success(), "{}", stderr(&o));
    HETERO.ok(&["chart", s(&report), "--out", s(&out), "--format", "png"]);
    for f in [
        "partition-prefill.png",
        "partition-decode.png",
        "latency-prefill.png",
        "latency-decode.png",
        "run-predicted-vs-measured.png",
    ] {
        let png = std::fs::read(out.join(f)).unwrap();
        assert_eq!(&png[1..4], b"PNG", "{f}");
    }
    // Keep them for a person to look at.
    if let Ok(keep) = std::env::var("HETERO_KEEP_CHARTS") {
        let keep = Path::new(&keep);
        std::fs::create_dir_all(keep).unwrap();
        for (f, bytes) in read_dir_bytes(&out) {
            std::fs::write(keep.join(f), bytes).unwrap();
        }
    }
}
