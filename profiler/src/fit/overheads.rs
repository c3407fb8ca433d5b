//! Overhead constants from the microbenchmark rows.

use hetero_plan::{
    LinearCost, MeasurementRow, MicrobenchKind, MicrobenchRow, Overheads, Processor, RowStatus,
};

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    })
}

/// Relative least squares fit of `alpha + beta·x` through `(x, t)` points,
/// with alpha kept non-negative. `None` with fewer than two distinct x.
pub fn fit_linear_cost(points: &[(f64, f64)]) -> Option<LinearCost> {
    let distinct = points
        .iter()
        .map(|p| p.0.to_bits())
        .collect::<std::collections::HashSet<_>>();
    if distinct.len() < 2 {
        return None;
    }
    let (mut s00, mut s01, mut s11, mut b0, mut b1) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for &(x, t) in points {
        let q = 1.0 / (t * t);
        s00 += q;
        s01 += q * x;
        s11 += q * x * x;
        b0 += q * t;
        b1 += q * x * t;
    }
    let det = s00 * s11 - s01 * s01;
    let mut a = (b0 * s11 - b1 * s01) / det;
    let mut b = (s00 * b1 - s01 * b0) / det;
    if a < 0.0 {
        a = 0.0;
        b = b1 / s11;
    }
    if b < 0.0 {
        b = 0.0;
        a = b0 / s00;
    }
    (a.is_finite() && b.is_finite()).then_some(LinearCost {
        alpha_us: a,
        beta_us_per_byte: b,
    })
}

/// Fits copy α+β·n, submit and sync constants, graph prepare α+β·bytes and
/// the concurrent-bandwidth factor, per processor.
pub fn fit_overheads(
    processors: &[Processor],
    rows: &[MeasurementRow],
    micro: &[MicrobenchRow],
) -> Vec<Overheads> {
    processors
        .iter()
        .map(|p| {
            let ok: Vec<&MicrobenchRow> = micro
                .iter()
                .filter(|r| r.processor == p.id && r.status == RowStatus::Ok)
                .collect();
            let medians = |kind: MicrobenchKind| -> Vec<f64> {
                ok.iter()
                    .filter(|r| r.bench == kind)
                    .filter_map(|r| r.stats.map(|s| s.median_us))
                    .filter(|t| t.is_finite() && *t > 0.0)
                    .collect()
            };
            let points = |kind: MicrobenchKind| -> Vec<(f64, f64)> {
                ok.iter()
                    .filter(|r| r.bench == kind)
                    .filter_map(|r| Some((r.bytes? as f64, r.stats?.median_us)))
                    .filter(|(_, t)| t.is_finite() && *t > 0.0)
                    .collect()
            };
            let gbps = |kind: MicrobenchKind| {
                median(
                    ok.iter()
                        .filter(|r| r.bench == kind)
                        .filter_map(|r| r.gbps)
                        .collect(),
                )
            };
            // Prepare cost against weight bytes, from graph-prepare rows and
            // from the prepare times that measurement rows carry.
            let mut prep: Vec<(f64, f64)> = rows
                .iter()
                .filter(|r| r.processor == p.id && r.status == RowStatus::Ok)
                .filter_map(|r| {
                    let bytes = r.k as f64 * r.n as f64 * r.dtype.weight_bits() as f64 / 8.0;
                    r.prepare_us.map(|t| (bytes, t))
                })
                .collect();
            prep.extend(
                ok.iter()
                    .filter(|r| r.bench == MicrobenchKind::GraphPrepare)
                    .filter_map(|r| {
                        let s = r.shape?;
                        Some((
                            s.k.get() as f64 * s.n.get() as f64 * 2.0,
                            r.stats?.median_us,
                        ))
                    }),
            );
            let alone = gbps(MicrobenchKind::BandwidthAlone);
            let together = gbps(MicrobenchKind::BandwidthConcurrent);
            Overheads {
                processor: p.id.clone(),
                copy_h2d: fit_linear_cost(&points(MicrobenchKind::CopyH2d)),
                copy_d2h: fit_linear_cost(&points(MicrobenchKind::CopyD2h)),
                submit_empty_us: median(medians(MicrobenchKind::SubmitEmpty)),
                submit_busy_us: median(medians(MicrobenchKind::SubmitBusy)),
                sync_block_us: median(medians(MicrobenchKind::SyncBlock)),
                sync_poll_us: median(medians(MicrobenchKind::SyncPoll)),
                prepare: fit_linear_cost(&prep),
                bandwidth_gbps: alone,
                concurrent_factor: alone.zip(together).map(|(a, t)| t / a),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_cost_recovers_exact_line() {
        let pts: Vec<(f64, f64)> = [4096.0, 65536.0, 1048576.0, 16777216.0]
            .iter()
            .map(|&b| (b, 7.0 + b / 55_000.0))
            .collect();
        let c = fit_linear_cost(&pts).unwrap();
        assert!((c.alpha_us - 7.0).abs() < 1e-6, "{c:?}");
        assert!((c.beta_us_per_byte - 1.0 / 55_000.0).abs() < 1e-12);
        assert!(fit_linear_cost(&pts[..1]).is_none());
    }
}
