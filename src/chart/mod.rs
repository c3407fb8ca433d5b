//! `hetero chart`: partition charts, latency curves, stage curves and
//! predicted-against-measured plots, drawn with plotters.
//!
//! Every chart is drawn by a function generic over the plotters backend, so
//! SVG and PNG come from the same code. Output is deterministic: inputs are
//! sorted before drawing and nothing depends on time or randomness.

mod draw;
mod draw_plan;
mod figure;
mod inputs;
mod plan;

pub use draw::ensure_font;

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
#[command(after_help = "Examples:
  hetero chart plan.ron --out /tmp/charts
  hetero chart plan.ron --predictor device.ron --model config.json --out /tmp/charts --format png
  hetero chart datasets/gpu-host-h200/ --out /tmp/ds-charts
  hetero chart datasets/gpu-host-h200/ --predictor p.ron --out /tmp/ds-charts
  hetero chart /tmp/fit-report.json --out /tmp/fit-charts
  hetero chart /tmp/run.json --out /tmp/run-charts

What each input gives:
  plan (hetero solve)          partition chart and latency curves per phase
  dataset folder               stage-performance curves per processor
  fit report (fit --report)    held-out predicted against measured
  run report (run --json)      predicted against measured per operator and part

A plan stores only each decision and its runner-up. Its latency curves show
every candidate only with --predictor and --model (the files the plan was
solved with; both fingerprints are checked); without them they show the
chosen strategy and the stored runner-up.")]
pub struct ChartArgs {
    /// A plan (.ron/.json from `hetero solve`), a dataset folder, a fit
    /// report (`hetero fit --report`) or a runtime report (`hetero run --json`).
    input: PathBuf,
    /// Folder for the charts and their index (index.md).
    #[arg(long)]
    out: PathBuf,
    /// Image format.
    #[arg(long, value_enum, default_value = "svg")]
    format: ImageFormat,
    /// For a dataset: a predictor whose curves are drawn over the measured
    /// points. For a plan: the predictor it was solved with, to re-evaluate
    /// every candidate (needs --model too).
    #[arg(long)]
    predictor: Option<PathBuf>,
    /// For a plan: the model config it was solved for (needs --predictor too).
    #[arg(long)]
    model: Option<PathBuf>,
    /// For a plan with --predictor: lengths re-evaluated per operator (all
    /// of them when the plan has fewer; else spread on a log axis, plus
    /// every graph size and the length after it).
    #[arg(long, default_value_t = 160)]
    samples: usize,
}

/// One chart written: its file name and a one-line description.
pub struct Written {
    pub file: String,
    pub about: String,
}

pub fn run(args: ChartArgs) -> anyhow::Result<()> {
    if args.samples < 2 {
        return Err(BadInput("--samples must be at least 2".into()).into());
    }
    let mut given = vec![("INPUT", args.input.as_path())];
    given.extend(args.predictor.as_deref().map(|p| ("--predictor", p)));
    given.extend(args.model.as_deref().map(|p| ("--model", p)));
    crate::outpath::check(
        &given,
        &[crate::outpath::Output::folder("--out", &args.out)],
    )?;
    let input = inputs::Input::detect(
        &args.input,
        args.predictor.as_deref(),
        args.model.as_deref(),
    )?;
    if let inputs::Input::Plan { eval: None, .. } = &input {
        eprintln!(
            "note: the latency curves show the chosen strategy and the runner-up the plan stores; \
             give --predictor and --model (the files the plan was solved with) to draw every candidate"
        );
    }
    std::fs::create_dir_all(&args.out)
        .map_err(|e| BadInput(format!("--out {}: {e}", args.out.display())))?;
    let name = args.input.file_name().map_or_else(
        || args.input.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let written = draw_all(&input, &name, &args.out, args.format, args.samples)?;
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
    name: &str,
    out: &Path,
    format: ImageFormat,
    samples: usize,
) -> anyhow::Result<Vec<Written>> {
    // plotters measures text with the font for layout, in SVG too.
    ensure_font()?;
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
        inputs::Input::RunReport(report) => {
            let file = format!("run-predicted-vs-measured.{}", format.ext());
            figure::render(
                &out.join(&file),
                format,
                &draw_plan::RunScatter::new(report),
            )?;
            written.push(Written {
                file,
                about: format!(
                    "runtime report ({} at length {}): predicted against measured per operator and per part, with ±10 % bands{}",
                    report.phase,
                    report.len,
                    if report.timing == "measured" {
                        String::new()
                    } else {
                        format!(", {} times", report.timing.to_uppercase())
                    }
                ),
            });
        }
        inputs::Input::Plan { plan, eval } => {
            plan_charts(
                plan,
                eval.as_deref(),
                name,
                out,
                format,
                samples,
                &mut written,
            )?;
        }
    }
    Ok(written)
}

fn plan_charts(
    p: &hetero_plan::Plan,
    eval: Option<&(hetero_plan::Predictor, hetero_plan::ModelSpec)>,
    name: &str,
    out: &Path,
    format: ImageFormat,
    samples: usize,
    written: &mut Vec<Written>,
) -> anyhow::Result<()> {
    let about = format!(
        "plan {name} · model {} · predictor {}",
        p.model.name, p.predictor.name
    );
    // Simulated or emulated processors, as the solver noted them.
    let notes: Vec<String> = p
        .notes
        .iter()
        .filter(|n| {
            let n = n.to_lowercase();
            n.contains("simulated") || n.contains("emulated")
        })
        .cloned()
        .collect();
    let phases = plan::phases(p);
    if phases.is_empty() {
        return Err(BadInput(format!("{name}: the plan has no decisions to chart")).into());
    }
    let sizes = |ph: hetero_plan::Phase| -> String {
        let v: Vec<String> = p
            .graph_sets
            .iter()
            .filter(|g| !g.sizes_for(ph).is_empty())
            .map(|g| {
                let s: Vec<String> = g.sizes_for(ph).iter().map(u32::to_string).collect();
                format!("{} graphs at {}", g.processor, s.join(", "))
            })
            .collect();
        if v.is_empty() {
            String::new()
        } else {
            format!("; {}", v.join("; "))
        }
    };
    for ph in &phases {
        let fig = plan::partition(p, *ph);
        let file = format!("partition-{ph}.{}", format.ext());
        figure::render(
            &out.join(&file),
            format,
            &draw_plan::PartitionChart::new(&fig, &about, &notes),
        )?;
        written.push(Written {
            file,
            about: format!(
                "{ph}: each processor's share of every operator against length, coloured by strategy ({} operators{})",
                fig.panels.len(),
                sizes(*ph)
            ),
        });
    }
    for ph in &phases {
        let fig = plan::latency(p, *ph, eval.map(|e| (&e.0, &e.1)), samples)?;
        let file = format!("latency-{ph}.{}", format.ext());
        figure::render(
            &out.join(&file),
            format,
            &draw_plan::LatencyChart::new(&fig, &about, &notes),
        )?;
        written.push(Written {
            file,
            about: match fig.source {
                plan::CurveSource::Reevaluated => format!(
                    "{ph}: predicted latency of every candidate against length, the plan's choice highlighted ({} candidates re-evaluated with the predictor)",
                    fig.keys.len()
                ),
                plan::CurveSource::Stored => format!(
                    "{ph}: predicted latency of the chosen strategy and the stored runner-up against length (plan alone; --predictor and --model draw every candidate)"
                ),
            },
        });
    }
    Ok(())
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
