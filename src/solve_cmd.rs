//! `hetero solve`: a plan from a predictor file and a model config.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, ValueEnum};
use hetero_plan::{DType, Format, ModelSpec, Phase, Plan, Predictor};
use hetero_solver::settings::{fmt_bytes, parse_bytes, parse_duration_us, parse_list, parse_range};
use hetero_solver::{Distribution, GraphChoice, OffloadStrategy, Settings};

use crate::bad;
use crate::outpath::{self, Output};

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum PhaseArg {
    Prefill,
    Decode,
    Both,
}

#[derive(Debug, Args)]
#[command(after_help = "Examples:
  hetero solve --predictor device.ron --model datasets/models/llama-3.1-8b.json --out plan.ron
  hetero solve --predictor device.ron --model config.json --out plan.json --json \\
      --lengths 1..4096 --npu-graphs 128,256,512,1024 --decode-lengths 1..4
  hetero solve --predictor h200.ron --model config.json --out plan.ron --gpu-mem-budget 8GiB")]
pub struct SolveArgs {
    /// Predictor file (`hetero fit` writes it): latency models and overheads.
    #[arg(long)]
    predictor: PathBuf,
    /// Hugging Face config.json of the model (or a model spec .ron).
    #[arg(long)]
    model: PathBuf,
    /// Where to write the plan (.ron, or .json).
    #[arg(long)]
    out: PathBuf,
    /// Phases to solve.
    #[arg(long, value_enum, default_value = "both")]
    phase: PhaseArg,
    /// Prefill lengths, both ends included: every length gets a decision.
    #[arg(long, default_value = "1..2048", conflicts_with = "buckets")]
    lengths: String,
    /// Prefill lengths as a list instead (the runtime rounds up to one).
    #[arg(long)]
    buckets: Option<String>,
    /// Decode step sizes (1, or n for speculative decoding).
    #[arg(long, default_value = "1")]
    decode_lengths: String,
    /// Static graph sizes to prepare on the NPU: auto (chosen under the
    /// budgets), none, or a list.
    #[arg(long, default_value = "auto")]
    npu_graphs: String,
    /// Prompt-length histogram (CSV `length,count`) the graph set is chosen
    /// for; default uniform over 1..2048.
    #[arg(long)]
    prompt_lengths: Option<PathBuf>,
    /// Graph prepare-time budget (30s, 2min, ...).
    #[arg(long, default_value = "30s")]
    prepare_budget: String,
    /// Memory budget for the graphs' buffers (512MiB, ...); default the
    /// NPU's memory when the profile knows it.
    #[arg(long)]
    graph_mem_budget: Option<String>,
    /// GPU memory for weights on a discrete-GPU host: turns on offload mode
    /// (ScheInfer CC/CG/GG slicing).
    #[arg(long)]
    gpu_mem_budget: Option<String>,
    /// In offload mode, how the plan runs a model larger than the budget:
    /// best (the solver's choice), sliced (CC/CG/GG per operator, resident
    /// weights per layer), gpu-stream (the GPU alone, copying what is not
    /// resident), layer-split (the first layers on the GPU, the rest on the
    /// CPU), cpu (the CPU alone). Needs --gpu-mem-budget.
    #[arg(long)]
    offload_strategy: Option<String>,
    /// Dtype of every processor (f16) or of one (npu=w8a16); repeatable.
    /// Default: f16 where the predictor has it, else the processor's first.
    #[arg(long)]
    dtype: Vec<String>,
    /// Use only these processors (comma-separated ids).
    #[arg(long)]
    processors: Option<String>,
    /// Solve only these operators (comma-separated names).
    #[arg(long)]
    ops: Option<String>,
    /// Row cuts are multiples of this many output rows.
    #[arg(long, default_value_t = 256)]
    row_align: u32,
    /// Cost every candidate at every length. By default a length whose
    /// neighbour's decision is proved within 0.5 % of its optimum (by lower
    /// bounds of the latency models) takes that decision uncosted.
    #[arg(long)]
    exhaustive: bool,
    /// Write the plan as JSON (the output must then be named .json).
    #[arg(long)]
    json: bool,
}

/// Loads a model: a Hugging Face config.json, or a model spec in RON.
pub fn load_model(path: &Path) -> anyhow::Result<ModelSpec> {
    if path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("ron"))
    {
        Ok(hetero_plan::load::<ModelSpec>(path)?)
    } else {
        Ok(hetero_plan::hf::load_config(path)?)
    }
}

/// Loads a predictor and its fingerprint (named by the file name).
pub fn load_predictor(path: &Path) -> anyhow::Result<(Predictor, hetero_plan::Fingerprint)> {
    let p: Predictor = hetero_plan::load(path)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string());
    let fp = p.fingerprint(name);
    Ok((p, fp))
}

/// `--dtype` values: every processor's dtype (`f16`) or one's (`npu=w8a16`).
pub fn parse_dtypes(values: &[String]) -> anyhow::Result<Vec<(Option<String>, DType)>> {
    values
        .iter()
        .map(|d| match d.split_once('=') {
            Some((p, t)) => t
                .parse::<DType>()
                .map(|t| (Some(p.to_string()), t))
                .map_err(|e| bad(format!("--dtype {d}: {e}"))),
            None => d
                .parse::<DType>()
                .map(|t| (None, t))
                .map_err(|e| bad(format!("--dtype {d}: {e}"))),
        })
        .collect()
}

fn settings(args: &SolveArgs) -> anyhow::Result<Settings> {
    let phases = match args.phase {
        PhaseArg::Prefill => vec![Phase::Prefill],
        PhaseArg::Decode => vec![Phase::Decode],
        PhaseArg::Both => vec![Phase::Prefill, Phase::Decode],
    };
    let prefill_lengths = match &args.buckets {
        Some(b) => parse_list(b).map_err(|e| bad(format!("--buckets: {e}")))?,
        None => parse_range(&args.lengths).map_err(|e| bad(format!("--lengths: {e}")))?,
    };
    let decode_lengths = parse_range(&args.decode_lengths)
        .or_else(|_| parse_list(&args.decode_lengths))
        .map_err(|e| bad(format!("--decode-lengths: {e}")))?;
    let graphs: GraphChoice = args
        .npu_graphs
        .parse()
        .map_err(|e| bad(format!("--npu-graphs: {e}")))?;
    let prompt_lengths = match &args.prompt_lengths {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .map_err(|e| bad(format!("--prompt-lengths {}: {e}", p.display())))?;
            Some(Distribution::from_csv(p, &text)?)
        }
        None => None,
    };
    let dtypes = parse_dtypes(&args.dtype)?;
    let list = |s: &Option<String>| -> Vec<String> {
        s.as_deref()
            .map(|s| {
                s.split(',')
                    .map(str::trim)
                    .filter(|x| !x.is_empty())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default()
    };
    Ok(Settings {
        phases,
        prefill_lengths,
        decode_lengths,
        graphs,
        prompt_lengths,
        prepare_budget_us: Some(
            parse_duration_us(&args.prepare_budget)
                .map_err(|e| bad(format!("--prepare-budget: {e}")))?,
        ),
        graph_mem_budget: args
            .graph_mem_budget
            .as_deref()
            .map(parse_bytes)
            .transpose()
            .map_err(|e| bad(format!("--graph-mem-budget: {e}")))?,
        gpu_mem_budget: args
            .gpu_mem_budget
            .as_deref()
            .map(parse_bytes)
            .transpose()
            .map_err(|e| bad(format!("--gpu-mem-budget: {e}")))?,
        dtypes,
        processors: list(&args.processors),
        ops: list(&args.ops),
        row_align: args.row_align,
        exhaustive: args.exhaustive,
        offload_strategy: offload_strategy(args)?,
    })
}

/// `--offload-strategy`, which needs `--gpu-mem-budget`.
fn offload_strategy(args: &SolveArgs) -> anyhow::Result<OffloadStrategy> {
    let Some(name) = args.offload_strategy.as_deref() else {
        return Ok(OffloadStrategy::Best);
    };
    let strategy = OffloadStrategy::from_name(name).ok_or_else(|| {
        let names: Vec<&str> = OffloadStrategy::ALL.iter().map(|s| s.name()).collect();
        bad(format!(
            "--offload-strategy {name}: expected one of {}",
            names.join(", ")
        ))
    })?;
    if args.gpu_mem_budget.is_none() {
        return Err(bad(format!(
            "--offload-strategy {name} needs --gpu-mem-budget (offload mode)"
        )));
    }
    Ok(strategy)
}

/// The format the plan is written in.
fn out_format(args: &SolveArgs) -> anyhow::Result<Format> {
    let ext = args
        .out
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase());
    match (args.json, ext.as_deref()) {
        (true, Some("json")) | (false, Some("json")) => Ok(Format::Json),
        (true, _) => Err(bad(format!(
            "--json writes JSON; name the output .json, not {}",
            args.out.display()
        ))),
        (false, Some("ron")) => Ok(Format::Ron),
        (false, _) => Err(bad(format!(
            "{}: cannot tell the plan format from the extension; use .ron, or .json",
            args.out.display()
        ))),
    }
}

pub fn run(args: SolveArgs) -> anyhow::Result<()> {
    let format = out_format(&args)?;
    let mut inputs = vec![
        ("--predictor", args.predictor.as_path()),
        ("--model", &args.model),
    ];
    if let Some(p) = &args.prompt_lengths {
        inputs.push(("--prompt-lengths", p));
    }
    outpath::check(&inputs, &[Output::file("--out", &args.out)])?;
    let settings = settings(&args)?;
    let model = load_model(&args.model)?;
    let (predictor, fp) = load_predictor(&args.predictor)?;
    let started = std::time::Instant::now();
    let plan = hetero_solver::solve(&predictor, fp, &model, &settings)?;
    let seconds = started.elapsed().as_secs_f64();
    let text = plan.to_text(format)?;
    hetero_plan::write_atomic(&args.out, text.as_bytes())
        .with_context(|| format!("writing the plan to {}", args.out.display()))?;
    print!("{}", summary(&plan, &args.out, seconds, text.len()));
    Ok(())
}

fn summary(plan: &Plan, out: &Path, seconds: f64, bytes: usize) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let cells: usize = plan.ops.iter().map(|o| o.length_count()).sum();
    let ranges: usize = plan.ops.iter().map(|o| o.ranges.len()).sum();
    let _ = writeln!(
        s,
        "wrote {} ({}): {} decisions in {} ranges for {} operator tables, solved in {:.2} s",
        out.display(),
        fmt_bytes(bytes as u64),
        cells,
        ranges,
        plan.ops.len(),
        seconds
    );
    crate::plan_cmd::write_graph_sets(&mut s, plan);
    if let Some(info) = &plan.solver {
        crate::plan_cmd::write_expected_prefill(&mut s, info);
    }
    for n in &plan.notes {
        let _ = writeln!(s, "note: {n}");
    }
    let _ = writeln!(s, "inspect it with: hetero plan show {}", out.display());
    s
}
