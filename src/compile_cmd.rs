//! `hetero compile`: build every static graph a plan runs on its QNN
//! processor as a context binary, ahead of time, with a manifest that
//! `hetero run --graphs` and the C API check before loading them.

use std::path::PathBuf;

use clap::Args;
use hetero_agent::OpenOptions;
use hetero_runtime::{CompileOptions, WeightSource};

use crate::BadInput;

#[derive(Debug, Args)]
#[command(after_help = "Examples:
  hetero compile plan.ron --model config.json --soc 57 --out graphs/
  hetero run plan.ron --model config.json --phase prefill --len 300 --graphs graphs/ --check

Builds one QNN context binary per graph the plan runs on qnn:htp (every
layer: the weights are baked in) with the QAIRT library of --qnn-lib-dir or
HETERO_QNN_LIB_DIR, and writes qnn-graphs.json: the plan's fingerprints,
the QNN build, and per graph its shape, dtype, weights hash and binary hash.
Run with the same --weights or --seed: other weights are refused (exit 2).
On x86-64 the library is the HTP emulator: compile times are emulated.")]
pub struct CompileArgs {
    /// The plan (.ron or .json) written by `hetero solve`.
    plan: PathBuf,
    /// The model's Hugging Face config.json the plan was solved for.
    #[arg(long)]
    model: PathBuf,
    /// Output folder (created): one .bin per graph and qnn-graphs.json.
    #[arg(long)]
    out: PathBuf,
    /// Target SoC model (QNN's socModel: 57 = SM8650, 69 = SM8750,
    /// 87 = SM8850); else HETERO_QNN_SOC.
    #[arg(long)]
    soc: Option<u32>,
    /// Folder holding libQnnHtp.so; else HETERO_QNN_LIB_DIR, else the
    /// standard Android folders.
    #[arg(long)]
    qnn_lib_dir: Option<PathBuf>,
    /// Real weights (safetensors) to bake in; synthetic seeded weights when absent.
    #[arg(long)]
    weights: Option<PathBuf>,
    /// Seed of the synthetic weights (as for `hetero run`).
    #[arg(long, default_value_t = 0x5eed)]
    seed: u64,
    /// Every layer runs layer 0's synthetic weights (one graph per share).
    #[arg(long, conflicts_with = "weights")]
    share_weights: bool,
    /// Print the manifest as JSON instead of a summary.
    #[arg(long)]
    json: bool,
}

pub fn run(args: CompileArgs) -> anyhow::Result<()> {
    let soc = match args.soc {
        Some(s) => s,
        None => std::env::var(hetero_agent::qnn::SOC_ENV)
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| {
                BadInput(format!(
                    "--soc is required (or {}): the SoC model the graphs are for, \
                     e.g. 57 for SM8650",
                    hetero_agent::qnn::SOC_ENV
                ))
            })?,
    };
    let mut inputs = vec![("PLAN", args.plan.as_path()), ("--model", &args.model)];
    if let Some(w) = &args.weights {
        inputs.push(("--weights", w));
    }
    crate::outpath::check(
        &inputs,
        &[crate::outpath::Output::folder("--out", &args.out)],
    )?;
    let model = hetero_plan::hf::load_config(&args.model)?;
    let opts = CompileOptions {
        open: OpenOptions {
            qnn_lib_dir: args.qnn_lib_dir.clone(),
            qnn_soc: Some(soc),
            ..Default::default()
        },
        weights: match &args.weights {
            Some(p) => WeightSource::Safetensors(p.clone()),
            None => WeightSource::Synthetic {
                seed: args.seed,
                share_layers: args.share_weights,
            },
        },
        soc,
    };
    let started = std::time::Instant::now();
    let mut progress = |done: usize, total: usize| {
        if done == total || done % 16 == 0 {
            eprintln!("compiled {done} of {total} graphs");
        }
    };
    let manifest =
        hetero_runtime::compile_plan(&args.plan, &model, &opts, &args.out, &mut progress)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&manifest)?);
        return Ok(());
    }
    let bytes: u64 = manifest.graphs.iter().map(|g| g.bytes).sum();
    let finalize_ms: f64 = manifest.graphs.iter().map(|g| g.prepare_us).sum::<f64>() / 1e3;
    let emulated = if hetero_agent::qnn::EMULATED {
        " (HTP emulator on this CPU: emulated, not NPU time)"
    } else {
        ""
    };
    println!(
        "wrote {} graphs ({:.1} MiB) for SoC {} with QNN {} to {}",
        manifest.graphs.len(),
        bytes as f64 / (1u64 << 20) as f64,
        manifest.soc,
        manifest.qnn_build,
        args.out.join(hetero_agent::qnn::MANIFEST_FILE).display()
    );
    println!(
        "graph finalize {finalize_ms:.1} ms in all{emulated}; {:.1} s wall",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
