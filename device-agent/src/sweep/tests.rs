//! The runner's rules, on a naive test backend with injectable faults.

use std::time::Duration;

use hetero_plan::{
    Capabilities, DType, GemmShape, OperandOrder, ProcessorApi, ProcessorKind, SchemaVersion,
    WeightMode,
};

use super::*;
use crate::{Gemm, GemmSpec, Timed};

#[derive(Clone, Copy, PartialEq)]
enum Fault {
    None,
    /// Adds 1 to one output of every run.
    Wrong,
    /// Correct first run, wrong afterwards (goes bad during timing).
    WrongLater,
    /// Sleeps this long per execution.
    Slow(u64),
    Panic,
}

struct Naive {
    p: Processor,
    fault: Fault,
}

struct NaiveGemm {
    spec: GemmSpec,
    w: Vec<f32>,
    a: Vec<f32>,
    c: Vec<f32>,
    fault: Fault,
    runs: u32,
}

fn naive(id: &str, fault: Fault) -> Box<dyn Backend> {
    Box::new(Naive {
        p: Processor {
            id: id.into(),
            kind: ProcessorKind::Cpu,
            api: ProcessorApi::Cpu,
            name: "naive test backend".into(),
            driver: String::new(),
            capabilities: Capabilities {
                dtypes: vec![DType::F32],
                ..Default::default()
            },
            simulated: false,
            emulated: false,
        },
        fault,
    })
}

impl Backend for Naive {
    fn processor(&self) -> &Processor {
        &self.p
    }
    fn prepare(&mut self, spec: &GemmSpec, weights: &[f32]) -> crate::Result<Box<dyn Gemm>> {
        if spec.dtype != DType::F32 {
            return Err(Error::unsupported(&self.p.id, spec.dtype.to_string()));
        }
        let (m, _, n) = spec.shape.mkn();
        Ok(Box::new(NaiveGemm {
            spec: *spec,
            w: weights.to_vec(),
            a: Vec::new(),
            c: vec![0.0; (m * n) as usize],
            fault: self.fault,
            runs: 0,
        }))
    }
}

impl Gemm for NaiveGemm {
    fn spec(&self) -> &GemmSpec {
        &self.spec
    }
    fn write_input(&mut self, a: &[f32]) -> crate::Result<()> {
        self.a = a.to_vec();
        Ok(())
    }
    fn execute(&mut self) -> crate::Result<Timed> {
        let (m, k, n) = self.spec.shape.mkn();
        let (m, k, n) = (m as usize, k as usize, n as usize);
        for i in 0..m {
            for j in 0..n {
                self.c[i * n + j] = (0..k).map(|p| self.a[i * k + p] * self.w[p * n + j]).sum();
            }
        }
        self.runs += 1;
        match self.fault {
            Fault::Wrong => self.c[0] += 1.0,
            Fault::WrongLater if self.runs > 1 => self.c[0] += 1.0,
            Fault::Slow(ms) => std::thread::sleep(Duration::from_millis(ms)),
            Fault::Panic => panic!("injected panic"),
            _ => {}
        }
        Ok(Timed {
            device_us: None,
            host_us: 1.0 + self.runs as f64,
            ran_us: None,
        })
    }
    fn execute_kernel_only(&mut self) -> crate::Result<Option<Timed>> {
        // Told apart from `execute` (1 µs more per run): always 0.5 µs.
        let mut t = self.execute()?;
        t.host_us = 0.5;
        Ok(Some(t))
    }
    fn read_output(&mut self, c: &mut [f32]) -> crate::Result<()> {
        c.copy_from_slice(&self.c);
        Ok(())
    }
    fn host_weights(&mut self, w: &[f32]) -> crate::Result<()> {
        // Kept as given: the naive GEMM reads them where they are.
        self.w = w.to_vec();
        Ok(())
    }
    fn backend_id(&self) -> String {
        "naive".into()
    }
}

fn case(id: &str, processor: &str, mkn: (u32, u32, u32), dtype: DType) -> SweepCase {
    SweepCase {
        id: id.into(),
        processor: processor.into(),
        shape: GemmShape::new(mkn.0, mkn.1, mkn.2).unwrap(),
        dtype,
        order: OperandOrder::Aw,
        weights: WeightMode::Static,
        run: None,
    }
}

fn run(reps: u32, timeout_ms: u64) -> RunParams {
    RunParams {
        warmups: 1,
        warmup_ms: 0,
        repetitions: reps,
        timeout_ms,
        cold_cache: false,
        rotate_weights: false,
        kernel_timer: false,
    }
}

#[test]
fn a_good_case_is_verified_and_timed() {
    let mut s = Sweeper::new(vec![naive("t:0", Fault::None)]);
    let row = s.run_case(&case("a", "t:0", (5, 9, 4), DType::F32), &run(5, 10_000));
    assert_eq!(row.status, RowStatus::Ok, "{:?}", row.message);
    assert!(row.verified && row.is_usable());
    assert_eq!(row.repetitions, 5);
    assert_eq!(row.warmups, 1);
    // Runs 1 (check) and 2 (warm-up) are untimed; 3..=7 give 4..=8 µs.
    assert_eq!(row.median_us, Some(6.0));
    assert_eq!(row.min_us, Some(4.0));
    assert!(row.rel_err.unwrap() <= row.tolerance.unwrap());
    assert!(row.conditions.timestamp_ms > 0);
}

#[test]
fn warming_up_lasts_warmup_ms_except_on_a_simulated_processor() {
    // 5 ms a run and 200 ms of warm-up: many untimed runs instead of the
    // one `warmups` asks for, so the timed runs (host_us = 1 + run number)
    // come later than in `a_good_case_is_verified_and_timed` (median 6).
    let warm = RunParams {
        warmup_ms: 200,
        ..run(5, 10_000)
    };
    let mut s = Sweeper::new(vec![naive("t:0", Fault::Slow(5))]);
    let t = Instant::now();
    let row = s.run_case(&case("a", "t:0", (5, 9, 4), DType::F32), &warm);
    assert_eq!(row.status, RowStatus::Ok, "{:?}", row.message);
    let median = row.median_us.unwrap();
    assert!(
        median >= 7.0,
        "median {median}: the warm-up stopped at its count"
    );
    // The check run, 200 ms of warm-up, then five timed runs.
    assert!(t.elapsed() >= Duration::from_millis(200 + 5 * 6));
    // A simulated processor's times do not depend on a clock: count only.
    let mut sim = Naive {
        p: naive("s:0", Fault::None).processor().clone(),
        fault: Fault::Slow(5),
    };
    sim.p.simulated = true;
    let mut s = Sweeper::new(vec![Box::new(sim)]);
    let row = s.run_case(&case("b", "s:0", (5, 9, 4), DType::F32), &warm);
    assert_eq!(row.status, RowStatus::Ok, "{:?}", row.message);
    assert_eq!(row.median_us, Some(6.0));
}

#[test]
fn the_kernel_timer_times_the_timed_runs_only() {
    // Same runs as `a_good_case_is_verified_and_timed` (median 6), each timed
    // run through `execute_kernel_only` (always 0.5 µs on this backend) and
    // then `execute`; the check and warm-up runs are untimed either way.
    let kernel = RunParams {
        kernel_timer: true,
        ..run(5, 10_000)
    };
    let mut s = Sweeper::new(vec![naive("t:0", Fault::None)]);
    let row = s.run_case(&case("a", "t:0", (5, 9, 4), DType::F32), &kernel);
    assert_eq!(row.status, RowStatus::Ok, "{:?}", row.message);
    assert!(row.verified);
    assert_eq!(row.median_us, Some(0.5));
    // Each kernel-only run is followed by an ordinary one: 5 of them after
    // the 3 untimed runs and 5 kernel-only runs interleaved, i.e. runs 5,
    // 7, 9, 11 and 13 (1 µs more per run): median 9 µs, so the launch path
    // is 9 - 0.5.
    assert_eq!(row.launch_us, Some(8.5), "the launch left out, per row");
    let row = s.run_case(&case("b", "t:0", (5, 9, 4), DType::F32), &run(5, 10_000));
    assert_eq!(row.launch_us, None);
}

#[test]
fn a_cold_cache_case_runs_the_same_runs() {
    // The eviction runs between timed runs, outside the timer, and adds no
    // run of the GEMM: the naive backend's times (one µs more per run) are
    // those of the warm case.
    let mut s = Sweeper::new(vec![naive("t:0", Fault::None)]);
    let cold = RunParams {
        cold_cache: true,
        ..run(5, 10_000)
    };
    let row = s.run_case(&case("a", "t:0", (5, 9, 4), DType::F32), &cold);
    assert_eq!(row.status, RowStatus::Ok, "{:?}", row.message);
    assert_eq!(row.median_us, Some(6.0));
    assert_eq!(row.min_us, Some(4.0));
}

#[test]
fn rotated_weights_run_copies_in_turn() {
    // 1x300x300 f32: 360 KB of weights, so that the least rotation (64
    // MiB) takes between 187 copies and the most; each copy counts its own
    // runs (1 µs more per run). The check and the warm-up run copy 0 twice
    // and every other copy once, so the timed runs (copies 0-4) take 4, 3,
    // 3, 3, 3 µs, where one copy run again and again takes 4..=8 µs.
    let mut s = Sweeper::new(vec![naive("t:0", Fault::None)]);
    let rotated = RunParams {
        cold_cache: true,
        rotate_weights: true,
        ..run(5, 60_000)
    };
    let target = crate::evict::rotation_bytes() as u64;
    if rotation_copies(300 * 300 * 4, 301 * 300 * 4 + 300 * 4, target).is_none() {
        eprintln!("skipped: HETERO_EVICT_MIB asks for more copies than a case may have");
        return;
    }
    let row = s.run_case(&case("a", "t:0", (1, 300, 300), DType::F32), &rotated);
    assert_eq!(row.status, RowStatus::Ok, "{:?}", row.message);
    assert!(row.verified);
    assert_eq!(row.median_us, Some(3.0));
    assert_eq!(row.min_us, Some(3.0));
    // Weights too small for a rotation: one copy, evicted instead.
    let row = s.run_case(&case("b", "t:0", (5, 9, 4), DType::F32), &rotated);
    assert_eq!(row.median_us, Some(6.0));
    // Without cold_cache, rotate_weights does nothing.
    let warm = RunParams {
        rotate_weights: true,
        ..run(5, 10_000)
    };
    let row = s.run_case(&case("c", "t:0", (1, 300, 300), DType::F32), &warm);
    assert_eq!(row.median_us, Some(6.0));
}

#[test]
fn rotation_copies_read_the_target_between_two_runs_of_one() {
    const MIB: u64 = 1 << 20;
    // 1×1536×8960 f32 (55 MB) under 512 MiB: ten others between two runs.
    let w = 1536 * 8960 * 4;
    assert_eq!(
        rotation_copies(w, w + 1536 * 4 + 8960 * 4, 512 * MIB),
        Some(11)
    );
    // Weights larger than the target: two copies, each reading past the
    // other's.
    assert_eq!(
        rotation_copies(933_000_000, 933_000_000, 512 * MIB),
        Some(2)
    );
    assert_eq!(rotation_copies(512 * MIB, 512 * MIB, 512 * MIB), Some(2));
    // Too small: more copies than the most.
    assert_eq!(rotation_copies(144, 300, 512 * MIB), None);
    assert_eq!(rotation_copies(0, 0, MIB), None);
    // Exactly the most.
    let most = MAX_ROTATION_COPIES as usize;
    assert_eq!(
        rotation_copies(MIB, MIB, (MAX_ROTATION_COPIES - 1) * MIB),
        Some(most)
    );
    // 4096x1536x1536: 9.4 MB of weights beside 50 MB of activations, 58
    // copies: 3.4 GB for a 512 MiB rotation, over twice it and the weights.
    let w = 1536 * 1536 * 4;
    let all = w + 2 * 4096 * 1536 * 4;
    assert_eq!(rotation_copies(w, all, 512 * MIB), None);
    assert_eq!(rotation_copies(w, all, 2048 * MIB), None);
    // 509x8960x1536: 55 MB beside 21 MB, 11 copies, 840 MB.
    let w = 8960 * 1536 * 4;
    assert_eq!(
        rotation_copies(w, w + 509 * (8960 + 1536) * 4, 512 * MIB),
        Some(11)
    );
}

#[test]
fn a_wrong_result_fails_and_is_never_timed() {
    for fault in [Fault::Wrong, Fault::WrongLater] {
        let mut s = Sweeper::new(vec![naive("t:0", fault)]);
        let row = s.run_case(&case("a", "t:0", (5, 9, 4), DType::F32), &run(3, 10_000));
        assert_eq!(row.status, RowStatus::Failed);
        assert!(!row.verified && !row.is_usable());
        assert_eq!(row.median_us, None);
        assert!(row.rel_err.unwrap() > row.tolerance.unwrap());
        assert!(row.message.unwrap().contains("C[0,0]"));
    }
}

#[test]
fn a_dtype_the_processor_lacks_is_unsupported() {
    let mut s = Sweeper::new(vec![naive("t:0", Fault::None)]);
    let row = s.run_case(&case("a", "t:0", (2, 2, 2), DType::Bf16), &run(3, 10_000));
    assert_eq!(row.status, RowStatus::Unsupported);
    assert!(row.message.unwrap().contains("bf16"));
    assert_eq!(row.median_us, None);
}

#[test]
fn a_slow_case_times_out_and_the_processor_comes_back() {
    let mut s = Sweeper::new(vec![naive("t:0", Fault::Slow(150))]);
    let slow = case("slow", "t:0", (2, 2, 2), DType::F32);
    let t0 = Instant::now();
    let row = s.run_case(&slow, &run(50, 100));
    assert_eq!(row.status, RowStatus::Timeout);
    assert!(row.message.unwrap().contains("100 ms"));
    // 50 repetitions of 150 ms would take 7.5 s: the runner did not wait.
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "waited for the slow case"
    );
    // The worker stops at its next run boundary (within ~150 ms); the next
    // case waits for it, then runs.
    let next = s.run_case(&case("next", "t:0", (2, 2, 2), DType::F32), &run(1, 5_000));
    assert_eq!(next.status, RowStatus::Ok, "{:?}", next.message);
}

#[test]
fn a_busy_processor_gives_a_timeout_row_naming_the_case() {
    let mut s = Sweeper::new(vec![naive("t:0", Fault::Slow(3000))]);
    let r = s.run_case(&case("slow", "t:0", (2, 2, 2), DType::F32), &run(5, 50));
    assert_eq!(r.status, RowStatus::Timeout);
    let r = s.run_case(&case("next", "t:0", (2, 2, 2), DType::F32), &run(1, 50));
    assert_eq!(r.status, RowStatus::Timeout);
    assert!(r.message.unwrap().contains("`slow`"));
}

#[test]
fn a_panicking_backend_gives_an_error_row() {
    let mut s = Sweeper::new(vec![naive("t:0", Fault::Panic)]);
    let r = s.run_case(&case("p", "t:0", (2, 2, 2), DType::F32), &run(1, 5_000));
    assert_eq!(r.status, RowStatus::Error);
    assert!(r.message.unwrap().contains("injected panic"));
    assert_eq!(r.case_id, "p");
}

#[test]
fn spec_checks_name_the_field() {
    let s = Sweeper::new(vec![naive("t:0", Fault::None)]);
    let mut spec = SweepSpec {
        schema_version: SchemaVersion,
        run: RunParams::default(),
        cases: vec![
            case("a", "t:0", (1, 1, 1), DType::F32),
            case("b", "gpu:9", (1, 1, 1), DType::F32),
        ],
        microbench: vec![],
    };
    let Err(Error::BadRequest { field, message }) = s.check_spec(&spec) else {
        panic!()
    };
    assert_eq!(field, "cases[1].processor");
    assert!(message.contains("t:0"), "{message}");
    spec.cases.pop();
    spec.microbench.push(MicrobenchRequest {
        id: "c".into(),
        processor: "t:0".into(),
        bench: MicrobenchKind::CopyH2d,
        bytes: None,
        peer: None,
        shape: None,
    });
    let Err(Error::BadRequest { field, .. }) = s.check_spec(&spec) else {
        panic!()
    };
    assert_eq!(field, "microbench[0].bytes");
}

#[test]
fn run_filters_skips_and_tallies() {
    let mut s = Sweeper::new(vec![naive("t:0", Fault::None), naive("u:0", Fault::Wrong)]);
    let spec = SweepSpec {
        schema_version: SchemaVersion,
        run: run(2, 10_000),
        cases: vec![
            case("a", "t:0", (2, 3, 4), DType::F32),
            case("b", "t:0", (2, 3, 4), DType::F32),
            case("c", "u:0", (2, 3, 4), DType::F32),
            case("d", "t:0", (2, 3, 4), DType::F16),
        ],
        microbench: vec![],
    };
    let opts = SweepOptions {
        filter: None,
        skip: ["b".to_string()].into(),
    };
    let mut ids = Vec::new();
    let done = s
        .run(&spec, &opts, &mut |l| {
            if let AgentLine::Measurement(r) = l {
                ids.push((r.case_id.clone(), r.status));
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(
        ids,
        vec![
            ("a".into(), RowStatus::Ok),
            ("c".into(), RowStatus::Failed),
            ("d".into(), RowStatus::Unsupported)
        ]
    );
    assert_eq!(
        (
            done.rows,
            done.ok,
            done.failed,
            done.unsupported,
            done.skipped
        ),
        (3, 1, 1, 1, 1)
    );
    let only_u = SweepOptions {
        filter: Some(vec!["u:*".into()]),
        skip: HashSet::new(),
    };
    let done = s.run(&spec, &only_u, &mut |_| Ok(())).unwrap();
    assert_eq!((done.rows, done.skipped), (1, 3));
}

#[test]
fn generic_bandwidth_and_prepare_rules() {
    let mut s = Sweeper::new(vec![naive("t:0", Fault::None), naive("u:0", Fault::None)]);
    let req = |bench, peer: Option<&str>| MicrobenchRequest {
        id: "x".into(),
        processor: "t:0".into(),
        bench,
        bytes: Some(64 * 64 * 4),
        peer: peer.map(str::to_string),
        shape: GemmShape::new(4, 4, 4),
    };
    let r = run(3, 10_000);
    let alone = s.run_microbench(&req(MicrobenchKind::BandwidthAlone, None), &r);
    assert_eq!(alone.row.status, RowStatus::Ok, "{:?}", alone.row.message);
    assert!(alone.row.gbps.unwrap() > 0.0);
    assert!(alone.note.unwrap().contains("1x64x64"));
    let both = s.run_microbench(&req(MicrobenchKind::BandwidthConcurrent, Some("u:0")), &r);
    assert_eq!(both.row.status, RowStatus::Ok, "{:?}", both.row.message);
    let note = both.note.unwrap();
    assert!(
        note.contains("peer `u:0`") && !note.contains("host memory"),
        "{note}"
    );
    let same = s.run_microbench(&req(MicrobenchKind::BandwidthConcurrent, Some("t:0")), &r);
    assert_eq!(same.row.status, RowStatus::Unsupported);
    assert!(same.row.message.unwrap().contains("--cpu-groups"));
    let prep = s.run_microbench(&req(MicrobenchKind::GraphPrepare, None), &r);
    assert_eq!(prep.row.status, RowStatus::Unsupported);
    let copy = s.run_microbench(&req(MicrobenchKind::CopyH2d, None), &r);
    assert_eq!(
        copy.row.status,
        RowStatus::Unsupported,
        "naive has no copy benchmark"
    );
}

#[test]
fn short_microbenchmarks_take_more_samples_than_the_repetitions() {
    let r = run(3, 10_000);
    // Short: more samples, up to the cap; long or simulated: the repetitions.
    assert!(!enough_samples(&[10.0; 3], &r, false));
    assert!(enough_samples(&[10.0; MICRO_MAX_SAMPLES], &r, false));
    assert!(enough_samples(&[10.0; 3], &r, true));
    assert!(!enough_samples(&[MICRO_MIN_US; 2], &r, false));
    assert!(enough_samples(&[MICRO_MIN_US / 3.0; 3], &r, false));

    let mut s = Sweeper::new(vec![naive("t:0", Fault::None)]);
    let req = MicrobenchRequest {
        id: "in".into(),
        processor: "t:0".into(),
        bench: MicrobenchKind::StageIn,
        bytes: Some(4096),
        peer: None,
        shape: None,
    };
    let line = s.run_microbench(&req, &r);
    assert_eq!(line.row.status, RowStatus::Ok, "{:?}", line.row.message);
    assert_eq!(line.row.stats.unwrap().count as usize, MICRO_MAX_SAMPLES);
}

#[test]
fn cold_staged_copies_on_unified_memory_take_the_repetitions_only() {
    // With cold caches, a processor on unified memory evicts them before
    // every round of a staged-copy microbenchmark, so its rounds stop at
    // the run's repetitions; a discrete one (whose copies are DMAs) keeps
    // the warm rounds and takes as many samples as a short benchmark does.
    let cold = RunParams {
        cold_cache: true,
        ..run(3, 30_000)
    };
    let req = MicrobenchRequest {
        id: "out".into(),
        processor: "t:0".into(),
        bench: MicrobenchKind::StageOut,
        bytes: Some(4096),
        peer: None,
        shape: None,
    };
    for (unified, want) in [(true, 3), (false, MICRO_MAX_SAMPLES)] {
        let mut b = Naive {
            p: naive("t:0", Fault::None).processor().clone(),
            fault: Fault::None,
        };
        b.p.capabilities.unified_memory = unified;
        let mut s = Sweeper::new(vec![Box::new(b)]);
        let line = s.run_microbench(&req, &cold);
        assert_eq!(line.row.status, RowStatus::Ok, "{:?}", line.row.message);
        assert_eq!(
            line.row.stats.unwrap().count as usize,
            want,
            "unified memory: {unified}"
        );
    }
}

#[test]
fn a_discrete_gpu_streams_by_copying_its_weights_from_host_memory() {
    // A discrete GPU's traffic on host memory is its copies over PCIe:
    // its bandwidth GEMV copies the weights from page-locked host memory
    // at every run, timed or as the peer, beside a CPU or another GPU.
    let discrete = |id: &str| {
        let mut p = naive(id, Fault::None).processor().clone();
        p.kind = ProcessorKind::Gpu;
        p.capabilities.unified_memory = false;
        p
    };
    let (pg, ph) = (discrete("g:0"), discrete("h:0"));
    let backend = |p: &Processor| -> Box<dyn Backend> {
        Box::new(Naive {
            p: p.clone(),
            fault: Fault::None,
        })
    };
    let mut s = Sweeper::new(vec![naive("t:0", Fault::None), backend(&pg), backend(&ph)]);
    let req = |processor: &str, peer: &str| MicrobenchRequest {
        id: "x".into(),
        processor: processor.into(),
        bench: MicrobenchKind::BandwidthConcurrent,
        bytes: Some(64 * 64 * 4),
        peer: Some(peer.into()),
        shape: None,
    };
    let copying = "copying its weights from page-locked host memory";
    let r = run(3, 10_000);
    let cpu = s.run_microbench(&req("t:0", "g:0"), &r);
    assert_eq!(cpu.row.status, RowStatus::Ok, "{:?}", cpu.row.message);
    // The row's fields say it; the note says it in words.
    let host_weights = |row: &MicrobenchRow| {
        (
            row.stream.unwrap().host_weights,
            row.peer_stream.unwrap().host_weights,
        )
    };
    assert_eq!(host_weights(&cpu.row), (false, true));
    assert!(cpu.row.peer_stream.unwrap().runs.unwrap() >= 1);
    let note = cpu.note.unwrap();
    let (timed, peer) = note.split_once("; peer").unwrap();
    assert!(!timed.contains(copying) && peer.contains(copying), "{note}");
    let gpus = s.run_microbench(&req("h:0", "g:0"), &r);
    assert_eq!(gpus.row.status, RowStatus::Ok, "{:?}", gpus.row.message);
    assert_eq!(host_weights(&gpus.row), (true, true));
    let note = gpus.note.unwrap();
    let (timed, peer) = note.split_once("; peer").unwrap();
    assert!(timed.contains(copying) && peer.contains(copying), "{note}");
}

#[test]
fn a_bandwidth_gemv_on_host_memory_runs_copies_past_the_cache() {
    // 64 MiB of weights against a 1200 MiB rotation: 20 copies, so that
    // between two runs of one the others read more than the target.
    let mib = 1u64 << 20;
    assert_eq!(stream_copies(true, 64 * mib, 1200 * mib), 20);
    assert_eq!(stream_copies(false, 64 * mib, 1200 * mib), 1);
    // Weights too small to fill it in 1024 copies: one.
    assert_eq!(stream_copies(true, 16 << 10, 1200 * mib), 1);
}
