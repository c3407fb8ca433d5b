//! Overhead constants from the microbenchmark rows.

use std::collections::BTreeMap;

use hetero_plan::predictor::gemm_bytes;
use hetero_plan::{
    DType, GemmShape, LinearCost, MEAN_ROWS_MIN, MeasurementRow, MicrobenchKind, MicrobenchRow,
    Overheads, Processor, RowStatus, StageSmall, Stats,
};

use super::line::relative_line;

/// The median of the values, through the crate-wide [`Stats`].
fn median(v: Vec<f64>) -> Option<f64> {
    Stats::from_samples(&v).map(|s| s.median_us)
}

/// A point this far off the line (relative residual) is left out of a
/// cost line fitted through five or more points.
pub const OUTLIER_REL: f64 = 0.5;

/// `alpha + beta·bytes` through `(bytes, µs)` points (see [`relative_line`]).
/// With five or more points, the one furthest from the line is left out
/// and the line refitted when it is more than [`OUTLIER_REL`] off (one
/// median that caught a transient stall would otherwise set the fixed cost
/// alone). `None` with fewer than two distinct sizes.
pub fn fit_linear_cost(points: &[(f64, f64)]) -> Option<LinearCost> {
    let mut line = relative_line(points)?;
    if points.len() >= 5 {
        let off = |&(x, t): &(f64, f64)| ((line.alpha + line.beta * x - t) / t).abs();
        let (worst, err) = points
            .iter()
            .enumerate()
            .map(|(i, p)| (i, off(p)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .expect("five points");
        if err > OUTLIER_REL {
            let rest: Vec<(f64, f64)> = points
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != worst)
                .map(|(_, p)| *p)
                .collect();
            line = relative_line(&rest)?;
        }
    }
    Some(LinearCost {
        alpha_us: line.alpha,
        beta_us_per_byte: line.beta,
    })
}

/// Fits copy α+β·n, submit and sync constants, graph prepare α+β·bytes,
/// the concurrent-bandwidth factor and the host's speed probe, per
/// processor.
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
            let ok_rows: Vec<&MeasurementRow> = rows
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
            // One point per size: the median over the agent processes that
            // measured it (`design::MICRO_PROCESSES`).
            let points = |kind: MicrobenchKind| -> Vec<(f64, f64)> {
                let mut by_size: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
                for r in ok.iter().filter(|r| r.bench == kind) {
                    if let (Some(b), Some(s)) = (r.bytes, r.stats)
                        && s.median_us.is_finite()
                        && s.median_us > 0.0
                    {
                        by_size.entry(b).or_default().push(s.median_us);
                    }
                }
                by_size
                    .into_iter()
                    .filter_map(|(b, t)| Some((b as f64, median(t)?)))
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
            // Prepare cost against the bytes the graph moves (activations
            // and weights, each in its dtype's size), from the prepare times
            // that measurement rows carry and from graph-prepare rows, whose
            // graphs are f16 (the agents' `graph_prepare`).
            let mut prep: Vec<(f64, f64)> = ok_rows
                .iter()
                .filter_map(|r| {
                    let shape = GemmShape::new(r.m, r.k, r.n)?;
                    r.prepare_us.map(|t| (gemm_bytes(shape, r.dtype), t))
                })
                .collect();
            prep.extend(
                ok.iter()
                    .filter(|r| r.bench == MicrobenchKind::GraphPrepare)
                    .filter_map(|r| Some((gemm_bytes(r.shape?, DType::F16), r.stats?.median_us))),
            );
            // The host's speed over the whole profile of this processor.
            let probes: Vec<f64> = ok_rows
                .iter()
                .filter_map(|r| r.conditions.host_probe_us)
                .chain(ok.iter().filter_map(|r| r.conditions.host_probe_us))
                .filter(|t| t.is_finite() && *t > 0.0)
                .collect();
            // How far its GEMM runs' means sit above their medians: the
            // median of the rows' ratios. A row's handful of runs gives a
            // noisy mean, and summed means over summed medians followed
            // the few longest rows (docs/decisions.md, Runtime).
            let ratios: Vec<f64> = ok_rows
                .iter()
                .filter_map(|r| Some(r.mean_us? / r.median_us?))
                .filter(|f| f.is_finite() && *f > 0.0)
                .collect();
            let mean_over_median = if ratios.len() >= MEAN_ROWS_MIN {
                median(ratios)
            } else {
                None
            };
            // Sizes that cross inside the launch are host copies: a line
            // of their own, the others' lines from the larger sizes only.
            let small = p.capabilities.launch_copy_max_bytes;
            let staged = |kind: MicrobenchKind, below: bool| -> Option<LinearCost> {
                let pts: Vec<(f64, f64)> = points(kind)
                    .into_iter()
                    .filter(|&(b, _)| small.is_none_or(|max| (b <= max as f64) == below))
                    .collect();
                fit_linear_cost(&pts)
            };
            let stage_small = small.map(|max_bytes| StageSmall {
                max_bytes,
                stage_in: staged(MicrobenchKind::StageIn, true),
                stage_out: staged(MicrobenchKind::StageOut, true),
                stage_out_aw: staged(MicrobenchKind::StageOutAw, true),
            });
            // The operator overhead with the wait the solver plans for
            // (polling where measured), and the blocking one beside it.
            // Older profiles measured both waits in one row.
            let poll = median(medians(MicrobenchKind::OpOverheadPoll));
            let block = median(medians(MicrobenchKind::OpOverheadBlock));
            let op_overhead_us = poll
                .or(block)
                .or_else(|| median(medians(MicrobenchKind::OpOverhead)));
            let op_overhead_block_us = poll.and(block);
            let alone = gbps(MicrobenchKind::BandwidthAlone);
            let together = gbps(MicrobenchKind::BandwidthConcurrent);
            Overheads {
                processor: p.id.clone(),
                copy_h2d: fit_linear_cost(&points(MicrobenchKind::CopyH2d)),
                copy_d2h: fit_linear_cost(&points(MicrobenchKind::CopyD2h)),
                stage_in: staged(MicrobenchKind::StageIn, false),
                stage_out: staged(MicrobenchKind::StageOut, false),
                stage_out_aw: staged(MicrobenchKind::StageOutAw, false),
                stage_small,
                op_overhead_us,
                op_overhead_block_us,
                launch_overhead_after_cpu_us: median(medians(
                    MicrobenchKind::LaunchOverheadAfterCpu,
                )),
                submit_empty_us: median(medians(MicrobenchKind::SubmitEmpty)),
                submit_busy_us: median(medians(MicrobenchKind::SubmitBusy)),
                sync_block_us: median(medians(MicrobenchKind::SyncBlock)),
                sync_poll_us: median(medians(MicrobenchKind::SyncPoll)),
                prepare: fit_linear_cost(&prep),
                bandwidth_gbps: alone,
                concurrent_factor: alone.zip(together).map(|(a, t)| t / a),
                host_probe_us: median(probes),
                mean_over_median,
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

    /// A `cuda:0` row of `bench` with one sample of `us`.
    fn micro_row(id: &str, bench: MicrobenchKind, bytes: Option<u64>, us: f64) -> MicrobenchRow {
        MicrobenchRow {
            case_id: id.into(),
            processor: "cuda:0".into(),
            bench,
            bytes,
            peer: None,
            shape: None,
            status: RowStatus::Ok,
            timing: hetero_plan::Timing::Real,
            stats: Stats::from_samples(&[us]),
            gbps: None,
            stream: None,
            peer_stream: None,
            message: None,
            conditions: Default::default(),
        }
    }

    fn gpu() -> Processor {
        Processor {
            id: "cuda:0".into(),
            kind: hetero_plan::ProcessorKind::Gpu,
            api: hetero_plan::ProcessorApi::Cuda,
            name: "a GPU".into(),
            driver: String::new(),
            capabilities: Default::default(),
            simulated: false,
            emulated: false,
        }
    }

    #[test]
    fn each_size_takes_the_median_over_its_processes() {
        // Three agent processes measured 4 and 64 KiB: one ran the host
        // path 60 % slower. Two large sizes were measured once. The same
        // for the staged input and output.
        for bench in [MicrobenchKind::StageIn, MicrobenchKind::StageOut] {
            let row = |id: &str, bytes: u64, us: f64| micro_row(id, bench, Some(bytes), us);
            let line = |b: f64| 10.0 + b / 20_000.0;
            let mut micro = Vec::new();
            for (round, slow) in [("", 1.0), ("@2", 1.6), ("@3", 1.0)] {
                for b in [4096u64, 65536] {
                    micro.push(row(&format!("s/{b}{round}"), b, slow * line(b as f64)));
                }
            }
            for b in [1u64 << 20, 16 << 20] {
                micro.push(row(&format!("s/{b}"), b, line(b as f64)));
            }
            let o = &fit_overheads(&[gpu()], &[], &micro)[0];
            let (c, other) = match bench {
                MicrobenchKind::StageIn => (o.stage_in, o.stage_out),
                _ => (o.stage_out, o.stage_in),
            };
            let c = c.expect("a line");
            assert!((c.alpha_us - 10.0).abs() < 1e-6, "{bench:?}: {c:?}");
            assert!((c.beta_us_per_byte * 20_000.0 - 1.0).abs() < 1e-6);
            assert_eq!(other, None, "{bench:?} fits its own line only");
        }
    }

    #[test]
    fn rows_of_a_retired_benchmark_change_nothing() {
        let line = |b: u64| 10.0 + b as f64 / 20_000.0;
        let staged: Vec<MicrobenchRow> = [4096u64, 65536]
            .map(|b| micro_row(&format!("s/{b}"), MicrobenchKind::StageIn, Some(b), line(b)))
            .to_vec();
        let mut with_old = staged.clone();
        with_old.push(micro_row(
            "o/8192",
            MicrobenchKind::Retired,
            Some(8192),
            31.0,
        ));
        with_old.push(micro_row(
            "o/65536",
            MicrobenchKind::Retired,
            Some(65536),
            45.0,
        ));
        assert_eq!(
            fit_overheads(&[gpu()], &[], &with_old),
            fit_overheads(&[gpu()], &[], &staged)
        );
    }

    #[test]
    fn sizes_that_cross_inside_the_launch_get_lines_of_their_own() {
        // Host copies up to 64 KiB (1 µs + 10 GB/s), a DMA and a wait past
        // it (8 µs + 50 GB/s).
        let host = |b: f64| 1.0 + b / 10_000.0;
        let dma = |b: f64| 8.0 + b / 50_000.0;
        let sizes = [4u64 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 16 << 20];
        let mut micro = Vec::new();
        for bench in [
            MicrobenchKind::StageIn,
            MicrobenchKind::StageOut,
            MicrobenchKind::StageOutAw,
        ] {
            for b in sizes {
                let t = if b <= 64 << 10 {
                    host(b as f64)
                } else {
                    dma(b as f64)
                };
                micro.push(micro_row(&format!("{bench:?}/{b}"), bench, Some(b), t));
            }
        }
        let mut p = gpu();
        p.capabilities.launch_copy_max_bytes = Some(64 << 10);
        let o = &fit_overheads(&[p], &[], &micro)[0];
        let small = o
            .stage_small
            .expect("the processor copies inside its launch");
        assert_eq!(small.max_bytes, 64 << 10);
        let close = |c: Option<LinearCost>, alpha: f64, gbps: f64| {
            let c = c.expect("a line");
            assert!((c.alpha_us - alpha).abs() < 1e-6, "{c:?}");
            assert!(
                (c.beta_us_per_byte * gbps * 1e3 - 1.0).abs() < 1e-6,
                "{c:?}"
            );
        };
        for c in [small.stage_in, small.stage_out, small.stage_out_aw] {
            close(c, 1.0, 10.0);
        }
        for c in [o.stage_in, o.stage_out, o.stage_out_aw] {
            close(c, 8.0, 50.0);
        }
        // Without the capability, one line over every size, as before.
        let o = &fit_overheads(&[gpu()], &[], &micro)[0];
        assert_eq!(o.stage_small, None);
        let one = o.stage_in.expect("a line");
        assert!(one.alpha_us < 8.0 && one.alpha_us > 1.0, "{one:?}");
    }

    #[test]
    fn the_operator_overhead_is_the_median_over_its_processes() {
        let row = |id: &str, us: f64| micro_row(id, MicrobenchKind::OpOverhead, None, us);
        let micro = [
            row("o", 7.0),
            row("o@2", 11.0),
            row("o@3", 7.4),
            row("o@4", 7.2),
        ];
        let o = &fit_overheads(&[gpu()], &[], &micro)[0];
        // One slow process (11 µs) does not move it: (7.2 + 7.4) / 2.
        assert!((o.op_overhead_us.unwrap() - 7.3).abs() < 1e-9, "{o:?}");
        assert_eq!(fit_overheads(&[gpu()], &[], &[])[0].op_overhead_us, None);
        assert_eq!(o.op_overhead_block_us, None);
    }

    #[test]
    fn the_operator_overhead_is_kept_per_wait() {
        let row = |id: &str, kind, us: f64| micro_row(id, kind, None, us);
        let (b, p, mixed) = (
            MicrobenchKind::OpOverheadBlock,
            MicrobenchKind::OpOverheadPoll,
            MicrobenchKind::OpOverhead,
        );
        let after = MicrobenchKind::LaunchOverheadAfterCpu;
        let micro = [
            row("b", b, 7.5),
            row("b@2", b, 7.7),
            row("p", p, 5.9),
            row("p@2", p, 6.1),
            row("m", mixed, 100.0),
            row("a", after, 10.0),
            row("a@2", after, 30.0),
            row("a@3", after, 10.4),
        ];
        // Polling is what the solver plans for; blocking rides beside it.
        // The mixed row of an older profile is not read once either exists.
        let o = &fit_overheads(&[gpu()], &[], &micro)[0];
        assert!((o.op_overhead_us.unwrap() - 6.0).abs() < 1e-9, "{o:?}");
        assert!(
            (o.op_overhead_block_us.unwrap() - 7.6).abs() < 1e-9,
            "{o:?}"
        );
        // After the CPU's runs: its own row, the median over the processes.
        assert!(
            (o.launch_overhead_after_cpu_us.unwrap() - 10.4).abs() < 1e-9,
            "{o:?}"
        );
        // A processor measured blocking only (no host flag): that one, and
        // no second figure.
        let o = &fit_overheads(&[gpu()], &[], &[micro[0].clone(), micro[4].clone()])[0];
        assert_eq!(
            (
                o.op_overhead_us,
                o.op_overhead_block_us,
                o.launch_overhead_after_cpu_us
            ),
            (Some(7.5), None, None)
        );
    }

    #[test]
    fn one_stalled_point_does_not_set_the_fixed_cost() {
        // The profile's six sizes on a 7 µs + 55 GB/s line, the 4 KiB median
        // three times too slow (as one H100 profile's stage_out_aw was).
        let line = |b: f64| 7.0 + b / 55_000.0;
        let mut pts: Vec<(f64, f64)> =
            [4096.0, 65536.0, 262144.0, 1048576.0, 16777216.0, 67108864.0]
                .iter()
                .map(|&b| (b, line(b)))
                .collect();
        pts[0].1 *= 3.0;
        let naive = relative_line(&pts).unwrap();
        assert!(naive.alpha > 8.0, "the stall moves a plain fit: {naive:?}");
        let c = fit_linear_cost(&pts).unwrap();
        assert!((c.alpha_us / 7.0 - 1.0).abs() < 1e-6, "{c:?}");
        assert!((c.beta_us_per_byte * 55_000.0 - 1.0).abs() < 1e-6);
        // Four points: too few to tell a stall from the line; kept.
        assert_eq!(
            fit_linear_cost(&pts[..4]).map(|c| c.alpha_us),
            relative_line(&pts[..4]).map(|l| l.alpha)
        );
    }
}
