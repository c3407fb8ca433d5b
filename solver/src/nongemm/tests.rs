//! Non-GEMM costs and placement on simulated processors
//! ([`crate::synthetic`]: a 16-core CPU at 80 GB/s and a PCIe GPU).

use std::path::Path;

use hetero_plan::{
    HOST, LayerPlacement, LinearCost, ModelSpec, NonGemmOp, Phase, Plan, Validate, hf,
};

use crate::synthetic::{self, Synthetic};
use crate::{GraphChoice, Settings, solve};

fn llama8b() -> ModelSpec {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../datasets/models/llama-3.1-8b.json");
    hf::load_config(&p).unwrap()
}

fn settings() -> Settings {
    Settings {
        prefill_lengths: (1..=512).collect(),
        graphs: GraphChoice::None,
        ops: vec!["attn_q".into(), "ffn_down".into()],
        ..Settings::default()
    }
}

fn solved(device: &Synthetic) -> Plan {
    let fp = hetero_plan::Fingerprint::of_bytes("synthetic", b"synthetic");
    let plan = solve(device, fp, &llama8b(), &settings()).unwrap();
    plan.validate().unwrap();
    plan
}

fn placement(plan: &Plan, phase: Phase) -> &LayerPlacement {
    let ng = plan.non_gemm.as_ref().expect("the solver places them");
    let mut of = ng.of_phase(phase);
    let p = of.next().unwrap();
    assert!(of.next().is_none(), "one range of layers");
    p
}

/// The discrete-GPU host with a GPU that declares it runs non-GEMM
/// operators, on unified memory or behind copies of `gbps` GB/s.
fn gpu_that_runs_them(unified: bool, gbps: f64) -> Synthetic {
    let mut d = synthetic::discrete_cpu_gpu();
    let caps = &mut d.processor_mut("cuda").unwrap().capabilities;
    caps.non_gemm = true;
    caps.unified_memory = unified;
    let copy = LinearCost {
        alpha_us: 7.0,
        beta_us_per_byte: 1.0 / (gbps * 1e3),
    };
    let ov = d.overheads_mut("cuda").unwrap();
    ov.copy_h2d = Some(copy);
    ov.copy_d2h = Some(copy);
    d
}

#[test]
fn attention_grows_with_context_and_elementwise_operators_with_tokens() {
    let plan = solved(&synthetic::discrete_cpu_gpu());
    let decode = &placement(&plan, Phase::Decode).chosen;
    let prefill = &placement(&plan, Phase::Prefill).chosen;
    assert_eq!(decode.at, HOST);
    let attention = |len| decode.at_len(NonGemmOp::Attention, len).unwrap().total_us();
    assert!(attention(64) < attention(1024), "{decode:?}");
    assert!(attention(1024) < attention(4096), "{decode:?}");
    // A decode step's norms see one token whatever the context.
    let norm = |c: &hetero_plan::PlacedCosts, len| c.at_len(NonGemmOp::Norm, len).unwrap();
    let (a, b) = (norm(decode, 64), norm(decode, 4096));
    assert_eq!((a.compute_us, a.copy_us), (b.compute_us, b.copy_us));
    assert!(norm(prefill, 512).compute_us > 100.0 * norm(prefill, 1).compute_us);
    // On the host nothing is copied or launched beyond the GEMMs' own.
    assert!(
        decode
            .ops
            .iter()
            .flat_map(|c| &c.knots)
            .all(|k| k.sync_us == 0.0 && k.copy_us == 0.0)
    );
    // Time per output token grows with the context, through attention.
    let (near, far) = (
        plan.forecast_decode(10).unwrap(),
        plan.forecast_decode(3000).unwrap(),
    );
    assert_eq!(near.gemm_us, far.gemm_us);
    assert!(far.non_gemm_us > near.non_gemm_us, "{near:?} {far:?}");
}

#[test]
fn the_host_is_the_only_placement_unless_a_processor_declares_support() {
    let plan = solved(&synthetic::discrete_cpu_gpu());
    let p = placement(&plan, Phase::Prefill);
    assert_eq!(p.chosen.at, HOST);
    assert_eq!(p.layers.count(), llama8b().layers);
    // The GPU holds the activation at long prompts: it was costed too.
    let alt = p.alternative.as_ref().expect("the GPU was costed");
    assert_eq!(alt.costs.at, "cuda");
    assert!(!alt.executable);
    let k = alt.costs.at_len(NonGemmOp::Attention, 512).unwrap();
    assert!(k.copy_us > 0.0, "the activation crosses PCIe: {k:?}");
}

#[test]
fn placement_flips_when_copies_dominate() {
    // On unified memory the GPU's bandwidth and FLOPs win a long prompt.
    let plan = solved(&gpu_that_runs_them(true, 25.0));
    let p = placement(&plan, Phase::Prefill);
    assert_eq!(p.chosen.at, "cuda", "{p:?}");
    let host = p.alternative.as_ref().unwrap();
    assert_eq!((host.costs.at.as_str(), host.executable), (HOST, true));
    assert!(host.costs.total_at(512) > p.chosen.total_at(512));
    // Behind a 3 GB/s copy the GPU still runs the long prompt's GEMMs,
    // but moving the activations to it costs more than the host takes to
    // compute on them.
    let plan = solved(&gpu_that_runs_them(false, 3.0));
    let p = placement(&plan, Phase::Prefill);
    assert_eq!(p.chosen.at, HOST, "{p:?}");
    let gpu = p.alternative.as_ref().unwrap();
    let k = gpu.costs.at_len(NonGemmOp::Attention, 512).unwrap();
    assert!(k.copy_us > k.compute_us, "{k:?}");
    // The forecast follows the chosen placement.
    let f = plan.forecast_prefill(512).unwrap();
    let attention = f.ops.iter().find(|o| o.op == "attention").unwrap();
    assert_eq!(attention.at, vec![HOST.to_string()]);
    let want = p
        .chosen
        .at_len(NonGemmOp::Attention, 512)
        .unwrap()
        .total_us()
        * p.layers.count() as f64;
    assert!((attention.us - want).abs() < 1e-6);
}

#[test]
fn generation_forecast_is_the_prefill_then_the_mean_step() {
    let plan = solved(&synthetic::discrete_cpu_gpu());
    let g = plan.forecast_generation(100, 5).unwrap();
    assert_eq!(g.ttft_us, plan.forecast_prefill(100).unwrap().total_us);
    let steps: f64 = (101..105)
        .map(|c| plan.forecast_decode(c).unwrap().total_us)
        .sum();
    assert!((g.per_token_us - steps / 4.0).abs() < 1e-6, "{g:?}");
    assert_eq!(g.first_step.len, 101);
}
