//! Each offload strategy as a plan, solved in memory, then run end to end
//! as `hetero generate` runs one: the prompt's prefill, then greedy decode
//! steps, on seeded synthetic weights of every layer its own.

use std::path::{Path, PathBuf};

use anyhow::Context;
use hetero_plan::{DType, Fingerprint, Format, ModelSpec, Phase, Plan, Predictor};
use hetero_runtime::{GenerateSpec, Generation, RuntimeOptions, Sampling};
use hetero_solver::{GraphChoice, OffloadStrategy, Settings};

use super::floor::Floor;
use super::report::{Check, Figure, StrategyRun};
use crate::generate_cmd::{forecast, open_generation, rates, run_generation};

/// A strategy's plan and the file the runtime opens it from.
pub struct Solved {
    pub strategy: OffloadStrategy,
    pub plan: Plan,
    pub path: PathBuf,
}

/// The solver's settings for one strategy: the prompt's prefill and
/// one-token decode steps, under `budget` bytes of GPU memory.
pub fn settings(
    strategy: OffloadStrategy,
    budget: u64,
    prompt: u32,
    dtypes: Vec<(Option<String>, DType)>,
) -> Settings {
    Settings {
        phases: vec![Phase::Prefill, Phase::Decode],
        prefill_lengths: vec![prompt],
        decode_lengths: vec![1],
        graphs: GraphChoice::None,
        gpu_mem_budget: Some(budget),
        offload_strategy: strategy,
        dtypes,
        ..Settings::default()
    }
}

/// Solves every strategy's plan from the predictor at `predictor` and
/// writes each to `dir/<strategy>.ron`. A strategy the solver refuses is
/// the user's input (exit 2), named.
pub fn solve_all(
    (pred, fp): (&Predictor, &Fingerprint),
    model: &ModelSpec,
    strategies: &[OffloadStrategy],
    base: &Settings,
    dir: &Path,
) -> anyhow::Result<Vec<Solved>> {
    let mut out = Vec::with_capacity(strategies.len());
    for &strategy in strategies {
        let settings = Settings {
            offload_strategy: strategy,
            ..base.clone()
        };
        let plan = hetero_solver::solve(pred, fp.clone(), model, &settings)
            .with_context(|| format!("the {} plan", strategy.name()))?;
        let path = dir.join(format!("{}.ron", strategy.name()));
        hetero_plan::write_atomic(&path, plan.to_text(Format::Ron)?.as_bytes())
            .with_context(|| format!("writing the {} plan", strategy.name()))?;
        out.push(Solved {
            strategy,
            plan,
            path,
        });
    }
    Ok(out)
}

/// What every strategy runs: the model, the prompt and the decode steps.
pub struct Workload<'a> {
    /// `--model` as given, its config.json and its spec.
    pub model: (&'a Path, &'a Path, &'a ModelSpec),
    pub prompt: Vec<u32>,
    pub decode_steps: u32,
    pub check: bool,
}

/// A prompt of `len` token ids spread over the vocabulary, the same every run.
pub fn prompt(len: u32, vocab: u32) -> Vec<u32> {
    (0..len as u64)
        .map(|i| ((i * 7919 + 1) % vocab.max(1) as u64) as u32)
        .collect()
}

/// Runs `solved` on this machine's processors, after an untimed warm-up
/// generation: the report's row, and the generation (for its check). `notes` gets the forecast's notes.
pub fn run(
    solved: &Solved,
    w: &Workload,
    opts: RuntimeOptions,
    floor: &Floor,
    notes: &mut Vec<String>,
) -> anyhow::Result<(StrategyRun, Generation)> {
    let name = solved.strategy.name();
    let plen = w.prompt.len() as u32;
    let max_new = w.decode_steps + 1;
    let positions = w.prompt.len() + max_new as usize;
    let (mut rt, mut decoder) = open_generation(&solved.path, w.model, None, opts, plen, positions)
        .with_context(|| format!("opening the {name} plan"))?;
    let spec = GenerateSpec {
        prompt: w.prompt.clone(),
        max_new,
        stop: Vec::new(),
        sampling: Sampling {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
        },
        keep_logits: false,
    };
    // Untimed first: the prompt and one decode step, so that no strategy
    // pays for the first touch of its memory, pools and libraries.
    eprintln!("{name}: warm-up, {plen} prompt tokens and one decode step");
    let warm = GenerateSpec {
        max_new: 2,
        ..spec.clone()
    };
    let warmed = run_generation(&mut decoder, &mut rt, &warm, false)
        .with_context(|| format!("warming up the {name} plan"))?;
    eprintln!(
        "{name}: {plen} prompt tokens, {} decode steps",
        w.decode_steps
    );
    let mut g = run_generation(&mut decoder, &mut rt, &spec, w.check)
        .with_context(|| format!("running the {name} plan"))?;
    let mut own = Vec::new();
    let p = forecast(&solved.plan, &mut g, &mut own);
    notes.extend(own.into_iter().map(|n| format!("{name}: {n}")));
    let r = rates(&g);
    let tpot = r.tpot_us.unwrap_or(f64::NAN);
    let row = StrategyRun {
        strategy: name,
        resident_bytes: solved
            .plan
            .solver
            .as_ref()
            .and_then(|i| i.offload.as_ref())
            .map_or(0, |o| o.resident_bytes),
        prepare_s: (warmed.prepare_us + g.prepare_us) / 1e6,
        ttft_us: Figure::new(p.as_ref().map(|p| p.ttft_us), g.ttft_us),
        prefill_tokens_per_s: Figure::new(
            p.as_ref().map(|p| p.prefill_tokens_per_s),
            r.prefill_tokens_per_s,
        ),
        tpot_us: Figure::new(p.as_ref().and_then(|p| p.tpot_us), tpot),
        decode_tokens_per_s: Figure::new(
            p.as_ref().and_then(|p| p.decode_tokens_per_s),
            r.decode_tokens_per_s.unwrap_or(f64::NAN),
        ),
        floor_fraction: floor.fraction(tpot),
        check: g.check.as_ref().map(|c| Check {
            passed: c.passed,
            outputs: c.outputs,
        }),
    };
    Ok((row, g))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompt_is_the_same_every_run_and_inside_the_vocabulary() {
        let a = prompt(512, 256);
        assert_eq!(a, prompt(512, 256));
        assert_eq!(a.len(), 512);
        assert!(a.iter().all(|&t| t < 256));
        assert!(a.windows(2).any(|w| w[0] != w[1]));
    }

    #[test]
    fn every_strategy_solves_under_a_budget_into_a_plan_that_covers_the_workload() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let pred = root.join("tests/fixtures/predictors/discrete-cpu-gpu.ron");
        let model =
            hetero_plan::hf::load_config(&root.join("datasets/models/llama-3.1-8b.json")).unwrap();
        let dir = hetero_test_support::temp_dir("bench-solve");
        let base = settings(OffloadStrategy::Best, 4 << 30, 64, vec![]);
        let (pred, fp) = crate::solve_cmd::load_predictor(&pred).unwrap();
        let solved = solve_all(
            (&pred, &fp),
            &model,
            &OffloadStrategy::ALL,
            &base,
            dir.path(),
        )
        .unwrap();
        assert_eq!(solved.len(), OffloadStrategy::ALL.len());
        for s in &solved {
            assert!(s.path.is_file(), "{}", s.path.display());
            let o = s
                .plan
                .solver
                .as_ref()
                .and_then(|i| i.offload.as_ref())
                .expect("an offload plan");
            // The GPU alone names no CPU.
            let cpu = match s.strategy {
                OffloadStrategy::GpuStream => "",
                _ => "cpu-sim",
            };
            assert_eq!((o.cpu.as_str(), o.gpu.as_str()), (cpu, "cuda-sim"));
            assert!(o.resident_bytes <= 4 << 30, "{}", s.strategy.name());
            let f = s.plan.forecast_generation(64, 9).unwrap();
            assert!(f.ttft_us > 0.0 && f.per_token_us > 0.0);
        }
    }
}
