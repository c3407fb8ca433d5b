use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use hetero_agent::GemmSpec;
use hetero_plan::{
    DType, GemmShape, LinearOp, Phase, RowPart, SeqPart, SolverInfo, Strategy, WeightMode,
};

use super::report::{host_note, outlier_note};
use super::*;
use crate::graphs::GraphRequest;
use crate::report::HostReport;
use crate::testutil::{row_cut, single, tiny_model, tiny_plan};

/// What a test's wrapper around a backend's GEMM changes ([`Wrapped`]).
/// Every other call goes to the GEMM itself; `submit` and `wait` only
/// where `ASYNC` (else they are unsupported, and the runtime runs the part
/// inline), and `host_weights` only where the tweak takes it (else
/// unsupported, and the runtime writes upload weights before each run).
/// `before_execute` runs before an execution or a submit.
trait Tweak: Send + 'static {
    const ASYNC: bool = false;
    fn before_execute(&mut self, _g: &mut dyn Gemm) -> hetero_agent::Result<()> {
        Ok(())
    }
    fn prefetch(&mut self) {}
    fn after_read(&mut self, _c: &mut [f32]) {}
    fn on_wait(&mut self, _mode: hetero_agent::SyncMode) {}
    fn write_weights(&mut self, g: &mut dyn Gemm, w: &[f32]) -> hetero_agent::Result<()> {
        g.write_weights(w)
    }
    fn host_weights(&mut self, g: &mut dyn Gemm, _w: &[f32]) -> hetero_agent::Result<()> {
        Err(hetero_agent::Error::unsupported(
            g.backend_id(),
            "weights kept on the host and copied every run",
        ))
    }
}

/// A backend's GEMM with a test's [`Tweak`].
struct Wrapped<T> {
    inner: Box<dyn Gemm>,
    tweak: T,
}

impl<T: Tweak> Gemm for Wrapped<T> {
    fn spec(&self) -> &GemmSpec {
        self.inner.spec()
    }
    fn write_input(&mut self, a: &[f32]) -> hetero_agent::Result<()> {
        self.inner.write_input(a)
    }
    fn execute(&mut self) -> hetero_agent::Result<hetero_agent::Timed> {
        self.tweak.before_execute(self.inner.as_mut())?;
        self.inner.execute()
    }
    fn read_output(&mut self, c: &mut [f32]) -> hetero_agent::Result<()> {
        self.inner.read_output(c)?;
        self.tweak.after_read(c);
        Ok(())
    }
    fn write_weights(&mut self, w: &[f32]) -> hetero_agent::Result<()> {
        self.tweak.write_weights(self.inner.as_mut(), w)
    }
    fn host_weights(&mut self, w: &[f32]) -> hetero_agent::Result<()> {
        self.tweak.host_weights(self.inner.as_mut(), w)
    }
    fn prefetch(&mut self) -> hetero_agent::Result<()> {
        self.tweak.prefetch();
        self.inner.prefetch()
    }
    fn submit(&mut self) -> hetero_agent::Result<()> {
        if !T::ASYNC {
            return Err(hetero_agent::Error::unsupported(
                self.backend_id(),
                "asynchronous submit",
            ));
        }
        self.tweak.before_execute(self.inner.as_mut())?;
        self.inner.submit()
    }
    fn wait(&mut self, mode: hetero_agent::SyncMode) -> hetero_agent::Result<hetero_agent::Timed> {
        if !T::ASYNC {
            return Err(hetero_agent::Error::unsupported(
                self.backend_id(),
                "asynchronous wait",
            ));
        }
        self.tweak.on_wait(mode);
        self.inner.wait(mode)
    }
    fn backend_id(&self) -> String {
        self.inner.backend_id()
    }
}

/// A graph source that wraps each GEMM the backend prepares with the
/// tweak `make` gives for its request, described as `.0`.
struct Wrap<F>(&'static str, F);

impl<T: Tweak, F: FnMut(&GraphRequest<'_>) -> T + Send> GraphSource for Wrap<F> {
    fn graph(
        &mut self,
        backend: &mut dyn Backend,
        req: &GraphRequest<'_>,
        weights: &[f32],
    ) -> hetero_agent::Result<Box<dyn Gemm>> {
        Ok(Box::new(Wrapped {
            inner: backend.prepare(&req.spec, weights)?,
            tweak: (self.1)(req),
        }))
    }
    fn describe(&self) -> String {
        self.0.into()
    }
}

struct Tmp(PathBuf);
impl Tmp {
    fn new(name: &str) -> Tmp {
        let p = std::env::temp_dir().join(format!(
            "hetero-runtime-{name}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&p).unwrap();
        Tmp(p)
    }
}
impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Every strategy family, on cpu:0 and npu-sim.
fn every_strategy(op: &LinearOp, phase: Phase, _len: u32, m: u32) -> Strategy {
    let n = op.n;
    let half = n / 2;
    if phase == Phase::Decode {
        return row_cut(&[("cpu:0", half), ("npu-sim", n - half)]);
    }
    match op.name.as_str() {
        "attn_q" => row_cut(&[("cpu:0", half), ("npu-sim", n - half)]),
        "attn_k" => Strategy::Hybrid {
            padded_to: 8,
            parts: vec![
                RowPart {
                    processor: "npu-sim".into(),
                    rows: half,
                    graph: Some(8),
                },
                RowPart {
                    processor: "cpu:0".into(),
                    rows: n - half,
                    graph: None,
                },
            ],
        },
        "attn_v" if m >= 6 => Strategy::SeqCut {
            parts: vec![
                SeqPart {
                    processor: "npu-sim".into(),
                    tokens: 6,
                    graphs: vec![4, 2],
                },
                SeqPart {
                    processor: "cpu:0".into(),
                    tokens: m - 6,
                    graphs: vec![],
                },
            ],
        },
        "attn_o" => Strategy::Chunked {
            processor: "npu-sim".into(),
            chunk: 4,
            chunks: m.div_ceil(4),
        },
        "ffn_gate" => Strategy::Single {
            processor: "npu-sim".into(),
            padded_to: Some(8),
            online_prepare: false,
        },
        "ffn_up" => Strategy::Offload {
            cpu: "cpu:0".into(),
            gpu: "npu-sim".into(),
            cc_rows: 32,
            cg_rows: 32,
            gg_rows: n - 64,
            gpu_tokens: m.min(2),
        },
        "lm_head" => row_cut(&[("cpu:0", 40), ("npu-sim", n - 40)]),
        _ => single("cpu:0"),
    }
}

fn open_tiny(
    dir: &Tmp,
    decide: impl Fn(&LinearOp, Phase, u32, u32) -> Strategy,
    opts: RuntimeOptions,
) -> Result<Runtime> {
    let model = tiny_model();
    let plan = tiny_plan(
        &model,
        &["cpu:0", "npu-sim"],
        &[
            (Phase::Prefill, (1..=8).collect()),
            (Phase::Decode, vec![1, 2]),
        ],
        decide,
    );
    let path = dir.0.join("plan.ron");
    hetero_plan::save(&path, &plan).unwrap();
    Runtime::open(&path, model, opts)
}

fn spec(phase: Phase, len: u32) -> RunSpec {
    RunSpec {
        phase,
        len,
        steps: 2,
        repeat: 2,
        check: true,
    }
}

#[test]
fn every_strategy_runs_and_passes_the_check_with_both_syncs() {
    let dir = Tmp::new("every");
    for sync in [SyncChoice::Poll, SyncChoice::Block] {
        let mut rt = open_tiny(
            &dir,
            every_strategy,
            RuntimeOptions {
                sync,
                ..Default::default()
            },
        )
        .unwrap();
        for (phase, len) in [
            (Phase::Prefill, 7),
            (Phase::Prefill, 8),
            (Phase::Prefill, 3),
            (Phase::Decode, 1),
            (Phase::Decode, 2),
        ] {
            let r = rt.run(&spec(phase, len)).unwrap();
            let c = r.check.as_ref().unwrap();
            // 7 ops × 2 layers + lm_head.
            assert_eq!(c.outputs, 15, "{phase} {len}");
            assert_eq!(c.passed, c.outputs, "{phase} {len}: {:?}", c.failures);
            assert_eq!(r.per_op.len(), 8);
            assert_eq!(r.pool.grown_while_timed, 0, "the pool is reused");
            // npu-sim takes part: everything is labelled simulated.
            assert_eq!(r.timing, "simulated");
            assert!(r.measured_us > 0.0 && r.predicted_us > 0.0);
            // The plan's prediction with the run's wait: 5 µs polled, 25
            // blocked (`testutil::cost`).
            let each = match sync {
                SyncChoice::Poll => 105.0,
                SyncChoice::Block => 125.0,
            };
            assert!(r.per_op.iter().all(|o| o.predicted_us == each), "{sync:?}");
            let layers: u32 = r.per_op.iter().map(|o| o.layers).sum();
            assert!((r.predicted_us - each * layers as f64).abs() < 1e-6);
            let down = r.per_op.iter().find(|o| o.op == "ffn_down").unwrap();
            if phase == Phase::Prefill {
                assert_eq!(down.timing, "measured", "cpu alone is a measurement");
                assert_eq!(r.ttft_us, Some(r.measured_us));
            } else {
                assert!(r.per_token_us.unwrap() > 0.0 && r.tokens_per_s.unwrap() > 0.0);
            }
            assert_eq!(
                down.samples as u32,
                2 * 2 * if phase == Phase::Decode { 2 } else { 1 }
            );
        }
    }
}

#[test]
fn a_wrong_merge_fails_the_check() {
    // A bug in a backend (here: a GEMM whose output is off) must fail --check.
    struct Broken;
    impl Tweak for Broken {
        fn after_read(&mut self, c: &mut [f32]) {
            c[c.len() - 1] += 0.5;
        }
    }
    let dir = Tmp::new("broken");
    let mut rt = open_tiny(&dir, every_strategy, RuntimeOptions::default()).unwrap();
    rt.set_graph_source(
        "npu-sim",
        Box::new(Wrap("broken", |_: &GraphRequest<'_>| Broken)),
    )
    .unwrap();
    let r = rt.run(&spec(Phase::Prefill, 8)).unwrap();
    let c = r.check.unwrap();
    assert!(c.passed < c.outputs, "{c:?}");
    assert!(
        c.failures.iter().any(|f| f.contains("attn_q")),
        "{:?}",
        c.failures
    );
    assert!(r.processors.iter().any(|p| p.graphs == "broken"));
}

#[test]
fn a_plan_for_another_model_or_an_absent_processor_is_refused() {
    let dir = Tmp::new("refuse");
    let model = tiny_model();
    let mut other = model.clone();
    other.layers = 3;
    let plan = tiny_plan(
        &other,
        &["cpu:0"],
        &[(Phase::Prefill, vec![1])],
        |_, _, _, _| single("cpu:0"),
    );
    let path = dir.0.join("plan.ron");
    hetero_plan::save(&path, &plan).unwrap();
    let e = Runtime::open(&path, model.clone(), RuntimeOptions::default())
        .err()
        .unwrap();
    assert!(
        matches!(e, Error::Fingerprint { .. }) && e.is_bad_input(),
        "{e}"
    );
    assert!(e.to_string().contains("model"), "{e}");

    let plan = tiny_plan(
        &model,
        &["cpu:7"],
        &[(Phase::Prefill, vec![1])],
        |_, _, _, _| single("cpu:7"),
    );
    hetero_plan::save(&path, &plan).unwrap();
    let e = Runtime::open(&path, model.clone(), RuntimeOptions::default())
        .err()
        .unwrap();
    assert!(matches!(e, Error::MissingProcessor { .. }) && e.is_bad_input());
    assert!(
        e.to_string().contains("`cpu:7`") && e.to_string().contains("cpu:0"),
        "{e}"
    );

    // A length the plan does not cover names what it covers.
    let plan = tiny_plan(
        &model,
        &["cpu:0"],
        &[(Phase::Prefill, vec![1, 2, 3])],
        |_, _, _, _| single("cpu:0"),
    );
    hetero_plan::save(&path, &plan).unwrap();
    let mut rt = Runtime::open(&path, model, RuntimeOptions::default()).unwrap();
    let e = rt.run(&spec(Phase::Prefill, 9)).unwrap_err();
    assert!(
        e.is_bad_input() && e.to_string().contains("lengths 1..=3"),
        "{e}"
    );
    let e = rt.run(&spec(Phase::Decode, 1)).unwrap_err();
    assert!(e.is_bad_input(), "{e}");
}

#[test]
fn a_processor_failing_mid_run_is_a_clear_error_and_leaves_the_output_untouched() {
    let dir = Tmp::new("fault");
    let mut rt = open_tiny(
        &dir,
        every_strategy,
        RuntimeOptions {
            fail_after: Some(("cpu:0".into(), 5)),
            ..Default::default()
        },
    )
    .unwrap();
    let e = rt.run(&spec(Phase::Prefill, 8)).unwrap_err();
    assert!(!e.is_bad_input());
    let msg = e.to_string();
    assert!(
        msg.contains("cpu:0 failed running") && msg.contains("injected fault"),
        "{msg}"
    );
    // The C-style entry point writes nothing on failure.
    let (k, n) = (64, 64);
    let input = vec![0.5f32; 8 * k];
    let mut out = vec![7.0f32; 8 * n];
    assert!(
        rt.linear("attn_q", Phase::Prefill, 0, 8, &input, &mut out)
            .is_err()
    );
    assert!(out.iter().all(|&x| x == 7.0));
}

#[test]
fn linear_matches_the_reference_and_checks_its_buffers() {
    let dir = Tmp::new("linear");
    let mut rt = open_tiny(&dir, every_strategy, RuntimeOptions::default()).unwrap();
    let model = tiny_model();
    for (op, len) in [
        ("attn_q", 5u32),
        ("attn_v", 7),
        ("ffn_up", 6),
        ("attn_o", 3),
    ] {
        let lop = model.op(op).unwrap();
        let (k, n) = (lop.k as usize, lop.n as usize);
        let m = len as usize;
        let input = hetero_agent::verify::random_vec(m * k, 9);
        let mut out = vec![0f32; m * n];
        let t = rt
            .linear(op, Phase::Prefill, 1, len, &input, &mut out)
            .unwrap();
        assert!(t.measured_us > 0.0 && t.predicted_us == 105.0);
        rt.set_sync(SyncChoice::Block);
        let t = rt
            .linear(op, Phase::Prefill, 1, len, &input, &mut out)
            .unwrap();
        assert_eq!(t.predicted_us, 125.0, "the blocking wait's prediction");
        rt.set_sync(SyncChoice::Poll);
        let w = rt.weights.get(lop, 1, 0).unwrap();
        let shape = GemmShape::new(len, lop.k, lop.n).unwrap();
        let r = hetero_agent::verify::check(&shape, &input, &w, &out);
        assert!(r.passes(1e-4), "{op}: {r:?}");
    }
    let mut out = vec![0f32; 3];
    let e = rt
        .linear("attn_q", Phase::Prefill, 0, 5, &[0.0; 3], &mut out)
        .unwrap_err();
    assert!(e.is_bad_input() && e.to_string().contains("5×64"), "{e}");
    let e = rt
        .linear("attn_q", Phase::Prefill, 9, 5, &[0.0; 320], &mut [0.0; 320])
        .unwrap_err();
    assert!(e.to_string().contains("layer 9"), "{e}");
}

#[test]
fn padded_graphs_are_shared_across_lengths_and_layers_when_asked() {
    let dir = Tmp::new("share");
    let mut rt = open_tiny(
        &dir,
        |_, _, _, _| Strategy::Single {
            processor: "npu-sim".into(),
            padded_to: Some(8),
            online_prepare: false,
        },
        RuntimeOptions {
            weights: WeightSource::Synthetic {
                seed: 3,
                share_layers: true,
            },
            ..Default::default()
        },
    )
    .unwrap();
    rt.prepare(Phase::Prefill, 5).unwrap();
    let after_first = rt.gemms.len();
    // One graph per operator: layers share it.
    assert_eq!(after_first, 8);
    rt.prepare(Phase::Prefill, 6).unwrap();
    assert_eq!(
        rt.gemms.len(),
        after_first,
        "the padded graph of 8 serves length 6"
    );
    let r = rt.run(&spec(Phase::Prefill, 6)).unwrap();
    assert_eq!(r.check.unwrap().passed, 15);
}

#[test]
fn offload_rows_kept_on_the_host_are_copied_every_run_or_the_check_fails() {
    // A backend with `host_weights`: it keeps W and writes it before each
    // run (`honest`), or keeps it and never writes it (`lazy`). Upload steps
    // are prepared with zeros, so only the honest one passes --check.
    struct Streaming {
        w: Option<Vec<f32>>,
        honest: bool,
    }
    impl Tweak for Streaming {
        fn before_execute(&mut self, g: &mut dyn Gemm) -> hetero_agent::Result<()> {
            match (&self.w, self.honest) {
                (Some(w), true) => g.write_weights(w),
                _ => Ok(()),
            }
        }
        fn write_weights(&mut self, _: &mut dyn Gemm, _: &[f32]) -> hetero_agent::Result<()> {
            panic!("host_weights is supported: write_weights must not be called")
        }
        fn host_weights(&mut self, _: &mut dyn Gemm, w: &[f32]) -> hetero_agent::Result<()> {
            self.w = Some(w.to_vec());
            Ok(())
        }
    }
    let offload = |op: &LinearOp, _: Phase, _: u32, _: u32| Strategy::Offload {
        cpu: "cpu:0".into(),
        gpu: "npu-sim".into(),
        cc_rows: 8,
        cg_rows: op.n - 16,
        gg_rows: 8,
        gpu_tokens: 0,
    };
    let dir = Tmp::new("hostw");
    for honest in [true, false] {
        let mut rt = open_tiny(&dir, offload, RuntimeOptions::default()).unwrap();
        let source = Wrap("streaming", move |_: &GraphRequest<'_>| Streaming {
            w: None,
            honest,
        });
        rt.set_graph_source("npu-sim", Box::new(source)).unwrap();
        let r = rt.run(&spec(Phase::Decode, 1)).unwrap();
        let c = r.check.unwrap();
        if honest {
            assert_eq!(c.passed, c.outputs, "{:?}", c.failures);
        } else {
            assert_eq!(c.passed, 0, "every output misses its CG rows: {c:?}");
        }
    }
}

#[test]
fn a_host_slower_or_faster_than_when_profiled_is_noted() {
    let h = |probe_us: f64, profiled: Option<f64>| HostReport {
        probe_us,
        profiled_probe_us: profiled,
        speed: profiled.map(|p| p / probe_us),
    };
    // Within 10 % of the profile's speed: nothing to say.
    assert_eq!(host_note(&h(1.05, Some(1.0))), None);
    assert_eq!(host_note(&h(0.95, Some(1.0))), None);
    // No probe in the plan: nothing to compare.
    assert_eq!(host_note(&h(3.0, None)), None);
    let slow = host_note(&h(0.78, Some(0.44))).unwrap();
    assert!(slow.contains("0.56×") && slow.contains("higher"), "{slow}");
    let fast = host_note(&h(0.44, Some(0.78))).unwrap();
    assert!(fast.contains("1.77×") && fast.contains("lower"), "{fast}");
}

#[test]
fn a_total_above_its_operators_medians_is_explained() {
    // Within 2 % of the medians summed: nothing to say.
    assert_eq!(outlier_note(Phase::Prefill, 1015.0, 1000.0, None), None);
    assert_eq!(outlier_note(Phase::Decode, 950.0, 1000.0, None), None);
    // Nothing summed (no operator timed): nothing to compare.
    assert_eq!(outlier_note(Phase::Prefill, 10.0, 0.0, None), None);
    let pass = outlier_note(Phase::Prefill, 1048.0, 1000.0, Some(("ffn_down", 1.73))).unwrap();
    assert!(
        pass.contains("pass is 4.8 % above") && pass.contains("of ffn_down, at 1.7×"),
        "{pass}"
    );
    let step = outlier_note(Phase::Decode, 1100.0, 1000.0, None).unwrap();
    assert!(
        step.contains("step is 10.0 % above") && !step.contains("slowest"),
        "{step}"
    );
}

#[test]
fn predicted_totals_scale_by_the_plans_mean_over_median() {
    let dir = Tmp::new("skew");
    let model = tiny_model();
    let lens = [(Phase::Prefill, vec![4]), (Phase::Decode, vec![1])];
    // cpu:0 alone for some operators, split with npu-sim for the others:
    // an operator takes the largest factor of its processors.
    let decide = |op: &LinearOp, _: Phase, _: u32, _: u32| {
        if op.name.starts_with("attn") {
            single("cpu:0")
        } else {
            let half = op.n / 2;
            row_cut(&[("cpu:0", half), ("npu-sim", op.n - half)])
        }
    };
    let base = tiny_plan(&model, &["cpu:0", "npu-sim"], &lens, decide);
    let run = |plan: &Plan, name: &str| {
        let path = dir.0.join(name);
        hetero_plan::save(&path, plan).unwrap();
        let mut rt = Runtime::open(&path, model.clone(), RuntimeOptions::default()).unwrap();
        rt.run(&spec(Phase::Prefill, 4)).unwrap()
    };
    let plain = run(&base, "plain.ron");
    assert_eq!(plain.predicted_us, plain.predicted_medians_us);
    assert!(!plain.notes.iter().any(|n| n.contains("mean / median")));

    let mut skewed = base.clone();
    skewed.solver = Some(SolverInfo {
        version: "test".into(),
        row_align: 64,
        prompt_lengths: String::new(),
        expected_prefill_us: None,
        prepare_budget_us: None,
        graph_mem_budget: None,
        offload: None,
        host_probe_us: None,
        mean_over_median: [("cpu:0".to_string(), 1.04), ("npu-sim".to_string(), 1.1)].into(),
    });
    let r = run(&skewed, "skewed.ron");
    assert_eq!(r.predicted_medians_us, plain.predicted_medians_us);
    let expect: f64 = r
        .per_op
        .iter()
        .map(|o| {
            let f = if o.op.starts_with("attn") { 1.04 } else { 1.1 };
            o.predicted_us * o.layers as f64 * f
        })
        .sum();
    assert!(
        (r.predicted_us - expect).abs() <= 1e-9 * expect,
        "{} against {expect}",
        r.predicted_us
    );
    assert!((r.ratio - r.measured_us / r.predicted_us).abs() < 1e-12);
    let note = r
        .notes
        .iter()
        .find(|n| n.contains("mean / median"))
        .unwrap();
    assert!(note.contains("cpu:0 1.040×, npu-sim 1.100×"), "{note}");
}

#[test]
fn plan_gemms_are_the_gemms_the_runtime_prepares() {
    // Every strategy family (offload included): what `plan_gemms` lists
    // for a plan is what the runtime reports each part ran, per processor.
    let dir = Tmp::new("plan-gemms");
    let mut rt = open_tiny(&dir, every_strategy, RuntimeOptions::default()).unwrap();
    for (phase, len) in [
        (Phase::Prefill, 1),
        (Phase::Prefill, 5),
        (Phase::Prefill, 7),
        (Phase::Decode, 2),
    ] {
        let r = rt
            .run(&RunSpec {
                repeat: 1,
                steps: 1,
                check: false,
                ..spec(phase, len)
            })
            .unwrap();
        let mut ran: Vec<(String, String)> = r
            .per_op
            .iter()
            .flat_map(|o| {
                o.parts.iter().flat_map(|p| {
                    p.gemms
                        .iter()
                        .map(|g| (p.processor.clone(), g.clone()))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut listed: Vec<(String, String)> = plan_gemms(rt.plan(), phase, len)
            .unwrap()
            .into_iter()
            .map(|g| {
                assert_eq!(g.dtype, DType::F32);
                (g.processor, g.shape.to_string())
            })
            .collect();
        ran.sort();
        listed.sort();
        assert_eq!(listed, ran, "{phase} {len}");
    }
    // A length the plan does not cover names what it does.
    let e = plan_gemms(rt.plan(), Phase::Decode, 3).unwrap_err();
    assert!(e.to_string().contains("1..=2"), "{e}");
}

#[test]
fn a_chain_spins_on_its_first_steps_and_sleeps_toward_the_parts_end_on_its_last() {
    // cpu:0 as an offload plan's GPU: its part runs the resident rows, then
    // the copied ones, two steps of one part predicted as a whole (100 µs).
    // Each wait's predicted time is recorded.
    type Waits = Arc<Mutex<Vec<(usize, f64)>>>;
    struct Recording {
        cols: usize,
        waits: Waits,
    }
    impl Tweak for Recording {
        const ASYNC: bool = true;
        fn on_wait(&mut self, mode: hetero_agent::SyncMode) {
            if let hetero_agent::SyncMode::Poll { predicted_us } = mode {
                self.waits.lock().unwrap().push((self.cols, predicted_us));
            }
        }
        fn write_weights(&mut self, g: &mut dyn Gemm, w: &[f32]) -> hetero_agent::Result<()> {
            g.write_weights(w)
        }
    }
    // 8 CC rows on npu-sim (simulated: run on the host after the real parts),
    // then on cpu:0 24 resident (GG) rows and the rest copied (CG).
    let offload = |op: &LinearOp, _: Phase, _: u32, _: u32| Strategy::Offload {
        cpu: "npu-sim".into(),
        gpu: "cpu:0".into(),
        cc_rows: 8,
        cg_rows: op.n - 32,
        gg_rows: 24,
        gpu_tokens: 0,
    };
    let dir = Tmp::new("chain-waits");
    let waits: Waits = Arc::default();
    let mut rt = open_tiny(
        &dir,
        offload,
        RuntimeOptions {
            sync: SyncChoice::Poll,
            ..Default::default()
        },
    )
    .unwrap();
    let recorded = waits.clone();
    let source = Wrap("recording", move |req: &GraphRequest<'_>| Recording {
        cols: req.spec.shape.n.get() as usize,
        waits: recorded.clone(),
    });
    rt.set_graph_source("cpu:0", Box::new(source)).unwrap();
    let r = rt.run(&spec(Phase::Decode, 1)).unwrap();
    let c = r.check.unwrap();
    assert_eq!(c.passed, c.outputs, "{:?}", c.failures);
    let waits = waits.lock().unwrap();
    assert!(!waits.is_empty());
    // Operators of N = 32 have no CG rows: one step, which sleeps through
    // the whole part. Elsewhere the GG step (24 columns) comes first and is
    // spun on; the CG step last, sleeping through the part's 100 µs less
    // what the GG step took (nothing once that has passed).
    let mut it = waits.iter();
    while let Some(&(cols, predicted)) = it.next() {
        assert_eq!(cols, 24, "{waits:?}");
        if predicted == 100.0 {
            continue;
        }
        assert_eq!(predicted, 0.0, "{waits:?}");
        let &(cg, last) = it.next().expect("a chain's last step");
        assert_ne!(cg, 24, "{waits:?}");
        assert!((0.0..100.0).contains(&last), "{waits:?}");
    }
    assert!(waits.iter().any(|&(c, p)| c != 24 && p > 0.0));
}

/// What a GEMM with host weights saw, in order: its submits and the
/// prefetches of its weights, by the GEMM's name.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    Submit(String),
    Prefetch(String),
}

type Log = Arc<Mutex<Vec<Seen>>>;

/// A GEMM that keeps its weights on the host (writing them before each
/// run, as a GPU's copy would) and logs its submits and prefetches.
struct Staging {
    name: String,
    w: Option<Vec<f32>>,
    log: Log,
}

impl Tweak for Staging {
    const ASYNC: bool = true;
    fn before_execute(&mut self, g: &mut dyn Gemm) -> hetero_agent::Result<()> {
        if let Some(w) = &self.w {
            self.log
                .lock()
                .unwrap()
                .push(Seen::Submit(self.name.clone()));
            g.write_weights(w)?;
        }
        Ok(())
    }
    fn prefetch(&mut self) {
        let seen = Seen::Prefetch(self.name.clone());
        self.log.lock().unwrap().push(seen);
    }
    fn host_weights(&mut self, _: &mut dyn Gemm, w: &[f32]) -> hetero_agent::Result<()> {
        self.w = Some(w.to_vec());
        Ok(())
    }
}

/// An offload plan run by `drive` with cpu:0 as its GPU, every CG GEMM a
/// [`Staging`] one; the log of what those saw.
fn staging_log(name: &str, drive: impl FnOnce(&mut Runtime)) -> Vec<Seen> {
    let offload = |op: &LinearOp, _: Phase, _: u32, _: u32| Strategy::Offload {
        cpu: "npu-sim".into(),
        gpu: "cpu:0".into(),
        cc_rows: 8,
        cg_rows: op.n - 32,
        gg_rows: 24,
        gpu_tokens: 0,
    };
    let dir = Tmp::new(name);
    let mut rt = open_tiny(&dir, offload, RuntimeOptions::default()).unwrap();
    let log: Log = Arc::default();
    let logged = log.clone();
    let source = Wrap("staging", move |req: &GraphRequest<'_>| Staging {
        name: format!("{} layer {} from {}", req.op, req.layer, req.first_col),
        w: None,
        log: logged.clone(),
    });
    rt.set_graph_source("cpu:0", Box::new(source)).unwrap();
    drive(&mut rt);
    log.lock().unwrap().clone()
}

/// Every submit of a GEMM with host weights is followed by the prefetch
/// of the one submitted next, from `from` on (the submits before it may
/// not know their successors yet); returns the submits checked.
fn assert_prefetch_next(log: &[Seen], from: usize) -> usize {
    let submits: Vec<(usize, &str)> = log
        .iter()
        .enumerate()
        .filter_map(|(i, s)| match s {
            Seen::Submit(n) => Some((i, n.as_str())),
            Seen::Prefetch(_) => None,
        })
        .collect();
    assert!(submits.len() > from + 2, "{log:?}");
    for w in submits[from..].windows(2) {
        let ((i, _), (_, next)) = (w[0], w[1]);
        assert_eq!(
            log.get(i + 1),
            Some(&Seen::Prefetch(next.to_string())),
            "submit {i} of {log:?}"
        );
    }
    submits.len() - from
}

#[test]
fn a_run_prefetches_the_next_host_weight_gemm_from_its_first_submit() {
    let log = staging_log("prefetch-run", |rt| {
        let r = rt.run(&spec(Phase::Decode, 1)).unwrap();
        let c = r.check.unwrap();
        assert_eq!(c.passed, c.outputs, "{:?}", c.failures);
    });
    // The pass order is known: every submit prefetches, the last of a pass
    // the first of the next.
    assert_prefetch_next(&log, 0);
}

#[test]
fn linear_learns_the_order_in_its_first_pass_and_prefetches_after() {
    let model = tiny_model();
    let layers = model.ops[0].layers;
    let tokens = 3;
    let log = staging_log("prefetch-linear", |rt| {
        // A decoder's tokens: every operator of every layer in turn.
        for _ in 0..tokens {
            for layer in 0..layers {
                for op in model.ops.iter().filter(|o| o.layers > 1) {
                    let (m, k, n, inst) = rt.op_dims(&op.name, Phase::Decode, 1).unwrap();
                    let input = vec![0.5; (inst * m * k) as usize];
                    let mut out = vec![0.0; (inst * m * n) as usize];
                    rt.linear(&op.name, Phase::Decode, layer, 1, &input, &mut out)
                        .unwrap();
                }
            }
        }
    });
    let submits = log.iter().filter(|s| matches!(s, Seen::Submit(_))).count();
    let per_token = submits / tokens;
    assert_eq!(per_token * tokens, submits, "{log:?}");
    // The first token's GEMMs (distinct weights per layer) know no
    // successor yet: no prefetch among them.
    let first: Vec<&Seen> = log.iter().take(per_token).collect();
    assert!(
        first.iter().all(|s| matches!(s, Seen::Submit(_))),
        "{log:?}"
    );
    // From the second token on, every submit prefetches the next.
    let checked = assert_prefetch_next(&log, per_token);
    assert_eq!(checked, (tokens - 1) * per_token);
}

/// A backend that reports `memory_bytes` of its own memory (a discrete
/// GPU, as far as the runtime's memory check is concerned).
/// With `staging`, its GEMMs with host weights share that many staging
/// buffers (as a CUDA device's ring), as far as the estimate is concerned.
struct OwnMemory {
    inner: Box<dyn Backend>,
    processor: hetero_plan::Processor,
    staging: Option<usize>,
}

impl OwnMemory {
    fn new(inner: Box<dyn Backend>, memory_bytes: u64) -> OwnMemory {
        let mut processor = inner.processor().clone();
        processor.capabilities.memory_bytes = Some(memory_bytes);
        processor.capabilities.unified_memory = false;
        OwnMemory {
            inner,
            processor,
            staging: None,
        }
    }
}

impl Backend for OwnMemory {
    fn processor(&self) -> &hetero_plan::Processor {
        &self.processor
    }
    fn prepare(&mut self, spec: &GemmSpec, weights: &[f32]) -> hetero_agent::Result<Box<dyn Gemm>> {
        self.inner.prepare(spec, weights)
    }
    fn staging_slots(&self) -> Option<usize> {
        self.staging
    }
}

/// The tiny model's plan with every operator on `proc`, saved in `dir`.
fn all_on(dir: &Tmp, model: &ModelSpec, proc: &str) -> (PathBuf, Plan) {
    let plan = tiny_plan(
        model,
        &["cpu:0", "npu-sim"],
        &[(Phase::Prefill, (1..=8).collect())],
        |_, _, _, _| single(proc),
    );
    let path = dir.0.join("plan.ron");
    hetero_plan::save(&path, &plan).unwrap();
    (path, plan)
}

#[test]
fn the_memory_estimate_counts_each_gemm_once_and_nothing_prepared_before() {
    let dir = Tmp::new("memory-estimate");
    let mut rt = open_tiny(&dir, |_, _, _, _| single("cpu:0"), Default::default()).unwrap();
    let ops = rt.phase_ops(Phase::Prefill);
    let need = rt.memory_need(Phase::Prefill, 7, &ops).unwrap();
    assert_eq!(need.keys().collect::<Vec<_>>(), [&memory::Place::Host]);
    let host = &need[&memory::Place::Host];
    // ffn_up: K×N 64×96 in f32 over 2 layers, M = 7, and its input.
    let gemm = (64 * 96 + 7 * (64 + 96)) * 4;
    assert_eq!(host.per_op["ffn_up"], 2 * gemm + 7 * 64 * 4);
    // The largest scratch: the lm_head's weights (64×80) and a slice, or an
    // FFN's (64×96 or 96×64), with its output and staging buffers.
    assert!(host.scratch >= 2 * 64 * 96 * 4, "{}", host.scratch);
    assert_eq!(
        host.total(),
        host.per_op.values().sum::<u128>() + host.scratch
    );
    rt.prepare(Phase::Prefill, 7).unwrap();
    assert!(rt.memory_need(Phase::Prefill, 7, &ops).unwrap().is_empty());
    // Shared weights: one layer's GEMMs.
    let shared = open_tiny(
        &dir,
        |_, _, _, _| single("cpu:0"),
        RuntimeOptions {
            weights: WeightSource::Synthetic {
                seed: 1,
                share_layers: true,
            },
            ..Default::default()
        },
    )
    .unwrap();
    let need = shared.memory_need(Phase::Prefill, 7, &ops).unwrap();
    assert_eq!(
        need[&memory::Place::Host].per_op["ffn_up"],
        gemm + 7 * 64 * 4
    );
}

#[test]
fn a_model_too_large_for_the_host_is_refused_before_anything_is_allocated() {
    let dir = Tmp::new("memory-host");
    let cfg = r#"{"model_type": "llama", "hidden_size": 1536, "num_hidden_layers": 2,
        "num_attention_heads": 12, "num_key_value_heads": 2,
        "intermediate_size": 4000000000, "vocab_size": 80, "_name_or_path": "huge"}"#;
    let model = hetero_plan::hf::from_str(Path::new("huge.json"), cfg, "huge").unwrap();
    let (path, _) = all_on(&dir, &model, "cpu:0");
    let mut rt = Runtime::open(&path, model, Default::default()).unwrap();
    let e = rt.run(&spec(Phase::Prefill, 4)).unwrap_err();
    assert!(e.is_bad_input(), "{e}");
    let Error::Memory(m) = &e else {
        panic!("not a memory refusal: {e}")
    };
    assert!(m.needed > m.available as u128, "{e}");
    // One FFN weight alone: 1536 × 4e9 f32 over 2 layers.
    assert!(m.needed >= 2 * 1536 * 4_000_000_000 * 4, "{e}");
    let msg = e.to_string();
    for part in [
        "plan.ron",
        "`huge`",
        "prefill at length 4",
        "cpu:0",
        "GiB",
        "4000000000",
    ] {
        assert!(msg.contains(part), "{part} missing: {msg}");
    }
    assert!(rt.gemms.is_empty() && rt.prepared.is_empty());
    // Linear refuses the same way.
    let mut out = vec![0f32; 4 * 4_000_000];
    let e = rt
        .linear(
            "ffn_up",
            Phase::Prefill,
            0,
            4,
            &vec![0f32; 4 * 1536],
            &mut out,
        )
        .unwrap_err();
    assert!(matches!(e, Error::Memory(_)), "{e}");
}

#[test]
fn a_processor_with_its_own_memory_is_checked_against_it_and_what_it_holds() {
    let dir = Tmp::new("memory-device");
    let model = tiny_model();
    let (path, plan) = all_on(&dir, &model, "npu-sim");
    let open = |memory_bytes: u64| {
        let mut reg = hetero_agent::Registry::open(&Default::default(), Some(&plan.processors));
        let mut backends = Vec::new();
        for id in &plan.processors {
            let i = reg
                .backends
                .iter()
                .position(|b| b.processor().id == *id)
                .unwrap();
            let b = reg.backends.remove(i);
            backends.push(if id == "npu-sim" {
                Box::new(OwnMemory::new(b, memory_bytes)) as Box<dyn Backend>
            } else {
                b
            });
        }
        Runtime::with_backends(
            &path,
            plan.clone(),
            model.clone(),
            backends,
            Default::default(),
        )
        .unwrap()
    };
    let mut small = open(10_000);
    let e = small.prepare(Phase::Prefill, 8).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("on `npu-sim`"), "{msg}");
    assert!(msg.contains("10000 bytes"), "{msg}");
    assert!(small.gemms.is_empty());
    // Room for one length, not for another length's GEMMs besides it.
    let ops = small.phase_ops(Phase::Prefill);
    let need = small.memory_need(Phase::Prefill, 8, &ops).unwrap();
    let at8 = need[&memory::Place::Device(1)].total() as u64;
    let mut room = open(at8 + at8 / 2);
    room.prepare(Phase::Prefill, 8).unwrap();
    let e = room.prepare(Phase::Prefill, 7).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("held by GEMMs prepared before"), "{msg}");
    let r = room.run(&spec(Phase::Prefill, 8)).unwrap();
    assert_eq!(r.check.unwrap().passed, 15);
}

#[test]
fn weights_copied_every_run_count_once_in_the_staging_ring_not_per_gemm() {
    // cpu:0 as a discrete GPU in an offload plan: its CG rows' weights are
    // copied every run. With staging slots it holds them in the ring only.
    let dir = Tmp::new("memory-staging");
    let model = tiny_model();
    let offload = |op: &LinearOp, _: Phase, _: u32, _: u32| Strategy::Offload {
        cpu: "npu-sim".into(),
        gpu: "cpu:0".into(),
        cc_rows: 8,
        cg_rows: op.n - 32,
        gg_rows: 24,
        gpu_tokens: 0,
    };
    let plan = tiny_plan(
        &model,
        &["cpu:0", "npu-sim"],
        &[(Phase::Decode, vec![1])],
        offload,
    );
    let path = dir.0.join("plan.ron");
    hetero_plan::save(&path, &plan).unwrap();
    let need = |staging: Option<usize>| {
        let mut reg = hetero_agent::Registry::open(&Default::default(), Some(&plan.processors));
        let mut backends: Vec<Box<dyn Backend>> = Vec::new();
        for id in &plan.processors {
            let i = reg
                .backends
                .iter()
                .position(|b| b.processor().id == *id)
                .unwrap();
            let b = reg.backends.remove(i);
            backends.push(if id == "cpu:0" {
                let mut own = OwnMemory::new(b, 1 << 40);
                own.staging = staging;
                Box::new(own)
            } else {
                b
            });
        }
        let rt = Runtime::with_backends(
            &path,
            plan.clone(),
            model.clone(),
            backends,
            Default::default(),
        )
        .unwrap();
        let ops = rt.phase_ops(Phase::Decode);
        let mut need = rt.memory_need(Phase::Decode, 1, &ops).unwrap();
        need.remove(&memory::Place::Device(0)).unwrap()
    };
    let (each, ring) = (need(None), need(Some(2)));
    // ffn_up (K×N 64×96): 64 CG columns of f32 weights in each of 2 layers.
    let cg_up = 64 * 64 * 4;
    assert_eq!(each.per_op["ffn_up"] - ring.per_op["ffn_up"], 2 * cg_up);
    // The ring: two slots of the largest CG weights (ffn_up's and
    // ffn_gate's; ffn_down's 32 columns of K = 96 are fewer bytes).
    assert!(!each.per_op.contains_key("staging ring"));
    assert_eq!(ring.per_op["staging ring"], 2 * cg_up);
    assert!(ring.total() < each.total());
}

#[test]
fn plan_static_graphs_are_the_static_gemms_the_runtime_asks_for() {
    // Every strategy family at every covered length: the graphs the
    // runtime requests from npu-sim's source are those `plan_static_graphs`
    // lists (what `hetero compile` builds), each for every layer and
    // instance, and nothing else.
    type Seen = Arc<Mutex<Vec<(String, u32, u32, u32, GemmSpec)>>>;
    struct Record(Seen);
    impl GraphSource for Record {
        fn graph(
            &mut self,
            backend: &mut dyn Backend,
            req: &GraphRequest<'_>,
            weights: &[f32],
        ) -> hetero_agent::Result<Box<dyn Gemm>> {
            let key = (
                req.op.to_string(),
                req.layer,
                req.instance,
                req.first_col,
                req.spec,
            );
            self.0.lock().unwrap().push(key);
            backend.prepare(&req.spec, weights)
        }
        fn describe(&self) -> String {
            "record".into()
        }
    }
    // With the weights as an input, one graph serves every layer and
    // instance, each run writing its own weights: the check passes.
    let dir = Tmp::new("static-graphs");
    let model = tiny_model();
    for weights in [WeightMode::Static, WeightMode::Input] {
        let mut plan = tiny_plan(
            &model,
            &["cpu:0", "npu-sim"],
            &[
                (Phase::Prefill, (1..=8).collect()),
                (Phase::Decode, vec![1, 2]),
            ],
            every_strategy,
        );
        plan.graph_sets = vec![hetero_plan::GraphSet {
            processor: "npu-sim".into(),
            sizes: vec![4, 8],
            decode_sizes: vec![1, 2],
            row_graphs: vec![],
            weights,
            prepare_us: 0.0,
            bytes: 0,
        }];
        let path = dir.0.join("plan.ron");
        hetero_plan::save(&path, &plan).unwrap();
        let mut rt = Runtime::open(&path, model.clone(), RuntimeOptions::default()).unwrap();
        let seen: Seen = Arc::default();
        rt.set_graph_source("npu-sim", Box::new(Record(seen.clone())))
            .unwrap();
        for len in 1..=8 {
            rt.prepare(Phase::Prefill, len).unwrap();
        }
        for len in 1..=2 {
            rt.prepare(Phase::Decode, len).unwrap();
        }
        let mut asked = seen.lock().unwrap().clone();
        asked.sort_by_key(|k| format!("{k:?}"));
        let listed = plan_static_graphs(&plan).unwrap();
        assert!(!listed.is_empty());
        let mut expected = Vec::new();
        for g in &listed {
            assert_eq!(g.processor, "npu-sim");
            assert_eq!(g.spec.weights, weights);
            let layers = match weights {
                WeightMode::Static => model.op(&g.op).unwrap().layers,
                WeightMode::Input => 1,
            };
            assert_eq!(g.layers, layers);
            for layer in 0..layers {
                for instance in 0..g.instances {
                    expected.push((g.op.clone(), layer, instance, g.first_col, g.spec));
                }
            }
        }
        expected.sort_by_key(|k| format!("{k:?}"));
        assert_eq!(asked, expected, "{weights:?}");
        for (phase, len) in [(Phase::Prefill, 7), (Phase::Decode, 2)] {
            let r = rt.run(&spec(phase, len)).unwrap();
            let c = r.check.as_ref().unwrap();
            assert_eq!(
                c.passed, c.outputs,
                "{weights:?} {phase} {len}: {:?}",
                c.failures
            );
        }
    }
}

/// A plan that decides per group of layers (offload mode's layer split):
/// layer 0 of every decoder operator on npu-sim, layer 1 on cpu:0. Each
/// group runs its own decision, every output checked.
#[test]
fn a_plan_decided_per_group_of_layers_runs_each_groups_decision() {
    let dir = Tmp::new("groups");
    let model = tiny_model();
    let lens = [(Phase::Prefill, vec![4]), (Phase::Decode, vec![1])];
    let on = |p: &'static str| move |_: &LinearOp, _: Phase, _: u32, _: u32| single(p);
    // ffn_up's layer 0 streams from the host on the GPU alone: no CPU named.
    let streamed = |op: &LinearOp, _: Phase, _: u32, _: u32| match op.name.as_str() {
        "ffn_up" => Strategy::Offload {
            cpu: String::new(),
            gpu: "npu-sim".into(),
            cc_rows: 0,
            cg_rows: 32,
            gg_rows: op.n - 32,
            gpu_tokens: 0,
        },
        _ => single("npu-sim"),
    };
    let first = tiny_plan(&model, &["cpu:0", "npu-sim"], &lens, streamed);
    let mut plan = tiny_plan(&model, &["cpu:0", "npu-sim"], &lens, on("cpu:0"));
    for (t, f) in plan.ops.iter_mut().zip(&first.ops) {
        if t.layers == 2 {
            t.first_layer = 1;
            t.layers = 1;
        }
        assert_eq!((t.op.as_str(), t.phase), (f.op.as_str(), f.phase));
    }
    plan.ops.extend(
        first
            .ops
            .into_iter()
            .filter(|t| t.layers == 2)
            .map(|mut t| {
                t.layers = 1;
                t
            }),
    );
    let path = dir.0.join("plan.ron");
    hetero_plan::save(&path, &plan).unwrap();
    let back: Plan = hetero_plan::load(&path).unwrap();
    assert_eq!(back, plan);
    let mut rt = Runtime::open(&path, model, RuntimeOptions::default()).unwrap();
    let npu = rt
        .decider()
        .op_index_at("attn_q", Phase::Decode, 0)
        .unwrap();
    let cpu = rt
        .decider()
        .op_index_at("attn_q", Phase::Decode, 1)
        .unwrap();
    assert_eq!(plan.ops[npu].at(1).unwrap().strategy, single("npu-sim"));
    assert_eq!(plan.ops[cpu].at(1).unwrap().strategy, single("cpu:0"));
    for (phase, len) in [(Phase::Prefill, 4), (Phase::Decode, 1)] {
        let r = rt.run(&spec(phase, len)).unwrap();
        let c = r.check.as_ref().unwrap();
        // 7 ops × 2 layers + lm_head, in 7 × 2 + 1 tables.
        assert_eq!(c.outputs, 15, "{phase} {len}");
        assert_eq!(c.passed, c.outputs, "{phase} {len}: {:?}", c.failures);
        assert_eq!(r.per_op.len(), 15);
        let layers: u32 = r.per_op.iter().map(|o| o.layers).sum();
        assert_eq!(layers, 15);
    }
    // One layer of one operator through the embedding entry point.
    let (m, k, n, _) = rt.op_dims("ffn_up", Phase::Decode, 1).unwrap();
    let input = vec![0.5f32; (m * k) as usize];
    let mut out = vec![0f32; (m * n) as usize];
    for layer in [0, 1] {
        rt.linear("ffn_up", Phase::Decode, layer, 1, &input, &mut out)
            .unwrap();
        let c = rt
            .check_linear("ffn_up", Phase::Decode, layer, 1, &input, &out)
            .unwrap();
        assert!(c.result.rel_err <= c.bound, "layer {layer}: {c:?}");
    }
    let e = rt
        .linear("ffn_up", Phase::Decode, 2, 1, &input, &mut out)
        .unwrap_err();
    assert!(e.to_string().contains("has 2 layers, not layer 2"), "{e}");
}
