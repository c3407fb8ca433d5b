//! `hetero predict`: ask a predictor file for one GEMM's latency.

use std::path::PathBuf;

use clap::Args;
use hetero_plan::{DType, GemmShape, OperandOrder, Predictor};

use crate::BadInput;

#[derive(Debug, Args)]
#[command(
    after_help = "Example:\n  hetero predict /tmp/p.ron --processor cpu:0 --shape 300x1536x8960"
)]
pub struct PredictArgs {
    /// A predictor file written by `hetero fit`.
    predictor: PathBuf,
    /// Processor id, as in `hetero-agent probe`.
    #[arg(long)]
    processor: String,
    /// GEMM shape MxKxN (M tokens, K in, N out).
    #[arg(long)]
    shape: GemmShape,
    /// Element type; the processor's only fitted dtype when absent.
    #[arg(long)]
    dtype: Option<DType>,
    /// Operand order.
    #[arg(long, default_value = "aw")]
    order: OperandOrder,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(args: PredictArgs) -> anyhow::Result<()> {
    let p: Predictor = hetero_plan::load(&args.predictor)?;
    let fitted: Vec<DType> = p
        .models
        .iter()
        .filter(|m| m.processor == args.processor)
        .map(|m| m.dtype)
        .collect();
    let known = || {
        let mut ids: Vec<&str> = p.models.iter().map(|m| m.processor.as_str()).collect();
        ids.dedup();
        ids.join(", ")
    };
    let dtype = match (args.dtype, fitted.as_slice()) {
        (_, []) => {
            return Err(BadInput(format!(
                "{}: no model for processor `{}`; fitted: {}",
                args.predictor.display(),
                args.processor,
                known()
            ))
            .into());
        }
        (Some(d), f) if !f.contains(&d) => {
            return Err(BadInput(format!(
                "{}: `{}` has no {d} model; fitted dtypes: {}",
                args.predictor.display(),
                args.processor,
                DType::list(f)
            ))
            .into());
        }
        (Some(d), _) => d,
        (None, [d]) => *d,
        (None, f) => {
            return Err(BadInput(format!(
                "`{}` has models for several dtypes ({}); pick one with --dtype",
                args.processor,
                DType::list(f)
            ))
            .into());
        }
    };
    let model = p.model(&args.processor, dtype).expect("checked above");
    let us = model.predict_us(args.shape, args.order).ok_or_else(|| {
        BadInput(format!(
            "{}: the {} model of `{}` is malformed",
            args.predictor.display(),
            model.model.family(),
            args.processor
        ))
    })?;
    // Where the profile measured the shape, that is the figure; the model's
    // own is shown beside it.
    let measured = model.measured_us(args.shape, args.order).is_some();
    let model_us = model.model_us(args.shape, args.order);
    let timing = p
        .processor(&args.processor)
        .map_or(hetero_plan::Timing::Real, |p| p.timing());
    if args.json {
        let v = serde_json::json!({
            "processor": args.processor,
            "shape": args.shape.to_string(),
            "dtype": dtype,
            "order": args.order,
            "predicted_us": us,
            "source": if measured { "measured" } else { "model" },
            "model_us": model_us,
            "model": model.model.family(),
            "launch_us": model.launch_us,
            "order_free": model.order_free,
            "timing": timing,
        });
        println!("{v}");
    } else {
        let label = match timing {
            hetero_plan::Timing::Real => "",
            hetero_plan::Timing::Emulated => " (emulated processor: not a hardware latency)",
            hetero_plan::Timing::Simulated => " (simulated processor: not a hardware latency)",
        };
        let source = match (measured, model_us) {
            (true, Some(m)) => format!(
                "measured in the profile; the {} model says {m:.1} µs",
                model.model.family()
            ),
            (true, None) => "measured in the profile".to_string(),
            (false, _) => format!("{} model", model.model.family()),
        };
        println!(
            "{} {} {dtype} {}: {us:.1} µs ({source}{}){label}",
            args.processor,
            args.shape,
            args.order,
            model
                .launch_us
                .map(|l| format!(", kernels plus a {l:.1} µs launch"))
                .unwrap_or_default()
                + if model.order_free {
                    ", both orders alike"
                } else {
                    ""
                }
        );
    }
    Ok(())
}
