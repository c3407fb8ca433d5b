//! Layout shared by the plan and run charts: a header (title, wrapped
//! subtitle, legend that flows over as many rows as it needs) above a grid
//! of panels, axes with explicit ticks (log where the range spans decades),
//! and label placement that never lets two labels overlap.

use std::path::Path;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::coord::types::RangedCoordf64;
use plotters::element::DashedPathElement;
use plotters::prelude::*;

use super::ImageFormat;
use super::draw::err;

/// Something drawn on one canvas.
pub trait Figure {
    /// Canvas size in pixels.
    fn size(&self) -> (u32, u32);
    /// Draws it.
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> anyhow::Result<()>;
}

/// Renders a figure to a file in `format`.
pub fn render<F: Figure>(path: &Path, format: ImageFormat, f: &F) -> anyhow::Result<()> {
    match format {
        ImageFormat::Svg => {
            let root = SVGBackend::new(path, f.size()).into_drawing_area();
            f.draw(&root)?;
            root.present().map_err(err)
        }
        ImageFormat::Png => {
            let root = BitMapBackend::new(path, f.size()).into_drawing_area();
            f.draw(&root)?;
            root.present().map_err(err)
        }
    }
}

/// Text width and height in pixels.
pub fn text_size(text: &str, px: u32) -> (u32, u32) {
    let font: FontDesc = ("sans-serif", px).into_font();
    font.box_size(text)
        .unwrap_or((text.len() as u32 * px / 2, px))
}

/// Splits `text` into lines no wider than `width` pixels.
pub fn wrap(text: &str, px: u32, width: u32) -> Vec<String> {
    let mut lines = Vec::new();
    let mut cur = String::new();
    for word in text.split(' ') {
        let cand = if cur.is_empty() {
            word.to_string()
        } else {
            format!("{cur} {word}")
        };
        if !cur.is_empty() && text_size(&cand, px).0 > width {
            lines.push(std::mem::replace(&mut cur, word.to_string()));
        } else {
            cur = cand;
        }
    }
    if !cur.is_empty() {
        lines.push(cur);
    }
    lines
}

/// Marker shapes, one per processor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// ●
    Circle,
    /// ▲
    Triangle,
    /// ■
    Square,
    /// ✕
    Cross,
}

impl Shape {
    /// The n-th shape.
    pub fn nth(i: usize) -> Shape {
        [Shape::Circle, Shape::Triangle, Shape::Square, Shape::Cross][i % 4]
    }
}

/// Dash patterns (dash, gap) in pixels; (0, 0) is solid.
pub const DASHES: [(u32, u32); 4] = [(0, 0), (10, 5), (3, 4), (16, 4)];

/// What a legend entry shows before its text.
#[derive(Debug, Clone)]
pub enum Sample {
    /// A filled square.
    Swatch(RGBColor),
    /// A line: colour, opacity, width, dash pattern index.
    Line(RGBColor, f64, u32, usize),
    /// A marker.
    Marker(RGBColor, Shape),
    /// An open circle.
    Ring(RGBColor),
    /// A line with a marker on it.
    LineMarker(RGBColor, usize, Shape),
}

/// One legend entry.
#[derive(Debug, Clone)]
pub struct LegendItem {
    /// The sample.
    pub sample: Sample,
    /// Its text.
    pub text: String,
}

/// Title, subtitle and legend above the panels.
pub struct Header {
    /// Title.
    pub title: String,
    /// Lines under the title (wrapped to the width).
    pub notes: Vec<String>,
    /// Legend entries, in order.
    pub legend: Vec<LegendItem>,
}

const TITLE_PX: u32 = 22;
const NOTE_PX: u32 = 15;
const LEGEND_PX: u32 = 15;
const MARGIN: i32 = 16;
const ROW: i32 = 24;

impl Header {
    fn note_lines(&self, width: u32) -> Vec<String> {
        self.notes
            .iter()
            .flat_map(|n| wrap(n, NOTE_PX, width - 2 * MARGIN as u32))
            .collect()
    }

    /// Legend entries placed in rows: (row, x) per entry.
    fn legend_layout(&self, width: u32) -> Vec<(i32, i32)> {
        let mut out = Vec::new();
        let (mut row, mut x) = (0, MARGIN);
        for item in &self.legend {
            let w = 34 + text_size(&item.text, LEGEND_PX).0 as i32 + 22;
            if x > MARGIN && x + w > width as i32 - MARGIN {
                row += 1;
                x = MARGIN;
            }
            out.push((row, x));
            x += w;
        }
        out
    }

    /// Pixels it takes at `width`.
    pub fn height(&self, width: u32) -> u32 {
        let rows = self.legend_layout(width).last().map_or(0, |(r, _)| *r + 1);
        (MARGIN
            + TITLE_PX as i32
            + 10
            + self.note_lines(width).len() as i32 * (NOTE_PX as i32 + 5)
            + 6
            + rows * ROW
            + 8) as u32
    }

    /// Draws it at the top of `area` (as wide as the canvas).
    pub fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> anyhow::Result<()> {
        let width = area.dim_in_pixel().0;
        let mut y = MARGIN;
        area.draw(&Text::new(
            self.title.clone(),
            (MARGIN, y),
            ("sans-serif", TITLE_PX).into_font().color(&BLACK),
        ))
        .map_err(err)?;
        y += TITLE_PX as i32 + 10;
        let grey = RGBColor(70, 70, 70);
        for line in self.note_lines(width) {
            area.draw(&Text::new(
                line,
                (MARGIN, y),
                ("sans-serif", NOTE_PX).into_font().color(&grey),
            ))
            .map_err(err)?;
            y += NOTE_PX as i32 + 5;
        }
        y += 6;
        for (item, (row, x)) in self.legend.iter().zip(self.legend_layout(width)) {
            let cy = y + row * ROW + ROW / 2 - 2;
            draw_sample(area, &item.sample, x, cy)?;
            area.draw(&Text::new(
                item.text.clone(),
                (x + 34, cy - LEGEND_PX as i32 / 2 - 1),
                ("sans-serif", LEGEND_PX).into_font().color(&BLACK),
            ))
            .map_err(err)?;
        }
        Ok(())
    }
}

fn draw_sample<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    s: &Sample,
    x: i32,
    cy: i32,
) -> anyhow::Result<()> {
    match s {
        Sample::Swatch(c) => area
            .draw(&Rectangle::new(
                [(x + 4, cy - 8), (x + 24, cy + 8)],
                c.filled(),
            ))
            .map_err(err),
        Sample::Line(c, alpha, w, dash) => {
            let style = c.mix(*alpha).stroke_width(*w);
            dashed_path(area, vec![(x, cy), (x + 28, cy)], style, *dash)
        }
        Sample::Marker(c, shape) => marker_px(area, (x + 14, cy), *shape, *c),
        Sample::Ring(c) => area
            .draw(&Circle::new((x + 14, cy), 7, c.stroke_width(2)))
            .map_err(err),
        Sample::LineMarker(c, dash, shape) => {
            dashed_path(area, vec![(x, cy), (x + 28, cy)], c.stroke_width(2), *dash)?;
            marker_px(area, (x + 14, cy), *shape, *c)
        }
    }
}

fn dashed_path<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    pts: Vec<(i32, i32)>,
    style: ShapeStyle,
    dash: usize,
) -> anyhow::Result<()> {
    let (d, g) = DASHES[dash % DASHES.len()];
    if d == 0 {
        area.draw(&PathElement::new(pts, style)).map_err(err)
    } else {
        area.draw(&DashedPathElement::new(pts, d, g, style))
            .map_err(err)
    }
}

fn marker_px<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    c: (i32, i32),
    shape: Shape,
    colour: RGBColor,
) -> anyhow::Result<()> {
    let style = colour.filled();
    match shape {
        Shape::Circle => area.draw(&Circle::new(c, 4, style)),
        Shape::Triangle => area.draw(&TriangleMarker::new(c, 5, style)),
        Shape::Square => area.draw(&Rectangle::new(
            [(c.0 - 4, c.1 - 4), (c.0 + 4, c.1 + 4)],
            style,
        )),
        Shape::Cross => area.draw(&Cross::new(c, 4, colour.stroke_width(2))),
    }
    .map_err(err)
}

/// Chart coordinates with explicit ticks (plotters' `WithKeyPoints` over
/// an f64 range has no value formatter, so the mesh cannot be drawn on it).
pub struct Coord {
    inner: RangedCoordf64,
    ticks: Vec<f64>,
}

impl Ranged for Coord {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        // Bold lines and labels at the ticks; no light lines.
        if hint.weight().allow_light_points() {
            vec![]
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.inner.range()
    }
}
/// A chart on one panel.
pub type Chart<'a, DB> = ChartContext<'a, DB, Cartesian2d<Coord, Coord>>;

/// One axis: linear or logarithmic, with its ticks in data units.
#[derive(Debug, Clone)]
pub struct Axis {
    /// Logarithm base, or linear.
    pub log: Option<f64>,
    /// Lower end, data units.
    pub lo: f64,
    /// Upper end, data units.
    pub hi: f64,
    /// Ticks, data units.
    pub ticks: Vec<f64>,
}

impl Axis {
    /// Data to chart coordinate.
    pub fn t(&self, v: f64) -> f64 {
        match self.log {
            Some(b) => v.max(f64::MIN_POSITIVE).log(b),
            None => v,
        }
    }

    /// Chart coordinate to data.
    pub fn inv(&self, t: f64) -> f64 {
        match self.log {
            Some(b) => b.powf(t),
            None => t,
        }
    }

    /// The plotters range.
    pub fn range(&self) -> Coord {
        Coord {
            inner: (self.t(self.lo)..self.t(self.hi)).into(),
            ticks: self.ticks.iter().map(|v| self.t(*v)).collect(),
        }
    }

    /// Sequence lengths `lo..=hi`: base-2 log when they span 16× or more,
    /// unless `linear` (plans with prepared graph sizes: padding steps and
    /// graph sizes are evenly spread on a linear axis, as in HeteroLLM
    /// Fig. 14, and crowd into the last octaves on a log one). Linear
    /// ticks are power-of-two steps.
    pub fn lengths(lo: u32, hi: u32, max_ticks: usize, linear: bool) -> Axis {
        let (lo, hi) = (lo.max(1) as f64, hi.max(1) as f64);
        if hi / lo >= 16.0 && !linear {
            let pad = 0.04 * (hi / lo).log2() + 0.1;
            let (a, b) = (lo / 2f64.powf(pad), hi * 2f64.powf(pad));
            let exps: Vec<i32> = (a.log2().ceil() as i32..=b.log2().floor() as i32).collect();
            let stride = exps.len().div_ceil(max_ticks.max(1)).max(1) as i32;
            let ticks = exps
                .iter()
                .filter(|e| *e % stride == 0)
                .map(|e| 2f64.powi(*e))
                .collect();
            Axis {
                log: Some(2.0),
                lo: a,
                hi: b,
                ticks,
            }
        } else {
            let pad = (0.04 * (hi - lo)).max(0.5);
            let raw = (hi - lo) / max_ticks.max(1) as f64;
            let step = 2f64.powf(raw.max(1.0).log2().ceil());
            let (a, b) = (lo - pad, hi + pad);
            Axis {
                log: None,
                lo: a,
                hi: b,
                ticks: steps(a.max(0.0), b, step),
            }
        }
    }

    /// Positive values `lo..=hi` (latencies): base-10 log when they span
    /// more than a decade, else linear from 0. `band` is a share of the
    /// height left free above the data for labels.
    pub fn values(lo: f64, hi: f64, max_ticks: usize, band: f64) -> Axis {
        let (lo, hi) = if lo.is_finite() && hi.is_finite() && lo > 0.0 && hi >= lo {
            (lo, hi)
        } else {
            (1.0, 10.0)
        };
        if hi / lo > 10.0 {
            let (a, b) = (lo / 1.25, hi * 1.25);
            let b = b * (b / a).powf(band);
            let mut ticks = vec![];
            for mults in [
                &[1.0][..],
                &[1.0, 3.0],
                &[1.0, 2.0, 5.0],
                &[1.0, 2.0, 3.0, 5.0, 7.0],
            ] {
                // Ticks within the data, not the padding: an end label stays whole.
                let t = log_ticks(lo / 1.05, hi * 1.05, mults);
                if t.len() > max_ticks && !ticks.is_empty() {
                    break;
                }
                ticks = t;
            }
            Axis {
                log: Some(10.0),
                lo: a,
                hi: b,
                ticks,
            }
        } else {
            let top = hi * 1.08;
            let step = nice_step(top, max_ticks);
            Axis {
                log: None,
                lo: 0.0,
                hi: top * (1.0 + band),
                ticks: steps(0.0, top, step),
            }
        }
    }

    /// Tick label for a chart coordinate.
    pub fn label(&self, t: f64) -> String {
        fmt_tick(self.inv(t))
    }
}

fn log_ticks(a: f64, b: f64, mults: &[f64]) -> Vec<f64> {
    let mut out = vec![];
    for e in a.log10().floor() as i32..=b.log10().ceil() as i32 {
        for m in mults {
            let v = m * 10f64.powi(e);
            if v >= a && v <= b {
                out.push(v);
            }
        }
    }
    out
}

fn nice_step(span: f64, max_ticks: usize) -> f64 {
    let raw = span / max_ticks.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag)
}

fn steps(lo: f64, hi: f64, step: f64) -> Vec<f64> {
    let first = (lo / step).ceil() as i64;
    let last = (hi / step).floor() as i64;
    (first..=last).map(|i| i as f64 * step).collect()
}

/// A number for a tick: at most three significant digits, no trailing zeros.
pub fn fmt_tick(v: f64) -> String {
    let a = v.abs();
    let s = if a >= 100.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Builds a panel's chart with the house axes.
pub fn panel<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    caption: &str,
    x: &Axis,
    y: &Axis,
    x_desc: &str,
    y_desc: &str,
) -> anyhow::Result<Chart<'a, DB>> {
    let mut builder = ChartBuilder::on(area);
    if !caption.is_empty() {
        builder.caption(caption, ("sans-serif", 16));
    }
    let mut chart = builder
        .margin(10)
        .margin_right(26)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(x.range(), y.range())
        .map_err(err)?;
    let (xl, yl) = (x.clone(), y.clone());
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .x_label_formatter(&|v| xl.label(*v))
        .y_label_formatter(&|v| yl.label(*v))
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 14))
        .bold_line_style(RGBColor(225, 225, 225))
        .light_line_style(TRANSPARENT)
        .draw()
        .map_err(err)?;
    Ok(chart)
}

/// Labels that may not overlap: each is placed only where it overlaps
/// none placed before.
#[derive(Default)]
pub struct Placer {
    boxes: Vec<(i32, i32, i32, i32)>,
}

impl Placer {
    /// True (and the box taken) when the box is free.
    pub fn take(&mut self, x0: i32, y0: i32, w: i32, h: i32) -> bool {
        let b = (x0 - 2, y0 - 1, x0 + w + 2, y0 + h + 1);
        if self
            .boxes
            .iter()
            .any(|o| b.0 < o.2 && o.0 < b.2 && b.1 < o.3 && o.1 < b.3)
        {
            return false;
        }
        self.boxes.push(b);
        true
    }
}

/// The colour of the diagonal and its bands.
const DIAGONAL_GREY: RGBColor = RGBColor(120, 120, 120);

/// The legend entries of [`diagonal_bands`]: "exact" and "±10 %".
pub fn diagonal_legend() -> Vec<LegendItem> {
    vec![
        LegendItem {
            sample: Sample::Line(DIAGONAL_GREY, 1.0, 1, 0),
            text: "exact".into(),
        },
        LegendItem {
            sample: Sample::Line(DIAGONAL_GREY, 1.0, 1, 1),
            text: "±10 %".into(),
        },
    ]
}

/// Draws the diagonal y = x (solid) and the ±10 % bands y = 0.9·x and
/// y = 1.1·x (dashed) of a predicted-against-measured panel whose two axes
/// are both `a`. The bands stop at the frame: each runs from where it
/// enters to where it leaves.
pub fn diagonal_bands<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    a: &Axis,
) -> anyhow::Result<()> {
    let grey = DIAGONAL_GREY;
    let (e0, e1) = (a.lo.max(f64::MIN_POSITIVE), a.hi);
    line(
        chart,
        vec![(a.t(e0), a.t(e0)), (a.t(e1), a.t(e1))],
        grey.stroke_width(1),
        0,
    )?;
    for f in [0.9, 1.1f64] {
        let (x0, x1) = (e0.max(e0 / f), e1.min(e1 / f));
        line(
            chart,
            vec![(a.t(x0), a.t(x0 * f)), (a.t(x1), a.t(x1 * f))],
            grey.stroke_width(1),
            1,
        )?;
    }
    Ok(())
}

/// Draws a line through `pts` (chart coordinates), solid or dashed.
///
/// plotters widens a line by mitring its joins; at a point repeated in
/// pixels, or at a turn sharper than a right angle, the mitre shoots off
/// the chart in PNG. So repeated pixels are dropped and the line is broken
/// at sharp turns (the pieces share the vertex).
pub fn line<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    pts: Vec<(f64, f64)>,
    style: ShapeStyle,
    dash: usize,
) -> anyhow::Result<()> {
    let (d, g) = DASHES[dash % DASHES.len()];
    let mut kept: Vec<((f64, f64), (i32, i32))> = Vec::with_capacity(pts.len());
    for p in pts {
        let px = chart.backend_coord(&p);
        if kept.last().is_none_or(|k| k.1 != px) {
            kept.push((p, px));
        }
    }
    let mut pieces: Vec<Vec<(f64, f64)>> = vec![];
    let mut cur: Vec<(f64, f64)> = vec![];
    for (i, (p, px)) in kept.iter().enumerate() {
        cur.push(*p);
        if i > 0 && i + 1 < kept.len() {
            let a = (px.0 - kept[i - 1].1.0, px.1 - kept[i - 1].1.1);
            let b = (kept[i + 1].1.0 - px.0, kept[i + 1].1.1 - px.1);
            let dot = (a.0 as f64) * (b.0 as f64) + (a.1 as f64) * (b.1 as f64);
            if dot < 0.0 {
                pieces.push(std::mem::replace(&mut cur, vec![*p]));
            }
        }
    }
    pieces.push(cur);
    for piece in pieces.into_iter().filter(|p| p.len() >= 2) {
        if d == 0 {
            chart
                .draw_series(LineSeries::new(piece, style))
                .map_err(err)?;
        } else {
            chart
                .draw_series(DashedLineSeries::new(piece, d, g, style))
                .map_err(err)?;
        }
    }
    Ok(())
}

/// Draws markers at `pts` (chart coordinates).
pub fn markers<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    pts: &[(f64, f64)],
    shape: Shape,
    colour: RGBColor,
    size: u32,
) -> anyhow::Result<()> {
    let style = colour.filled();
    let r = size as i32;
    match shape {
        Shape::Circle => chart
            .draw_series(pts.iter().map(|p| Circle::new(*p, size, style)))
            .map(|_| ()),
        Shape::Triangle => chart
            .draw_series(pts.iter().map(|p| TriangleMarker::new(*p, size + 1, style)))
            .map(|_| ()),
        Shape::Square => chart
            .draw_series(
                pts.iter()
                    .map(|p| EmptyElement::at(*p) + Rectangle::new([(-r, -r), (r, r)], style)),
            )
            .map(|_| ()),
        Shape::Cross => chart
            .draw_series(
                pts.iter()
                    .map(|p| Cross::new(*p, size, colour.stroke_width(2))),
            )
            .map(|_| ()),
    }
    .map_err(err)
}

/// Vertical dotted markers at `xs` (data units) from `y0` to `y1` (chart
/// coordinates), labelled above `y1` where the label fits without overlap.
#[allow(clippy::too_many_arguments)]
pub fn graph_marks<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    x: &Axis,
    xs: &[u32],
    y0: f64,
    y1: f64,
    colour: RGBColor,
    dash: usize,
) -> anyhow::Result<()> {
    let (xlo, xhi) = (x.t(x.lo), x.t(x.hi));
    let mut placer = Placer::default();
    for &s in xs {
        let tx = x.t(s as f64);
        if tx < xlo || tx > xhi {
            continue;
        }
        let (d, g) = DASHES[dash % DASHES.len()];
        chart
            .draw_series(DashedLineSeries::new(
                [(tx, y0), (tx, y1)],
                d.max(2),
                g.max(3),
                colour.stroke_width(1),
            ))
            .map_err(err)?;
        let label = s.to_string();
        let (w, h) = text_size(&label, 12);
        let (w, h) = (w as i32, h as i32);
        let (px, py) = chart.backend_coord(&(tx, y1));
        // Two rows of labels; a size whose label fits in neither keeps its line.
        for dy in [-h - 4, -2 * h - 7] {
            if placer.take(px - w / 2, py + dy, w, h) {
                chart
                    .draw_series(std::iter::once(
                        EmptyElement::at((tx, y1))
                            + Text::new(
                                label,
                                (-w / 2, dy),
                                ("sans-serif", 12).into_font().color(&colour),
                            ),
                    ))
                    .map_err(err)?;
                break;
            }
        }
    }
    Ok(())
}

/// Columns and rows of a grid of `n` panels.
pub fn grid(n: usize) -> (usize, usize) {
    let cols = match n {
        0 | 1 => 1,
        2..=4 => 2,
        5..=9 => 3,
        _ => 4,
    };
    (cols, n.div_ceil(cols).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn length_axis_is_log2_over_decades_with_few_ticks() {
        let a = Axis::lengths(1, 2048, 7, false);
        assert_eq!(a.log, Some(2.0));
        assert!(a.ticks.len() <= 7, "{:?}", a.ticks);
        assert!(a.ticks.contains(&1.0) && a.ticks.contains(&1024.0));
        let b = Axis::lengths(1, 4, 8, false);
        assert_eq!(b.log, None);
        assert_eq!(b.ticks, vec![1.0, 2.0, 3.0, 4.0]);
        let c = Axis::lengths(1, 2048, 7, true);
        assert_eq!(c.log, None);
        assert_eq!(c.ticks, vec![0.0, 512.0, 1024.0, 1536.0, 2048.0]);
    }

    #[test]
    fn value_axis_is_log_only_over_a_decade() {
        let a = Axis::values(30.0, 20000.0, 8, 0.0);
        assert_eq!(a.log, Some(10.0));
        assert!(a.ticks.len() <= 8 && a.ticks.len() >= 3, "{:?}", a.ticks);
        let b = Axis::values(300.0, 900.0, 6, 0.0);
        assert_eq!(b.log, None);
        assert!(b.ticks.len() <= 7, "{:?}", b.ticks);
    }

    #[test]
    fn ticks_read_well() {
        assert_eq!(fmt_tick(1024.0000001), "1024");
        assert_eq!(fmt_tick(2.5), "2.5");
        assert_eq!(fmt_tick(20.0), "20");
        assert_eq!(fmt_tick(0.05), "0.05");
    }

    #[test]
    fn placer_refuses_overlaps() {
        let mut p = Placer::default();
        assert!(p.take(0, 0, 20, 10));
        assert!(!p.take(10, 5, 20, 10));
        assert!(p.take(30, 0, 20, 10));
    }
}
