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
use super::screen::{self, PhaseTimes, Predicted, Reference};
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
    /// Its strategy mix, where the screen shows one.
    pub mix: Option<Vec<(String, f64)>>,
}

/// What the comparing step found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Compared {
    /// The best single-processor plan, then the offload plan: run beside
    /// the plan.
    pub extra: Vec<Extra>,
    /// Why no single-processor plan runs (the plan has one processor).
    pub single_note: Option<String>,
    /// The plans on the reference machine.
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
    let predictor = d.files.predictor.clone();
    if plan.processors.len() > 1 {
        let best = singles(d, &predictor, &plan.processors, &d.out, "")?;
        let best = best.into_iter().min_by(|a, b| a.total.total_cmp(&b.total));
        if let Some(best) = best {
            println!(
                "  best single processor, as predicted at prefill {} and in decode: {}",
                d.args.len, best.processor
            );
            compared.extra.push(Extra {
                tag: "single".into(),
                label: format!("{} alone", best.processor),
                plan: best.plan,
                mix: None,
            });
        }
    } else {
        let only = plan.processors.first().cloned().unwrap_or_default();
        compared.single_note = Some(format!(
            "the plan has one processor ({only}): it is its own best single processor"
        ));
    }
    if let Some(gpu) = d.choice.discrete_gpu() {
        let cpu = (plan.processors.iter())
            .find(|id| (d.choice.processor(id)).is_some_and(|p| p.kind == ProcessorKind::Cpu));
        match cpu {
            Some(cpu) if plan.processors.contains(&gpu.id) => {
                let path = d.out.join("offload-plan.ron").display().to_string();
                let label = offload(d, &predictor, &plan, [cpu, &gpu.id], &path, "")?;
                compared.extra.push(Extra {
                    tag: "offload".into(),
                    mix: Some(screen::mix(&hetero_plan::load(Path::new(&path))?)),
                    plan: path,
                    label,
                });
            }
            _ => println!(
                "  no offload plan: the plan does not use both a CPU and {}",
                gpu.id
            ),
        }
    }
    if d.choice.one_real() {
        compared.reference = Some(reference_plans(d)?);
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
    /// Predicted over a prefill and the demo's decode steps.
    total: f64,
}

/// A plan's predicted prefill at the demo's length and one decode step,
/// and the two over a prefill and the demo's decode steps, µs.
fn predicted_run(d: &Demo, plan: &Plan) -> (PhaseTimes, f64) {
    let (p, s) = screen::predicted(plan, d.args.len);
    let total = p.unwrap_or(f64::INFINITY) + d.args.tokens as f64 * s.unwrap_or(f64::INFINITY);
    ((p, s), total)
}

/// Solves a plan for each of `procs` alone, at the demo's prefill length
/// and in decode, with `predictor`, into `dir`.
fn singles(
    d: &Demo,
    predictor: &str,
    procs: &[String],
    dir: &Path,
    tag: &str,
) -> Result<Vec<Single>> {
    let len = d.args.len.to_string();
    let mut out = Vec::new();
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
        out.push(Single {
            processor: p.clone(),
            plan: path,
            times,
            total,
        });
    }
    Ok(out)
}

/// Solves the offload plan of `[cpu, gpu]` into `path`, at every length
/// the plan has: a GPU memory budget of half the model's weights (in the
/// GPU's dtype in `plan`), which therefore do not fit. Returns its label.
fn offload(
    d: &Demo,
    predictor: &str,
    plan: &Plan,
    [cpu, gpu]: [&str; 2],
    path: &str,
    tag: &str,
) -> Result<String> {
    let bits = (plan.dtypes.iter())
        .find(|x| x.processor == gpu)
        .map_or(16, |x| x.dtype.weight_bits() as u64);
    let model = crate::solve_cmd::load_model(Path::new(&d.files.model))?;
    let weights = model.linear_params_stored().saturating_mul(bits) / 8;
    let budget = weights / 2;
    d.hetero(
        &format!("{tag}solve-offload"),
        &[
            "solve",
            "--predictor",
            predictor,
            "--model",
            &d.files.model,
            "--out",
            path,
            "--lengths",
            &format!("1..{}", d.args.max_len),
            "--processors",
            &format!("{cpu},{gpu}"),
            "--gpu-mem-budget",
            &format!("{budget}B"),
        ],
    )?;
    println!(
        "  offload plan: {} of the model's {} of weights on {gpu}, the rest on the host",
        fmt_bytes(budget),
        fmt_bytes(weights),
    );
    Ok(format!(
        "offload, {}/{} on {gpu}",
        fmt_bytes(budget),
        fmt_bytes(weights)
    ))
}

/// Fits the built-in reference profile and solves the same model on it:
/// the plan of its two processors, each alone, and the offload plan.
fn reference_plans(d: &Demo) -> Result<Reference> {
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
    let mut plans = vec![Predicted {
        label: format!("the plan ({})", plan.processors.join(" + ")),
        times: predicted_run(d, &plan).0,
        mix: Some(screen::mix(&plan)),
    }];
    let procs: Vec<String> = reference::PROCESSORS.map(String::from).to_vec();
    for s in singles(d, &predictor, &procs, &dir, "reference-")? {
        plans.push(Predicted {
            label: format!("{} alone", s.processor),
            times: s.times,
            mix: None,
        });
    }
    let off = at("offload-plan.ron");
    let label = offload(
        d,
        &predictor,
        &plan,
        reference::PROCESSORS,
        &off,
        "reference-",
    )?;
    let off_plan: Plan = hetero_plan::load(Path::new(&off))?;
    plans.push(Predicted {
        label,
        times: predicted_run(d, &off_plan).0,
        mix: Some(screen::mix(&off_plan)),
    });
    for p in &plans {
        println!(
            "  reference, {}: {}",
            p.label,
            p.mix.as_deref().map_or_else(String::new, screen::mix_line)
        );
    }
    Ok(Reference {
        machine: reference::MACHINE.into(),
        plans,
    })
}
