//! The non-GEMM operators (attention, RoPE, RMSNorm, SwiGLU, residual
//! adds): their predicted cost per phase and length on two placements, the
//! host CPU and the processor that holds the activation, and the choice
//! between them per range of layers (HeteroLLM's layer-level placement).
//!
//! The choice is restricted to placements the runtime can execute: the
//! host always, a processor only where it declares
//! [`Capabilities::non_gemm`](hetero_plan::Capabilities). The other
//! placement is costed all the same and recorded as the alternative, so
//! `hetero plan explain` can show what it would cost.

mod cost;

use hetero_plan::{
    Alternative, DType, HOST, LayerPlacement, Layers, ModelSpec, NonGemmCost, NonGemmOp,
    NonGemmPlan, Phase, PlacedCosts, Plan, ProcessorApi, ProcessorKind,
};

pub(crate) use cost::{LayerDims, Runner, tokens_and_context};

use crate::engine::Setup;
use crate::oracle::{GemmModel, LatencyOracle};
use crate::settings::Settings;

/// Knots the line between their neighbours gives within this share are
/// left out of the plan.
const PRUNE: f64 = 1e-3;

/// The shortest context the decode costs are knotted to (decode steps
/// run at contexts beyond the longest prompt).
const MIN_DECODE_CONTEXT: u32 = 4096;

/// Places every layer's non-GEMM operators in each phase the plan solved,
/// with their costs; notes what the cost model had to assume.
pub(crate) fn place<O: LatencyOracle + ?Sized>(
    oracle: &O,
    setup: &Setup,
    model: &ModelSpec,
    settings: &Settings,
    plan: &Plan,
    notes: &mut Vec<String>,
) -> NonGemmPlan {
    let dims = LayerDims::of(model);
    let decode_tokens = settings.decode_lengths.first().copied().unwrap_or(1);
    let host = host_runner(oracle, setup, notes);
    let mut placements = vec![];
    for &phase in &settings.phases {
        let lens = knot_lengths(phase, settings);
        let holder = activation_holder(plan, phase, &lens, decode_tokens);
        let device = holder
            .filter(|id| host.as_ref().is_none_or(|h| h.processor != *id))
            .and_then(|id| device_runner(oracle, setup, &id, notes));
        let cost = |r: &Runner| costs(r, &dims, phase, &lens, decode_tokens);
        let host_costs = match &host {
            Some(h) => cost(h),
            None => PlacedCosts {
                at: HOST.into(),
                ops: vec![],
            },
        };
        let device_costs = device.as_ref().map(|(r, exec)| (cost(r), *exec));
        placements.push(choose(phase, model.layers, host_costs, device_costs, &lens));
    }
    NonGemmPlan {
        decode_tokens,
        placements,
    }
}

/// The cheaper executable placement over the knot lengths; the other is
/// the alternative.
fn choose(
    phase: Phase,
    layers: u32,
    host: PlacedCosts,
    device: Option<(PlacedCosts, bool)>,
    lens: &[u32],
) -> LayerPlacement {
    let sum = |c: &PlacedCosts| lens.iter().map(|&l| c.total_at(l)).sum::<f64>();
    let (chosen, alternative) = match device {
        // The host's costs are unknown without a CPU model: a processor
        // that can run them is taken.
        Some((d, true)) if host.ops.is_empty() || sum(&d) < sum(&host) => (
            d,
            Some(Alternative {
                costs: host,
                executable: true,
            }),
        ),
        Some((d, executable)) => (
            host,
            Some(Alternative {
                costs: d,
                executable,
            }),
        ),
        None => (host, None),
    };
    LayerPlacement {
        phase,
        layers: Layers {
            first: 0,
            last: layers.saturating_sub(1),
        },
        chosen,
        alternative,
    }
}

fn costs(r: &Runner, dims: &LayerDims, phase: Phase, lens: &[u32], step: u32) -> PlacedCosts {
    PlacedCosts {
        at: r.at.clone(),
        ops: NonGemmOp::ALL
            .into_iter()
            .map(|op| {
                NonGemmCost {
                    op,
                    knots: lens
                        .iter()
                        .map(|&len| {
                            let (tokens, context) = tokens_and_context(phase, len, step);
                            r.knot(dims, op, tokens, context)
                        })
                        .collect(),
                }
                .pruned(PRUNE)
            })
            .collect(),
    }
}

/// The lengths costs are knotted at: powers of two and one and a half
/// times them (attention's quadratic prefill stays within 4 % between
/// them), from the phase's first length to its last: the longest prompt
/// in prefill, in decode at least [`MIN_DECODE_CONTEXT`].
pub(crate) fn knot_lengths(phase: Phase, settings: &Settings) -> Vec<u32> {
    let prefill = &settings.prefill_lengths;
    let (lo, hi) = match phase {
        Phase::Prefill => (prefill[0], *prefill.last().expect("checked settings")),
        Phase::Decode => (
            1,
            prefill.last().copied().unwrap_or(1).max(MIN_DECODE_CONTEXT),
        ),
    };
    let mut v = vec![lo];
    let mut p = 1u64;
    while p < hi as u64 {
        for x in [p, p * 3 / 2] {
            if x > lo as u64 && x < hi as u64 && !v.contains(&(x as u32)) {
                v.push(x as u32);
            }
        }
        p *= 2;
    }
    if hi > lo {
        v.push(hi);
    }
    v.sort_unstable();
    v
}

/// The processor that holds the activation a layer's non-GEMM operators
/// read: the one with the longest part of the attention projection's
/// decision (the first GEMM of a layer), the most often over the lengths.
fn activation_holder(plan: &Plan, phase: Phase, lens: &[u32], step: u32) -> Option<String> {
    let op = ["attn_qkv", "attn_q"]
        .iter()
        .find_map(|n| plan.op(n, phase))
        .or_else(|| {
            plan.ops
                .iter()
                .find(|o| o.phase == phase && o.op != "lm_head")
        })?;
    let mut votes: Vec<(String, usize)> = vec![];
    for &len in lens {
        let at = if phase == Phase::Decode { step } else { len };
        let Some(d) = op.at(at) else { continue };
        let procs = d.strategy.processors();
        let Some((p, _)) = procs
            .iter()
            .zip(&d.cost.parts_us)
            .max_by(|a, b| a.1.total_cmp(b.1))
        else {
            continue;
        };
        match votes.iter_mut().find(|v| v.0 == *p) {
            Some(v) => v.1 += 1,
            None => votes.push((p.to_string(), 1)),
        }
    }
    votes.into_iter().max_by_key(|v| v.1).map(|v| v.0)
}

/// The host CPU as the cost model sees it: a CPU processor of the
/// predictor (the cpu backend's first, else any), in f32, the runtime's
/// host format. `None` (noted) without one.
fn host_runner<'a, O: LatencyOracle + ?Sized>(
    oracle: &'a O,
    setup: &Setup,
    notes: &mut Vec<String>,
) -> Option<Runner<'a>> {
    let cpus = oracle
        .processors()
        .iter()
        .filter(|p| p.kind == ProcessorKind::Cpu);
    let in_plan = |id: &str| setup.procs.iter().any(|p| p.id == id);
    let mut ranked: Vec<_> = cpus.collect();
    ranked.sort_by_key(|p| (p.api != ProcessorApi::Cpu, !in_plan(&p.id)));
    let found = ranked.into_iter().find_map(|p| {
        let dtypes = oracle.dtypes(&p.id);
        let dtype = if dtypes.contains(&DType::F32) {
            DType::F32
        } else {
            *dtypes.first()?
        };
        Some((p.id.clone(), oracle.gemm_model(&p.id, dtype)?))
    });
    let Some((id, model)) = found else {
        notes.push("no CPU processor in the predictor: the host's non-GEMM costs are unknown, so predicted totals cover the GEMMs alone".into());
        return None;
    };
    let bandwidth_gbps = bandwidth(oracle, &id, model, DType::F32, notes);
    notes.push(format!(
        "non-GEMM operators on the host are costed with {id}'s latency model and bandwidth"
    ));
    Some(Runner {
        at: HOST.into(),
        processor: id,
        model,
        elem_bytes: 4.0,
        bandwidth_gbps,
        device: None,
    })
}

/// The processor holding the activation, and whether the runtime can run
/// the non-GEMM operators there.
fn device_runner<'a, O: LatencyOracle + ?Sized>(
    oracle: &'a O,
    setup: &'a Setup<'a>,
    id: &str,
    notes: &mut Vec<String>,
) -> Option<(Runner<'a>, bool)> {
    let proc = setup.procs.iter().find(|p| p.id == id)?;
    let model = oracle.gemm_model(id, proc.dtype)?;
    let executable = oracle
        .processors()
        .iter()
        .any(|p| p.id == id && p.capabilities.non_gemm);
    Some((
        Runner {
            at: id.into(),
            processor: id.into(),
            model,
            elem_bytes: proc.abytes(),
            bandwidth_gbps: bandwidth(oracle, id, model, proc.dtype, notes),
            device: Some(proc),
        },
        executable,
    ))
}

/// A processor's streaming bandwidth, GB/s: its bandwidth microbenchmark,
/// else (noted) what its latency model predicts a 1×4096×4096 GEMM
/// streams, the weights read once.
fn bandwidth<O: LatencyOracle + ?Sized>(
    oracle: &O,
    id: &str,
    model: &dyn GemmModel,
    dtype: DType,
    notes: &mut Vec<String>,
) -> f64 {
    if let Some(b) = oracle.overheads(id).bandwidth_gbps {
        return b;
    }
    let shape = hetero_plan::GemmShape::new(1, 4096, 4096).expect("non-zero");
    let bytes = hetero_plan::predictor::gemm_bytes(shape, dtype);
    let b = model
        .predict_us(shape, hetero_plan::OperandOrder::Aw)
        .map_or(1.0, |t| bytes / t / 1e3);
    notes.push(format!(
        "{id}: no bandwidth measured; its non-GEMM operators assume {b:.1} GB/s, what its latency model predicts a 1×4096×4096 GEMM streams"
    ));
    b
}

#[cfg(test)]
mod tests;
