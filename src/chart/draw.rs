//! The drawing code, generic over plotters backends.

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::ImageFormat;
use super::figure::{
    Axis, Figure, Header, LegendItem, Sample, Shape, diagonal_bands, diagonal_legend, line,
    markers, panel, render,
};
use super::inputs::StageSeries;
use hetero_profiler::fit::Report;

/// Plot area of the one-panel charts, below their header.
const SIZE: (u32, u32) = (960, 560);

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

static FONT: OnceLock<Result<String, String>> = OnceLock::new();

/// Fonts tried first, by path: the same text metrics on every machine that
/// has one of them, so that a chart's bytes do not depend on which other
/// fonts a machine happens to hold.
const PREFERRED: [&str; 5] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
];

/// Registers a TrueType font: plotters lays text out with its metrics, for
/// SVG and PNG alike. `HETERO_FONT`, where set, is the only font tried;
/// else the [`PREFERRED`] paths, then a sans-serif face from the system's
/// font folders (fontdb reads them as fontconfig lists them, so other
/// distributions' paths are found too). Returns the font's path.
pub fn ensure_font() -> anyhow::Result<String> {
    FONT.get_or_init(find_font)
        .clone()
        .map_err(|e| anyhow::anyhow!(e))
}

fn register(path: &str, bytes: Vec<u8>) -> Result<String, String> {
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
        .map(|()| path.to_string())
        .map_err(|_| format!("{path}: not a usable TrueType font"))
}

fn find_font() -> Result<String, String> {
    if let Some(path) = std::env::var("HETERO_FONT").ok().filter(|p| !p.is_empty()) {
        let bytes = std::fs::read(&path).map_err(|e| format!("HETERO_FONT={path}: {e}"))?;
        return register(&path, bytes).map_err(|e| format!("HETERO_FONT={e}"));
    }
    for path in PREFERRED {
        if let Ok(bytes) = std::fs::read(path) {
            return register(path, bytes);
        }
    }
    if let Some((path, bytes)) = system_font() {
        return register(&path, bytes);
    }
    Err(
        "charts need a TrueType font and this machine has none (searched the system's \
         font folders). Install one (Debian and Ubuntu: fonts-dejavu-core; Fedora: \
         dejavu-sans-fonts) or set HETERO_FONT to a .ttf file"
            .to_string(),
    )
}

/// A sans-serif face of the system's fonts, or any face, that is the first
/// of its file (plotters reads a font file's first face only).
fn system_font() -> Option<(String, Vec<u8>)> {
    use fontdb::{Family, Query};
    let mut db = fontdb::Database::new();
    db.load_system_fonts();
    let families = [
        Family::Name("DejaVu Sans"),
        Family::Name("Liberation Sans"),
        Family::Name("Noto Sans"),
        Family::Name("Arial"),
        Family::Name("Helvetica"),
        Family::SansSerif,
    ];
    let first_face = |id: &fontdb::ID| db.face(*id).is_some_and(|f| f.index == 0);
    let id = db
        .query(&Query {
            families: &families,
            ..Query::default()
        })
        .filter(first_face)
        .or_else(|| db.faces().map(|f| f.id).find(first_face))?;
    let path = match &db.face(id)?.source {
        fontdb::Source::File(p) => p.display().to_string(),
        _ => "a system font".to_string(),
    };
    db.with_face_data(id, |data, _| (path, data.to_vec()))
}

/// A plotters error as an anyhow error.
pub fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow::anyhow!("drawing failed: {e:?}")
}

/// Measured points and the predictor's curve against one dimension, on log
/// axes where the dimension or the latency spans decades.
pub fn stage_chart(path: &Path, format: ImageFormat, s: &StageSeries) -> anyhow::Result<()> {
    render(path, format, &StageChart::new(s))
}

struct StageChart<'a> {
    s: &'a StageSeries,
    header: Header,
}

impl<'a> StageChart<'a> {
    fn new(s: &'a StageSeries) -> Self {
        let mut legend = vec![LegendItem {
            sample: Sample::Marker(PALETTE[0], Shape::Circle),
            text: match s.timing {
                hetero_plan::Timing::Real => "measured (median)".to_string(),
                _ => format!("measured (median) — {}", s.timing_note()),
            },
        }];
        if !s.predicted.is_empty() {
            legend.push(LegendItem {
                sample: Sample::Line(PALETTE[5], 1.0, 2, 0),
                text: "predictor".into(),
            });
        }
        StageChart {
            s,
            header: Header {
                title: format!("{} — latency against {}", s.processor, s.axis),
                notes: vec![format!(
                    "{} swept, {} fixed; {}.",
                    s.axis,
                    s.fixed,
                    s.timing_note()
                )],
                legend,
            },
        }
    }
}

impl Figure for StageChart<'_> {
    fn size(&self) -> (u32, u32) {
        (SIZE.0, self.header.height(SIZE.0) + SIZE.1)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> anyhow::Result<()> {
        let s = self.s;
        root.fill(&WHITE).map_err(err)?;
        let (top, body) = root.split_vertically(self.header.height(SIZE.0));
        self.header.draw(&top)?;
        let (xlo, xhi) = (
            s.measured.first().map_or(1, |p| p.0),
            s.measured.last().map_or(1, |p| p.0),
        );
        let x = Axis::lengths(xlo, xhi, 10, false);
        let (ylo, yhi) = s
            .measured
            .iter()
            .chain(&s.predicted)
            .map(|p| p.1)
            .filter(|v| v.is_finite() && *v > 0.0)
            .fold((f64::INFINITY, 0.0f64), |(a, b), v| (a.min(v), b.max(v)));
        let y = Axis::values(ylo, yhi, 9, 0.0);
        let log = |a: &Axis| if a.log.is_some() { ", log scale" } else { "" };
        let mut chart = panel(
            &body,
            "",
            &x,
            &y,
            &format!("{} (elements{})", s.axis, log(&x)),
            &format!("latency (µs{})", log(&y)),
        )?;
        if !s.predicted.is_empty() {
            line(
                &mut chart,
                s.predicted
                    .iter()
                    .map(|(v, us)| (x.t(*v as f64), y.t(*us)))
                    .collect(),
                PALETTE[5].stroke_width(2),
                0,
            )?;
        }
        let pts: Vec<(f64, f64)> = s
            .measured
            .iter()
            .filter(|p| p.1 > 0.0)
            .map(|(v, us)| (x.t(*v as f64), y.t(*us)))
            .collect();
        markers(&mut chart, &pts, Shape::Circle, PALETTE[0], 3)
    }
}

/// Held-out predicted against measured latency, log-log, with ±10 % bands.
pub fn scatter_chart(path: &Path, format: ImageFormat, r: &Report) -> anyhow::Result<()> {
    render(path, format, &Scatter::new(r))
}

struct Scatter<'a> {
    r: &'a Report,
    header: Header,
}

impl<'a> Scatter<'a> {
    fn new(r: &'a Report) -> Self {
        let mut legend = diagonal_legend();
        for (i, e) in r.entries.iter().enumerate() {
            legend.push(LegendItem {
                sample: Sample::Marker(PALETTE[i % PALETTE.len()], Shape::Circle),
                text: format!(
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
                ),
            });
        }
        Scatter {
            r,
            header: Header {
                title: "Held-out predictions against measurements".into(),
                notes: vec![format!(
                    "Fit of dataset {}: every held-out row of each processor's chosen model.",
                    r.dataset.name
                )],
                legend,
            },
        }
    }
}

impl Figure for Scatter<'_> {
    fn size(&self) -> (u32, u32) {
        (SIZE.0, self.header.height(SIZE.0) + 640)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> anyhow::Result<()> {
        let r = self.r;
        root.fill(&WHITE).map_err(err)?;
        let (top, body) = root.split_vertically(self.header.height(SIZE.0));
        self.header.draw(&top)?;
        let ok = |(m, p): &&(f64, f64)| m.is_finite() && p.is_finite() && *m > 0.0 && *p > 0.0;
        let (lo, hi) = r
            .entries
            .iter()
            .flat_map(|e| e.held_out.iter())
            .filter(ok)
            .flat_map(|(m, p)| [*m, *p])
            .fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
                (lo.min(v), hi.max(v))
            });
        let a = Axis::values(lo, hi, 10, 0.0);
        let log = if a.log.is_some() { ", log scale" } else { "" };
        let mut chart = panel(
            &body,
            "",
            &a,
            &a,
            &format!("measured latency (µs{log})"),
            &format!("predicted latency (µs{log})"),
        )?;
        diagonal_bands(&mut chart, &a)?;
        for (i, e) in r.entries.iter().enumerate() {
            let c = PALETTE[i % PALETTE.len()];
            chart
                .draw_series(
                    e.held_out
                        .iter()
                        .filter(ok)
                        .map(|(m, p)| Circle::new((a.t(*m), a.t(*p)), 3, c.mix(0.7).filled())),
                )
                .map_err(err)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fallback behind the preferred paths: on a machine with fonts in
    /// its system folders (CI installs fonts-dejavu-core), it finds one
    /// whose first face plotters can read.
    #[test]
    fn the_system_search_finds_a_readable_first_face() {
        let Some((path, bytes)) = system_font() else {
            println!("skipping: this machine has no fonts in its system font folders");
            return;
        };
        assert!(!bytes.is_empty(), "{path}");
        assert!(
            plotters::style::register_font("sans-serif", FontStyle::Normal, bytes.leak()).is_ok(),
            "{path}"
        );
    }
}
