//! Golden files for every file format: a sample value of each type is
//! written as pretty RON and JSON and compared byte for byte with the files
//! in `tests/golden/`, then each file is parsed back and compared with the
//! value.
//!
//! To regenerate after an intended format change:
//! `HETERO_BLESS=1 cargo test -p hetero-plan --test golden`, then review the diff.

use std::path::{Path, PathBuf};

use hetero_plan::*;
use serde::Serialize;
use serde::de::DeserializeOwned;

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn check<T>(name: &str, value: &T)
where
    T: Serialize + DeserializeOwned + Validate + PartialEq + std::fmt::Debug,
{
    for (ext, format) in [("ron", Format::Ron), ("json", Format::Json)] {
        let path = golden_dir().join(format!("{name}.{ext}"));
        let text = to_string(value, format).unwrap();
        if std::env::var_os("HETERO_BLESS").is_some() {
            std::fs::create_dir_all(golden_dir()).unwrap();
            std::fs::write(&path, &text).unwrap();
        }
        let golden = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (run with HETERO_BLESS=1)", path.display()));
        assert_eq!(
            text,
            golden,
            "{} differs from the golden file",
            path.display()
        );
        let back: T = load(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(&back, value, "{} does not round-trip", path.display());
    }
}

fn shape(m: u32, k: u32, n: u32) -> GemmShape {
    GemmShape::new(m, k, n).unwrap()
}

fn conditions() -> Conditions {
    Conditions {
        timestamp_ms: 1_790_000_000_000,
        cpu_mhz: Some(2400.0),
        temp_c: Some(41.5),
        host_probe_us: Some(4.25),
        setup: None,
    }
}

fn processors() -> Vec<Processor> {
    vec![
        Processor {
            id: "cpu:0".into(),
            kind: ProcessorKind::Cpu,
            api: ProcessorApi::Cpu,
            name: "cores 0-1".into(),
            driver: "gemm 0.19".into(),
            capabilities: Capabilities {
                dtypes: vec![DType::F32, DType::F16],
                unified_memory: true,
                compute_units: Some(2),
                ..Default::default()
            },
            simulated: false,
            emulated: false,
        },
        Processor {
            id: "npu-sim".into(),
            kind: ProcessorKind::Npu,
            api: ProcessorApi::Sim,
            name: "weight-stationary array 32x32 (illustrative)".into(),
            driver: String::new(),
            capabilities: Capabilities {
                dtypes: vec![DType::F16, DType::W8a16],
                static_graphs: true,
                unified_memory: true,
                tile: Some(32),
                ..Default::default()
            },
            simulated: true,
            emulated: false,
        },
    ]
}

fn sweep() -> SweepSpec {
    SweepSpec {
        schema_version: SchemaVersion,
        run: RunParams::default(),
        cases: vec![
            SweepCase {
                id: "cpu:0/64x256x256/f32/aw".into(),
                processor: "cpu:0".into(),
                shape: shape(64, 256, 256),
                dtype: DType::F32,
                order: OperandOrder::Aw,
                weights: WeightMode::Static,
                run: None,
            },
            SweepCase {
                id: "npu-sim/300x1536x8960/f16/transposed".into(),
                processor: "npu-sim".into(),
                shape: shape(300, 1536, 8960),
                dtype: DType::F16,
                order: OperandOrder::Transposed,
                weights: WeightMode::Input,
                run: Some(RunParams {
                    warmups: 1,
                    warmup_ms: 25,
                    repetitions: 3,
                    timeout_ms: 5000,
                    cold_cache: false,
                    rotate_weights: false,
                    kernel_timer: false,
                }),
            },
        ],
        microbench: vec![MicrobenchRequest {
            id: "cpu:0/copy_h2d/4096".into(),
            processor: "cpu:0".into(),
            bench: MicrobenchKind::CopyH2d,
            bytes: Some(4096),
            peer: None,
            shape: None,
        }],
    }
}

#[test]
fn golden_sweep_spec() {
    check("sweep-spec", &sweep());
}

#[test]
fn golden_device_profile() {
    let p = DeviceProfile {
        schema_version: SchemaVersion,
        host: HostInfo {
            name: "devbox".into(),
            os: "Linux 6.1".into(),
            arch: "x86_64".into(),
            transport: "local".into(),
        },
        agent: AgentInfo {
            version: "0.1.0".into(),
            protocol: 1,
            arch: "x86_64".into(),
        },
        processors: processors(),
        unavailable: vec![
            "opencl: libOpenCL.so.1 not found (tried: libOpenCL.so.1, libOpenCL.so)".into(),
        ],
        sweep: Some(sweep()),
        started_ms: 1_790_000_000_000,
        seconds: 61.5,
    };
    check("device-profile", &p);
}

#[derive(Debug, PartialEq, Serialize, serde::Deserialize)]
struct Rows {
    measurements: Vec<MeasurementRow>,
    microbench: Vec<MicrobenchRow>,
}

impl Validate for Rows {
    fn validate(&self) -> Result<(), (String, String)> {
        Ok(())
    }
}

#[test]
fn golden_rows() {
    let mut ok = MeasurementRow {
        case_id: "cpu:0/64x256x256/f32/aw".into(),
        processor: "cpu:0".into(),
        m: 64,
        k: 256,
        n: 256,
        dtype: DType::F32,
        order: OperandOrder::Aw,
        weights: WeightMode::Static,
        status: RowStatus::Ok,
        timing: Timing::Real,
        warmups: 2,
        repetitions: 0,
        median_us: None,
        min_us: None,
        p90_us: None,
        cv: None,
        mean_us: None,
        host_median_us: None,
        launch_us: None,
        prepare_us: None,
        verified: true,
        rel_err: Some(3.1e-7),
        tolerance: Some(1.6e-4),
        message: None,
        conditions: conditions(),
    };
    ok.set_stats(&Stats::from_samples(&[41.0, 40.0, 44.0, 40.5, 42.0, 40.2, 43.0]).unwrap());
    let unsupported = MeasurementRow {
        case_id: "cpu:0/64x256x256/w4a16/aw".into(),
        dtype: DType::W4a16,
        status: RowStatus::Unsupported,
        repetitions: 0,
        median_us: None,
        min_us: None,
        p90_us: None,
        cv: None,
        verified: false,
        rel_err: None,
        tolerance: None,
        message: Some("cpu:0: dtype w4a16 is not supported".into()),
        ..ok.clone()
    };
    let sim = MeasurementRow {
        case_id: "npu-sim/300x1536x8960/f16/transposed".into(),
        processor: "npu-sim".into(),
        m: 300,
        k: 1536,
        n: 8960,
        dtype: DType::F16,
        order: OperandOrder::Transposed,
        timing: Timing::Simulated,
        prepare_us: Some(152_000.0),
        ..ok.clone()
    };
    let bench = MicrobenchRow {
        case_id: "cpu:0/copy_h2d/4096".into(),
        processor: "cpu:0".into(),
        bench: MicrobenchKind::CopyH2d,
        bytes: Some(4096),
        peer: None,
        shape: None,
        status: RowStatus::Ok,
        timing: Timing::Real,
        stats: Stats::from_samples(&[0.5, 0.25, 0.75]),
        gbps: Some(8.2),
        stream: None,
        peer_stream: None,
        message: None,
        conditions: conditions(),
    };
    let stream = MicrobenchRow {
        case_id: "cuda:0/bandwidth_concurrent/67108864/cpu:0".into(),
        processor: "cuda:0".into(),
        bench: MicrobenchKind::BandwidthConcurrent,
        bytes: Some(64 << 20),
        peer: Some("cpu:0".into()),
        gbps: Some(25.5),
        stream: Some(GemvStream {
            copies: 9,
            host_weights: true,
            runs: None,
        }),
        peer_stream: Some(GemvStream {
            copies: 9,
            host_weights: false,
            runs: Some(30),
        }),
        ..bench.clone()
    };
    check(
        "rows",
        &Rows {
            measurements: vec![ok, unsupported, sim],
            microbench: vec![bench, stream],
        },
    );
}

#[test]
fn golden_model_spec() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../datasets/models/qwen2.5-1.5b.json");
    let spec = hf::load_config(&path).unwrap();
    check("model-spec", &spec);
}

pub fn sample_plan() -> Plan {
    let cost = |parts: Vec<f64>, sync: f64| CostBreakdown {
        total_us: parts.iter().cloned().fold(0.0, f64::max) + sync,
        parts_us: parts,
        sync_us: sync,
        sync_block_us: None,
        copy_us: 0.0,
    };
    let runner_up = |kind, label: &str, total_us: f64, winner: f64| {
        Some(RunnerUp {
            kind,
            label: label.into(),
            total_us,
            margin_us: total_us - winner,
        })
    };
    Plan {
        schema_version: SchemaVersion,
        model: Fingerprint::of_bytes("Qwen/Qwen2.5-1.5B", b"model"),
        predictor: Fingerprint::of_bytes("predictor.ron", b"predictor"),
        processors: vec!["npu-sim".into(), "cpu:0".into()],
        dtypes: vec![
            ProcessorDType {
                processor: "npu-sim".into(),
                dtype: DType::F16,
            },
            ProcessorDType {
                processor: "cpu:0".into(),
                dtype: DType::F32,
            },
        ],
        solver: Some(SolverInfo {
            version: "0.1.0".into(),
            row_align: 256,
            prompt_lengths: "uniform 1..=2048".into(),
            expected_prefill_us: Some(81_000.0),
            prepare_budget_us: Some(30e6),
            graph_mem_budget: None,
            host_probe_us: Some(4.25),
            mean_over_median: [("cpu:0".to_string(), 1.0312)].into(),
            offload: Some(OffloadPlacement {
                cpu: "cpu:0".into(),
                gpu: "cuda:0".into(),
                gpu_mem_budget: 8 << 30,
                resident_bytes: 6 << 30,
                strategy: None,
                resident: vec![Resident {
                    op: "ffn_down".into(),
                    rows: 1024,
                    first_layer: 0,
                    layers: None,
                }],
            }),
        }),
        notes: vec!["cpu:0: no concurrent_factor; assumed 1.0".into()],
        graph_sets: vec![GraphSet {
            processor: "npu-sim".into(),
            sizes: vec![32, 256, 512],
            decode_sizes: vec![1],
            row_graphs: vec![RowGraph {
                op: "ffn_down".into(),
                phase: Phase::Prefill,
                size: 512,
                rows: 1280,
            }],
            weights: WeightMode::Static,
            prepare_us: 2.5e6,
            bytes: 120 << 20,
        }],
        ops: vec![OpPlan::from_dense(DenseOpPlan {
            op: "ffn_down".into(),
            phase: Phase::Prefill,
            k: 8960,
            n: 1536,
            layers: 28,
            orders: vec![ProcessorOrder {
                processor: "npu-sim".into(),
                order: OperandOrder::Transposed,
            }],
            decisions: vec![
                Decision {
                    len: 299,
                    m: None,
                    instances: 1,
                    strategy: Strategy::Hybrid {
                        padded_to: 512,
                        parts: vec![
                            RowPart {
                                processor: "npu-sim".into(),
                                rows: 1280,
                                graph: Some(512),
                            },
                            RowPart {
                                processor: "cpu:0".into(),
                                rows: 256,
                                graph: None,
                            },
                        ],
                    },
                    cost: CostBreakdown {
                        // The blocking wait's cost, where it differs.
                        sync_block_us: Some(60.0),
                        ..cost(vec![900.0, 880.0], 25.0)
                    },
                    runner_up: runner_up(StrategyKind::RowCut, "", 940.0, 925.0),
                },
                Decision {
                    len: 300,
                    m: None,
                    instances: 1,
                    strategy: Strategy::SeqCut {
                        parts: vec![
                            SeqPart {
                                processor: "npu-sim".into(),
                                tokens: 256,
                                graphs: vec![256],
                            },
                            SeqPart {
                                processor: "cpu:0".into(),
                                tokens: 44,
                                graphs: vec![],
                            },
                        ],
                    },
                    cost: cost(vec![700.0, 650.0], 25.0),
                    runner_up: runner_up(
                        StrategyKind::Single,
                        "npu-sim padded to 512",
                        1100.0,
                        725.0,
                    ),
                },
                Decision {
                    len: 301,
                    m: Some(1),
                    instances: 2,
                    strategy: Strategy::Single {
                        processor: "npu-sim".into(),
                        padded_to: Some(512),
                        online_prepare: false,
                    },
                    cost: cost(vec![1000.0], 0.0),
                    runner_up: None,
                },
                Decision {
                    len: 302,
                    m: None,
                    instances: 1,
                    strategy: Strategy::Offload {
                        cpu: "cpu:0".into(),
                        gpu: "npu-sim".into(),
                        cc_rows: 256,
                        cg_rows: 256,
                        gg_rows: 1024,
                        gpu_tokens: 32,
                    },
                    cost: cost(vec![500.0, 480.0], 10.0),
                    runner_up: None,
                },
            ],
        })],
        non_gemm: Some(sample_non_gemm()),
    }
}

/// Layers 0-27 run their non-GEMM operators on the host in prefill; the
/// NPU holding the activation was costed too, but cannot run them.
fn sample_non_gemm() -> NonGemmPlan {
    let knot = |len, compute_us, sync_us, copy_us| NonGemmKnot {
        len,
        compute_us,
        sync_us,
        copy_us,
    };
    let costs = |at: &str, sync: f64, copy: f64| PlacedCosts {
        at: at.into(),
        ops: vec![
            NonGemmCost {
                op: NonGemmOp::Attention,
                knots: vec![knot(1, 2.0, sync, copy), knot(512, 900.0, sync, 8.0 * copy)],
            },
            NonGemmCost {
                op: NonGemmOp::Norm,
                knots: vec![
                    knot(1, 0.5, 2.0 * sync, copy),
                    knot(512, 40.0, 2.0 * sync, 8.0 * copy),
                ],
            },
        ],
    };
    NonGemmPlan {
        decode_tokens: 1,
        placements: vec![LayerPlacement {
            phase: Phase::Prefill,
            layers: Layers { first: 0, last: 27 },
            chosen: costs(HOST, 0.0, 0.0),
            alternative: Some(Alternative {
                costs: costs("npu-sim", 12.0, 3.5),
                executable: false,
            }),
        }],
    }
}

/// The sample plan's predicted prefill: its GEMM's decision times its
/// layers, plus the non-GEMM operators on the host, interpolated.
#[test]
fn forecast_adds_gemms_and_non_gemm_operators() {
    let plan = sample_plan();
    let f = plan.forecast_prefill(300).unwrap();
    let gemm = plan.ops[0].at(300).unwrap().cost.total_us * plan.ops[0].layers as f64;
    assert_eq!(f.gemm_us, gemm);
    let t = (300.0 - 1.0) / 511.0;
    let per_layer = (2.0 + t * 898.0) + (0.5 + t * 39.5);
    assert!((f.non_gemm_us - 28.0 * per_layer).abs() < 1e-6, "{f:?}");
    assert_eq!(f.total_us, f.gemm_us + f.non_gemm_us);
    let attention = f.ops.iter().find(|o| o.op == "attention").unwrap();
    assert_eq!(
        (attention.layers, attention.at.clone()),
        (28, vec!["host".to_string()])
    );
    assert!(!f.gemms_only);
    // Lengths the plan's GEMMs do not cover are refused by name.
    let e = plan.forecast_prefill(7).unwrap_err();
    assert_eq!(e.len, 7);
    assert!(e.to_string().contains(&plan.ops[0].op), "{e}");
    // The sample has no decode table: no step is predicted.
    let e = plan.forecast_decode(10).unwrap_err();
    assert!(e.to_string().contains("no decode decisions"), "{e}");
}

#[test]
fn golden_plan() {
    check("plan", &sample_plan());
}

/// Plans are written one range per line (`Plan::to_text`); the compact
/// layout parses back to the same plan.
#[test]
fn golden_plan_one_decision_per_line() {
    let plan = sample_plan();
    for (ext, format) in [("ron", Format::Ron), ("json", Format::Json)] {
        let path = golden_dir().join(format!("plan-compact.{ext}"));
        let text = plan.to_text(format).unwrap();
        if std::env::var_os("HETERO_BLESS").is_some() {
            std::fs::write(&path, &text).unwrap();
        }
        let golden = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (run with HETERO_BLESS=1)", path.display()));
        assert_eq!(text, golden, "{} differs", path.display());
        let lines = text
            .lines()
            .filter(|l| l.contains("from:") || l.contains("\"from\":"))
            .count();
        assert_eq!(lines, plan.ops[0].ranges.len() + 1, "{text}");
        let back: Plan = load(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, plan);
    }
}

/// Plans of schema version 2 (one decision per length) still load, and give
/// the decisions of today's plan at every length.
#[test]
fn schema_2_plans_load_and_give_the_same_decisions() {
    let plan = sample_plan();
    for ext in ["ron", "json"] {
        let old: Plan = load(&golden_dir().join(format!("plan-v2.{ext}"))).unwrap();
        assert_eq!(old.ops[0].ranges, plan.ops[0].ranges, "{ext}");
        assert_eq!(old.ops[0].spans, plan.ops[0].spans, "{ext}");
        let want: Vec<Decision> = plan.ops[0].decisions().collect();
        let got: Vec<Decision> = old.ops[0].decisions().collect();
        assert_eq!(got, want, "{ext}");
        assert_eq!(want.len(), 4);
    }
}

/// A layer-split plan: `ffn_down`'s decode table in two groups of layers,
/// the first 10 resident on the GPU and run there alone, the other 18 on
/// the CPU alone.
fn layer_grouped_plan() -> Plan {
    let single = |p: &str, total_us: f64| Decision {
        len: 1,
        m: None,
        instances: 1,
        strategy: Strategy::Single {
            processor: p.into(),
            padded_to: None,
            online_prepare: false,
        },
        cost: CostBreakdown {
            parts_us: vec![total_us],
            sync_us: 0.0,
            sync_block_us: None,
            copy_us: 0.0,
            total_us,
        },
        runner_up: None,
    };
    let group = |first_layer: u32, layers: u32, d: Decision| OpPlan {
        first_layer,
        ..OpPlan::from_dense(DenseOpPlan {
            op: "ffn_down".into(),
            phase: Phase::Decode,
            k: 8960,
            n: 1536,
            layers,
            orders: vec![],
            decisions: vec![d],
        })
    };
    let mut plan = sample_plan();
    plan.processors = vec!["cpu:0".into(), "cuda:0".into()];
    plan.dtypes.clear();
    plan.graph_sets.clear();
    plan.non_gemm = None;
    let solver = plan.solver.as_mut().unwrap();
    solver.offload = Some(OffloadPlacement {
        cpu: "cpu:0".into(),
        gpu: "cuda:0".into(),
        gpu_mem_budget: 300 << 20,
        resident_bytes: 10 * 8960 * 1536 * 2,
        strategy: Some("layer-split".into()),
        resident: vec![Resident {
            op: "ffn_down".into(),
            rows: 1536,
            first_layer: 0,
            layers: Some(10),
        }],
    });
    plan.ops = vec![
        group(0, 10, single("cuda:0", 30.0)),
        group(10, 18, single("cpu:0", 900.0)),
    ];
    plan
}

#[test]
fn golden_plan_with_layer_groups() {
    let plan = layer_grouped_plan();
    plan.validate().unwrap();
    check("plan-layer-groups", &plan);
    let o = plan.solver.as_ref().unwrap().offload.as_ref().unwrap();
    assert_eq!(
        (o.rows_at("ffn_down", 9), o.rows_at("ffn_down", 10)),
        (1536, 0)
    );
    assert_eq!(layer_count(&plan.ops, "ffn_down", Phase::Decode), 28);
    // A decode step costs each group's decision times its layers.
    let f = plan.forecast_decode(1).unwrap();
    assert_eq!(f.gemm_us, 10.0 * 30.0 + 18.0 * 900.0);
}

#[test]
fn golden_predictor() {
    use hetero_plan::predictor::Work;
    let p = Predictor {
        schema_version: SchemaVersion,
        dataset: Fingerprint::of_bytes("datasets/devbox", b"dataset"),
        // The cpu as a processor that runs both orders as one kernel, so
        // that the file shows both fields.
        processors: {
            let mut p = processors();
            p[0].capabilities.order_free = true;
            p
        },
        models: vec![
            ProcessorModel {
                processor: "cpu:0".into(),
                dtype: DType::F32,
                model: LatencyModel::Linear {
                    alpha_us: 12.5,
                    beta_us: 8.0e-6,
                    work: Work::Flops,
                },
                score: Score {
                    mape: 4.2,
                    within_10pct: 0.97,
                    within_20pct: 1.0,
                    samples: 640,
                    folds: 5,
                },
                candidates: vec![("roofline".into(), Score::default())],
                launch_us: None,
                order_free: true,
                measured: Vec::new(),
            },
            ProcessorModel {
                processor: "npu-sim".into(),
                dtype: DType::F16,
                model: LatencyModel::Tree(Tree {
                    nodes: vec![
                        TreeNode::Split {
                            feature: 6,
                            threshold: 1.5,
                            left: 1,
                            right: 2,
                        },
                        TreeNode::Leaf { value: 3.1 },
                        TreeNode::Leaf { value: 3.9 },
                    ],
                }),
                score: Score::default(),
                candidates: vec![],
                launch_us: None,
                order_free: false,
                measured: Vec::new(),
            },
        ],
        overheads: vec![Overheads {
            processor: "npu-sim".into(),
            prepare: Some(LinearCost {
                alpha_us: 2000.0,
                beta_us_per_byte: 0.01,
            }),
            sync_poll_us: Some(3.0),
            sync_block_us: Some(60.0),
            host_probe_us: Some(4.25),
            mean_over_median: Some(1.0125),
            ..Default::default()
        }],
    };
    check("predictor", &p);
}
