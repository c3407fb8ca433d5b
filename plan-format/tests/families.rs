//! Every supported model family against weight counts computed by hand.
//!
//! Each expected figure is written out as the arithmetic that produces it
//! from the published config values, so a reviewer can check it without the
//! code under test.

use std::path::PathBuf;

use hetero_plan::{ModelSpec, hf};

fn repo(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(rel)
}

fn load(rel: &str) -> ModelSpec {
    hf::load_config(&repo(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn kn(spec: &ModelSpec, op: &str) -> (u32, u32) {
    let o = spec
        .op(op)
        .unwrap_or_else(|| panic!("{}: no op {op}", spec.name));
    (o.k, o.n)
}

/// Dense llama-style layer: q, k, v, o, gate, up, down.
fn dense_layer(hidden: u64, q: u64, kv: u64, inter: u64) -> u64 {
    hidden * q + 2 * hidden * kv + q * hidden + 3 * hidden * inter
}

#[test]
fn llama_3_1_8b() {
    let s = load("datasets/models/llama-3.1-8b.json");
    // 32 layers × (4096·4096 + 2·4096·1024 + 4096·4096 + 3·4096·14336) + 4096·128256
    let layer = 16_777_216 + 2 * 4_194_304 + 16_777_216 + 3 * 58_720_256;
    assert_eq!(layer, dense_layer(4096, 4096, 1024, 14336));
    let expect = 32 * layer + 525_336_576;
    assert_eq!(expect, 7_504_658_432);
    assert_eq!(s.linear_params_per_token(), expect);
    assert_eq!(s.linear_params_stored(), expect);
    assert_eq!(kn(&s, "attn_k"), (4096, 1024));
    assert_eq!(kn(&s, "ffn_down"), (14336, 4096));
    assert!(!s.tied_embeddings);
}

#[test]
fn llama_3_2_3b_tied_lm_head_is_still_a_gemm() {
    let s = load("datasets/models/llama-3.2-3b.json");
    // 28 × (3072·3072 + 2·3072·1024 + 3072·3072 + 3·3072·8192) + 3072·128256
    let expect = 28 * dense_layer(3072, 3072, 1024, 8192) + 3072 * 128_256;
    assert_eq!(expect, 3_212_574_720);
    assert_eq!(s.linear_params_per_token(), expect);
    assert!(s.tied_embeddings);
    assert_eq!(kn(&s, "lm_head"), (3072, 128_256));
}

#[test]
fn qwen2_5_1_5b_gqa() {
    let s = load("datasets/models/qwen2.5-1.5b.json");
    // head_dim = 1536/12 = 128; kv = 2·128 = 256.
    // 28 × (1536·1536 + 2·1536·256 + 1536·1536 + 3·1536·8960) + 1536·151936
    let expect = 28 * dense_layer(1536, 1536, 256, 8960) + 1536 * 151_936;
    assert_eq!(expect, 1_543_569_408);
    assert_eq!(s.linear_params_per_token(), expect);
    assert_eq!(kn(&s, "attn_v"), (1536, 256));
}

#[test]
fn internlm2_1_8b_fused_wqkv() {
    let s = load("datasets/models/internlm2-1.8b.json");
    // wqkv: 2048 → (16 + 2·8)·128 = 4096; wo 2048·2048; w1, w3, w2 with 8192.
    let layer = 2048 * 4096 + 2048 * 2048 + 3 * 2048 * 8192;
    let expect = 24 * layer + 2048 * 92_544;
    assert_eq!(expect, 1_699_479_552);
    assert_eq!(s.linear_params_per_token(), expect);
    assert_eq!(kn(&s, "attn_qkv"), (2048, 4096));
    assert_eq!(s.op("attn_qkv").unwrap().hf_name, "attention.wqkv");
    assert_eq!(s.op("lm_head").unwrap().hf_name, "output");
    assert!(s.op("attn_q").is_none());
}

#[test]
fn mixtral_8x7b_experts_top2() {
    let s = load("datasets/models/mixtral-8x7b.json");
    let attn: u64 = 4096 * 4096 + 2 * 4096 * 1024 + 4096 * 4096;
    let router: u64 = 4096 * 8;
    let expert: u64 = 3 * 4096 * 14336;
    let head: u64 = 4096 * 32_000;
    let stored = 32 * (attn + router + 8 * expert) + head;
    let per_token = 32 * (attn + router + 2 * expert) + head;
    assert_eq!(stored, 46_571_454_464);
    assert_eq!(per_token, 12_748_587_008);
    assert_eq!(s.linear_params_stored(), stored);
    assert_eq!(s.linear_params_per_token(), per_token);
    let e = s.op("expert_down").unwrap();
    assert_eq!((e.k, e.n, e.count, e.active), (14336, 4096, 8, 2));
    assert_eq!(kn(&s, "moe_router"), (4096, 8));
}

#[test]
fn mistral_7b() {
    let s = load("tests/fixtures/configs/mistral-7b.json");
    let expect = 32 * dense_layer(4096, 4096, 1024, 14336) + 4096 * 32_000;
    assert_eq!(expect, 7_110_393_856);
    assert_eq!(s.linear_params_per_token(), expect);
}

#[test]
fn qwen3_0_6b_explicit_head_dim() {
    let s = load("tests/fixtures/configs/qwen3-0.6b.json");
    // q: 1024 → 16·128 = 2048 (head_dim is explicit, not 1024/16 = 64).
    let expect = 28 * dense_layer(1024, 2048, 1024, 3072) + 1024 * 151_936;
    assert_eq!(expect, 595_984_384);
    assert_eq!(s.linear_params_per_token(), expect);
    assert_eq!(kn(&s, "attn_q"), (1024, 2048));
    assert_eq!(kn(&s, "attn_o"), (2048, 1024));
}

#[test]
fn phi3_mini_fused_qkv_and_gate_up() {
    let s = load("tests/fixtures/configs/phi3-mini.json");
    // qkv: 3072 → 3·3072; o 3072·3072; gate_up 3072 → 2·8192; down 8192·3072.
    let layer = 3072 * 9216 + 3072 * 3072 + 3072 * 16_384 + 8192 * 3072;
    let expect = 32 * layer + 3072 * 32_064;
    assert_eq!(expect, 3_722_379_264);
    assert_eq!(s.linear_params_per_token(), expect);
    assert_eq!(kn(&s, "ffn_gate_up"), (3072, 16_384));
    assert_eq!(kn(&s, "attn_qkv"), (3072, 9216));
}

#[test]
fn gemma_2b_multi_query_tied_by_default() {
    let s = load("tests/fixtures/configs/gemma-2b.json");
    // 8 heads × 256 = 2048; one kv head: 256.
    let expect = 18 * dense_layer(2048, 2048, 256, 16_384) + 2048 * 256_000;
    assert_eq!(expect, 2_506_096_640);
    assert_eq!(s.linear_params_per_token(), expect);
    assert!(
        s.tied_embeddings,
        "gemma ties embeddings when the config is silent"
    );
}

#[test]
fn gemma2_2b_head_dim_wins_over_hidden_over_heads() {
    let s = load("tests/fixtures/configs/gemma2-2b.json");
    // 8 × 256 = 2048 ≠ 2304 = hidden.
    let expect = 26 * dense_layer(2304, 2048, 1024, 9216) + 2304 * 256_000;
    assert_eq!(expect, 2_614_099_968);
    assert_eq!(s.linear_params_per_token(), expect);
    assert_eq!(s.head_dim, 256);
    assert_eq!(kn(&s, "attn_q"), (2304, 2048));
    assert_eq!(kn(&s, "attn_o"), (2048, 2304));
}

#[test]
fn qwen2_moe_shared_expert_and_router() {
    let s = load("tests/fixtures/configs/qwen1.5-moe-a2.7b.json");
    let attn: u64 = 4 * 2048 * 2048;
    let router: u64 = 2048 * 60;
    let expert: u64 = 3 * 2048 * 1408;
    let shared: u64 = 3 * 2048 * 5632 + 2048; // plus the shared-expert gate, 2048 → 1
    let head: u64 = 2048 * 151_936;
    let stored = 24 * (attn + router + 60 * expert + shared) + head;
    let per_token = 24 * (attn + router + 4 * expert + shared) + head;
    assert_eq!(stored, 14_004_371_456);
    assert_eq!(per_token, 2_377_760_768);
    assert_eq!(s.linear_params_stored(), stored);
    assert_eq!(s.linear_params_per_token(), per_token);
    assert!(s.op("ffn_gate").is_none(), "no dense layers in this config");
}

#[test]
fn qwen2_moe_mlp_only_layers_are_dense() {
    let text = std::fs::read_to_string(repo("tests/fixtures/configs/qwen1.5-moe-a2.7b.json"))
        .unwrap()
        .replace("\"mlp_only_layers\": []", "\"mlp_only_layers\": [0, 5]");
    let s = hf::from_str(std::path::Path::new("x.json"), &text, "x").unwrap();
    assert_eq!(s.op("ffn_down").unwrap().layers, 2);
    assert_eq!(s.op("expert_down").unwrap().layers, 22);
}

#[test]
fn routed_rows_per_expert() {
    let s = load("datasets/models/mixtral-8x7b.json");
    let e = s.op("expert_gate").unwrap();
    // One token, top-2 of 8: two experts with one row each.
    let (shape, n) = e.gemms(hetero_plan::Phase::Decode, 1).unwrap();
    assert_eq!((shape.m.get(), n), (1, 2));
    // 300 tokens × 2 = 600 assignments over 8 experts: 75 rows each.
    let (shape, n) = e.gemms(hetero_plan::Phase::Prefill, 300).unwrap();
    assert_eq!((shape.m.get(), n), (75, 8));
    // The lm_head needs only the last position during prefill.
    let (shape, _) = s
        .op("lm_head")
        .unwrap()
        .gemms(hetero_plan::Phase::Prefill, 300)
        .unwrap();
    assert_eq!(shape.m.get(), 1);
}
