//! Tests of the CUDA backend. Where libcuda or a device is absent they
//! check the error and print why the device tests were skipped.

use hetero_plan::{GemmShape, MicrobenchKind, OperandOrder, WeightMode};

use super::*;
use crate::{SyncMode, default_tolerance};

/// The opened devices, or `None` after printing why there are none.
fn devices_or_skip(test: &str) -> Option<Vec<Box<dyn Backend>>> {
    match open(&OpenOptions::default()) {
        Ok(list) => Some(list),
        Err(e @ Error::Library { .. }) => {
            eprintln!("skipping {test}: {e}");
            None
        }
        Err(e @ Error::Backend { .. }) => {
            eprintln!("skipping {test}: no usable CUDA device: {e}");
            None
        }
        Err(e) => panic!("{test}: unexpected error opening CUDA: {e}"),
    }
}

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Largest |c − ref| over all outputs, relative to the largest |ref|.
fn rel_err(a: &[f32], w: &[f32], c: &[f32], m: usize, k: usize, n: usize) -> f64 {
    let (mut err, mut scale) = (0f64, 0f64);
    for i in 0..m {
        for j in 0..n {
            let r: f64 = (0..k)
                .map(|p| a[i * k + p] as f64 * w[p * n + j] as f64)
                .sum();
            err = err.max((c[i * n + j] as f64 - r).abs());
            scale = scale.max(r.abs());
        }
    }
    err / scale.max(f64::MIN_POSITIVE)
}

/// Reads `g`'s output into a buffer poisoned with NaN (every element must
/// be written) and returns its [`rel_err`] against `a`·`w`.
fn output_err(g: &mut dyn Gemm, a: &[f32], w: &[f32], (m, k, n): (usize, usize, usize)) -> f64 {
    let mut c = vec![f32::NAN; m * n];
    g.read_output(&mut c).unwrap();
    rel_err(a, w, &c, m, k, n)
}

fn spec(m: u32, k: u32, n: u32, dtype: DType, order: OperandOrder) -> GemmSpec {
    GemmSpec {
        shape: GemmShape::new(m, k, n).unwrap(),
        dtype,
        order,
        weights: WeightMode::Static,
    }
}

#[test]
fn open_without_cuda_is_a_library_error() {
    match open(&OpenOptions::default()) {
        Ok(list) => {
            eprintln!("skipping: CUDA opened here with {} device(s)", list.len());
            assert!(list.iter().all(|b| b.processor().id.starts_with("cuda:")));
        }
        Err(Error::Library {
            library,
            tried,
            reason,
        }) => {
            assert!(library.starts_with("libcu"), "{library}");
            assert!(!tried.is_empty());
            assert!(!reason.is_empty());
        }
        Err(e) => eprintln!("skipping: CUDA loaded but did not open: {e}"),
    }
}

#[test]
fn gemm_matches_the_f64_reference_in_every_dtype_and_order() {
    let Some(mut devices) = devices_or_skip("gemm reference test") else {
        return;
    };
    for dev in &mut devices {
        for &(m, k, n) in &[(1, 64, 48), (3, 67, 45), (64, 256, 128), (130, 96, 257)] {
            for dtype in [DType::F32, DType::F16, DType::Bf16] {
                for order in [OperandOrder::Aw, OperandOrder::Transposed] {
                    let w = values(k * n, 7 + k as u64);
                    let a = values(m * k, 11 + m as u64);
                    let s = spec(m as u32, k as u32, n as u32, dtype, order);
                    let mut g = dev.prepare(&s, &w).unwrap();
                    g.write_input(&a).unwrap();
                    let t = g.execute().unwrap();
                    assert!(t.host_us > 0.0 && t.device_us.unwrap() > 0.0);
                    let err = output_err(g.as_mut(), &a, &w, (m, k, n));
                    let tol = dev.tolerance(dtype, k as u32);
                    assert!(
                        err <= tol,
                        "{} {m}x{k}x{n} {dtype} {order}: rel err {err} > {tol}",
                        dev.processor().id
                    );
                }
            }
        }
    }
}

#[test]
fn every_row_count_form_and_algorithm_the_search_may_pick_gives_the_reference_result() {
    if devices_or_skip("row count test").is_none() {
        return;
    }
    let backend = CudaBackend::open(0).unwrap();
    for &(m, k, n) in &[(445, 64, 72), (158, 96, 40), (670, 32, 24)] {
        for dtype in [DType::F32, DType::F16] {
            for order in [OperandOrder::Aw, OperandOrder::Transposed] {
                let w = values(k * n, 3 + n as u64);
                let a = values(m * k, 5 + m as u64);
                let s = spec(m as u32, k as u32, n as u32, dtype, order);
                let mut g = gemm::CudaGemm::new(backend.dev.clone(), &s, &w).unwrap();
                let candidates = gemm::candidates(m, order);
                assert!(gemm::row_candidates(m).len() > 1, "M = {m}");
                assert!(
                    candidates.contains(&(g.rows(), g.form())),
                    "{} rows {:?} not in {candidates:?}",
                    g.rows(),
                    g.form()
                );
                let (algo, offered) = g.algo();
                assert!(algo < offered, "algorithm {algo} of {offered}");
                g.write_input(&a).unwrap();
                for (rows, form) in gemm::row_candidates(m)
                    .into_iter()
                    .flat_map(|r| [(r, gemm::Form::ActLeft), (r, gemm::Form::WeightLeft)])
                {
                    // Every algorithm cuBLASLt offers for them, too.
                    let offered = g.set_candidate(rows, form, 0).unwrap();
                    for algo in 0..offered {
                        g.set_candidate(rows, form, algo).unwrap();
                        g.execute().unwrap();
                        let err = output_err(&mut g, &a, &w, (m, k, n));
                        let tol = backend.tolerance(dtype, k as u32);
                        assert!(
                            err <= tol,
                            "{m}x{k}x{n} {dtype} {order}, {rows} rows {form:?}, \
                             algorithm {algo} of {offered}: rel err {err} > {tol}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn graph_launches_read_each_new_input_in_both_forms() {
    if devices_or_skip("graph launch test").is_none() {
        return;
    }
    let backend = CudaBackend::open(0).unwrap();
    let (m, k, n): (usize, usize, usize) = (5, 72, 40);
    let w = values(k * n, 21);
    for dtype in [DType::F32, DType::F16] {
        for form in [gemm::Form::ActLeft, gemm::Form::WeightLeft] {
            let s = spec(m as u32, k as u32, n as u32, dtype, OperandOrder::Aw);
            let mut g = gemm::CudaGemm::new(backend.dev.clone(), &s, &w).unwrap();
            g.set_graphs(true);
            g.set_candidate(m.next_multiple_of(8), form, 0).unwrap();
            let tol = backend.tolerance(dtype, k as u32);
            // Run 0 launches directly, run 1 captures, runs 2 and 3 reuse
            // the graph (once through submit and a polling wait); every run
            // has its own input, so a graph that kept a stale operand fails.
            for run in 0..4u64 {
                let a = values(m * k, 100 + run);
                g.write_input(&a).unwrap();
                let t = if run == 3 {
                    g.submit().unwrap();
                    g.wait(SyncMode::Poll { predicted_us: 1.0 }).unwrap()
                } else {
                    g.execute().unwrap()
                };
                assert!(t.device_us.unwrap() > 0.0);
                assert_eq!(g.graphed(), run > 0, "{dtype} {form:?} run {run}");
                let err = output_err(&mut g, &a, &w, (m, k, n));
                assert!(
                    err <= tol,
                    "{dtype} {form:?} run {run}: rel err {err} > {tol}"
                );
            }
            // Another selection drops the graph; with graphs off none is made.
            g.set_graphs(false);
            g.set_candidate(m.next_multiple_of(8), form, 0).unwrap();
            for run in 0..2u64 {
                let a = values(m * k, 200 + run);
                g.write_input(&a).unwrap();
                g.execute().unwrap();
                assert!(!g.graphed());
                let err = output_err(&mut g, &a, &w, (m, k, n));
                assert!(
                    err <= tol,
                    "{dtype} {form:?} direct run {run}: rel err {err} > {tol}"
                );
            }
        }
    }
}

#[test]
fn small_copies_cross_inside_the_launch_and_large_ones_on_their_own() {
    if devices_or_skip("launch copy test").is_none() {
        return;
    }
    let backend = CudaBackend::open(0).unwrap();
    let max = gemm::LAUNCH_COPY_MAX;
    assert_eq!(
        backend.processor().capabilities.launch_copy_max_bytes,
        Some(max),
        "the probe reports what the GEMMs do"
    );
    let fits = |values: usize| (values * 4) as u64 <= max;
    // Small both ways (a decode step), a large input with a small output,
    // a small input with a large output, large both ways, on either side
    // of the bound; K and N padded.
    let over = |rows: usize| (max as usize / 4 / rows + 5) | 1;
    let cases = [
        (1, 1531, 1533),
        (16, over(16), 67),
        (2, 93, over(2)),
        (40, over(40), over(40) + 2),
    ];
    let sides: Vec<_> = cases
        .iter()
        .map(|&(m, k, n)| (fits(m * k), fits(m * n)))
        .collect();
    assert_eq!(
        sides,
        [(true, true), (false, true), (true, false), (false, false)],
        "{cases:?} against {max} bytes"
    );
    for (m, k, n) in cases {
        let w = values(k * n, 31 + n as u64);
        for dtype in [DType::F32, DType::F16] {
            for form in [gemm::Form::ActLeft, gemm::Form::WeightLeft] {
                let s = spec(m as u32, k as u32, n as u32, dtype, OperandOrder::Aw);
                let mut g = gemm::CudaGemm::new(backend.dev.clone(), &s, &w).unwrap();
                assert_eq!(g.launch_copies(), (fits(m * k), fits(m * n)), "{s:?}");
                g.set_graphs(true);
                g.set_candidate(m.next_multiple_of(8), form, 0).unwrap();
                let tol = backend.tolerance(dtype, k as u32);
                let what = format!("{m}×{k}×{n} {dtype} {form:?}");
                // Direct, captured, then replayed, each with a new input.
                for run in 0..3u64 {
                    let a = values(m * k, 300 + run);
                    g.write_input(&a).unwrap();
                    g.execute().unwrap();
                    let err = output_err(&mut g, &a, &w, (m, k, n));
                    assert!(err <= tol, "{what} run {run}: rel err {err} > {tol}");
                }
                // An input written while a run is in flight waits for that
                // run's copy: the run computes the input it was given, the
                // next run the new one.
                let (a1, a2) = (values(m * k, 400), values(m * k, 401));
                g.write_input(&a1).unwrap();
                g.submit().unwrap();
                g.write_input(&a2).unwrap();
                g.wait(SyncMode::Block).unwrap();
                let err = output_err(&mut g, &a1, &w, (m, k, n));
                assert!(err <= tol, "{what} in flight: rel err {err} > {tol}");
                g.execute().unwrap();
                let err = output_err(&mut g, &a2, &w, (m, k, n));
                assert!(err <= tol, "{what} after: rel err {err} > {tol}");
            }
        }
    }
}

#[test]
fn k_and_n_padded_to_eight_give_the_reference_result() {
    if devices_or_skip("padding test").is_none() {
        return;
    }
    let backend = CudaBackend::open(0).unwrap();
    for &(m, k, n) in &[(37, 1021, 75), (8, 173, 1003), (130, 8148, 9)] {
        for dtype in [DType::F32, DType::F16, DType::Bf16] {
            for order in [OperandOrder::Aw, OperandOrder::Transposed] {
                let w = values(k * n, 13 + k as u64);
                let a = values(m * k, 17 + n as u64);
                let s = spec(m as u32, k as u32, n as u32, dtype, order);
                let mut g = gemm::CudaGemm::new(backend.dev.clone(), &s, &w).unwrap();
                assert_eq!(
                    g.padded_kn(),
                    (k.next_multiple_of(8), n.next_multiple_of(8))
                );
                let tol = backend.tolerance(dtype, k as u32);
                g.write_input(&a).unwrap();
                for form in [gemm::Form::ActLeft, gemm::Form::WeightLeft] {
                    g.set_candidate(m.next_multiple_of(8), form, 0).unwrap();
                    g.execute().unwrap();
                    let err = output_err(&mut g, &a, &w, (m, k, n));
                    assert!(
                        err <= tol,
                        "{m}x{k}x{n} {dtype} {order} {form:?}: rel err {err} > {tol}"
                    );
                }
                // The same through host-resident weights (the padded copy).
                g.host_weights(&w).unwrap();
                g.execute().unwrap();
                let err = output_err(&mut g, &a, &w, (m, k, n));
                assert!(
                    err <= tol,
                    "{m}x{k}x{n} {dtype} {order}, host weights: rel err {err} > {tol}"
                );
            }
        }
    }
}

/// An f16 `aw` GEMM of `(m, k, n)` prepared on `dev` with `values` of the
/// weight and activation seeds, its input written: the GEMM, A and W.
fn f16_aw_written(
    dev: &mut Box<dyn Backend>,
    (m, k, n): (usize, usize, usize),
    (w_seed, a_seed): (u64, u64),
) -> (Box<dyn Gemm>, Vec<f32>, Vec<f32>) {
    let w = values(k * n, w_seed);
    let a = values(m * k, a_seed);
    let mut g = dev
        .prepare(
            &spec(m as u32, k as u32, n as u32, DType::F16, OperandOrder::Aw),
            &w,
        )
        .unwrap();
    g.write_input(&a).unwrap();
    (g, a, w)
}

#[test]
fn evicting_l2_between_runs_keeps_the_results() {
    let Some(mut devices) = devices_or_skip("L2 eviction test") else {
        return;
    };
    for dev in &mut devices {
        let (m, k, n) = (16, 1024, 2048);
        let (mut g, a, w) = f16_aw_written(dev, (m, k, n), (13, 17));
        for _ in 0..3 {
            // The eviction writes its own buffer, never this GEMM's.
            g.evict_caches().unwrap();
            let t = g.execute().unwrap();
            assert!(t.device_us.unwrap() > 0.0);
            assert!(
                output_err(g.as_mut(), &a, &w, (m, k, n))
                    <= default_tolerance(DType::F16, k as u32)
            );
        }
    }
}

#[test]
fn kernel_only_timing_leaves_the_launch_out_and_keeps_the_results() {
    let Some(mut devices) = devices_or_skip("kernel-only timing test") else {
        return;
    };
    for dev in &mut devices {
        let (m, k, n) = (1, 1536, 1536);
        let (mut g, a, w) = f16_aw_written(dev, (m, k, n), (23, 29));
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (mut plain, mut gated) = (Vec::new(), Vec::new());
        for _ in 0..21 {
            plain.push(g.execute().unwrap().device_us.unwrap());
            let t = g.execute_kernel_only().unwrap();
            gated.push(
                t.expect("this GPU has stream memory operations")
                    .device_us
                    .unwrap(),
            );
            assert!(
                output_err(g.as_mut(), &a, &w, (m, k, n))
                    <= default_tolerance(DType::F16, k as u32)
            );
        }
        let (p, q) = (median(&mut plain), median(&mut gated));
        eprintln!(
            "{}: 1x1536x1536 f16 device time {p:.1} µs, kernels alone {q:.1} µs",
            g.backend_id()
        );
        assert!(
            q > 0.0 && q <= p,
            "kernels alone {q} µs, with the launch {p} µs"
        );
    }
}

#[test]
fn submit_and_wait_block_and_poll() {
    let Some(mut devices) = devices_or_skip("submit/wait test") else {
        return;
    };
    for dev in &mut devices {
        let (m, k, n) = (32, 512, 256);
        let w = values(k * n, 3);
        let a = values(m * k, 5);
        let mut g = dev
            .prepare(
                &spec(32, 512, 256, DType::F16, OperandOrder::Transposed),
                &w,
            )
            .unwrap();
        g.write_input(&a).unwrap();
        for mode in [
            SyncMode::Block,
            SyncMode::Poll { predicted_us: 0.0 },
            SyncMode::Poll {
                predicted_us: 500.0,
            },
        ] {
            g.submit().unwrap();
            let t = g.wait(mode).unwrap();
            assert!(t.host_us > 0.0, "{mode:?}");
            assert!(
                output_err(g.as_mut(), &a, &w, (m, k, n))
                    <= default_tolerance(DType::F16, k as u32)
            );
        }
        assert!(g.wait(SyncMode::Block).is_err(), "wait without submit");
    }
}

#[test]
fn unsupported_dtype_and_bad_lengths_are_refused() {
    let Some(mut devices) = devices_or_skip("refusal test") else {
        return;
    };
    let dev = &mut devices[0];
    let s = spec(2, 4, 3, DType::W4a16, OperandOrder::Aw);
    assert!(matches!(
        dev.prepare(&s, &[0.5; 12]),
        Err(Error::Unsupported { .. })
    ));
    let s = spec(2, 4, 3, DType::F32, OperandOrder::Aw);
    assert!(matches!(
        dev.prepare(&s, &[0.5; 11]),
        Err(Error::BadRequest { .. })
    ));
    let mut g = dev.prepare(&s, &[0.5; 12]).unwrap();
    assert!(matches!(
        g.write_input(&[1.0; 7]),
        Err(Error::BadRequest { .. })
    ));
}

#[test]
fn microbenchmarks_return_positive_samples() {
    let Some(mut devices) = devices_or_skip("microbenchmark test") else {
        return;
    };
    let dev = &mut devices[0];
    let id = dev.processor().id.clone();
    for (bench, bytes) in [
        (MicrobenchKind::CopyH2d, Some(1 << 20)),
        (MicrobenchKind::CopyD2h, Some(4096)),
        (MicrobenchKind::SubmitEmpty, None),
        (MicrobenchKind::SubmitBusy, None),
        (MicrobenchKind::SyncBlock, None),
        (MicrobenchKind::SyncPoll, None),
    ] {
        let req = MicrobenchRequest {
            id: format!("{bench:?}"),
            processor: id.clone(),
            bench,
            bytes,
            peer: None,
            shape: None,
        };
        let samples = dev.microbench(&req).unwrap();
        assert!(
            !samples.is_empty() && samples.iter().all(|&s| s > 0.0),
            "{bench:?}"
        );
    }
}

/// The operator overhead per wait, through the sweep as `hetero profile`
/// asks for it: every sample positive (the device's interval lies inside
/// the host's), each row's note naming its wait.
#[test]
fn the_operator_overhead_is_measured_per_wait() {
    let Some(mut devices) = devices_or_skip("operator overhead test") else {
        return;
    };
    let dev = devices.remove(0);
    let id = dev.processor().id.clone();
    assert!(dev.processor().capabilities.host_flag);
    let mut s = crate::sweep::Sweeper::new(vec![dev]);
    let run = hetero_plan::RunParams {
        warmups: 2,
        repetitions: 20,
        ..Default::default()
    };
    for (bench, waits) in [
        (MicrobenchKind::OpOverheadBlock, "then a blocking wait"),
        (MicrobenchKind::OpOverheadPoll, "then a polling wait"),
    ] {
        // Ok, with at least the 20 repetitions asked for.
        let (note, stats) = crate::conformance::microbench_ok(&mut s, &id, bench, None, &run);
        assert!(stats.min_us > 0.0, "{stats:?}");
        assert!(note.contains(waits), "{bench:?}: {note}");
    }
}

#[test]
fn passes_the_shared_conformance_suite() {
    let Some(mut devices) = devices_or_skip("conformance suite") else {
        return;
    };
    for b in &mut devices {
        crate::conformance::check_backend(b.as_mut());
    }
}

#[test]
fn host_weights_are_copied_before_every_run() {
    let Some(mut devices) = devices_or_skip("host weights test") else {
        return;
    };
    for dev in &mut devices {
        for (dtype, order) in [
            (DType::F16, OperandOrder::Transposed),
            (DType::F32, OperandOrder::Aw),
        ] {
            let (m, k, n) = (3, 96, 130);
            let a = values(m * k, 5);
            let w = values(k * n, 9);
            // Prepared with zeros: only the host copy brings the weights.
            let mut g = dev
                .prepare(
                    &spec(m as u32, k as u32, n as u32, dtype, order),
                    &vec![0.0; k * n],
                )
                .unwrap();
            g.host_weights(&w).unwrap();
            g.write_input(&a).unwrap();
            let tol = dev.tolerance(dtype, k as u32);
            // Run 0 launches directly, runs 1 and 2 through the graph.
            for run in 0..3 {
                let t = g.execute().unwrap();
                assert!(t.host_us > 0.0);
                let err = output_err(g.as_mut(), &a, &w, (m, k, n));
                assert!(
                    err <= tol,
                    "{dtype} {order} run {run}: rel err {err} > {tol}"
                );
            }
            assert!(matches!(
                g.host_weights(&w[1..]),
                Err(Error::BadRequest { .. })
            ));
        }
    }
}

/// GEMMs with host weights share the device's staging ring: run in turn,
/// each prefetching the next right after its submit, with a GEMM between
/// them whose prefetch is skipped, and two prefetched ahead so that a
/// third launch takes a slot over. Every output must be its own weights'
/// product, the ring two slots of the largest GEMM, and gone with them.
#[test]
fn host_weight_gemms_share_the_staging_ring_and_prefetch_the_next() {
    let Some(mut devices) = devices_or_skip("staging ring test") else {
        return;
    };
    for dev in &mut devices {
        let dtype = DType::F16;
        // Unlike sizes: the ring grows when the larger ones join it.
        let shapes = [(1, 64, 96), (3, 200, 130), (1, 512, 1000), (8, 96, 64)];
        let mut gemms = Vec::new();
        let mut largest = 0;
        for (i, &(m, k, n)) in shapes.iter().enumerate() {
            let w = values(k * n, 40 + i as u64);
            let a = values(m * k, 50 + i as u64);
            let s = spec(m as u32, k as u32, n as u32, dtype, OperandOrder::Aw);
            let mut g = dev.prepare(&s, &vec![0.0; k * n]).unwrap();
            g.host_weights(&w).unwrap();
            g.write_input(&a).unwrap();
            largest = largest.max(k.next_multiple_of(8) * n.next_multiple_of(8) * 2);
            gemms.push((g, a, w, (m, k, n)));
        }
        assert_eq!(
            dev.staging_bytes(),
            Some((ring::RING_SLOTS * largest) as u64)
        );
        let tol = dev.tolerance(dtype, 512);
        let check = |g: &mut Box<dyn Gemm>, a: &[f32], w: &[f32], mkn, what: &str| {
            let err = output_err(g.as_mut(), a, w, mkn);
            assert!(err <= tol, "{what}: rel err {err} > {tol}");
        };
        // Rounds of submit, prefetch the next, wait: direct launches, then
        // graphs (one per slot address).
        for round in 0..4 {
            for i in 0..gemms.len() {
                let next = (i + 1) % gemms.len();
                gemms[i].0.submit().unwrap();
                gemms[next].0.prefetch().unwrap();
                // Prefetching twice queues one copy.
                gemms[next].0.prefetch().unwrap();
                let t = gemms[i].0.wait(SyncMode::Block).unwrap();
                assert!(t.device_us.unwrap() > 0.0);
                let (g, a, w, mkn) = &mut gemms[i];
                check(g, a, w, *mkn, &format!("round {round}, GEMM {i}"));
            }
        }
        // Two prefetched, both slots pending; a third runs and takes one
        // over; then the two run, one of them copying again.
        gemms[0].0.prefetch().unwrap();
        gemms[1].0.prefetch().unwrap();
        for i in [2, 0, 1, 3] {
            let (g, a, w, mkn) = &mut gemms[i];
            g.execute().unwrap();
            check(g, a, w, *mkn, &format!("after a take-over, GEMM {i}"));
        }
        // A prefetch left unread when its GEMM goes.
        gemms[3].0.prefetch().unwrap();
        gemms.clear();
        assert_eq!(dev.staging_bytes(), None);
    }
}

#[test]
fn conversion_kernels_round_exactly_like_half() {
    let Some(_) = devices_or_skip("conversion_kernels_round_exactly_like_half") else {
        return;
    };
    let be = CudaBackend::open(0).expect("opened above");
    let dev = &be.dev;
    let id = dev.id.as_str();
    // Random values over many binades, the rounding ties, and the specials.
    let mut x: Vec<f32> = values(100_003, 7)
        .into_iter()
        .enumerate()
        .map(|(i, v)| v * 2f32.powi((i % 60) as i32 - 30))
        .collect();
    x.extend([
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::MAX,
        f32::MIN_POSITIVE,
        65504.0,
        65520.0,
        1.0 + 2f32.powi(-11),
        1.0 + 3.0 * 2f32.powi(-11),
        f32::from_bits(0x3f80_8000),
        f32::from_bits(0x3f81_8000),
        f32::from_bits(0x7f7f_ffff),
        f32::from_bits(0x7fa0_0001),
    ]);
    let n = x.len();
    let src = DeviceBuf::new(&dev.ctx, n * 4, id).unwrap();
    let dst = DeviceBuf::new(&dev.ctx, n * 2, id).unwrap();
    dev.ctx.bind_to_thread().unwrap();
    // SAFETY: `src` holds n f32; synchronous copy.
    unsafe { result::memcpy_htod_sync(src.ptr(), &x) }.unwrap();
    for to in [kernels::Half::F16, kernels::Half::Bf16] {
        dev.kernels()
            .unwrap()
            .convert(dev.stream.cu_stream(), src.ptr(), dst.ptr(), n, to, id)
            .unwrap();
        dev.stream.synchronize().unwrap();
        let mut got = vec![0u16; n];
        // SAFETY: `dst` holds n u16; synchronous copy after the stream sync.
        unsafe { result::memcpy_dtoh_sync(&mut got, dst.ptr()) }.unwrap();
        for (i, (&v, &g)) in x.iter().zip(&got).enumerate() {
            let want = match to {
                kernels::Half::F16 => half::f16::from_f32(v).to_bits(),
                kernels::Half::Bf16 => half::bf16::from_f32(v).to_bits(),
            };
            if v.is_nan() {
                // Any NaN will do, as long as it stays one.
                let back = match to {
                    kernels::Half::F16 => half::f16::from_bits(g).is_nan(),
                    kernels::Half::Bf16 => half::bf16::from_bits(g).is_nan(),
                };
                assert!(back, "{to:?}: NaN at {i} became {g:#06x}");
            } else {
                assert_eq!(g, want, "{to:?}: {v:e} (bits {:#010x}) at {i}", v.to_bits());
            }
        }
    }
}

#[test]
fn gemm_reads_and_writes_backend_host_memory() {
    let Some(mut list) = devices_or_skip("gemm_reads_and_writes_backend_host_memory") else {
        return;
    };
    let be = &mut list[0];
    for order in [OperandOrder::Aw, OperandOrder::Transposed] {
        let (m, k, n) = (37usize, 96usize, 130usize);
        let w = values(k * n, 3);
        let mut g = be
            .prepare(&spec(m as u32, k as u32, n as u32, DType::F16, order), &w)
            .unwrap();
        let mut a = crate::HostBuf::Backend(be.alloc_host(m * k).unwrap());
        a.copy_from_slice(&values(m * k, 4));
        let mut c = crate::HostBuf::Backend(be.alloc_host(m * n).unwrap());
        c.fill(f32::NAN);
        g.write_input(&a).unwrap();
        g.execute().unwrap();
        g.read_output(&mut c).unwrap();
        let err = rel_err(&a, &w, &c, m, k, n);
        assert!(
            err < default_tolerance(DType::F16, k as u32),
            "{order}: rel err {err}"
        );
    }
}
