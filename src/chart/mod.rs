//! `hetero chart`: partition charts, latency curves, stage curves and
//! predicted-against-measured plots, drawn with plotters.
//!
//! Every chart is drawn by a function generic over the plotters backend, so
//! SVG and PNG come from the same code. Output is deterministic: inputs are
//! sorted before drawing and nothing depends on time or randomness.

mod draw;
mod inputs;

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};

use crate::BadInput;

/// Image format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ImageFormat {
    /// Scalable vector graphics.
    Svg,
    /// PNG.
    Png,
}

impl ImageFormat {
    fn ext(self) -> &'static str {
        match self {
            ImageFormat::Svg => "svg",
            ImageFormat::Png => "png",
        }
    }
}

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  hetero chart plan.ron --out /tmp/charts\n  hetero chart datasets/gpu-host-h200/ --predictor p.ron --out /tmp/ds-charts\n  hetero chart /tmp/r.json --out /tmp/fit-charts --format png"
)]
pub struct ChartArgs {
    /// A plan file, a dataset folder, or a fit report (JSON from `hetero fit --report`).
    input: PathBuf,
    /// Folder for the charts and their index.
    #[arg(long)]
    out: PathBuf,
    /// Image format.
    #[arg(long, value_enum, default_value = "svg")]
    format: ImageFormat,
    /// For a dataset: a predictor whose curves are drawn over the measured points.
    #[arg(long)]
    predictor: Option<PathBuf>,
}

/// One chart written: its file name and a one-line description.
pub struct Written {
    pub file: String,
    pub about: String,
}

pub fn run(args: ChartArgs) -> anyhow::Result<()> {
    let input = inputs::Input::detect(&args.input, args.predictor.as_deref())?;
    std::fs::create_dir_all(&args.out)?;
    let written = draw_all(&input, &args.out, args.format)?;
    let index = write_index(&args.out, &args.input, &written)?;
    for w in &written {
        println!("{}", args.out.join(&w.file).display());
    }
    println!("{}", index.display());
    Ok(())
}

/// Draws every chart the input supports into `out`.
pub fn draw_all(
    input: &inputs::Input,
    out: &Path,
    format: ImageFormat,
) -> anyhow::Result<Vec<Written>> {
    // plotters measures text with the font for layout, in SVG too.
    draw::ensure_font()?;
    let mut written = Vec::new();
    match input {
        inputs::Input::Dataset { data, predictor } => {
            for (i, series) in inputs::stage_series(data, predictor.as_ref())
                .iter()
                .enumerate()
            {
                let file = format!(
                    "stage-{:02}-{}.{}",
                    i,
                    slug(&series.processor),
                    format.ext()
                );
                draw::stage_chart(&out.join(&file), format, series)?;
                written.push(Written {
                    file,
                    about: format!(
                        "{}: measured latency against {} ({}), {}",
                        series.processor,
                        series.axis,
                        series.fixed,
                        series.timing_note()
                    ),
                });
            }
            if written.is_empty() {
                return Err(BadInput("the dataset has no usable rows to chart".into()).into());
            }
        }
        inputs::Input::FitReport(report) => {
            let file = format!("predicted-vs-measured.{}", format.ext());
            draw::scatter_chart(&out.join(&file), format, report)?;
            written.push(Written {
                file,
                about:
                    "held-out predicted against measured latency per processor, with ±10 % bands"
                        .into(),
            });
        }
    }
    Ok(written)
}

fn slug(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

fn write_index(out: &Path, input: &Path, written: &[Written]) -> anyhow::Result<PathBuf> {
    let mut md = format!("# Charts for `{}`\n\n", input.display());
    for w in written {
        md.push_str(&format!("- [{}]({}) — {}\n", w.file, w.file, w.about));
    }
    let path = out.join("index.md");
    hetero_plan::write_atomic(&path, md.as_bytes())?;
    Ok(path)
}
