//! The plan charts (partition, latency curves) and the runtime report's
//! predicted-against-measured scatter.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::draw::{PALETTE, err};
use super::figure::{
    Axis, Figure, Header, LegendItem, Placer, Sample, Shape, diagonal_bands, diagonal_legend,
    graph_marks, grid, line, markers, panel, text_size,
};
use super::inputs::RunReport;
use super::plan::{
    CurveSource, GraphMarks, LatencyFigure, PartitionFigure, kind_index, kind_words,
};
use hetero_plan::{Phase, StrategyKind};

/// Up to this many lengths a panel marks every point.
const FEW: usize = 12;

/// Panel size in pixels.
const PANEL: (u32, u32) = (560, 380);

/// The colour of a strategy family, the same in every chart.
pub fn kind_colour(k: StrategyKind) -> RGBColor {
    const C: [RGBColor; 9] = [
        RGBColor(0, 114, 178),   // single: blue
        RGBColor(230, 159, 0),   // row cut: orange
        RGBColor(213, 94, 0),    // three-way: vermillion
        RGBColor(0, 158, 115),   // sequence cut: bluish green
        RGBColor(86, 180, 233),  // multi-sequence: sky blue
        RGBColor(204, 121, 167), // hybrid: reddish purple
        RGBColor(140, 125, 0),   // chunked: dark olive (Okabe–Ito yellow is unreadable on white)
        RGBColor(110, 80, 160),  // offload: purple
        RGBColor(0, 90, 70),     // pipe: dark bluish green
    ];
    C[kind_index(k)]
}

const MARK_GREY: RGBColor = RGBColor(120, 120, 120);
const INK: RGBColor = RGBColor(60, 60, 60);

fn x_desc(phase: Phase) -> &'static str {
    match phase {
        Phase::Prefill => "prompt length (tokens)",
        Phase::Decode => "tokens per decode step",
    }
}

fn mark_items(marks: &[GraphMarks]) -> Vec<LegendItem> {
    marks
        .iter()
        .enumerate()
        .map(|(i, g)| LegendItem {
            sample: Sample::Line(MARK_GREY, 1.0, 1, 2 + i),
            text: format!("prepared {} graph sizes (M)", g.processor),
        })
        .collect()
}

fn figure_size(panels: usize, header: &Header) -> (u32, u32) {
    let (cols, rows) = grid(panels);
    let w = cols as u32 * PANEL.0;
    (w, header.height(w) + rows as u32 * PANEL.1)
}

fn split<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    header: &Header,
    panels: usize,
) -> anyhow::Result<Vec<DrawingArea<DB, Shift>>> {
    root.fill(&WHITE).map_err(err)?;
    let w = root.dim_in_pixel().0;
    let (top, body) = root.split_vertically(header.height(w));
    header.draw(&top)?;
    let (cols, rows) = grid(panels);
    Ok(body.split_evenly((rows, cols)))
}

fn len_range<'a>(lens: impl Iterator<Item = &'a u32>) -> (u32, u32) {
    lens.fold((u32::MAX, 0), |(a, b), l| (a.min(*l), b.max(*l)))
}

/// Where each operator runs at each length.
pub struct PartitionChart<'a> {
    /// The data.
    pub fig: &'a PartitionFigure,
    /// Header.
    pub header: Header,
}

impl<'a> PartitionChart<'a> {
    /// The chart of `fig`; `about` names the plan.
    pub fn new(fig: &'a PartitionFigure, about: &str, notes: &[String]) -> Self {
        let mut legend: Vec<LegendItem> = fig
            .kinds
            .iter()
            .map(|k| LegendItem {
                sample: Sample::Swatch(kind_colour(*k)),
                text: kind_words(*k),
            })
            .collect();
        legend.extend(fig.processors.iter().enumerate().map(|(i, p)| LegendItem {
            sample: Sample::LineMarker(INK, i, Shape::nth(i)),
            text: format!("share on {p}"),
        }));
        legend.extend(mark_items(&fig.marks));
        let mut n = vec![
            about.to_string(),
            "Share = the part of the operator's M × N output each processor computes (padding is not work). \
             Colour = the strategy the plan chose at that length; line style and marker = the processor."
                .to_string(),
        ];
        n.extend(notes.iter().cloned());
        PartitionChart {
            fig,
            header: Header {
                title: format!("Partition of every operator ({})", fig.phase),
                notes: n,
                legend,
            },
        }
    }
}

impl Figure for PartitionChart<'_> {
    fn size(&self) -> (u32, u32) {
        figure_size(self.fig.panels.len(), &self.header)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> anyhow::Result<()> {
        let f = self.fig;
        let areas = split(root, &self.header, f.panels.len())?;
        let (lo, hi) = len_range(f.panels.iter().flat_map(|p| p.data.iter().map(|s| &s.len)));
        let x = Axis::lengths(lo, hi, 7, !f.marks.is_empty() && hi >= 128);
        let y = Axis {
            log: None,
            lo: -4.0,
            hi: 128.0,
            ticks: vec![0.0, 25.0, 50.0, 75.0, 100.0],
        };
        for (p, area) in f.panels.iter().zip(&areas) {
            let mut chart = panel(
                area,
                &p.title,
                &x,
                &y,
                x_desc(f.phase),
                "share of the output (%)",
            )?;
            for (i, g) in f.marks.iter().enumerate() {
                graph_marks(&mut chart, &x, &g.sizes, 0.0, 103.0, MARK_GREY, 2 + i)?;
            }
            let dense = p.data.len() > 48;
            for (pi, _) in f.processors.iter().enumerate() {
                let pts: Vec<(f64, f64, StrategyKind)> = p
                    .data
                    .iter()
                    .map(|s| (x.t(s.len as f64), 100.0 * s.shares[pi], s.kind))
                    .collect();
                if !dense {
                    // Few lengths: a thin grey line joins them, markers carry the colour.
                    line(
                        &mut chart,
                        pts.iter().map(|p| (p.0, p.1)).collect(),
                        RGBColor(190, 190, 190).stroke_width(1),
                        pi,
                    )?;
                }
                // Runs of one strategy on the same processors without a jump
                // (10 points of share): one line each, in its colour. A
                // vertical line would claim a transition that is a switch.
                let users =
                    |i: usize| -> Vec<bool> { p.data[i].shares.iter().map(|v| *v > 0.0).collect() };
                let mut start = 0;
                while start < pts.len() {
                    let mut end = start + 1;
                    while end < pts.len()
                        && pts[end].2 == pts[start].2
                        && users(end) == users(start)
                        && (pts[end].1 - pts[end - 1].1).abs() <= 10.0
                    {
                        end += 1;
                    }
                    let run: Vec<(f64, f64)> = pts[start..end].iter().map(|p| (p.0, p.1)).collect();
                    let colour = kind_colour(pts[start].2);
                    if dense && run.len() > 1 {
                        line(&mut chart, run, colour.stroke_width(2), pi)?;
                    } else {
                        markers(&mut chart, &run, Shape::nth(pi), colour, 4)?;
                    }
                    start = end;
                }
            }
        }
        Ok(())
    }
}

/// Predicted latency of every candidate against length.
pub struct LatencyChart<'a> {
    /// The data.
    pub fig: &'a LatencyFigure,
    /// Header.
    pub header: Header,
    /// µs per unit of the y axis (1 or 1000).
    unit: (f64, &'static str),
}

impl<'a> LatencyChart<'a> {
    /// The chart of `fig`; `about` names the plan.
    pub fn new(fig: &'a LatencyFigure, about: &str, notes: &[String]) -> Self {
        let mut legend = vec![LegendItem {
            sample: Sample::Line(BLACK, 0.25, 11, 0),
            text: "chosen by the plan".into(),
        }];
        let mut n = vec![about.to_string()];
        match fig.source {
            CurveSource::Reevaluated => {
                let few = fig.panels.iter().all(|p| p.data.chosen.len() <= FEW);
                legend.extend(fig.keys.iter().map(|(key, kind, variant)| LegendItem {
                    sample: if few {
                        Sample::LineMarker(kind_colour(*kind), *variant, Shape::nth(*variant))
                    } else {
                        Sample::Line(kind_colour(*kind), 1.0, 2, *variant)
                    },
                    text: key.clone(),
                }));
                n.push(
                    "Predicted latency of one layer's worth of each operator: every candidate the solver weighs \
                     (the best split of each family), re-evaluated with the predictor the plan was solved with. \
                     Laid out like HeteroLLM Fig. 14: padding, pipe (multi-sequence cut) and tensor partition against length."
                        .into(),
                );
            }
            CurveSource::Stored => {
                let mut kinds: Vec<StrategyKind> = fig
                    .panels
                    .iter()
                    .flat_map(|p| p.data.chosen.iter().chain(&p.data.runner_up).map(|c| c.2))
                    .collect();
                kinds.sort_by_key(|k| kind_index(*k));
                kinds.dedup();
                legend.extend(kinds.iter().map(|k| LegendItem {
                    sample: Sample::Swatch(kind_colour(*k)),
                    text: kind_words(*k),
                }));
                legend.push(LegendItem {
                    sample: Sample::Marker(INK, Shape::Cross),
                    text: "runner-up stored in the plan".into(),
                });
                n.push(
                    "From the plan alone: the chosen strategy (line, coloured by family) and the runner-up it stores (×). \
                     Give --predictor and --model (the files the plan was solved with) to draw every candidate."
                        .into(),
                );
            }
        }
        legend.extend(mark_items(&fig.marks));
        n.extend(notes.iter().cloned());
        let top = fig
            .panels
            .iter()
            .flat_map(|p| {
                p.data.chosen.iter().map(|c| c.1).chain(
                    p.data
                        .curves
                        .iter()
                        .flat_map(|c| c.runs.iter().flatten().map(|q| q.1)),
                )
            })
            .filter(|v| v.is_finite())
            .fold(0.0, f64::max);
        let unit = if top >= 1e5 {
            (1e3, "ms")
        } else {
            (1.0, "µs")
        };
        LatencyChart {
            fig,
            header: Header {
                title: match fig.source {
                    CurveSource::Reevaluated => {
                        format!("Predicted latency of each candidate ({})", fig.phase)
                    }
                    CurveSource::Stored => format!(
                        "Predicted latency of the chosen strategy and the runner-up ({})",
                        fig.phase
                    ),
                },
                notes: n,
                legend,
            },
            unit,
        }
    }
}

impl Figure for LatencyChart<'_> {
    fn size(&self) -> (u32, u32) {
        figure_size(self.fig.panels.len(), &self.header)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> anyhow::Result<()> {
        let f = self.fig;
        let areas = split(root, &self.header, f.panels.len())?;
        let (lo, hi) = len_range(
            f.panels
                .iter()
                .flat_map(|p| p.data.chosen.iter().map(|c| &c.0)),
        );
        let x = Axis::lengths(lo, hi, 7, !f.marks.is_empty() && hi >= 128);
        let u = self.unit.0;
        let y_desc = format!("latency, one layer ({})", self.unit.1);
        for (p, area) in f.panels.iter().zip(&areas) {
            let d = &p.data;
            let vals = d
                .chosen
                .iter()
                .map(|c| c.1)
                .chain(d.runner_up.iter().map(|c| c.1))
                .chain(
                    d.curves
                        .iter()
                        .flat_map(|c| c.runs.iter().flatten().map(|q| q.1)),
                )
                .filter(|v| v.is_finite() && *v > 0.0)
                .map(|v| v / u);
            let (vlo, vhi) = vals.fold((f64::INFINITY, 0.0f64), |(a, b), v| (a.min(v), b.max(v)));
            let y = Axis::values(vlo, vhi, 7, 0.14);
            let data_top = if y.log.is_some() {
                vhi * 1.25
            } else {
                vhi * 1.08
            };
            let mut chart = panel(area, &p.title, &x, &y, x_desc(f.phase), &y_desc)?;
            for (i, g) in f.marks.iter().enumerate() {
                graph_marks(
                    &mut chart,
                    &x,
                    &g.sizes,
                    y.t(y.lo),
                    y.t(data_top),
                    MARK_GREY,
                    2 + i,
                )?;
            }
            let few = d.chosen.len() <= FEW;
            let pt = |l: u32, v: f64| (x.t(l as f64), y.t(v / u));
            // With few lengths, candidates equal at one length would hide
            // each other: each is moved sideways by its own few pixels.
            let unit_px = {
                let (a, b) = (x.t(x.lo), x.t(x.hi));
                let span = chart.backend_coord(&(b, 0.0)).0 - chart.backend_coord(&(a, 0.0)).0;
                (b - a) / f64::from(span.max(1))
            };
            let n = d.curves.len() as f64;
            let dodge = |i: usize| -> f64 {
                if few {
                    (i as f64 - (n - 1.0) / 2.0) * 8.0 * unit_px
                } else {
                    0.0
                }
            };
            let chosen: Vec<(f64, f64)> = d.chosen.iter().map(|c| pt(c.0, c.1)).collect();
            line(
                &mut chart,
                chosen.clone(),
                BLACK.mix(0.25).stroke_width(11),
                0,
            )?;
            if few {
                // The halo sits on the candidate that is the choice.
                let halos = d.chosen.iter().map(|c| {
                    let i = d.curves.iter().position(|cv| {
                        // Plans store costs to 0.01 µs.
                        cv.runs
                            .iter()
                            .flatten()
                            .any(|q| q.0 == c.0 && (q.1 - c.1).abs() <= 0.01 + 1e-6 * c.1.abs())
                    });
                    let (px, py) = pt(c.0, c.1);
                    Circle::new((px + i.map_or(0.0, dodge), py), 9, BLACK.mix(0.25).filled())
                });
                chart.draw_series(halos).map_err(err)?;
            }
            for (i, c) in d.curves.iter().enumerate() {
                let colour = kind_colour(c.kind);
                for run in &c.runs {
                    let pts: Vec<(f64, f64)> = run
                        .iter()
                        .map(|q| {
                            let (px, py) = pt(q.0, q.1);
                            (px + dodge(i), py)
                        })
                        .collect();
                    line(&mut chart, pts.clone(), colour.stroke_width(2), c.variant)?;
                    if few || pts.len() == 1 {
                        markers(&mut chart, &pts, Shape::nth(c.variant), colour, 3)?;
                    }
                }
            }
            if f.source == CurveSource::Stored {
                let mut start = 0;
                while start < d.chosen.len() {
                    let mut end = start + 1;
                    while end < d.chosen.len() && d.chosen[end].2 == d.chosen[start].2 {
                        end += 1;
                    }
                    let colour = kind_colour(d.chosen[start].2);
                    let run = chosen[start..end].to_vec();
                    if run.len() > 1 && !few {
                        line(&mut chart, run, colour.stroke_width(2), 0)?;
                    } else {
                        markers(&mut chart, &run, Shape::Circle, colour, 3)?;
                    }
                    start = end;
                }
                // One cross every 6 pixels at most, so they stay crosses.
                let mut last_px = i32::MIN;
                for r in &d.runner_up {
                    let p = pt(r.0, r.1);
                    let px = chart.backend_coord(&p).0;
                    if px.saturating_sub(last_px) < 6 {
                        continue;
                    }
                    last_px = px;
                    markers(&mut chart, &[p], Shape::Cross, kind_colour(r.2), 3)?;
                }
            }
        }
        Ok(())
    }
}

/// A runtime report: each operator's and part's predicted against measured time.
pub struct RunScatter<'a> {
    /// The report.
    pub report: &'a RunReport,
    /// Header.
    pub header: Header,
    processors: Vec<(String, String)>,
}

impl<'a> RunScatter<'a> {
    /// The chart of `report`.
    pub fn new(report: &'a RunReport) -> Self {
        let mut processors: Vec<(String, String)> = report
            .per_op
            .iter()
            .flat_map(|o| {
                o.parts
                    .iter()
                    .map(|p| (p.processor.clone(), p.timing.clone()))
            })
            .collect();
        processors.sort();
        processors.dedup_by(|a, b| a.0 == b.0);
        let mut legend = diagonal_legend();
        legend.push(LegendItem {
            sample: Sample::Ring(BLACK),
            text: "operator (all its parts, one layer)".into(),
        });
        legend.extend(processors.iter().enumerate().map(|(i, (p, t))| LegendItem {
            sample: Sample::Marker(PALETTE[i % PALETTE.len()], Shape::nth(i + 1)),
            text: format!("part on {p} ({})", timing_words(t)),
        }));
        let within = report
            .per_op
            .iter()
            .filter(|o| (o.measured_us / o.predicted_us - 1.0).abs() <= 0.1)
            .count();
        let mut notes = vec![
            format!(
                "plan {} · model {} · {} at length {}",
                report.plan, report.model, report.phase, report.len
            ),
            format!(
                "Whole {}: predicted {:.1} µs, measured {:.1} µs (measured / predicted = {:.2}); {} of {} operators within ±10 %.",
                if report.phase == "decode" {
                    "step"
                } else {
                    "pass"
                },
                report.predicted_us,
                report.measured_us,
                report.measured_us / report.predicted_us,
                within,
                report.per_op.len()
            ),
        ];
        if report.timing != "measured" && report.timing != "real" {
            notes.push(format!(
                "Timing: {} — some parts are not hardware latencies (see each part's label).",
                report.timing.to_uppercase()
            ));
        }
        RunScatter {
            report,
            header: Header {
                title: "Runtime report: predicted against measured".into(),
                notes,
                legend,
            },
            processors,
        }
    }
}

fn timing_words(t: &str) -> String {
    match t {
        "real" | "measured" => "real".into(),
        other => other.to_uppercase(),
    }
}

impl Figure for RunScatter<'_> {
    fn size(&self) -> (u32, u32) {
        (960, self.header.height(960) + 640)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> anyhow::Result<()> {
        let r = self.report;
        root.fill(&WHITE).map_err(err)?;
        let (top, body) = root.split_vertically(self.header.height(root.dim_in_pixel().0));
        self.header.draw(&top)?;
        let ok = |v: f64| v.is_finite() && v > 0.0;
        let pairs = r
            .per_op
            .iter()
            .map(|o| (o.measured_us, o.predicted_us))
            .chain(
                r.per_op
                    .iter()
                    .flat_map(|o| o.parts.iter().map(|p| (p.measured_us, p.predicted_us))),
            )
            .filter(|(m, p)| ok(*m) && ok(*p));
        let (lo, hi) = pairs
            .flat_map(|(m, p)| [m, p])
            .fold((f64::INFINITY, 0.0f64), |(a, b), v| (a.min(v), b.max(v)));
        let a = Axis::values(lo, hi * 1.1, 9, 0.0);
        let mut chart = panel(
            &body,
            &format!("{} at length {}", r.phase, r.len),
            &a,
            &a,
            "measured latency (µs)",
            "predicted latency (µs)",
        )?;
        diagonal_bands(&mut chart, &a)?;
        for (i, (proc_id, _)) in self.processors.iter().enumerate() {
            let pts: Vec<(f64, f64)> = r
                .per_op
                .iter()
                .flat_map(|o| o.parts.iter())
                .filter(|p| &p.processor == proc_id && ok(p.measured_us) && ok(p.predicted_us))
                .map(|p| (a.t(p.measured_us), a.t(p.predicted_us)))
                .collect();
            markers(
                &mut chart,
                &pts,
                Shape::nth(i + 1),
                PALETTE[i % PALETTE.len()],
                4,
            )?;
        }
        let ops: Vec<(f64, f64, &str)> = r
            .per_op
            .iter()
            .filter(|o| ok(o.measured_us) && ok(o.predicted_us))
            .map(|o| (a.t(o.measured_us), a.t(o.predicted_us), o.op.as_str()))
            .collect();
        // Rings, so a part's marker inside stays visible (one-part operators).
        chart
            .draw_series(
                ops.iter()
                    .map(|o| Circle::new((o.0, o.1), 7, BLACK.stroke_width(2))),
            )
            .map_err(err)?;
        // Operator names beside their points, where they overlap nothing.
        let mut placer = Placer::default();
        for (x, y, _) in &ops {
            let (px, py) = chart.backend_coord(&(*x, *y));
            placer.take(px - 5, py - 5, 10, 10);
        }
        for (x, y, name) in &ops {
            let (w, h) = text_size(name, 13);
            let (w, h) = (w as i32, h as i32);
            let (px, py) = chart.backend_coord(&(*x, *y));
            // Clear of the point's own box (±5 px, kept 2 px apart).
            for (dx, dy) in [(10, -h - 8), (10, 8), (-w - 10, -h - 8), (-w - 10, 8)] {
                if placer.take(px + dx, py + dy, w, h) {
                    chart
                        .draw_series(std::iter::once(
                            EmptyElement::at((*x, *y))
                                + Text::new(name.to_string(), (dx, dy), ("sans-serif", 13)),
                        ))
                        .map_err(err)?;
                    break;
                }
            }
        }
        Ok(())
    }
}
