//! Overhead constants from the microbenchmark rows.

use hetero_plan::{
    LinearCost, MeasurementRow, MicrobenchKind, MicrobenchRow, Overheads, Processor, RowStatus,
    Stats,
};

use super::line::relative_line;

/// The median of the values, through the crate-wide [`Stats`].
fn median(v: Vec<f64>) -> Option<f64> {
    Stats::from_samples(&v).map(|s| s.median_us)
}

/// `alpha + beta·bytes` through `(bytes, µs)` points (see [`relative_line`]).
/// `None` with fewer than two distinct sizes.
pub fn fit_linear_cost(points: &[(f64, f64)]) -> Option<LinearCost> {
    relative_line(points).map(|l| LinearCost {
        alpha_us: l.alpha,
        beta_us_per_byte: l.beta,
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
                stage_in: fit_linear_cost(&points(MicrobenchKind::StageIn)),
                stage_out: fit_linear_cost(&points(MicrobenchKind::StageOut)),
                stage_out_aw: fit_linear_cost(&points(MicrobenchKind::StageOutAw)),
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
    fn linear_cost_maps_the_line() {
        let pts: Vec<(f64, f64)> = [4096.0, 1048576.0]
            .iter()
            .map(|&b| (b, 7.0 + b / 55_000.0))
            .collect();
        let c = fit_linear_cost(&pts).unwrap();
        assert!((c.alpha_us - 7.0).abs() < 1e-6, "{c:?}");
        assert!((c.beta_us_per_byte - 1.0 / 55_000.0).abs() < 1e-12);
        assert!(fit_linear_cost(&pts[..1]).is_none());
        assert_eq!(median(vec![3.0, 1.0, 2.0, 10.0]), Some(2.5));
        assert_eq!(median(vec![]), None);
    }
}
