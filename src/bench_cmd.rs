//! `hetero bench offload`: every way of running a model larger than the
//! GPU's memory budget, each solved as a plan and run end to end on this
//! machine, beside the bandwidths that bound them and the floor they set.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use hetero_plan::DType;
use hetero_runtime::WeightSource;
use hetero_solver::OffloadStrategy;
use hetero_solver::settings::parse_bytes;

use crate::bad;
use crate::bench::bandwidth;
use crate::bench::floor::{Floor, decode_weight_bytes};
use crate::bench::report::{Report, best_over_alternatives};
use crate::bench::strategy::{self, Workload};
use crate::outpath::{self, Output};
use crate::runtime_args::RuntimeArgs;

#[derive(Debug, Subcommand)]
pub enum BenchCmd {
    /// A model larger than the GPU budget: every offload strategy solved,
    /// run end to end, and compared with the floor the bandwidths set.
    Offload(Box<OffloadArgs>),
}

#[derive(Debug, Args)]
#[command(after_help = "Examples:
  hetero bench offload --model datasets/models/llama-3.1-8b.json --gpu-mem-budget 4GiB --predictor h100.ron
  hetero bench offload --model config.json --gpu-mem-budget 8GiB --predictor h100.ron \\
      --strategies best,gpu-stream --tokens 16 --json --out offload.json

Weights are seeded and synthetic, every layer its own (as a checkpoint
keeps them in memory). Each strategy's plan is solved from --predictor for
a prompt of --prompt tokens and one-token decode steps, then runs the whole
model: the prompt's prefill, then --tokens greedy decode steps.")]
pub struct OffloadArgs {
    /// The model's Hugging Face config.json (or a folder holding one).
    #[arg(long)]
    model: PathBuf,
    /// GPU memory for weights (4GiB, 512MiB, ...).
    #[arg(long)]
    gpu_mem_budget: String,
    /// Prompt tokens.
    #[arg(long, default_value_t = 512)]
    prompt: u32,
    /// Greedy decode steps after the prefill's token.
    #[arg(long, default_value_t = 32)]
    tokens: u32,
    /// The strategies to run, comma-separated: best, sliced, gpu-stream,
    /// layer-split, cpu.
    #[arg(long, default_value = "best,sliced,gpu-stream,layer-split,cpu")]
    strategies: String,
    /// Dtype of every processor (f16) or of one (cuda:0=bf16); repeatable.
    /// Default: f16 where the predictor has it.
    #[arg(long)]
    dtype: Vec<String>,
    /// Seed of the synthetic weights.
    #[arg(long, default_value_t = 0x5eed)]
    seed_weights: u64,
    /// Compare every GEMM's output with a reference product on the host.
    #[arg(long)]
    check: bool,
    /// Keep each strategy's plan in this folder (`<strategy>.ron`).
    #[arg(long, value_name = "DIR")]
    plans: Option<PathBuf>,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// Also write the JSON report to this file.
    #[arg(long)]
    out: Option<PathBuf>,
    #[command(flatten)]
    rt: RuntimeArgs,
    /// Testing: open the plans' processors without checking them against
    /// the predictor's (a CPU group standing in for the GPU).
    #[arg(long, hide = true)]
    unchecked_processors: bool,
}

pub fn run(cmd: BenchCmd) -> anyhow::Result<()> {
    match cmd {
        BenchCmd::Offload(args) => offload(*args),
    }
}

/// What the arguments ask for, checked before anything runs.
struct Checked {
    predictor: PathBuf,
    budget: u64,
    strategies: Vec<OffloadStrategy>,
}

fn check_args(args: &OffloadArgs) -> anyhow::Result<Checked> {
    let Some(predictor) = args.rt.predictor.clone() else {
        return Err(bad(
            "--predictor is required: the plans are solved from it (`hetero fit` writes it)",
        ));
    };
    let budget =
        parse_bytes(&args.gpu_mem_budget).map_err(|e| bad(format!("--gpu-mem-budget: {e}")))?;
    if args.prompt == 0 || args.tokens == 0 {
        return Err(bad("--prompt and --tokens must be at least 1"));
    }
    let mut strategies = Vec::new();
    for name in args
        .strategies
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        let Some(s) = OffloadStrategy::from_name(name) else {
            let known: Vec<&str> = OffloadStrategy::ALL.iter().map(|s| s.name()).collect();
            return Err(bad(format!(
                "--strategies: unknown strategy `{name}`; known: {}",
                known.join(", ")
            )));
        };
        if !strategies.contains(&s) {
            strategies.push(s);
        }
    }
    if strategies.is_empty() {
        return Err(bad("--strategies: no strategy named"));
    }
    let mut inputs = vec![
        ("--predictor", predictor.as_path()),
        ("--model", &args.model),
    ];
    if let Some(p) = &args.rt.sim_params {
        inputs.push(("--sim-params", p));
    }
    let mut outputs = Vec::new();
    if let Some(o) = &args.out {
        outputs.push(Output::file("--out", o));
    }
    outpath::check(&inputs, &outputs)?;
    Ok(Checked {
        predictor,
        budget,
        strategies,
    })
}

fn offload(args: OffloadArgs) -> anyhow::Result<()> {
    let c = check_args(&args)?;
    let (config, _) = crate::generate_cmd::model_paths(&args.model, true)?;
    let model = hetero_plan::hf::load_config(&config)?;
    let dtypes = crate::solve_cmd::parse_dtypes(&args.dtype)?;
    let tmp;
    let dir = match &args.plans {
        Some(d) => {
            std::fs::create_dir_all(d).map_err(|e| bad(format!("--plans {}: {e}", d.display())))?;
            d.clone()
        }
        None => {
            tmp = tempfile::tempdir().context("a folder for the plans")?;
            tmp.path().to_path_buf()
        }
    };
    let base = strategy::settings(OffloadStrategy::Best, c.budget, args.prompt, dtypes);
    let (pred, fp) = crate::solve_cmd::load_predictor(&c.predictor)?;
    let solved = strategy::solve_all((&pred, &fp), &model, &c.strategies, &base, &dir)?;
    let placements: Vec<_> = solved
        .iter()
        .filter_map(|s| s.plan.solver.as_ref()?.offload.clone())
        .collect();
    let Some(mut placement) = placements.first().cloned() else {
        anyhow::bail!("the solver made no offload plan under --gpu-mem-budget");
    };
    // The GPU alone names no CPU; the floor's bandwidths still need the
    // host's: another strategy's CPU, else the predictor's first.
    if placement.cpu.is_empty() {
        placement.cpu = (placements.iter().map(|o| o.cpu.clone()))
            .chain(
                (pred.processors.iter())
                    .filter(|p| p.kind == hetero_plan::ProcessorKind::Cpu)
                    .map(|p| p.id.clone()),
            )
            .find(|id| !id.is_empty())
            .ok_or_else(|| {
                anyhow::anyhow!("the predictor has no CPU processor for the floor's host bandwidth")
            })?;
    }
    args.rt.hold_cpu_poll()?;
    let weights = WeightSource::Synthetic {
        seed: args.seed_weights,
        share_layers: false,
    };
    let mut opts = args.rt.options(weights, None);
    if args.unchecked_processors {
        opts.predictor = None;
    }
    let dtype = solved[0].plan.dtype(&placement.gpu).unwrap_or(DType::F16);
    eprintln!(
        "measuring the bandwidths of {} and {}",
        placement.cpu, placement.gpu
    );
    let bw = bandwidth::measure(&placement.cpu, &placement.gpu, &opts.open, dtype)?;
    let floor = Floor::new(
        decode_weight_bytes(&model, dtype),
        c.budget,
        bw.host_gbps,
        bw.gpu_memory_gbps,
    );
    let w = Workload {
        model: (args.model.as_path(), config.as_path(), &model),
        prompt: strategy::prompt(args.prompt, model.vocab),
        decode_steps: args.tokens,
        check: args.check,
    };
    let mut notes = vec![
        "the floor counts the GEMMs' weights only: attention, norms and the other host operators add to every measured step".to_string(),
    ];
    let (mut runs, mut gens) = (Vec::new(), Vec::new());
    for s in &solved {
        let (row, g) = strategy::run(s, &w, opts.clone(), &floor, &mut notes)?;
        runs.push(row);
        gens.push(g);
    }
    if args.plans.is_none() {
        notes.push("the plans were not kept (--plans DIR keeps them)".into());
    }
    notes.dedup();
    let report = Report {
        model: model.name.clone(),
        predictor: c.predictor.display().to_string(),
        gpu_mem_budget: c.budget,
        prompt: args.prompt,
        decode_steps: args.tokens,
        bandwidths: bw,
        floor,
        best_over_alternatives: best_over_alternatives(&runs),
        strategies: runs,
        notes,
    };
    let json = serde_json::to_string_pretty(&report)?;
    if let Some(out) = &args.out {
        hetero_plan::write_atomic(out, format!("{json}\n").as_bytes())
            .with_context(|| format!("writing the report to {}", out.display()))?;
    }
    if args.json {
        println!("{json}");
    } else {
        print!("{}", report.to_text());
    }
    gens.iter().try_for_each(crate::generate_cmd::check_passed)
}
