//! A `config.json` whose sizes cannot describe a model is refused with exit
//! code 2 (bad input), naming the file and the config's field.

use std::path::Path;

use hetero_plan::{Error, Validate, hf};

/// A llama config with `extra` fields replacing the defaults.
fn llama(extra: &[(&str, serde_json::Value)]) -> String {
    let mut v = serde_json::json!({
        "model_type": "llama", "hidden_size": 768, "num_hidden_layers": 2,
        "num_attention_heads": 12, "num_key_value_heads": 4,
        "intermediate_size": 2048, "vocab_size": 1000
    });
    for (k, x) in extra {
        v[*k] = x.clone();
    }
    v.to_string()
}

/// The error of loading `text` as `cfg.json`: its field and message.
fn refused(text: &str) -> (String, String) {
    let e = hf::from_str(Path::new("cfg.json"), text, "x").unwrap_err();
    assert!(e.is_bad_input(), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("cfg.json"), "{msg}");
    match e {
        Error::Invalid { field, message, .. } => (field, message),
        e => panic!("unexpected {e}"),
    }
}

#[test]
fn heads_not_divisible_by_kv_heads_are_refused() {
    let (field, message) = refused(&llama(&[("num_key_value_heads", 7.into())]));
    assert_eq!(field, "num_key_value_heads");
    assert!(message.contains("12") && message.contains('7'), "{message}");
    // More KV heads than heads cannot be grouped either.
    let (field, _) = refused(&llama(&[("num_key_value_heads", 24.into())]));
    assert_eq!(field, "num_key_value_heads");
    // Divisors load: 12 over 4, 6, 12 and 1 (multi-query).
    for kv in [1, 4, 6, 12] {
        hf::from_str(
            Path::new("cfg.json"),
            &llama(&[("num_key_value_heads", kv.into())]),
            "x",
        )
        .unwrap_or_else(|e| panic!("{kv} KV heads: {e}"));
    }
}

#[test]
fn zero_sizes_and_hidden_not_divisible_by_heads_are_refused() {
    for field in [
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "intermediate_size",
        "vocab_size",
        "head_dim",
    ] {
        let (f, message) = refused(&llama(&[(field, 0.into())]));
        assert_eq!(f, field, "{message}");
    }
    let (f, message) = refused(&llama(&[("hidden_size", 770.into())]));
    assert_eq!(f, "num_attention_heads");
    assert!(message.contains("head_dim"), "{message}");
    // An explicit head_dim makes the quotient irrelevant.
    hf::from_str(
        Path::new("cfg.json"),
        &llama(&[("hidden_size", 770.into()), ("head_dim", 64.into())]),
        "x",
    )
    .unwrap();
}

#[test]
fn sizes_beyond_a_gemm_dimension_are_refused_not_wrapped() {
    // 12 heads × 400 000 000 overflows 32 bits.
    let (f, message) = refused(&llama(&[("head_dim", 400_000_000u32.into())]));
    assert_eq!(f, "num_attention_heads");
    assert!(message.contains("4800000000"), "{message}");
    // phi3 fuses gate and up: 2 × intermediate_size.
    let phi3 = llama(&[
        ("model_type", "phi3".into()),
        ("intermediate_size", 4_000_000_000u32.into()),
    ]);
    let (f, message) = refused(&phi3);
    assert_eq!(f, "intermediate_size");
    assert!(message.contains("8000000000"), "{message}");
    // A large but representable size still loads: memory is the runtime's
    // concern, which knows the machine.
    let spec = hf::from_str(
        Path::new("cfg.json"),
        &llama(&[("intermediate_size", 4_000_000_000u32.into())]),
        "x",
    )
    .unwrap();
    assert_eq!(spec.op("ffn_up").unwrap().n, 4_000_000_000);
}

#[test]
fn more_experts_per_token_than_experts_are_refused() {
    let mixtral = llama(&[
        ("model_type", "mixtral".into()),
        ("num_local_experts", 8.into()),
        ("num_experts_per_tok", 9.into()),
    ]);
    let (f, message) = refused(&mixtral);
    assert_eq!(f, "num_experts_per_tok");
    assert!(message.contains("num_local_experts"), "{message}");
}

#[test]
fn a_model_spec_checks_its_heads_and_routing_itself() {
    let text = llama(&[
        ("model_type", "mixtral".into()),
        ("num_local_experts", 8.into()),
        ("num_experts_per_tok", 2.into()),
    ]);
    let good = hf::from_str(Path::new("cfg.json"), &text, "x").unwrap();
    good.validate().unwrap();
    let mut bad = good.clone();
    bad.kv_heads = 5;
    assert_eq!(bad.validate().unwrap_err().0, "kv_heads");
    let mut bad = good.clone();
    bad.head_dim = 0;
    assert_eq!(bad.validate().unwrap_err().0, "head_dim");
    let mut bad = good.clone();
    let i = bad.ops.iter().position(|o| o.name == "expert_up").unwrap();
    bad.ops[i].decode_m = hetero_plan::MRule::Routed {
        top_k: 9,
        experts: 8,
    };
    assert_eq!(
        bad.validate().unwrap_err().0,
        format!("ops[{i}].decode_m.top_k")
    );
}

#[test]
fn sparse_layers_are_counted_without_walking_every_layer() {
    let qwen2_moe = |layers: u32, step: u32, dense: &[u32]| {
        llama(&[
            ("model_type", "qwen2_moe".into()),
            ("num_hidden_layers", layers.into()),
            ("num_experts", 4.into()),
            ("num_experts_per_tok", 2.into()),
            ("moe_intermediate_size", 128.into()),
            ("decoder_sparse_step", step.into()),
            ("mlp_only_layers", dense.into()),
        ])
    };
    let layers_of = |text: &str, op: &str| {
        let spec = hf::from_str(Path::new("cfg.json"), text, "x").unwrap();
        spec.op(op).map_or(0, |o| o.layers)
    };
    // Step 2 over 6 layers: 1, 3 and 5 are sparse; 1 and 3 are listed
    // dense (3 twice), 100 is past the end.
    let text = qwen2_moe(6, 2, &[1, 3, 3, 100]);
    assert_eq!(layers_of(&text, "expert_up"), 1);
    assert_eq!(layers_of(&text, "ffn_up"), 5);
    // A claimed four billion layers loads at once.
    let t = std::time::Instant::now();
    let text = qwen2_moe(4_000_000_000, 1, &[0]);
    assert_eq!(layers_of(&text, "expert_up"), 3_999_999_999);
    assert_eq!(layers_of(&text, "ffn_up"), 1);
    assert!(t.elapsed().as_secs() < 5, "{:?}", t.elapsed());
}

#[test]
fn weights_beyond_64_bits_are_refused_and_counts_never_overflow() {
    let absurd = llama(&[
        ("model_type", "mixtral".into()),
        ("num_hidden_layers", 4_000_000_000u32.into()),
        ("hidden_size", 4_000_000_000u32.into()),
        ("head_dim", 1.into()),
        ("num_local_experts", 4_000_000_000u32.into()),
        ("num_experts_per_tok", 2.into()),
    ]);
    let (f, message) = refused(&absurd);
    assert_eq!(f, "ops");
    assert!(message.contains("64 bits"), "{message}");
    let big = hf::from_str(
        Path::new("cfg.json"),
        &llama(&[("intermediate_size", 4_000_000_000u32.into())]),
        "x",
    )
    .unwrap();
    assert_eq!(
        big.op("ffn_up").unwrap().params_stored(),
        768 * 4_000_000_000 * 2
    );
    assert!(big.linear_params_stored() >= big.linear_params_per_token());
    // Built in code, unvalidated: the counts saturate instead of panicking.
    let mut raw = big.clone();
    raw.ops[0].k = u32::MAX;
    raw.ops[0].n = u32::MAX;
    raw.ops[0].count = u32::MAX;
    raw.ops[0].active = u32::MAX;
    raw.ops[0].layers = u32::MAX;
    assert_eq!(raw.linear_params_stored(), u64::MAX);
    assert_eq!(raw.linear_params_per_token(), u64::MAX);
}
