//! What the demo compares the plan with, so that it shows what hetero is
//! for on the machine it runs on:
//! - with more than one processor, the best single-processor plan, run on
//!   the same lengths as the plan;
//! - with a discrete GPU, the offload setting (ScheInfer): a plan under a
//!   GPU memory budget of half the model's weights, which therefore do not
//!   fit, run like the others;
//! - with one real processor, the plan the same model gets on the GPU host
//!   of the reference profile built into hetero, predicted there and
//!   labelled as such (it is not run here).

use std::path::Path;

use anyhow::Result;
use hetero_plan::{Plan, ProcessorKind};
use hetero_solver::settings::fmt_bytes;

use super::reference;
use super::screen::{self, PhaseTimes, Reference};
use crate::demo_cmd::Demo;

/// A plan to run beside the demo's own.
#[derive(Debug, Clone, PartialEq)]
pub struct Extra {
    /// Names its run reports: `run-TAG-prefill.json`.
    pub tag: String,
    /// The plan file.
    pub plan: String,
    /// How the screen names it.
    pub label: String,
}

/// What the comparing step found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Compared {
    /// The best single-processor plan, then the offload plan: run beside
    /// the plan.
    pub extra: Vec<Extra>,
    /// Why no single-processor plan runs (the plan has one processor).
    pub single_note: Option<String>,
    /// The plan on the reference machine.
    pub reference: Option<Reference>,
}

/// The step's title, from the processors chosen.
pub fn title(d: &Demo) -> String {
    let c = &d.choice;
    if c.one_real() {
        return "show the plan with a second processor: fit and solve the built-in reference \
                profile of a GPU host (predicted there, not run here)"
            .into();
    }
    let mut t = "solve the best single-processor plan, to run beside the plan".to_string();
    if let Some(gpu) = c.discrete_gpu() {
        t += &format!(
            ", and the offload plan (ScheInfer) with {} holding half the model's weights",
            gpu.id
        );
    }
    t
}

/// What the run step runs: "the plan", and the plans beside it.
pub fn runs_title(d: &Demo) -> String {
    let mut names = vec!["the plan".to_string()];
    names.extend(d.compared.extra.iter().map(|e| e.label.clone()));
    names.join(", ")
}

/// The step: solves the plans to compare with.
pub fn step(d: &mut Demo) -> Result<()> {
    let plan: Plan = hetero_plan::load(Path::new(&d.files.plan))?;
    let mut compared = Compared::default();
    if plan.processors.len() > 1 {
        let procs = plan.processors.clone();
        let predictor = d.files.predictor.clone();
        if let Some(best) = best_single(d, &predictor, &procs, &d.out, "")? {
            println!(
                "  best single processor, as predicted at prefill {} and in decode: {}",
                d.args.len, best.processor
            );
            compared.extra.push(Extra {
                tag: "single".into(),
                label: format!("{} alone", best.processor),
                plan: best.plan,
            });
        }
    } else {
        let only = plan.processors.first().cloned().unwrap_or_default();
        compared.single_note = Some(format!(
            "the plan has one processor ({only}): it is its own best single processor"
        ));
    }
    if let Some(off) = offload(d, &plan)? {
        compared.extra.push(off);
    }
    if d.choice.one_real() {
        let r = reference_plan(d)?;
        println!(
            "  reference plan on {}: {}",
            r.processors.join(" + "),
            screen::mix_line(&r.mix)
        );
        compared.reference = Some(r);
    }
    d.compared = compared;
    Ok(())
}

/// A plan of one processor alone.
struct Single {
    processor: String,
    plan: String,
    /// Predicted at the demo's lengths.
    times: PhaseTimes,
}

/// A plan's predicted prefill at the demo's length and one decode step,
/// and the two over a prefill and the demo's decode steps, µs.
fn predicted_run(d: &Demo, plan: &Plan) -> (PhaseTimes, f64) {
    let (p, s) = screen::predicted(plan, d.args.len);
    let total = p.unwrap_or(f64::INFINITY) + d.args.tokens as f64 * s.unwrap_or(f64::INFINITY);
    ((p, s), total)
}

/// Solves a plan for each of `procs` alone, at the demo's prefill length
/// and in decode, with `predictor`; returns the one predicted fastest over
/// a prefill and the decode steps: its processor, plan file and predicted
/// times.
fn best_single(
    d: &Demo,
    predictor: &str,
    procs: &[String],
    dir: &Path,
    tag: &str,
) -> Result<Option<Single>> {
    let mut best: Option<(Single, f64)> = None;
    let len = d.args.len.to_string();
    for p in procs {
        let file = p.replace(':', "-");
        let path = dir.join(format!("single-{file}.ron")).display().to_string();
        d.hetero(
            &format!("{tag}solve-{file}-alone"),
            &[
                "solve",
                "--predictor",
                predictor,
                "--model",
                &d.files.model,
                "--out",
                &path,
                "--buckets",
                &len,
                "--processors",
                p,
            ],
        )?;
        let plan: Plan = hetero_plan::load(Path::new(&path))?;
        let (times, total) = predicted_run(d, &plan);
        if best.as_ref().is_none_or(|b| total < b.1) {
            let s = Single {
                processor: p.clone(),
                plan: path,
                times,
            };
            best = Some((s, total));
        }
    }
    Ok(best.map(|b| b.0))
}

/// The offload plan where the plan has a discrete GPU and a CPU: half the
/// model's weights (in the GPU's dtype) fit in the GPU memory budget.
fn offload(d: &Demo, plan: &Plan) -> Result<Option<Extra>> {
    let Some(gpu) = d.choice.discrete_gpu() else {
        return Ok(None);
    };
    let cpu = (plan.processors.iter()).find(|id| {
        d.choice
            .processor(id)
            .is_some_and(|p| p.kind == ProcessorKind::Cpu)
    });
    let (Some(cpu), true) = (cpu, plan.processors.contains(&gpu.id)) else {
        println!(
            "  no offload plan: the plan does not use both a CPU and {}",
            gpu.id
        );
        return Ok(None);
    };
    let bits = (plan.dtypes.iter())
        .find(|x| x.processor == gpu.id)
        .map_or(16, |x| x.dtype.weight_bits() as u64);
    let model = crate::solve_cmd::load_model(Path::new(&d.files.model))?;
    let weights = model.linear_params_stored().saturating_mul(bits) / 8;
    let budget = weights / 2;
    let path = d.out.join("offload-plan.ron").display().to_string();
    d.hetero(
        "solve-offload",
        &[
            "solve",
            "--predictor",
            &d.files.predictor,
            "--model",
            &d.files.model,
            "--out",
            &path,
            "--buckets",
            &d.args.len.to_string(),
            "--processors",
            &format!("{cpu},{}", gpu.id),
            "--gpu-mem-budget",
            &format!("{budget}B"),
        ],
    )?;
    println!(
        "  offload plan: {} of the model's {} of weights on {}, the rest streamed from host memory",
        fmt_bytes(budget),
        fmt_bytes(weights),
        gpu.id
    );
    Ok(Some(Extra {
        tag: "offload".into(),
        plan: path,
        label: format!(
            "offload, {} of {} on {}",
            fmt_bytes(budget),
            fmt_bytes(weights),
            gpu.id
        ),
    }))
}

/// Fits the built-in reference profile and solves the same model on it,
/// with its two processors and each alone.
fn reference_plan(d: &Demo) -> Result<Reference> {
    let dir = d.out.join("reference");
    let at = |name: &str| dir.join(name).display().to_string();
    let (dataset, predictor, report, plan_path) = (
        at("dataset"),
        at("predictor.ron"),
        at("fit-report.json"),
        at("plan.ron"),
    );
    reference::write(Path::new(&dataset))?;
    println!(
        "  the reference profile: {} ({} of its processors)",
        reference::MACHINE,
        reference::PROCESSORS.join(", ")
    );
    d.hetero(
        "reference-fit",
        &["fit", &dataset, "--out", &predictor, "--report", &report],
    )?;
    d.hetero(
        "reference-solve",
        &[
            "solve",
            "--predictor",
            &predictor,
            "--model",
            &d.files.model,
            "--out",
            &plan_path,
            "--lengths",
            &format!("1..{}", d.args.max_len),
            "--processors",
            &reference::PROCESSORS.join(","),
        ],
    )?;
    let plan: Plan = hetero_plan::load(Path::new(&plan_path))?;
    let procs: Vec<String> = reference::PROCESSORS.map(String::from).to_vec();
    let single = best_single(d, &predictor, &procs, &dir, "reference-")?;
    Ok(Reference {
        machine: reference::MACHINE.into(),
        processors: plan.processors.clone(),
        mix: screen::mix(&plan),
        plan: predicted_run(d, &plan).0,
        single: single.map(|s| (s.processor, s.times)),
    })
}
