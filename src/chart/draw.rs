//! The drawing code, generic over plotters backends.

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;

use super::ImageFormat;
use super::inputs::StageSeries;
use hetero_profiler::fit::Report;

const SIZE: (u32, u32) = (960, 600);

/// Colours that stay distinguishable in print and for common colour blindness
/// (Okabe–Ito).
pub const PALETTE: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(213, 94, 0),
    RGBColor(240, 228, 66),
    RGBColor(0, 0, 0),
];

static FONT: OnceLock<Result<(), String>> = OnceLock::new();

/// Registers a TrueType font: plotters lays text out with its metrics, for
/// SVG and PNG alike.
pub fn ensure_font() -> anyhow::Result<()> {
    FONT.get_or_init(|| {
        let mut tried = Vec::new();
        let candidates: Vec<String> = std::env::var("HETERO_FONT")
            .into_iter()
            .chain(
                [
                    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
                    "/usr/share/fonts/TTF/DejaVuSans.ttf",
                    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
                    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
                    "/System/Library/Fonts/Supplemental/Arial.ttf",
                ]
                .map(String::from),
            )
            .collect();
        for path in candidates {
            match std::fs::read(&path) {
                Ok(bytes) => {
                    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                    return plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
                        .map_err(|_| format!("{path}: not a usable TrueType font"));
                }
                Err(_) => tried.push(path),
            }
        }
        Err(format!(
            "charts need a TrueType font; none found (tried: {}). Install fonts-dejavu-core or set HETERO_FONT to a .ttf file",
            tried.join(", ")
        ))
    })
    .clone()
    .map_err(|e| anyhow::anyhow!(e))
}

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow::anyhow!("drawing failed: {e:?}")
}

/// Measured points and the predictor's curve against one dimension.
pub fn stage_chart(path: &Path, format: ImageFormat, s: &StageSeries) -> anyhow::Result<()> {
    struct Draw<'a>(&'a StageSeries);
    impl Draw<'_> {
        fn on<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> anyhow::Result<()> {
            let s = self.0;
            root.fill(&WHITE).map_err(err)?;
            let x_max = s.measured.last().map_or(1, |p| p.0) as f64 * 1.02;
            let y_max = s
                .measured
                .iter()
                .chain(&s.predicted)
                .map(|p| p.1)
                .fold(0.0, f64::max)
                * 1.1;
            let title = format!("{} — latency against {} ({})", s.processor, s.axis, s.fixed);
            let mut chart = ChartBuilder::on(root)
                .caption(&title, ("sans-serif", 22))
                .margin(16)
                .x_label_area_size(48)
                .y_label_area_size(72)
                .build_cartesian_2d(0.0..x_max, 0.0..y_max)
                .map_err(err)?;
            chart
                .configure_mesh()
                .x_desc(format!("{} (elements)", s.axis))
                .y_desc("latency (µs)")
                .x_label_formatter(&|v| format!("{v:.0}"))
                .y_label_formatter(&|v| format!("{v:.0}"))
                .label_style(("sans-serif", 15))
                .axis_desc_style(("sans-serif", 17))
                .draw()
                .map_err(err)?;
            let note = match s.timing {
                hetero_plan::Timing::Real => "measured (median)".to_string(),
                _ => format!("measured (median) — {}", s.timing_note()),
            };
            if !s.predicted.is_empty() {
                chart
                    .draw_series(LineSeries::new(
                        s.predicted.iter().map(|(x, y)| (*x as f64, *y)),
                        PALETTE[5].stroke_width(2),
                    ))
                    .map_err(err)?
                    .label("predictor")
                    .legend(|(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], PALETTE[5].stroke_width(2))
                    });
            }
            chart
                .draw_series(
                    s.measured
                        .iter()
                        .map(|(x, y)| Circle::new((*x as f64, *y), 3, PALETTE[0].filled())),
                )
                .map_err(err)?
                .label(note)
                .legend(|(x, y)| Circle::new((x + 10, y), 4, PALETTE[0].filled()));
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .label_font(("sans-serif", 15))
                .draw()
                .map_err(err)?;
            Ok(())
        }
    }
    let d = Draw(s);
    match format {
        ImageFormat::Svg => {
            let root = SVGBackend::new(path, SIZE).into_drawing_area();
            d.on(&root)?;
            root.present().map_err(err)
        }
        ImageFormat::Png => {
            let root = BitMapBackend::new(path, SIZE).into_drawing_area();
            d.on(&root)?;
            root.present().map_err(err)
        }
    }
}

/// Held-out predicted against measured latency, log-log, with ±10 % bands.
pub fn scatter_chart(path: &Path, format: ImageFormat, r: &Report) -> anyhow::Result<()> {
    fn on<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, r: &Report) -> anyhow::Result<()> {
        root.fill(&WHITE).map_err(err)?;
        let all = r.entries.iter().flat_map(|e| e.held_out.iter());
        let (lo, hi) = all
            .flat_map(|(m, p)| [*m, *p])
            .filter(|v| v.is_finite() && *v > 0.0)
            .fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
                (lo.min(v), hi.max(v))
            });
        let (lo, hi) = if lo.is_finite() {
            (lo / 1.5, hi * 1.5)
        } else {
            (1.0, 10.0)
        };
        let mut chart = ChartBuilder::on(root)
            .caption(
                "Held-out predictions against measurements",
                ("sans-serif", 22),
            )
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(80)
            // Log-log by hand: plotters labels only whole decades on a log
            // axis, too few for a range within one or two decades.
            .build_cartesian_2d(lo.log10()..hi.log10(), lo.log10()..hi.log10())
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("measured latency (µs, log scale)")
            .y_desc("predicted latency (µs, log scale)")
            .x_labels(12)
            .y_labels(12)
            .x_label_formatter(&|v| fmt_us(10f64.powf(*v)))
            .y_label_formatter(&|v| fmt_us(10f64.powf(*v)))
            .label_style(("sans-serif", 15))
            .axis_desc_style(("sans-serif", 17))
            .draw()
            .map_err(err)?;
        let grey = RGBColor(120, 120, 120);
        chart
            .draw_series(LineSeries::new(
                [(lo.log10(), lo.log10()), (hi.log10(), hi.log10())],
                grey.stroke_width(1),
            ))
            .map_err(err)?
            .label("exact")
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], grey));
        for f in [0.9, 1.1] {
            let s = chart
                .draw_series(DashedLineSeries::new(
                    [
                        (lo.log10(), (lo * f).log10()),
                        (hi.log10(), (hi * f).log10()),
                    ],
                    6,
                    4,
                    grey.stroke_width(1),
                ))
                .map_err(err)?;
            if f > 1.0 {
                s.label("±10 %").legend(move |(x, y)| {
                    DashedPathElement::new(vec![(x, y), (x + 20, y)], 5, 3, grey)
                });
            }
        }
        for (i, e) in r.entries.iter().enumerate() {
            let c = PALETTE[i % PALETTE.len()];
            let label = format!(
                "{} {} ({}, {:.1} % within ±10 %{})",
                e.processor,
                e.dtype,
                e.model,
                100.0 * e.within_10pct,
                match e.timing {
                    hetero_plan::Timing::Real => "",
                    hetero_plan::Timing::Emulated => ", EMULATED",
                    hetero_plan::Timing::Simulated => ", SIMULATED",
                }
            );
            chart
                .draw_series(
                    e.held_out
                        .iter()
                        .filter(|(m, p)| m.is_finite() && p.is_finite() && *m > 0.0 && *p > 0.0)
                        .map(|(m, p)| Circle::new((m.log10(), p.log10()), 3, c.mix(0.7).filled())),
                )
                .map_err(err)?
                .label(label)
                .legend(move |(x, y)| Circle::new((x + 10, y), 4, c.filled()));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 15))
            .draw()
            .map_err(err)?;
        Ok(())
    }
    match format {
        ImageFormat::Svg => {
            let root = SVGBackend::new(path, SIZE).into_drawing_area();
            on(&root, r)?;
            root.present().map_err(err)
        }
        ImageFormat::Png => {
            let root = BitMapBackend::new(path, SIZE).into_drawing_area();
            on(&root, r)?;
            root.present().map_err(err)
        }
    }
}

/// A latency label with sensible precision.
fn fmt_us(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}
