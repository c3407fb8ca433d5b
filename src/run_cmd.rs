//! `hetero run`: execute a plan on this machine's processors and compare
//! the measured times with the plan's predictions.

use std::path::PathBuf;

use clap::Args;
use hetero_plan::Phase;
use hetero_runtime::{RunSpec, Runtime, WeightSource};

use crate::BadInput;
use crate::runtime_args::RuntimeArgs;

#[derive(Debug, Args)]
#[command(after_help = "Examples:
  hetero run plan.ron --model config.json --phase prefill --len 300 --check --json
  hetero run plan.ron --model config.json --phase decode --len 1 --tokens 32 --sync block
  hetero run plan.ron --model config.json --phase prefill --len 128 --weights model.safetensors --check

Only the linear operators run (attention, norms and activations are not
modelled). Operators with an npu-sim part are labelled simulated: their time
is the simulator's model, not a measurement.")]
pub struct RunArgs {
    /// The plan (.ron or .json) written by `hetero solve`.
    plan: PathBuf,
    /// The model's Hugging Face config.json the plan was solved for.
    #[arg(long)]
    model: PathBuf,
    /// Phase to run.
    #[arg(long)]
    phase: Phase,
    /// Sequence length (prefill) or tokens per step (decode).
    #[arg(long)]
    len: u32,
    /// Decode steps to run per pass (decode only).
    #[arg(long)]
    tokens: Option<u32>,
    /// Compare every output with a reference product on the host (f64).
    #[arg(long)]
    check: bool,
    /// Timed passes (after one untimed warm-up pass).
    #[arg(long, default_value_t = 5)]
    repeat: u32,
    /// Real weights: a safetensors file, a model.safetensors.index.json of
    /// shards, or a folder holding one; synthetic seeded weights when absent.
    #[arg(long)]
    weights: Option<PathBuf>,
    /// Seed of the synthetic weights and inputs.
    #[arg(long, default_value_t = 0x5eed)]
    seed: u64,
    /// Every layer runs layer 0's synthetic weights (one layer in memory).
    #[arg(long, conflicts_with = "weights")]
    share_weights: bool,
    #[command(flatten)]
    rt: RuntimeArgs,
    /// Pin this thread, which launches, copies and waits, to these cores
    /// before the processors open, so the GPU driver's threads follow it:
    /// `rest` (the cores no --cpu-groups group holds) or a list like `15`.
    #[arg(long)]
    host_cores: Option<String>,
    /// Also write the JSON report to this file (atomically, only on success).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Also distil a decision tree (linfa-trees) from every operator's
    /// table and report its agreement with the table (the run uses the table).
    #[arg(long)]
    tree: bool,
    /// Depth limit of those trees (default: grown fully).
    #[arg(long, requires = "tree")]
    tree_depth: Option<usize>,
    /// Testing: processor ID fails at its N-th execution (`ID:N`).
    #[arg(long, hide = true)]
    inject_fault: Option<String>,
}

pub fn run(args: RunArgs) -> anyhow::Result<()> {
    if args.len == 0 {
        return Err(BadInput("--len must be at least 1".into()).into());
    }
    if args.repeat == 0 {
        return Err(BadInput("--repeat must be at least 1".into()).into());
    }
    let steps = match (args.phase, args.tokens) {
        (Phase::Decode, Some(0)) => {
            return Err(BadInput("--tokens must be at least 1".into()).into());
        }
        (Phase::Decode, t) => t.unwrap_or(8),
        (Phase::Prefill, Some(_)) => {
            return Err(BadInput(
                "--tokens is for --phase decode (prefill runs one pass of --len tokens)".into(),
            )
            .into());
        }
        (Phase::Prefill, None) => 1,
    };
    if let Some(out) = &args.out {
        check_output(&args, out)?;
    }
    let fail_after = match &args.inject_fault {
        Some(s) => {
            let (p, n) = s
                .rsplit_once(':')
                .and_then(|(p, n)| Some((p.to_string(), n.parse::<u32>().ok()?)))
                .ok_or_else(|| BadInput(format!("--inject-fault `{s}`: expected ID:N")))?;
            Some((p, n))
        }
        None => None,
    };
    args.rt.hold_cpu_poll()?;
    if let Some(text) = &args.host_cores {
        use hetero_agent::cpu::topology;
        let cores = topology::host_cores(
            text,
            args.rt.cpu_groups.as_deref(),
            &topology::process_cores(),
        )
        .map_err(|e| BadInput(format!("--host-cores: {e}")))?;
        topology::pin_current_thread(&cores)
            .map_err(|e| BadInput(format!("--host-cores: pinning the host thread: {e}")))?;
        eprintln!("host thread on cores {}", topology::format_list(&cores));
    }
    let model = hetero_plan::hf::load_config(&args.model)?;
    let weights = match &args.weights {
        Some(p) => WeightSource::Safetensors(p.clone()),
        None => WeightSource::Synthetic {
            seed: args.seed,
            share_layers: args.share_weights,
        },
    };
    let mut rt = Runtime::open(&args.plan, model, args.rt.options(weights, fail_after))?;
    let mut report = rt
        .run(&RunSpec {
            phase: args.phase,
            len: args.len,
            steps,
            repeat: args.repeat,
            check: args.check,
        })
        .map_err(|e| match e {
            hetero_runtime::Error::Memory(_) => anyhow::Error::new(e).context(format!(
                "{}: the model is too large for this machine",
                args.model.display()
            )),
            e => e.into(),
        })?;
    if args.tree {
        report.tree = Some(rt.tree_agreement(args.phase, args.tree_depth));
    }
    let json = serde_json::to_string_pretty(&report)?;
    if let Some(out) = &args.out {
        hetero_plan::write_atomic(out, format!("{json}\n").as_bytes())?;
    }
    if args.json {
        println!("{json}");
    } else {
        print!("{}", report.to_text());
    }
    if let Some(c) = &report.check
        && c.passed < c.outputs
    {
        return Err(hetero_runtime::Error::CheckFailed {
            failed: c.outputs - c.passed,
            checked: c.outputs,
            worst: format!(
                "{} (error {:.3e}, bound {:.3e})",
                c.worst, c.worst_rel_err, c.worst_bound
            ),
        }
        .into());
    }
    Ok(())
}

/// Refuses a report path over one of the run's inputs (exit 2).
fn check_output(args: &RunArgs, out: &std::path::Path) -> anyhow::Result<()> {
    let mut inputs = vec![("PLAN", args.plan.as_path()), ("--model", &args.model)];
    let optional = [
        ("--weights", &args.weights),
        ("--predictor", &args.rt.predictor),
        ("--sim-params", &args.rt.sim_params),
        ("--graphs", &args.rt.graphs),
    ];
    inputs.extend(
        optional
            .iter()
            .filter_map(|(f, p)| Some((*f, p.as_deref()?))),
    );
    crate::outpath::check(&inputs, &[crate::outpath::Output::file("--out", out)])
}
