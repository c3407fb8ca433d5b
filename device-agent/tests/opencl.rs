//! Tests of the OpenCL backend on whatever OpenCL devices are installed
//! (PoCL in CI). Each test skips with a printed reason when libOpenCL or an
//! OpenCL platform is missing; `HETERO_REQUIRE_OPENCL=1` makes that a
//! failure instead (CI installs PoCL, so a skip there would hide a break).
#![cfg(feature = "opencl")]

use hetero_agent::opencl::{self, CANDIDATES, OpenClBackend, Tile};
use hetero_agent::{
    Backend, Error, Gemm, GemmSpec, OpenOptions, Registry, SyncMode, default_tolerance,
};
use hetero_plan::{
    DType, GemmShape, MicrobenchKind, MicrobenchRequest, OperandOrder, ProcessorApi, WeightMode,
};
use hetero_test_support::{TempDir, or_skip, temp_dir};

/// The devices, with the temporary folder that holds their tuning cache;
/// or why there are none, when OpenCL is absent here.
fn devices(test: &str) -> Result<(TempDir, Vec<OpenClBackend>), String> {
    let cache = temp_dir(&format!("opencl-{test}"));
    let opts = OpenOptions {
        cache_dir: Some(cache.path().to_path_buf()),
        ..OpenOptions::default()
    };
    match opencl::open_devices(&opts) {
        Ok(v) => Ok((cache, v)),
        Err(e) => {
            let absent = match &e {
                Error::Library { .. } => true,
                Error::Backend { message, .. } => message.contains("no OpenCL platform"),
                _ => false,
            };
            if !absent {
                panic!("OpenCL is installed but the backend failed to open: {e}");
            }
            Err(format!("no OpenCL device here: {e}"))
        }
    }
}

fn spec(m: u32, k: u32, n: u32, dtype: DType, order: OperandOrder) -> GemmSpec {
    GemmSpec {
        shape: GemmShape::new(m, k, n).unwrap(),
        dtype,
        order,
        weights: WeightMode::Static,
    }
}

fn data(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Largest |c - ref| / Σ|a·w| over every output, ref in f64.
fn rel_err(a: &[f32], w: &[f32], c: &[f32], m: usize, k: usize, n: usize) -> f64 {
    let mut worst = 0f64;
    for i in 0..m {
        for j in 0..n {
            let (mut dot, mut abs) = (0f64, 0f64);
            for p in 0..k {
                let x = f64::from(a[i * k + p]) * f64::from(w[p * n + j]);
                dot += x;
                abs += x.abs();
            }
            let e = (f64::from(c[i * n + j]) - dot).abs() / abs.max(f64::MIN_POSITIVE);
            if e.is_nan() || e > worst {
                worst = e;
            }
        }
    }
    worst
}

/// Runs one GEMM through the `Gemm` trait and checks it against the reference.
fn run_and_check(g: &mut dyn Gemm, a: &[f32], w: &[f32], what: &str) {
    let (m, k, n) = g.spec().shape.mkn();
    let (m, k, n) = (m as usize, k as usize, n as usize);
    g.write_input(a).unwrap();
    let t = g.execute().unwrap();
    let dev = t.device_us.expect("OpenCL has a device timer");
    assert!(dev.is_finite() && dev > 0.0, "{what}: device_us {dev}");
    assert!(
        t.host_us.is_finite() && t.host_us > 0.0,
        "{what}: host_us {}",
        t.host_us
    );
    let mut c = vec![f32::NAN; m * n];
    g.read_output(&mut c).unwrap();
    let err = rel_err(a, w, &c, m, k, n);
    let tol = default_tolerance(g.spec().dtype, k as u32);
    assert!(err <= tol, "{what}: rel err {err:.3e} > {tol:.3e}");
}

const ODD_SHAPES: &[(u32, u32, u32)] = &[
    (1, 1, 1),
    (1, 7, 129),
    (7, 129, 1),
    (129, 7, 7),
    (129, 129, 129),
    (3, 4097, 5),
    (1, 33, 4097),
    (4097, 9, 2),
];

fn fitting_tiles(be: &mut OpenClBackend, dtype: DType) -> Vec<Tile> {
    let w = data(4, 0);
    CANDIDATES
        .iter()
        .copied()
        .filter(|&t| {
            be.prepare_with_tile(&spec(2, 2, 2, dtype, OperandOrder::Aw), &w, t)
                .is_ok()
        })
        .collect()
}

#[test]
fn probe_describes_each_device() {
    let (_cache, devs) = or_skip!(OPENCL, devices("probe"));
    assert!(!devs.is_empty());
    for be in &devs {
        let p = be.processor();
        eprintln!(
            "{}: {} [{:?}] driver {}; dtypes {:?}, unified {}, host_flag {}, {} extensions",
            p.id,
            p.name,
            p.kind,
            p.driver,
            p.capabilities.dtypes,
            p.capabilities.unified_memory,
            p.capabilities.host_flag,
            p.capabilities.extensions.len()
        );
        assert!(p.id.starts_with("opencl:"), "{}", p.id);
        assert_eq!(p.id.split(':').count(), 3, "{}", p.id);
        assert_eq!(p.api, ProcessorApi::Opencl);
        assert!(!p.simulated && !p.emulated);
        let c = &p.capabilities;
        assert!(c.dtypes.contains(&DType::F32));
        let fp16 = c.extensions.iter().any(|e| e == "cl_khr_fp16");
        assert_eq!(c.dtypes.contains(&DType::F16), fp16, "{}", p.id);
        assert!(c.device_timer);
        assert!(c.compute_units.is_some_and(|n| n > 0));
        assert!(c.memory_bytes.is_some_and(|n| n > 0));
        assert!(!p.name.is_empty());
    }
}

#[test]
fn registry_opens_opencl_processors() {
    let (_cache, _) = or_skip!(OPENCL, devices("registry"));
    let cache = temp_dir("opencl-registry2");
    let opts = OpenOptions {
        cache_dir: Some(cache.path().to_path_buf()),
        ..OpenOptions::default()
    };
    let reg = Registry::open(&opts, Some(&["opencl:*".to_string()]));
    assert!(
        !reg.backends.is_empty(),
        "unavailable: {:?}",
        reg.unavailable
    );
    assert!(
        reg.backends
            .iter()
            .all(|b| b.processor().id.starts_with("opencl:"))
    );
}

#[test]
fn f32_odd_shapes_both_orders_every_tile() {
    let (_cache, mut devs) = or_skip!(OPENCL, devices("odd"));
    for be in &mut devs {
        let tiles = fitting_tiles(be, DType::F32);
        assert!(
            !tiles.is_empty(),
            "no candidate tile fits {}",
            be.processor().id
        );
        for tile in tiles {
            for &(m, k, n) in ODD_SHAPES {
                let a = data((m * k) as usize, u64::from(m * 31 + k));
                let w = data((k * n) as usize, u64::from(n * 17 + k));
                for order in [OperandOrder::Aw, OperandOrder::Transposed] {
                    let s = spec(m, k, n, DType::F32, order);
                    let mut g = be.prepare_with_tile(&s, &w, tile).unwrap();
                    let what = format!("{} {m}x{k}x{n} {order} tile {tile}", be.processor().id);
                    run_and_check(&mut g, &a, &w, &what);
                }
            }
        }
    }
}

#[test]
fn f16_storage_kernels_are_correct() {
    let (_cache, mut devs) = or_skip!(OPENCL, devices("f16"));
    for be in &mut devs {
        if !be.processor().capabilities.dtypes.contains(&DType::F16) {
            // The kernels store f16 with vload_half/vstore_half (core
            // OpenCL C), so they run without cl_khr_fp16; force them on.
            let err = be
                .prepare_cl(&spec(2, 2, 2, DType::F16, OperandOrder::Aw), &data(4, 1))
                .err()
                .expect("f16 refused without cl_khr_fp16");
            assert!(matches!(err, Error::Unsupported { .. }), "{err}");
            be.force_f16_storage();
        }
        for tile in fitting_tiles(be, DType::F16) {
            for &(m, k, n) in &[(1, 7, 129), (129, 65, 33), (3, 4097, 5)] {
                let a = data((m * k) as usize, 5);
                let w = data((k * n) as usize, 6);
                for order in [OperandOrder::Aw, OperandOrder::Transposed] {
                    let s = spec(m, k, n, DType::F16, order);
                    let mut g = be.prepare_with_tile(&s, &w, tile).unwrap();
                    let what = format!("f16 {m}x{k}x{n} {order} tile {tile}");
                    run_and_check(&mut g, &a, &w, &what);
                }
            }
        }
    }
}

#[test]
fn unsupported_dtypes_and_bad_lengths_are_errors() {
    let (_cache, mut devs) = or_skip!(OPENCL, devices("bad"));
    let be = &mut devs[0];
    let tile = fitting_tiles(be, DType::F32)[0];
    be.set_tile(DType::F32, tile).unwrap();
    let err = be
        .prepare(&spec(2, 2, 2, DType::Bf16, OperandOrder::Aw), &data(4, 1))
        .err()
        .unwrap();
    assert!(matches!(err, Error::Unsupported { .. }), "{err}");
    let err = be
        .prepare(&spec(2, 3, 2, DType::F32, OperandOrder::Aw), &data(4, 1))
        .err()
        .unwrap();
    assert!(
        matches!(&err, Error::BadRequest { field, .. } if field == "weights"),
        "{err}"
    );
    let mut g = be
        .prepare(&spec(2, 3, 2, DType::F32, OperandOrder::Aw), &data(6, 1))
        .unwrap();
    assert!(matches!(
        g.write_input(&[1.0; 5]),
        Err(Error::BadRequest { .. })
    ));
    assert!(matches!(
        g.read_output(&mut [0.0; 3]),
        Err(Error::BadRequest { .. })
    ));
    assert!(g.wait(SyncMode::Block).is_err(), "wait without submit");
    g.write_input(&[1.0; 6]).unwrap();
    g.submit().unwrap();
    assert!(g.submit().is_err(), "second submit while pending");
    g.wait(SyncMode::Block).unwrap();
}

#[test]
fn autotune_cache_round_trip() {
    let (_cache, devs) = or_skip!(OPENCL, devices("tune"));
    let tune_cache = temp_dir("opencl-tune-cache");
    let dir = tune_cache.path().to_path_buf();
    let opts = OpenOptions {
        cache_dir: Some(dir.clone()),
        ..OpenOptions::default()
    };
    drop(devs);
    let mut first = opencl::open_devices(&opts).unwrap();
    let be = &mut first[0];
    let report = be.tune(DType::F32).unwrap().clone();
    assert!(!report.from_cache);
    assert_eq!(report.trials.len(), CANDIDATES.len());
    for t in &report.trials {
        eprintln!(
            "{} tile {}: {}",
            be.processor().id,
            t.tile,
            match (t.best_us, &t.error) {
                (Some(us), _) => format!("{us:.0} µs"),
                (None, e) => format!("rejected: {}", e.as_deref().unwrap_or("?")),
            }
        );
    }
    let best = report
        .trials
        .iter()
        .filter_map(|t| t.best_us)
        .fold(f64::INFINITY, f64::min);
    let chosen = report
        .trials
        .iter()
        .find(|t| t.tile == report.tile)
        .unwrap();
    assert_eq!(chosen.best_us, Some(best), "the fastest tile is chosen");
    let file = dir.join(opencl::tune::CACHE_FILE);
    assert_eq!(be.cache_file(), Some(file.as_path()));
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains(&be.cache_key(DType::F32)), "{text}");
    // No temporary file is left behind by the atomic write.
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // A second process-equivalent open reads the choice back without tuning.
    let mut second = opencl::open_devices(&opts).unwrap();
    let again = second[0].tune(DType::F32).unwrap();
    assert!(again.from_cache);
    assert!(again.trials.is_empty());
    assert_eq!(again.tile, report.tile);

    // The tuned tile serves the Backend trait.
    let be2: &mut dyn Backend = &mut second[0];
    let (m, k, n) = (64, 256, 256);
    let w = data(k * n, 3);
    let a = data(m * k, 4);
    let mut g = be2
        .prepare(
            &spec(m as u32, k as u32, n as u32, DType::F32, OperandOrder::Aw),
            &w,
        )
        .unwrap();
    run_and_check(g.as_mut(), &a, &w, "tuned 64x256x256");
}

#[test]
fn zero_copy_inputs_are_replaced_between_runs() {
    let (_cache, mut devs) = or_skip!(OPENCL, devices("zerocopy"));
    for be in &mut devs {
        let p = be.processor().clone();
        if p.kind == hetero_plan::ProcessorKind::Cpu {
            assert!(
                p.capabilities.unified_memory,
                "a CPU device shares host memory"
            );
        }
        let tile = fitting_tiles(be, DType::F32)[0];
        for order in [OperandOrder::Aw, OperandOrder::Transposed] {
            let (m, k, n) = (33, 65, 17);
            let w = data(k * n, 8);
            let mut g = be
                .prepare_with_tile(
                    &spec(m as u32, k as u32, n as u32, DType::F32, order),
                    &w,
                    tile,
                )
                .unwrap();
            // Each input goes through map/unmap of the ALLOC_HOST_PTR buffer;
            // a stale mapping would show the previous product.
            for seed in 0..3 {
                let a = data(m * k, 100 + seed);
                run_and_check(&mut g, &a, &w, &format!("{} run {seed} {order}", p.id));
            }
        }
    }
}

#[test]
fn evicting_between_runs_keeps_the_product() {
    // `--cold-cache` runs the `evict` kernel on the device's queue before
    // every timed run: the GEMM after it still gives the product, and a
    // GEMM still in flight refuses it.
    let (_cache, mut devs) = or_skip!(OPENCL, devices("evict"));
    for be in &mut devs {
        let id = be.processor().id.clone();
        let tile = fitting_tiles(be, DType::F32)[0];
        let (m, k, n) = (9, 70, 40);
        let w = data(k * n, 11);
        let a = data(m * k, 12);
        let mut g = be
            .prepare_with_tile(
                &spec(
                    m as u32,
                    k as u32,
                    n as u32,
                    DType::F32,
                    OperandOrder::Transposed,
                ),
                &w,
                tile,
            )
            .unwrap();
        for round in 0..2 {
            g.evict_caches().unwrap();
            run_and_check(&mut g, &a, &w, &format!("{id} after eviction {round}"));
        }
        g.submit().unwrap();
        assert!(
            g.evict_caches().is_err(),
            "{id}: evicted under a running GEMM"
        );
        g.wait(SyncMode::Block).unwrap();
    }
}

#[test]
fn poll_and_block_both_complete_with_correct_results() {
    let (_cache, mut devs) = or_skip!(OPENCL, devices("sync"));
    for be in &mut devs {
        let id = be.processor().id.clone();
        let tile = fitting_tiles(be, DType::F32)[0];
        let (m, k, n) = (128, 256, 192);
        let w = data(k * n, 9);
        for order in [OperandOrder::Aw, OperandOrder::Transposed] {
            let mut g = be
                .prepare_with_tile(
                    &spec(m as u32, k as u32, n as u32, DType::F32, order),
                    &w,
                    tile,
                )
                .unwrap();
            let predicted = {
                g.write_input(&data(m * k, 1)).unwrap();
                g.execute().unwrap().best_us()
            };
            let rounds = 8;
            for round in 0..rounds {
                for mode in [
                    SyncMode::Block,
                    SyncMode::Poll {
                        predicted_us: predicted,
                    },
                    // A prediction far too short: the poll spins longer.
                    SyncMode::Poll { predicted_us: 0.0 },
                ] {
                    let a = data(m * k, 200 + round);
                    g.write_input(&a).unwrap();
                    g.submit().unwrap();
                    let t = g.wait(mode).unwrap();
                    let dev = t.device_us.unwrap();
                    assert!(dev > 0.0 && t.host_us.is_finite() && t.host_us > 0.0);
                    let mut c = vec![f32::NAN; m * n];
                    g.read_output(&mut c).unwrap();
                    let err = rel_err(&a, &w, &c, m, k, n);
                    let tol = default_tolerance(DType::F32, k as u32);
                    assert!(err <= tol, "{id} {order} {mode:?}: rel err {err:.3e}");
                }
            }
            let stats = g.poll_stats();
            eprintln!("{id} {order}: poll completions {stats:?}");
            assert_eq!(stats.by_flag + stats.by_event + stats.by_wait, 2 * rounds);
            if be.processor().kind == hetero_plan::ProcessorKind::Cpu {
                // PoCL computes on the host's cores: polls wait, never spin.
                assert_eq!(stats.by_wait, 2 * rounds, "{id}: {stats:?}");
            } else if be.processor().capabilities.unified_memory {
                assert_eq!(
                    stats.by_event, 0,
                    "{id}: on unified memory the flag should be seen before the event"
                );
            }
        }
    }
}

#[test]
fn microbench_rows_are_sane() {
    let (_cache, mut devs) = or_skip!(OPENCL, devices("micro"));
    let be = &mut devs[0];
    let tile = fitting_tiles(be, DType::F32)[0];
    be.set_tile(DType::F32, tile).unwrap();
    let id = be.processor().id.clone();
    let req = |bench, bytes| MicrobenchRequest {
        id: format!("{bench:?}"),
        processor: id.clone(),
        bench,
        bytes,
        peer: None,
        shape: None,
    };
    let mut medians = Vec::new();
    for (bench, bytes) in [
        (MicrobenchKind::CopyH2d, Some(4096)),
        (MicrobenchKind::CopyH2d, Some(16 << 20)),
        (MicrobenchKind::CopyD2h, Some(4096)),
        (MicrobenchKind::CopyD2h, Some(16 << 20)),
        (MicrobenchKind::SubmitEmpty, None),
        (MicrobenchKind::SubmitBusy, None),
        (MicrobenchKind::SyncBlock, None),
        (MicrobenchKind::SyncPoll, None),
    ] {
        let samples = be.microbench(&req(bench, bytes)).unwrap();
        assert!(samples.len() >= 5, "{bench:?}: {} samples", samples.len());
        assert!(
            samples.iter().all(|s| s.is_finite() && *s > 0.0),
            "{bench:?} {bytes:?}: {samples:?}"
        );
        let stats = hetero_plan::Stats::from_samples(&samples).unwrap();
        let gbps = bytes.map(|b| b as f64 / stats.median_us / 1e3);
        eprintln!(
            "{id} {bench:?} {bytes:?}: median {:.1} µs, min {:.1}, cv {:.2}{}",
            stats.median_us,
            stats.min_us,
            stats.cv,
            gbps.map(|g| format!(", {g:.2} GB/s")).unwrap_or_default()
        );
        medians.push(stats.median_us);
    }
    // A 16 MiB copy takes longer than a 4 KiB one.
    assert!(
        medians[1] > medians[0] && medians[3] > medians[2],
        "{medians:?}"
    );
    let err = be
        .microbench(&req(MicrobenchKind::CopyH2d, None))
        .unwrap_err();
    assert!(matches!(&err, Error::BadRequest { field, .. } if field == "microbench.bytes"));
    let err = be
        .microbench(&req(MicrobenchKind::GraphPrepare, None))
        .unwrap_err();
    assert!(matches!(err, Error::Unsupported { .. }), "{err}");
}

/// `op_overhead` times submit and wait less each run's device time.
#[test]
fn op_overhead_takes_the_device_time_off() {
    let (_cache, mut devs) = or_skip!(OPENCL, devices("op-overhead"));
    let be = devs.remove(0);
    let id = be.processor().id.clone();
    let flag = be.processor().capabilities.host_flag;
    let mut s = hetero_agent::sweep::Sweeper::new(vec![Box::new(be)]);
    let run = hetero_plan::RunParams {
        warmups: 1,
        repetitions: 5,
        ..Default::default()
    };
    // Runs one benchmark; its note and statistics, once it passed.
    let mut measure =
        |bench| hetero_agent::conformance::microbench_ok(&mut s, &id, bench, None, &run);
    // The operator overhead: submit and wait of one GEMM less each run's
    // device time, every sample positive (the device's interval lies
    // inside the host's). Blocking; polling where the device has a host
    // flag; both alternately in the row older profiles had.
    for (kind, waits) in [
        (MicrobenchKind::OpOverheadBlock, "then a blocking wait"),
        (MicrobenchKind::OpOverheadPoll, "then a polling wait"),
        (MicrobenchKind::OpOverhead, "alternately"),
    ] {
        if kind == MicrobenchKind::OpOverheadPoll && !flag {
            continue;
        }
        let (note, stats) = measure(kind);
        assert!(stats.min_us > 0.0, "{kind:?}: {stats:?}");
        assert!(note.contains("1x1024x1024"), "{note}");
        let expect = kind != MicrobenchKind::OpOverhead || flag;
        assert_eq!(note.contains(waits), expect, "{kind:?}: {note}");
    }
}

/// `launch_overhead_after_cpu`: the operator overhead after each run of a peer on
/// host memory (the CPU). Its row is the launch overhead of a rotation of
/// GEMMs, each sample less that GEMM's device time alone; the note names
/// the peer and its GEMV. Without a peer the
/// request is refused, naming the field; with a peer that has no device
/// timer as the processor, it is unsupported, saying why.
#[cfg(feature = "cpu")]
#[test]
fn launch_overhead_after_cpu_runs_the_gemms_after_the_peers_gemv() {
    let (_cache, mut devs) = or_skip!(OPENCL, devices("after"));
    let be = devs.remove(0);
    let id = be.processor().id.clone();
    let cpu = hetero_agent::cpu::open(&OpenOptions::default())
        .unwrap()
        .remove(0);
    let cpu_id = cpu.processor().id.clone();
    let mut s = hetero_agent::sweep::Sweeper::new(vec![Box::new(be), cpu]);
    // 128 GEMMs prepared, checked and timed alone first: on PoCL, on two
    // cores shared with the other tests, that takes more than the
    // default 30 s.
    let run = hetero_plan::RunParams {
        warmups: 1,
        repetitions: 8,
        timeout_ms: 300_000,
        ..Default::default()
    };
    let req = |processor: &str, peer: Option<&str>| MicrobenchRequest {
        id: format!("after/{processor}"),
        processor: processor.into(),
        bench: MicrobenchKind::LaunchOverheadAfterCpu,
        bytes: None,
        peer: peer.map(String::from),
        shape: None,
    };
    let line = s.run_microbench(&req(&id, Some(&cpu_id)), &run);
    assert_eq!(
        line.row.status,
        hetero_plan::RowStatus::Ok,
        "{:?}",
        line.row.message
    );
    // Not necessarily positive here: PoCL's "device" is this machine's
    // CPU, shared with the other tests, so a run may beat the warm median.
    let stats = line.row.stats.unwrap();
    assert!(stats.count >= 8 && stats.median_us.is_finite(), "{stats:?}");
    let note = line.note.unwrap();
    eprintln!(
        "{id} launch_overhead_after_cpu: median {:.1} µs ({note})",
        stats.median_us
    );
    assert!(note.contains("128 1x1024x1024"), "{note}");
    assert!(
        note.contains(&format!("after each run of peer `{cpu_id}`")),
        "{note}"
    );
    assert!(note.contains("less the GEMM's device time alone"), "{note}");
    // The CPU has no device timer: nothing to take off.
    let line = s.run_microbench(&req(&cpu_id, Some(&id)), &run);
    assert_eq!(line.row.status, hetero_plan::RowStatus::Unsupported);
    assert!(
        line.row
            .message
            .as_deref()
            .unwrap()
            .contains("device timer"),
        "{:?}",
        line.row.message
    );
    let line = s.run_microbench(&req(&id, None), &run);
    assert_eq!(line.row.status, hetero_plan::RowStatus::Unsupported);
    assert!(
        line.row
            .message
            .as_deref()
            .unwrap()
            .contains("needs a `peer`"),
        "{:?}",
        line.row.message
    );
}
