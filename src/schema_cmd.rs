//! `hetero schema`: JSON Schema of every file format.

use std::path::PathBuf;

use clap::Args;
use schemars::{Schema, schema_for};

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  hetero schema plan            # print the plan schema\n  hetero schema --out schemas/  # write every schema to a folder"
)]
pub struct SchemaArgs {
    /// Which format; all of them when absent (then --out is required).
    #[arg(value_parser = clap::builder::PossibleValuesParser::new(NAMES))]
    name: Option<String>,
    /// Write NAME.schema.json files into this folder instead of printing.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// The file formats, by the name used on the command line.
pub const NAMES: [&str; 9] = [
    "device-profile",
    "processor",
    "sweep-spec",
    "measurement-row",
    "microbench-row",
    "model-spec",
    "plan",
    "predictor",
    "fingerprint",
];

pub fn schema(name: &str) -> Schema {
    use hetero_plan::*;
    match name {
        "device-profile" => schema_for!(DeviceProfile),
        "processor" => schema_for!(Processor),
        "sweep-spec" => schema_for!(SweepSpec),
        "measurement-row" => schema_for!(MeasurementRow),
        "microbench-row" => schema_for!(MicrobenchRow),
        "model-spec" => schema_for!(ModelSpec),
        "plan" => schema_for!(Plan),
        "predictor" => schema_for!(Predictor),
        "fingerprint" => schema_for!(Fingerprint),
        _ => unreachable!("clap checks the name against NAMES"),
    }
}

pub fn run(args: SchemaArgs) -> anyhow::Result<()> {
    let names: Vec<&str> = match &args.name {
        Some(n) => vec![n.as_str()],
        None => NAMES.to_vec(),
    };
    match &args.out {
        Some(dir) => {
            crate::outpath::check(&[], &[crate::outpath::Output::folder("--out", dir)])?;
            std::fs::create_dir_all(dir)?;
            for name in names {
                let path = dir.join(format!("{name}.schema.json"));
                let text = serde_json::to_string_pretty(&schema(name))? + "\n";
                hetero_plan::write_atomic(&path, text.as_bytes())?;
                println!("{}", path.display());
            }
        }
        None if names.len() == 1 => {
            println!("{}", serde_json::to_string_pretty(&schema(names[0]))?);
        }
        None => {
            return Err(crate::BadInput(format!(
                "name a format ({}) or give --out DIR to write them all",
                NAMES.join(", ")
            ))
            .into());
        }
    }
    Ok(())
}
