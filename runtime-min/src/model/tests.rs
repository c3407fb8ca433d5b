//! The decoder on tiny random checkpoints written here: decoding through
//! the KV cache gives what recomputing the whole sequence gives, a split
//! plan gives what a one-processor plan gives, and bad checkpoints are
//! refused by tensor name.

use std::path::{Path, PathBuf};

use hetero_plan::{ModelSpec, Phase};
use safetensors::Dtype;

use super::*;
use crate::testutil::{row_cut, single, tiny_plan};
use crate::{Runtime, RuntimeOptions, WeightSource};

const DIMS: &str = r#""hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 40, "rms_norm_eps": 1e-5"#;

/// `config.json` of a family and its model.
fn config(dir: &Path, family: &str, extra: &str) -> (PathBuf, ModelSpec) {
    let p = dir.join("config.json");
    std::fs::write(
        &p,
        format!(r#"{{"model_type": "{family}", {DIMS}{extra}}}"#),
    )
    .unwrap();
    let m = hetero_plan::hf::load_config(&p).unwrap();
    (p, m)
}

/// Every tensor the decoder reads, random, f32 (`skip` leaves one out,
/// `dtype` stores the linears in another dtype).
fn checkpoint(
    dir: &Path,
    model: &ModelSpec,
    cfg: &DecoderConfig,
    skip: &str,
    dtype: Dtype,
) -> PathBuf {
    let (h, q, kv) = (cfg.hidden, cfg.q_dim(), cfg.kv_dim());
    let mut t: Vec<(String, Dtype, Vec<usize>)> = vec![
        (
            "model.embed_tokens.weight".into(),
            Dtype::F32,
            vec![cfg.vocab, h],
        ),
        ("model.norm.weight".into(), Dtype::F32, vec![h]),
    ];
    for l in 0..cfg.layers {
        let at = |s: &str| format!("model.layers.{l}.{s}");
        t.push((at("input_layernorm.weight"), Dtype::F32, vec![h]));
        t.push((at("post_attention_layernorm.weight"), Dtype::F32, vec![h]));
        if cfg.qkv_bias {
            for (p, n) in [("q", q), ("k", kv), ("v", kv)] {
                t.push((at(&format!("self_attn.{p}_proj.bias")), Dtype::F32, vec![n]));
            }
        }
        for op in model.ops.iter().filter(|o| o.name != "lm_head") {
            t.push((
                at(&format!("{}.weight", op.hf_name)),
                dtype,
                vec![op.n as usize, op.k as usize],
            ));
        }
    }
    if !model.tied_embeddings {
        t.push(("lm_head.weight".into(), dtype, vec![cfg.vocab, h]));
    }
    let tensors: Vec<(&str, Dtype, Vec<usize>, Vec<f32>)> = t
        .iter()
        .enumerate()
        .filter(|(_, (n, _, _))| n != skip)
        .map(|(i, (n, d, s))| {
            let len = s.iter().product();
            let mut v = hetero_agent::verify::random_vec(len, 17 + i as u64);
            if n.ends_with("norm.weight") {
                v.iter_mut().for_each(|x| *x = 1.0 + 0.2 * *x);
            } else if !n.contains("embed") {
                v.iter_mut().for_each(|x| *x *= 0.3);
            }
            (n.as_str(), *d, s.clone(), v)
        })
        .collect();
    let p = dir.join("model.safetensors");
    checkpoint::tests::write(&p, &tensors);
    p
}

/// A runtime for `model` whose GEMMs all run on cpu:0, or split by rows
/// between cpu:0 and npu-sim.
fn runtime(dir: &Path, model: &ModelSpec, split: bool, weights: &Path) -> Runtime {
    let plan = tiny_plan(
        model,
        &["cpu:0", "npu-sim"],
        &[
            (Phase::Prefill, (1..=12).collect()),
            (Phase::Decode, vec![1]),
        ],
        |op, _, _, _| {
            if split && op.n >= 2 {
                row_cut(&[("cpu:0", op.n / 2), ("npu-sim", op.n - op.n / 2)])
            } else {
                single("cpu:0")
            }
        },
    );
    let path = dir.join(if split { "split.ron" } else { "cpu.ron" });
    hetero_plan::save(&path, &plan).unwrap();
    let opts = RuntimeOptions {
        weights: WeightSource::Safetensors(weights.to_path_buf()),
        ..Default::default()
    };
    Runtime::open(&path, model.clone(), opts).unwrap()
}

fn greedy(prompt: &[u32], max_new: u32) -> GenerateSpec {
    GenerateSpec {
        prompt: prompt.to_vec(),
        max_new,
        stop: vec![],
        sampling: Sampling::default(),
        keep_logits: true,
    }
}

fn generate(files: &ModelFiles, rt: &mut Runtime, spec: &GenerateSpec, check: bool) -> Generation {
    let positions = spec.prompt.len() + spec.max_new as usize;
    let mut d = Decoder::load(files, rt, spec.prompt.len() as u32, positions).unwrap();
    d.generate(rt, spec, check, &mut |_, _, _| {}).unwrap()
}

/// max |a − b| / max |b|.
fn rel(a: &[f32], b: &[f32]) -> f32 {
    let d = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    d / b.iter().map(|x| x.abs()).fold(0f32, f32::max)
}

#[test]
fn cached_decoding_matches_recomputing_and_a_split_plan_matches_one_processor() {
    for (family, extra) in [
        ("llama", ""),
        ("qwen2", r#", "tie_word_embeddings": true"#),
        ("phi3", ""),
        (
            "llama",
            r#", "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 16}"#,
        ),
    ] {
        let dir = hetero_test_support::temp_dir("decoder");
        let (cfg_path, model) = config(dir.path(), family, extra);
        let cfg = DecoderConfig::load(&cfg_path, &model).unwrap();
        let w = checkpoint(dir.path(), &model, &cfg, "", Dtype::F32);
        let files = ModelFiles::open(&cfg_path, &model, &w).unwrap();
        let prompt = [3u32, 17, 5, 39, 0, 8];
        let mut rt = runtime(dir.path(), &model, false, &w);
        let g = generate(&files, &mut rt, &greedy(&prompt, 5), true);
        assert_eq!(g.tokens.len(), 5);
        let c = g.check.as_ref().unwrap();
        assert_eq!(c.passed, c.outputs, "{family}: {c:?}");
        // The last step through the cache against a prefill of everything.
        let mut all = prompt.to_vec();
        all.extend(&g.tokens[..4]);
        let mut rt2 = runtime(dir.path(), &model, false, &w);
        let full = generate(&files, &mut rt2, &greedy(&all, 1), false);
        let r = rel(&g.logits[4], &full.logits[0]);
        assert!(r < 1e-5, "{family} {extra}: cached {r}");
        assert_eq!(full.tokens[0], g.tokens[4]);
        // A split plan.
        let mut rt3 = runtime(dir.path(), &model, true, &w);
        let s = generate(&files, &mut rt3, &greedy(&prompt, 5), false);
        assert_eq!(s.tokens, g.tokens, "{family}");
        for (a, b) in s.logits.iter().zip(&g.logits) {
            assert!(rel(a, b) < 1e-5, "{family}: split {}", rel(a, b));
        }
        assert!(g.ttft_us > 0.0 && g.decode_us.len() == 4);
        for op in [
            "attn_o",
            "attention",
            "norm",
            "rope",
            "activation",
            "lm_head",
        ] {
            assert!(g.ops.iter().any(|o| o.op == op), "{family}: {op}");
        }
    }
}

#[test]
fn half_precision_checkpoints_run_and_bad_ones_name_the_tensor() {
    let dir = hetero_test_support::temp_dir("decoder-bad");
    let (cfg_path, model) = config(dir.path(), "qwen2", "");
    let cfg = DecoderConfig::load(&cfg_path, &model).unwrap();
    let w = checkpoint(dir.path(), &model, &cfg, "", Dtype::BF16);
    let files = ModelFiles::open(&cfg_path, &model, &w).unwrap();
    let mut rt = runtime(dir.path(), &model, false, &w);
    let g = generate(&files, &mut rt, &greedy(&[1, 2, 3], 3), true);
    assert_eq!(g.tokens.len(), 3);
    for missing in [
        "model.layers.1.self_attn.k_proj.bias",
        "model.layers.0.post_attention_layernorm.weight",
        "model.norm.weight",
    ] {
        let w = checkpoint(dir.path(), &model, &cfg, missing, Dtype::F32);
        let e = ModelFiles::open(&cfg_path, &model, &w).err().unwrap();
        assert!(e.is_bad_input() && e.to_string().contains(missing), "{e}");
    }
    // A runtime on synthetic weights cannot run the model.
    let plan = dir.path().join("cpu.ron");
    let synthetic = Runtime::open(&plan, model.clone(), RuntimeOptions::default()).unwrap();
    let e = Decoder::load(&files, &synthetic, 3, 6)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("synthetic weights"), "{e}");
    let w = checkpoint(dir.path(), &model, &cfg, "lm_head.weight", Dtype::F32);
    let e = ModelFiles::open(&cfg_path, &model, &w)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("lm_head"), "{e}");
}

#[test]
fn synthetic_weights_stay_finite_through_many_layers_and_share_one_layer() {
    let dir = hetero_test_support::temp_dir("decoder-synthetic");
    let deep = r#", "num_hidden_layers": 28"#;
    let (cfg_path, _) = config(dir.path(), "qwen2", "");
    let text = std::fs::read_to_string(&cfg_path)
        .unwrap()
        .replace(r#", "num_hidden_layers": 2,"#, ",")
        .replace('}', &format!("{deep}}}"));
    std::fs::write(&cfg_path, text).unwrap();
    let model = hetero_plan::hf::load_config(&cfg_path).unwrap();
    assert_eq!(model.layers, 28);
    let cfg = DecoderConfig::load(&cfg_path, &model).unwrap();
    let w = checkpoint(dir.path(), &model, &cfg, "", Dtype::F32);
    // A runtime with the checkpoint: synthetic host tensors are refused.
    let file_rt = runtime(dir.path(), &model, false, &w);
    let e = Decoder::synthetic(cfg.clone(), &file_rt, 3, 8, 1, true)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("synthetic GEMM weights"), "{e}");
    let plan = dir.path().join("cpu.ron");
    let mut logits = vec![];
    for share in [true, false] {
        let opts = RuntimeOptions {
            weights: WeightSource::Synthetic {
                seed: 9,
                share_layers: share,
            },
            ..Default::default()
        };
        let mut rt = Runtime::open(&plan, model.clone(), opts).unwrap();
        let mut d = Decoder::synthetic(cfg.clone(), &rt, 3, 8, 9, share).unwrap();
        assert_eq!(d.host.layers.len(), if share { 1 } else { 28 });
        let g = d
            .generate(&mut rt, &greedy(&[1, 2, 3], 4), true, &mut |_, _, _| {})
            .unwrap();
        assert!(g.logits.iter().flatten().all(|x| x.is_finite()));
        let c = g.check.unwrap();
        assert_eq!(c.passed, c.outputs, "{}", c.worst);
        assert!(g.check_us > 0.0);
        // The checks cover one generation's GEMMs; the timed one is a
        // second, of the same tokens, whose operators ran once each.
        let gemm_calls: u32 = g
            .ops
            .iter()
            .filter(|o| o.kind == OpKind::Gemm)
            .map(|o| o.calls)
            .sum();
        assert_eq!(c.outputs, gemm_calls as usize);
        let plain = d
            .generate(&mut rt, &greedy(&[1, 2, 3], 4), false, &mut |_, _, _| {})
            .unwrap();
        assert_eq!(plain.tokens, g.tokens);
        assert!(plain.check.is_none());
        logits.push(g.logits);
    }
    assert_ne!(logits[0], logits[1]);
}
