//! `hetero`: profile heterogeneous processors, fit latency models, and solve
//! how every GEMM of an LLM is split between them.
//!
//! This binary is thin: it parses arguments with clap and calls the library
//! crates. Exit codes: 0 success, 1 failure of the environment or a bug,
//! 2 bad input (a missing file, malformed data, a bad argument).

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;
mod bench_cmd;
mod chart;
mod compile_cmd;
mod dataset_cmd;
mod demo;
mod demo_cmd;
mod demo_folder;
mod exit;
mod fit_cmd;
mod generate_cmd;
mod model_cmd;
mod outpath;
mod plan_cmd;
mod predict_cmd;
mod profile_cmd;
mod run_cmd;
mod runtime_args;
mod schema_cmd;
mod solve_cmd;

pub use exit::{BadInput, bad};

/// Profile processors, fit latency models, solve partition plans for LLMs.
#[derive(Debug, Parser)]
#[command(name = "hetero", version, about, long_about = None)]
#[command(after_help = "Start with: hetero demo")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The whole pipeline on this machine in a few minutes: probe, profile, fit, solve, chart, run.
    Demo(demo_cmd::DemoArgs),
    /// Inspect a model: the GEMM operators derived from a Hugging Face config.json.
    #[command(subcommand)]
    #[command(after_help = "Example:\n  hetero model show datasets/models/llama-3.1-8b.json")]
    Model(model_cmd::ModelCmd),
    /// Profile a device (local, ssh or adb): sweep GEMMs within a time budget into a dataset.
    Profile(Box<profile_cmd::ProfileArgs>),
    /// Inspect, merge or export a dataset folder.
    #[command(subcommand)]
    Dataset(dataset_cmd::DatasetCmd),
    /// Export the JSON Schema of hetero's file formats.
    Schema(schema_cmd::SchemaArgs),
    /// Solve a plan: how every GEMM of a model runs on a device at every length.
    Solve(Box<solve_cmd::SolveArgs>),
    /// Inspect a plan: a summary, or why one decision won.
    #[command(subcommand)]
    #[command(
        after_help = "Examples:\n  hetero plan show plan.ron\n  hetero plan explain plan.ron --op ffn_down --len 300"
    )]
    Plan(plan_cmd::PlanCmd),
    /// Draw charts of a plan, a dataset or a fit report.
    Chart(chart::ChartArgs),
    /// Fit latency models per processor from a dataset.
    Fit(fit_cmd::FitArgs),
    /// Predict one GEMM's latency from a predictor file.
    Predict(predict_cmd::PredictArgs),
    /// Run a plan on this machine's processors: predicted against measured.
    Run(Box<run_cmd::RunArgs>),
    /// Generate tokens with a real model under a plan: TTFT, tokens/s, time per operator.
    Generate(Box<generate_cmd::GenerateArgs>),
    /// Compile a plan's QNN graphs ahead of time into context binaries.
    Compile(Box<compile_cmd::CompileArgs>),
    /// Benchmarks of whole plans on this machine: `bench offload` runs every
    /// way of fitting a model into a GPU memory budget.
    #[command(subcommand)]
    Bench(bench_cmd::BenchCmd),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // clap prints help/version to stdout and usage errors to stderr.
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let result = match cli.command {
        Command::Demo(args) => demo_cmd::run(args),
        Command::Model(cmd) => model_cmd::run(cmd),
        Command::Profile(args) => profile_cmd::run(*args),
        Command::Dataset(cmd) => dataset_cmd::run(cmd),
        Command::Schema(args) => schema_cmd::run(args),
        Command::Solve(args) => solve_cmd::run(*args),
        Command::Plan(cmd) => plan_cmd::run(cmd),
        Command::Chart(args) => chart::run(args),
        Command::Fit(args) => fit_cmd::run(args),
        Command::Predict(args) => predict_cmd::run(args),
        Command::Run(args) => run_cmd::run(*args),
        Command::Generate(args) => generate_cmd::run(*args),
        Command::Compile(args) => compile_cmd::run(*args),
        Command::Bench(cmd) => bench_cmd::run(cmd),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(exit::code_for(&e))
        }
    }
}
