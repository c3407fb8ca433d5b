//! `hetero model show`.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use hetero_plan::{ModelSpec, hf};

#[derive(Debug, Subcommand)]
pub enum ModelCmd {
    /// Print the GEMM operators of one decoder layer plus the lm_head.
    #[command(
        after_help = "Examples:\n  hetero model show datasets/models/qwen2.5-1.5b.json\n  hetero model show path/to/config.json --json"
    )]
    Show(ShowArgs),
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// A Hugging Face config.json (llama, mistral, qwen2, qwen3, phi3, gemma,
    /// gemma2, internlm2, mixtral, qwen2_moe).
    config: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(cmd: ModelCmd) -> anyhow::Result<()> {
    match cmd {
        ModelCmd::Show(args) => show(args),
    }
}

fn show(args: ShowArgs) -> anyhow::Result<()> {
    let spec = hf::load_config(&args.config)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&show_json(&spec))?);
    } else {
        print!("{}", show_table(&spec));
    }
    Ok(())
}

/// The model spec plus the two parameter totals.
pub fn show_json(spec: &ModelSpec) -> serde_json::Value {
    let mut v = serde_json::to_value(spec).expect("a model spec serialises");
    let obj = v.as_object_mut().expect("a struct serialises to an object");
    obj.insert(
        "linear_params_per_token".into(),
        spec.linear_params_per_token().into(),
    );
    obj.insert(
        "linear_params_stored".into(),
        spec.linear_params_stored().into(),
    );
    v
}

fn billions(n: u64) -> String {
    format!("{:.3} B", n as f64 / 1e9)
}

fn show_table(spec: &ModelSpec) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} ({}): {} layers, hidden {}, {} heads / {} kv heads x {}, vocab {}{}",
        spec.name,
        spec.model_type,
        spec.layers,
        spec.hidden,
        spec.heads,
        spec.kv_heads,
        spec.head_dim,
        spec.vocab,
        if spec.tied_embeddings {
            ", tied embeddings"
        } else {
            ""
        }
    );
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "{:<20} {:<30} {:>8} {:>8} {:>6} {:>7} {:>7}",
        "op", "module", "in (K)", "out (N)", "count", "active", "layers"
    );
    for op in &spec.ops {
        let _ = writeln!(
            s,
            "{:<20} {:<30} {:>8} {:>8} {:>6} {:>7} {:>7}",
            op.name, op.hf_name, op.k, op.n, op.count, op.active, op.layers
        );
    }
    let _ = writeln!(s);
    let per_token = spec.linear_params_per_token();
    let stored = spec.linear_params_stored();
    let _ = writeln!(
        s,
        "linear params per token: {per_token} ({}; active experts only, lm_head included)",
        billions(per_token)
    );
    let _ = writeln!(
        s,
        "linear params stored:    {stored} ({})",
        billions(stored)
    );
    s
}
