//! `hetero plan explain --op attention|rope|norm|activation|residual`:
//! where each range of layers runs a non-GEMM operator, what it costs
//! there and on the alternative placement, and the pass it belongs to.

use std::fmt::Write;

use hetero_plan::{HOST, LayerPlacement, NonGemmKnot, NonGemmOp, PassForecast, Phase, Plan};
use hetero_solver::settings::fmt_us;
use serde_json::json;

use crate::BadInput;

/// Explains `op` in `phase` (default: prefill where the plan places it) at
/// `len`: the prompt length in prefill, the context length in decode.
pub(super) fn explain(
    plan: &Plan,
    op: NonGemmOp,
    phase: Option<Phase>,
    len: u32,
    as_json: bool,
) -> anyhow::Result<()> {
    let Some(ng) = &plan.non_gemm else {
        return Err(BadInput(format!(
            "the plan places no non-GEMM operators (`{op}`): it was solved before the solver placed them; solve it again"
        ))
        .into());
    };
    let phase = phase.unwrap_or_else(|| {
        if ng.of_phase(Phase::Prefill).next().is_some() {
            Phase::Prefill
        } else {
            Phase::Decode
        }
    });
    let placements: Vec<&LayerPlacement> = ng.of_phase(phase).collect();
    if placements.is_empty() {
        return Err(BadInput(format!("the plan places no non-GEMM operators in {phase}")).into());
    }
    let pass = match phase {
        Phase::Prefill => plan.forecast_prefill(len),
        Phase::Decode => plan.forecast_decode(len),
    }
    .ok();
    if as_json {
        let v = json!({
            "op": op,
            "phase": phase,
            "len": len,
            "decode_tokens": ng.decode_tokens,
            "placements": placements.iter().map(|p| json!({
                "layers": p.layers,
                "at": p.chosen.at,
                "cost": knot_json(p.chosen.at_len(op, len)),
                "alternative": p.alternative.as_ref().map(|a| json!({
                    "at": a.costs.at,
                    "executable": a.executable,
                    "cost": knot_json(a.costs.at_len(op, len)),
                })),
            })).collect::<Vec<_>>(),
            "pass": pass,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!(
            "{}",
            explain_text(op, phase, len, ng.decode_tokens, &placements, pass.as_ref())
        );
    }
    Ok(())
}

/// A cost as `--json` gives it: every term and the total, per layer.
fn knot_json(k: Option<NonGemmKnot>) -> serde_json::Value {
    k.map_or(serde_json::Value::Null, |k| {
        json!({
            "compute_us": k.compute_us,
            "sync_us": k.sync_us,
            "copy_us": k.copy_us,
            "total_us": k.total_us(),
        })
    })
}

fn knot_words(k: &NonGemmKnot) -> String {
    format!(
        "compute {:.1} µs + sync {:.1} µs + copy {:.1} µs = {:.1} µs",
        k.compute_us,
        k.sync_us,
        k.copy_us,
        k.total_us()
    )
}

fn place_words(at: &str) -> String {
    if at == HOST {
        "host (the host CPU, on the activations in host memory)".into()
    } else {
        format!("{at} (the processor that holds the activation)")
    }
}

fn explain_text(
    op: NonGemmOp,
    phase: Phase,
    len: u32,
    step: u32,
    placements: &[&LayerPlacement],
    pass: Option<&PassForecast>,
) -> String {
    let mut s = String::new();
    let what = match phase {
        Phase::Prefill => format!("a {len}-token prompt"),
        Phase::Decode => format!("context {len}, {step} token(s) per step"),
    };
    let _ = writeln!(s, "{op} ({phase}) at {what}:");
    for p in placements {
        let layers = p.layers.count();
        let _ = writeln!(
            s,
            "layers {}-{}: {}",
            p.layers.first,
            p.layers.last,
            place_words(&p.chosen.at)
        );
        let chosen = p.chosen.at_len(op, len);
        match &chosen {
            Some(k) => {
                let _ = writeln!(
                    s,
                    "  per layer: {}; {} over {layers} layers",
                    knot_words(k),
                    fmt_us(k.total_us() * layers as f64)
                );
            }
            None => {
                let _ = writeln!(s, "  cost unknown (the predictor had no model for it)");
            }
        }
        if let Some(a) = &p.alternative
            && let Some(k) = a.costs.at_len(op, len)
        {
            let why = if a.executable {
                "costlier over the plan's lengths"
            } else {
                "the runtime cannot run non-GEMM operators there"
            };
            let vs = chosen.map_or(String::new(), |c| {
                format!(" ({:+.1} µs per layer)", k.total_us() - c.total_us())
            });
            let _ = writeln!(
                s,
                "  alternative {} ({why}): {}{vs}",
                a.costs.at,
                knot_words(&k)
            );
        }
    }
    if let Some(f) = pass {
        write_pass(&mut s, f);
    }
    s
}

/// The pass the operator belongs to, operator by operator.
fn write_pass(s: &mut String, f: &PassForecast) {
    let what = match f.phase {
        Phase::Prefill => "time to first token",
        Phase::Decode => "time per decode step",
    };
    let _ = writeln!(
        s,
        "\n{what} at this length: GEMMs {} + non-GEMM operators {} = {}",
        fmt_us(f.gemm_us),
        fmt_us(f.non_gemm_us),
        fmt_us(f.total_us)
    );
    let _ = writeln!(s, "  {:<14} {:<18} {:>12}", "op", "at", "all layers");
    for o in &f.ops {
        let _ = writeln!(
            s,
            "  {:<14} {:<18} {:>12}",
            o.op,
            o.at.join("+"),
            fmt_us(o.us)
        );
    }
}

/// Decode contexts `plan show` predicts a step at.
const SHOW_CONTEXTS: [u32; 3] = [128, 1024, 4096];

/// `plan show`'s lines on the non-GEMM operators: each phase's placement
/// per range of layers, and the passes predicted with them (prefill at
/// `prefill_lens`, a decode step at a few contexts).
pub(super) fn write_show(s: &mut String, plan: &Plan, prefill_lens: &[u32]) {
    let Some(ng) = &plan.non_gemm else {
        return;
    };
    for p in &ng.placements {
        let alt = p.alternative.as_ref().map_or(String::new(), |a| {
            let how = if a.executable {
                "costlier"
            } else {
                "not run there by the runtime"
            };
            format!(" (alternative {}: {how})", a.costs.at)
        });
        let _ = writeln!(
            s,
            "non-GEMM operators in {}: layers {}-{} on {}{alt}",
            p.phase, p.layers.first, p.layers.last, p.chosen.at
        );
    }
    let ttft: Vec<String> = prefill_lens
        .iter()
        .filter_map(|&l| {
            Some(format!(
                "{l}: {}",
                fmt_us(plan.forecast_prefill(l).ok()?.total_us)
            ))
        })
        .collect();
    if !ttft.is_empty() {
        let _ = writeln!(
            s,
            "time to first token (every operator) at {}",
            ttft.join(", ")
        );
    }
    let tpot: Vec<String> = SHOW_CONTEXTS
        .iter()
        .filter_map(|&c| {
            Some(format!(
                "{c}: {}",
                fmt_us(plan.forecast_decode(c).ok()?.total_us)
            ))
        })
        .collect();
    if ng.of_phase(Phase::Decode).next().is_some() && !tpot.is_empty() {
        let _ = writeln!(
            s,
            "time per decode step (every operator) at context {}",
            tpot.join(", ")
        );
    }
}

/// `plan show --json`'s `non_gemm`: the placements without their knots,
/// and the passes `write_show` prints.
pub(super) fn show_json(plan: &Plan, prefill_lens: &[u32]) -> serde_json::Value {
    let Some(ng) = &plan.non_gemm else {
        return serde_json::Value::Null;
    };
    let at = |lens: &[u32], f: &dyn Fn(u32) -> Option<f64>| -> serde_json::Value {
        lens.iter()
            .filter_map(|&l| Some((l.to_string(), json!(f(l)?))))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    json!({
        "decode_tokens": ng.decode_tokens,
        "placements": ng.placements.iter().map(|p| json!({
            "phase": p.phase,
            "layers": p.layers,
            "at": p.chosen.at,
            "alternative": p.alternative.as_ref().map(|a| json!({
                "at": a.costs.at,
                "executable": a.executable,
            })),
        })).collect::<Vec<_>>(),
        "ttft_us_at": at(prefill_lens, &|l| Some(plan.forecast_prefill(l).ok()?.total_us)),
        "decode_step_us_at": at(&SHOW_CONTEXTS, &|c| Some(plan.forecast_decode(c).ok()?.total_us)),
    })
}
