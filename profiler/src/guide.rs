//! The throughput guide: a rough predictor that steers the sweep, not one
//! to plan with.
//!
//! It interpolates the *throughput* (FLOP/s) of measured shapes in
//! log₂(M, K, N) space by inverse-distance weighting of the nearest
//! neighbours, and predicts `time = flops / throughput`. Throughput varies
//! far less over shapes than time does, so even a crude interpolation of it
//! is a usable guess. Its leave-one-out error tells the sweep where the
//! measurements are too sparse (nn-Meter's adaptive sampling); the real
//! latency models are fitted later from the dataset.

use hetero_plan::GemmShape;

/// Neighbours used for a prediction.
const K_NEIGHBOURS: usize = 4;

/// One measured point.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// The shape.
    pub shape: GemmShape,
    /// Median time, µs.
    pub us: f64,
}

fn coords(s: &GemmShape) -> [f64; 3] {
    let (m, k, n) = s.mkn();
    [(m as f64).log2(), (k as f64).log2(), (n as f64).log2()]
}

fn log_throughput(p: &Point) -> f64 {
    (p.shape.flops() / p.us).ln()
}

/// Inverse-distance-weighted nearest neighbours of the throughput.
#[derive(Debug, Clone, Default)]
pub struct ThroughputGuide {
    points: Vec<([f64; 3], f64, Point)>,
}

impl ThroughputGuide {
    /// A predictor over measured points (non-positive or non-finite times
    /// are left out).
    pub fn new(points: impl IntoIterator<Item = Point>) -> ThroughputGuide {
        ThroughputGuide {
            points: points
                .into_iter()
                .filter(|p| p.us.is_finite() && p.us > 0.0)
                .map(|p| (coords(&p.shape), log_throughput(&p), p))
                .collect(),
        }
    }

    /// Points it holds.
    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// True when it holds no point.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// The predicted time of `shape`, µs; `None` without data. `skip`
    /// leaves one point out (for the held-out error).
    fn predict_skipping(&self, shape: &GemmShape, skip: Option<usize>) -> Option<f64> {
        let x = coords(shape);
        let mut near: Vec<(f64, f64)> = self
            .points
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != skip)
            .map(|(_, (c, lt, _))| {
                let d2 = (0..3).map(|j| (c[j] - x[j]).powi(2)).sum::<f64>();
                (d2, *lt)
            })
            .collect();
        if near.is_empty() {
            return None;
        }
        near.sort_by(|a, b| a.0.total_cmp(&b.0));
        near.truncate(K_NEIGHBOURS);
        if near[0].0 < 1e-12 {
            return Some(shape.flops() / near[0].1.exp());
        }
        let (mut wsum, mut acc) = (0.0, 0.0);
        for (d2, lt) in near {
            let w = 1.0 / d2;
            wsum += w;
            acc += w * lt;
        }
        Some(shape.flops() / (acc / wsum).exp())
    }

    /// The predicted time of `shape`, µs; `None` without data.
    pub fn predict(&self, shape: &GemmShape) -> Option<f64> {
        self.predict_skipping(shape, None)
    }

    /// Leave-one-out relative error of every point: the point predicted from
    /// all the others, `|predicted − measured| / measured`. Empty with fewer
    /// than two points.
    pub fn held_out(&self) -> Vec<(Point, f64)> {
        if self.points.len() < 2 {
            return Vec::new();
        }
        self.points
            .iter()
            .enumerate()
            .filter_map(|(i, (_, _, p))| {
                let pred = self.predict_skipping(&p.shape, Some(i))?;
                Some((*p, (pred - p.us).abs() / p.us))
            })
            .collect()
    }

    /// The `k` nearest measured shapes to `shape` (excluding itself).
    pub fn neighbours(&self, shape: &GemmShape, k: usize) -> Vec<GemmShape> {
        let x = coords(shape);
        let mut v: Vec<(f64, GemmShape)> = self
            .points
            .iter()
            .filter(|(_, _, p)| p.shape != *shape)
            .map(|(c, _, p)| ((0..3).map(|j| (c[j] - x[j]).powi(2)).sum::<f64>(), p.shape))
            .collect();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v.into_iter().take(k).map(|(_, s)| s).collect()
    }
}

/// Summary of held-out errors.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct HeldOut {
    /// Points evaluated.
    pub points: usize,
    /// Median relative error.
    pub median: f64,
    /// Share of points above the refinement threshold.
    pub above: f64,
}

impl HeldOut {
    /// Summarises leave-one-out errors against `threshold`.
    pub fn of(errors: &[f64], threshold: f64) -> HeldOut {
        if errors.is_empty() {
            return HeldOut::default();
        }
        let mut e = errors.to_vec();
        e.sort_by(f64::total_cmp);
        HeldOut {
            points: e.len(),
            median: e[e.len() / 2],
            above: e.iter().filter(|&&x| x > threshold).count() as f64 / e.len() as f64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(m: u32, k: u32, n: u32) -> GemmShape {
        GemmShape::new(m, k, n).unwrap()
    }

    #[test]
    fn constant_throughput_is_predicted_exactly() {
        // 1 GFLOP/s everywhere: time = flops / 1e3 µs.
        let pts = [
            (1, 64, 64),
            (8, 256, 256),
            (64, 1024, 512),
            (512, 512, 4096),
        ]
        .map(|(m, k, n)| {
            let s = shape(m, k, n);
            Point {
                shape: s,
                us: s.flops() / 1e3,
            }
        });
        let q = ThroughputGuide::new(pts);
        let s = shape(32, 300, 700);
        let p = q.predict(&s).unwrap();
        assert!((p - s.flops() / 1e3).abs() / p < 1e-9);
        assert!(q.held_out().iter().all(|(_, e)| *e < 1e-9));
    }

    #[test]
    fn a_step_shows_up_as_held_out_error() {
        // Throughput jumps tenfold above m = 64: points near the step are
        // badly predicted from the other side.
        let mut pts = Vec::new();
        for m in [1, 2, 4, 8, 16, 32, 64, 128, 256, 512] {
            let s = shape(m, 512, 512);
            let tput = if m > 64 { 10e3 } else { 1e3 };
            pts.push(Point {
                shape: s,
                us: s.flops() / tput,
            });
        }
        let q = ThroughputGuide::new(pts);
        let errs = q.held_out();
        let worst = errs.iter().max_by(|a, b| a.1.total_cmp(&b.1)).unwrap();
        assert!(worst.1 > 0.5, "{errs:?}");
        let m = worst.0.shape.m.get();
        assert!(m == 64 || m == 128, "{m}");
        let h = HeldOut::of(&errs.iter().map(|e| e.1).collect::<Vec<_>>(), 0.1);
        assert!(h.above > 0.0 && h.above < 1.0);
        assert!(q.predict(&shape(1, 1, 1)).is_some());
        assert!(
            ThroughputGuide::default()
                .predict(&shape(1, 1, 1))
                .is_none()
        );
    }
}
