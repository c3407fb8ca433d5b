//! `hetero generate` end to end: the tiny Hugging Face fixtures of every
//! family give transformers' greedy tokens and logits under a one-CPU plan
//! and under a plan that splits every GEMM between two CPU groups; bad
//! checkpoints, a missing tokenizer and an unsupported family exit 2.
//!
//! Logits are compared per step as `max |a − b| / max |b|` (b: the
//! reference), within 1e-3.

mod common;

use std::path::{Path, PathBuf};

use common::{HETERO, TINY_LLAMA, root, temp_dir};
use hetero_plan::{
    CostBreakdown, DType, Decision, DenseOpPlan, Fingerprint, ModelSpec, OpPlan, Phase, Plan,
    ProcessorDType, RowPart, SchemaVersion, Strategy,
};

const FAMILIES: [&str; 4] = ["llama", "qwen2", "mistral", "phi3"];

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The processors of a split plan, and the `--cpu-groups` that opens them:
/// two CPU groups where this machine has two cores, else cpu:0 and npu-sim.
fn split_processors() -> (Vec<&'static str>, Option<String>) {
    let cores = hetero_agent::cpu::topology::allowed_cores();
    if cores.len() >= 2 {
        let groups = format!("{};{}", cores[0], cores[1]);
        (vec!["cpu:0", "cpu:1"], Some(groups))
    } else {
        (vec!["cpu:0", "npu-sim"], None)
    }
}

/// A plan for `model` with fixed decisions: every GEMM on `processors[0]`,
/// or (two processors) its output features split in halves; prefill
/// lengths 1..=64 and decode length 1, all in f32.
fn plan(dir: &Path, model: &ModelSpec, processors: &[&str]) -> PathBuf {
    let mut ops = Vec::new();
    for (phase, lens) in [
        (Phase::Prefill, (1..=64).collect::<Vec<u32>>()),
        (Phase::Decode, vec![1]),
    ] {
        for op in &model.ops {
            let decisions = lens
                .iter()
                .map(|&len| {
                    let (shape, instances) = op.gemms(phase, len).unwrap();
                    let m = shape.m.get();
                    let strategy = match processors {
                        [a, b] if op.n >= 2 => Strategy::RowCut {
                            parts: vec![
                                RowPart {
                                    processor: (*a).into(),
                                    rows: op.n / 2,
                                    graph: None,
                                },
                                RowPart {
                                    processor: (*b).into(),
                                    rows: op.n - op.n / 2,
                                    graph: None,
                                },
                            ],
                        },
                        _ => Strategy::Single {
                            processor: processors[0].into(),
                            padded_to: None,
                            online_prepare: false,
                        },
                    };
                    let parts = strategy.processors().len();
                    Decision {
                        len,
                        m: (m != len).then_some(m),
                        instances,
                        cost: CostBreakdown {
                            parts_us: vec![10.0; parts],
                            sync_us: 1.0,
                            sync_block_us: Some(2.0),
                            copy_us: 0.0,
                            total_us: 11.0,
                        },
                        strategy,
                        runner_up: None,
                    }
                })
                .collect();
            ops.push(OpPlan::from_dense(DenseOpPlan {
                op: op.name.clone(),
                phase,
                k: op.k,
                n: op.n,
                layers: op.layers,
                orders: vec![],
                decisions,
            }));
        }
    }
    let plan = Plan {
        schema_version: SchemaVersion,
        model: model.fingerprint(),
        predictor: Fingerprint::of_bytes("fixed", b"fixed"),
        processors: processors.iter().map(|p| p.to_string()).collect(),
        dtypes: processors
            .iter()
            .map(|p| ProcessorDType {
                processor: p.to_string(),
                dtype: DType::F32,
            })
            .collect(),
        solver: None,
        notes: vec![],
        graph_sets: vec![],
        ops,
        non_gemm: None,
    };
    let path = dir.join(format!("plan-{}.ron", processors.len()));
    hetero_plan::save(&path, &plan).unwrap();
    path
}

/// The plans every fixture runs under: one CPU, then split.
fn plans(dir: &Path, model: &ModelSpec) -> Vec<(PathBuf, Option<String>)> {
    let (split, groups) = split_processors();
    vec![
        (plan(dir, model, &["cpu:0"]), None),
        (plan(dir, model, &split), groups),
    ]
}

/// `hetero generate ... --json --logits`, parsed.
fn generate(
    plan: &Path,
    model: &Path,
    groups: &Option<String>,
    extra: &[&str],
) -> serde_json::Value {
    let mut args = vec![
        "generate",
        s(plan),
        "--model",
        s(model),
        "--json",
        "--logits",
    ];
    args.extend(extra);
    if let Some(g) = groups {
        args.extend(["--cpu-groups", g.as_str()]);
    }
    serde_json::from_str(&HETERO.ok(&args)).unwrap()
}

fn floats(v: &serde_json::Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

/// max |a − b| / max |b|.
fn rel(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let d = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max);
    d / b.iter().map(|x| x.abs()).fold(0.0, f64::max)
}

#[test]
fn every_family_gives_the_reference_tokens_and_logits_under_one_cpu_and_a_split_plan() {
    let dir = temp_dir("generate-fixtures");
    let mut failures = Vec::new();
    for family in FAMILIES {
        let fixture = root().join("tests/fixtures/models").join(family);
        let expected: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(fixture.join("expected.json"))
                .unwrap_or_else(|e| panic!("{}: {e}", fixture.display())),
        )
        .unwrap();
        let model = hetero_plan::hf::load_config(&fixture.join("config.json")).unwrap();
        let prompt: Vec<String> = expected["prompt_tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.to_string())
            .collect();
        let want_tokens = &expected["tokens"];
        let max_new = expected["max_new"].to_string();
        let prompt = prompt.join(",");
        // Transformers stops at the end token; when it generated all
        // `max_new`, so must we.
        let mut extra = vec!["--prompt-tokens", &prompt, "--max-new", &max_new];
        if want_tokens.as_array().unwrap().len().to_string() == max_new {
            extra.push("--ignore-eos");
        }
        let sub = dir.path().join(family);
        std::fs::create_dir_all(&sub).unwrap();
        for (plan, groups) in plans(&sub, &model) {
            // Every GEMM output checked against the host's f64 reference.
            let mut args = extra.clone();
            args.push("--check");
            let got = generate(&plan, &fixture, &groups, &args);
            let under = format!("{family} under {}", plan.display());
            assert_eq!(got["check"]["passed"], got["check"]["outputs"], "{under}");
            let logits = got["logits"].as_array().unwrap();
            let want = expected["logits"].as_array().unwrap();
            assert_eq!(logits.len(), want.len(), "{under}");
            let gaps: Vec<f64> = logits
                .iter()
                .zip(want)
                .map(|(a, b)| rel(&floats(a), &floats(b)))
                .collect();
            let worst = gaps.iter().copied().fold(0.0, f64::max);
            eprintln!("{under}: largest logit gap {worst:.1e}");
            if &got["tokens"] != want_tokens || gaps.iter().any(|r| *r >= 1e-3) {
                failures.push(format!(
                    "{under}: tokens {} (want {want_tokens}), logit gaps {}",
                    got["tokens"],
                    gaps.iter()
                        .map(|g| format!("{g:.1e}"))
                        .collect::<Vec<_>>()
                        .join(" ")
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Writes [`TINY_LLAMA`]-shaped tensors (random, f32) as
/// `dir/model.safetensors` beside its config.json; `skip` leaves one out
/// and `widen` gives one an extra column.
fn tiny_model(dir: &Path, skip: &str, widen: &str) -> ModelSpec {
    std::fs::write(dir.join("config.json"), TINY_LLAMA).unwrap();
    let model = hetero_plan::hf::load_config(&dir.join("config.json")).unwrap();
    let h = model.hidden as usize;
    let mut t: Vec<(String, Vec<usize>)> = vec![
        (
            "model.embed_tokens.weight".into(),
            vec![model.vocab as usize, h],
        ),
        ("model.norm.weight".into(), vec![h]),
    ];
    for l in 0..model.layers {
        t.push((format!("model.layers.{l}.input_layernorm.weight"), vec![h]));
        t.push((
            format!("model.layers.{l}.post_attention_layernorm.weight"),
            vec![h],
        ));
        for op in model.ops.iter().filter(|o| o.name != "lm_head") {
            let name = format!("model.layers.{l}.{}.weight", op.hf_name);
            t.push((name, vec![op.n as usize, op.k as usize]));
        }
    }
    t.push(("lm_head.weight".into(), vec![model.vocab as usize, h]));
    let data: Vec<(String, Vec<usize>, Vec<u8>)> = t
        .into_iter()
        .filter(|(n, _)| n != skip)
        .enumerate()
        .map(|(i, (n, mut shape))| {
            if n == widen {
                shape[1] += 1;
            }
            let len = shape.iter().product();
            let norm = n.ends_with("norm.weight");
            let bytes = hetero_agent::verify::random_vec(len, 5 + i as u64)
                .into_iter()
                .flat_map(|x| (if norm { 1.0 + 0.1 * x } else { 0.3 * x }).to_le_bytes())
                .collect();
            (n, shape, bytes)
        })
        .collect();
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = data
        .iter()
        .map(|(n, s, d)| {
            let v = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), d);
            (n.clone(), v.unwrap())
        })
        .collect();
    std::fs::write(
        dir.join("model.safetensors"),
        safetensors::serialize(views, None).unwrap(),
    )
    .unwrap();
    model
}

#[test]
fn text_output_reports_times_per_operator_and_checks_every_gemm() {
    let dir = temp_dir("generate-text");
    let model = tiny_model(dir.path(), "", "");
    let cpu = plan(dir.path(), &model, &["cpu:0"]);
    let out = HETERO.ok(&[
        "generate",
        s(&cpu),
        "--model",
        s(dir.path()),
        "--prompt-tokens",
        "1,2,3,4",
        "--max-new",
        "4",
        "--check",
    ]);
    for part in [
        "tokens: ",
        "time to first token",
        "time per output token",
        "tokens/s",
        "attention",
        "ffn_down",
        "predicted µs",
        "check: 60/60 GEMM outputs within their bound",
    ] {
        assert!(out.contains(part), "{part} missing: {out}");
    }
    // Sampling with a seed repeats itself.
    let sampled = |seed: &str| {
        let v = generate(
            &cpu,
            dir.path(),
            &None,
            &[
                "--prompt-tokens",
                "1 2 3",
                "--max-new",
                "6",
                "--temperature",
                "0.9",
                "--top-k",
                "20",
                "--top-p",
                "0.95",
                "--seed",
                seed,
            ],
        );
        v["tokens"].clone()
    };
    assert_eq!(sampled("4"), sampled("4"));
    // Text in and out through a tokenizer.json.
    let vocab: Vec<String> = (0..80).map(|i| format!("\"t{i}\": {i}")).collect();
    let tok = dir.path().join("tokenizer.json");
    std::fs::write(
        &tok,
        format!(
            r#"{{"version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
            "normalizer": null, "pre_tokenizer": {{"type": "Whitespace"}}, "post_processor": null,
            "decoder": null, "model": {{"type": "WordLevel", "vocab": {{{}}}, "unk_token": "t0"}}}}"#,
            vocab.join(", ")
        ),
    )
    .unwrap();
    let v = generate(
        &cpu,
        dir.path(),
        &None,
        &[
            "--tokenizer",
            s(&tok),
            "--prompt",
            "t5 t7 t9",
            "--max-new",
            "3",
        ],
    );
    assert_eq!(v["prompt_tokens"], 3, "{v}");
    let text = v["text"].as_str().unwrap();
    assert_eq!(text.split_whitespace().count(), 3, "{text}");
}

#[test]
fn bad_checkpoints_a_missing_tokenizer_and_unsupported_families_exit_2() {
    let dir = temp_dir("generate-bad");
    let model = tiny_model(dir.path(), "", "");
    let cpu = plan(dir.path(), &model, &["cpu:0"]);
    let run = |model_dir: &Path, extra: &[&str]| {
        let mut a = vec![
            "generate",
            s(&cpu),
            "--model",
            s(model_dir),
            "--max-new",
            "2",
        ];
        a.extend(extra);
        HETERO.bad_input(&a)
    };
    let ids = ["--prompt-tokens", "1,2"];
    for (skip, widen, name, also) in [
        (
            "model.layers.1.post_attention_layernorm.weight",
            "",
            "model.layers.1.post_attention_layernorm.weight",
            "missing",
        ),
        (
            "",
            "model.layers.0.mlp.down_proj.weight",
            "model.layers.0.mlp.down_proj.weight",
            "[64, 97]",
        ),
        ("lm_head.weight", "", "lm_head.weight", "lm_head"),
    ] {
        let sub = dir.path().join(format!("m{}", name.len()));
        std::fs::create_dir_all(&sub).unwrap();
        tiny_model(&sub, skip, widen);
        let e = run(&sub, &ids);
        assert!(e.contains(name) && e.contains(also), "{e}");
    }
    let e = run(
        dir.path(),
        &["--tokenizer", "nowhere/tokenizer.json", "--prompt", "hi"],
    );
    assert!(e.contains("nowhere/tokenizer.json"), "{e}");
    let e = run(dir.path(), &["--prompt", "hi"]);
    assert!(e.contains("--tokenizer"), "{e}");
    let e = run(dir.path(), &["--prompt-tokens", "1,80"]);
    assert!(e.contains("80") && e.contains("vocabulary"), "{e}");
    let e = run(dir.path(), &["--prompt-tokens", "1,x"]);
    assert!(e.contains("--prompt-tokens"), "{e}");
    // A KV cache for four billion positions cannot fit: refused with the
    // bytes, before anything is allocated.
    let mut a = vec!["generate", s(&cpu), "--model", s(dir.path())];
    a.extend(["--prompt-tokens", "1,2", "--max-new", "4000000000"]);
    let e = HETERO.bad_input(&a);
    for part in ["too large for this machine", "KV cache", "bytes", "GiB"] {
        assert!(e.contains(part), "{part} missing: {e}");
    }
    for (family, feature) in [
        ("gemma2", "soft-capping"),
        ("mixtral", "mixture-of-experts"),
        ("qwen3", "q_norm"),
    ] {
        let sub = dir.path().join(family);
        std::fs::create_dir_all(&sub).unwrap();
        let cfg = TINY_LLAMA.replace("\"llama\"", &format!("\"{family}\""));
        let cfg = cfg.replace(
            "\"vocab_size\"",
            "\"num_local_experts\": 4, \"num_experts_per_tok\": 2, \"vocab_size\"",
        );
        std::fs::write(sub.join("config.json"), cfg).unwrap();
        let e = run(&sub, &ids);
        assert!(e.contains(family) && e.contains(feature), "{e}");
    }
}

/// A qwen2 config (q/k/v biases, tied embeddings) as deep as Qwen2.5-1.5B,
/// 28 layers, and otherwise tiny; no checkpoint beside it.
fn deep_qwen2(dir: &Path) -> (PathBuf, ModelSpec) {
    let path = dir.join("deep-qwen2.json");
    let text = std::fs::read_to_string(root().join("tests/fixtures/models/qwen2/config.json"))
        .unwrap()
        .replace("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 28")
        .replace("\"hidden_size\": 64", "\"hidden_size\": 128")
        .replace("\"intermediate_size\": 128", "\"intermediate_size\": 384");
    std::fs::write(&path, text).unwrap();
    let model = hetero_plan::hf::load_config(&path).unwrap();
    assert_eq!(model.layers, 28);
    (path, model)
}

#[test]
fn synthetic_weights_run_every_layer_with_finite_logits_and_checks() {
    let dir = temp_dir("generate-synthetic");
    let (config, model) = deep_qwen2(dir.path());
    let (split, groups) = split_processors();
    let cpu = plan(dir.path(), &model, &split);
    let prompt = ["--prompt-tokens", "3,1,4,1,5,9,2,6"];
    let run = |extra: &[&str]| {
        let mut a = vec!["--synthetic-weights", "--max-new", "4", "--ignore-eos"];
        a.extend(prompt);
        a.extend(extra);
        generate(&cpu, &config, &groups, &a)
    };
    let shared = run(&["--share-weights", "--check"]);
    let logits: Vec<Vec<f64>> = (shared["logits"].as_array().unwrap().iter())
        .map(floats)
        .collect();
    assert_eq!(logits.len(), 4);
    for l in &logits {
        assert!(l.iter().all(|x| x.is_finite()), "{l:?}");
        assert!(l.iter().any(|x| *x != 0.0));
    }
    let c = &shared["check"];
    assert_eq!(c["passed"], c["outputs"], "{c}");
    // Seven GEMMs per layer, 28 layers, a prefill and three decode steps.
    assert!(c["outputs"].as_u64().unwrap() >= 4 * 28 * 7, "{c}");
    let notes = shared["notes"].to_string();
    assert!(notes.contains("synthetic weights: tokens are not a model's output"));
    // Seeded: the same seed gives the same logits, another seed others;
    // without sharing each layer has its own weights.
    assert_eq!(run(&["--share-weights"])["logits"], shared["logits"]);
    let other = run(&["--share-weights", "--seed-weights", "7"]);
    assert_ne!(other["logits"], shared["logits"]);
    let own = run(&[]);
    assert_ne!(own["logits"], shared["logits"]);
    assert!(floats(&own["logits"][3]).iter().all(|x| x.is_finite()));
}

#[test]
fn synthetic_weight_options_are_refused_where_they_do_not_apply() {
    let dir = temp_dir("generate-synthetic-bad");
    let model = tiny_model(dir.path(), "", "");
    let cpu = plan(dir.path(), &model, &["cpu:0"]);
    let tok = dir.path().join("tokenizer.json");
    std::fs::write(&tok, "{}").unwrap();
    let base = [
        "generate",
        s(&cpu),
        "--prompt-tokens",
        "1,2",
        "--max-new",
        "2",
    ];
    let folder = dir.path().to_str().unwrap();
    for (extra, says) in [
        // Sharing and seeds are of synthetic weights, not a checkpoint's.
        (
            vec!["--model", folder, "--share-weights"],
            "--synthetic-weights",
        ),
        (
            vec!["--model", folder, "--seed-weights", "3"],
            "--synthetic-weights",
        ),
        // Synthetic tokens have no text.
        (
            vec![
                "--model",
                folder,
                "--synthetic-weights",
                "--tokenizer",
                s(&tok),
            ],
            "--tokenizer",
        ),
        (
            vec!["--model", "/nonexistent/config.json", "--synthetic-weights"],
            "/nonexistent",
        ),
    ] {
        let args = [&base[..], &extra[..]].concat();
        let o = HETERO.cmd().args(&args).output();
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {e}");
        assert!(e.contains(says), "{extra:?}: {e}");
    }
    // A folder with a checkpoint runs on synthetic weights when asked.
    let v = generate(
        &cpu,
        dir.path(),
        &None,
        &[
            "--synthetic-weights",
            "--prompt-tokens",
            "1,2",
            "--max-new",
            "2",
        ],
    );
    assert_eq!(v["tokens"].as_array().unwrap().len(), 2);
}

/// `plan` with the host operators' costs per layer: every operator at
/// `us` per layer at length 1, ten times that at length 64, on the host.
fn with_non_gemm(plan: &Path, layers: u32, us: f64) -> PathBuf {
    use hetero_plan::{
        HOST, LayerPlacement, Layers, NonGemmCost, NonGemmKnot, NonGemmOp, NonGemmPlan, PlacedCosts,
    };
    let mut p: Plan = hetero_plan::load(plan).unwrap();
    let knot = |len, us| NonGemmKnot {
        len,
        compute_us: us,
        sync_us: 0.0,
        copy_us: 0.0,
    };
    let chosen = PlacedCosts {
        at: HOST.into(),
        ops: (NonGemmOp::ALL.iter())
            .map(|&op| NonGemmCost {
                op,
                knots: vec![knot(1, us), knot(64, 10.0 * us)],
            })
            .collect(),
    };
    p.non_gemm = Some(NonGemmPlan {
        decode_tokens: 1,
        placements: [Phase::Prefill, Phase::Decode]
            .map(|phase| LayerPlacement {
                phase,
                layers: Layers {
                    first: 0,
                    last: layers - 1,
                },
                chosen: chosen.clone(),
                alternative: None,
            })
            .to_vec(),
    });
    let out = plan.with_file_name("plan-non-gemm.ron");
    hetero_plan::save(&out, &p).unwrap();
    out
}

#[test]
fn the_plan_s_forecast_is_printed_beside_the_measurement() {
    let dir = temp_dir("generate-forecast");
    let model = tiny_model(dir.path(), "", "");
    let old = plan(dir.path(), &model, &["cpu:0"]);
    let new = with_non_gemm(&old, model.layers, 2.0);
    let args = [
        "--prompt-tokens",
        "1,2,3,4",
        "--max-new",
        "3",
        "--ignore-eos",
    ];
    let v = generate(&new, dir.path(), &None, &args);
    let p = &v["predicted"];
    let forecast = hetero_plan::load::<Plan>(&new)
        .unwrap()
        .forecast_generation(4, 3)
        .unwrap();
    assert_eq!(p["ttft_us"].as_f64(), Some(forecast.ttft_us), "{p}");
    assert_eq!(p["tpot_us"].as_f64(), Some(forecast.per_token_us), "{p}");
    assert!(p["prefill_tokens_per_s"].as_f64().unwrap() > 0.0, "{p}");
    assert!(p["decode_tokens_per_s"].as_f64().unwrap() > 0.0, "{p}");
    // Each layer operator's prediction: 2 µs per layer at length 1 and
    // 20 at 64, linear between; the prefill runs at 4.
    let layer_us = 2.0 + 18.0 * 3.0 / 63.0;
    let ops = v["ops"].as_array().unwrap();
    let find = |phase: &str, op: &str| {
        (ops.iter())
            .find(|o| o["phase"] == phase && o["op"] == op)
            .unwrap_or_else(|| panic!("{phase} {op}: {v}"))
    };
    for op in ["attention", "rope", "norm", "activation", "residual"] {
        let got = find("prefill", op)["predicted_us"].as_f64().unwrap();
        assert!(
            (got - layer_us * model.layers as f64).abs() < 1e-6,
            "{op}: {got}"
        );
        assert!(
            find("decode", op)["predicted_us"].as_f64().unwrap() > 0.0,
            "{op}"
        );
    }
    for op in ["embedding", "final_norm", "sampling"] {
        assert!(find("prefill", op)["predicted_us"].is_null(), "{op}");
    }
    let text = HETERO.ok(&[
        &["generate", s(&new), "--model", s(dir.path())][..],
        &args[..],
    ]
    .concat());
    assert!(
        text.contains("time to first token") && text.contains(", predicted "),
        "{text}"
    );
    // A plan without the host operators' costs: GEMM predictions only.
    let v = generate(&old, dir.path(), &None, &args);
    assert!(v["predicted"].is_null(), "{v}");
    assert!(
        v["notes"]
            .to_string()
            .contains("only the GEMMs have predictions")
    );
    for o in v["ops"].as_array().unwrap() {
        let gemm = o["kind"] == "gemm";
        assert_eq!(o["predicted_us"].as_f64().is_some(), gemm, "{o}");
    }
}
