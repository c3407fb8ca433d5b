//! The shared backend test suite: written once, run for every processor
//! present (candle's `test_device!`, burn's backend tests).
//!
//! A backend's own tests call [`check_backend`] on each processor it opens:
//!
//! ```no_run
//! # fn open() -> Vec<Box<dyn hetero_agent::Backend>> { Vec::new() }
//! for mut b in open() {
//!     hetero_agent::conformance::check_backend(b.as_mut());
//! }
//! ```
//!
//! It panics with a message naming the processor, dtype, order and shape at
//! the first violation, so it is meant for tests. What it checks:
//!
//! - the [`Processor`](hetero_plan::Processor) description is coherent (an id,
//!   at least one dtype, `simulated` for the simulator API, a tile for static
//!   graphs);
//! - for every dtype the processor lists and both operand orders, odd shapes
//!   (each of 1, 7, 129 and 4097 in each dimension) match the CPU f64
//!   reference within [`Backend::tolerance`] (fixed-point dtypes only from
//!   K = [`MIN_K_FIXED_POINT`] on); a second input on the same prepared GEMM
//!   is read, not cached;
//! - static-graph processors report a prepare time; times are positive;
//! - a dtype it does not list is refused with [`Error::Unsupported`];
//! - wrong buffer lengths are errors, not panics;
//! - asynchronous submit/wait, where offered, give the same product with
//!   both [`SyncMode`]s (skipped with a printed reason where not offered).
//!
//! Static-graph processors whose prepare is slow can pass fewer shapes with
//! [`check_backend_with`].
//!
//! [`microbench_ok`] runs one microbenchmark through the sweep and checks
//! that its row passed, for the backends' tests of their host-path costs.

use hetero_plan::{
    DType, GemmShape, MicrobenchKind, MicrobenchRequest, OperandOrder, ProcessorApi, RowStatus,
    RunParams, Stats, WeightMode,
};

use crate::sweep::Sweeper;
use crate::{Backend, Error, GemmSpec, SyncMode, verify};

/// What to run; [`Options::default`] is the full suite.
#[derive(Debug, Clone)]
pub struct Options {
    /// Shapes `(M, K, N)` checked in every dtype and order.
    pub shapes: Vec<(u32, u32, u32)>,
    /// Dtypes to check; `None` means every dtype the processor lists.
    pub dtypes: Option<Vec<DType>>,
    /// Operand orders to check.
    pub orders: Vec<OperandOrder>,
}

/// Each of 1, 7, 129 and 4097 appears in each dimension, with products
/// small enough for a 2-core debug build.
pub const ODD_SHAPES: [(u32, u32, u32); 6] = [
    (1, 1, 1),
    (7, 129, 1),
    (4097, 7, 129),
    (129, 1, 4097),
    (1, 4097, 7),
    (129, 129, 129),
];

impl Default for Options {
    fn default() -> Self {
        Options {
            shapes: ODD_SHAPES.to_vec(),
            dtypes: None,
            orders: vec![OperandOrder::Aw, OperandOrder::Transposed],
        }
    }
}

/// Runs one microbenchmark on `processor` through the sweep, as `hetero
/// profile` asks for it, and returns its note and statistics; panics
/// (naming the benchmark and size) unless its row is `ok` with at least
/// `run.repetitions` samples.
pub fn microbench_ok(
    s: &mut Sweeper,
    processor: &str,
    bench: MicrobenchKind,
    bytes: Option<u64>,
    run: &RunParams,
) -> (String, Stats) {
    let req = MicrobenchRequest {
        id: format!("{bench:?}/{bytes:?}"),
        processor: processor.into(),
        bench,
        bytes,
        peer: None,
        shape: None,
    };
    let line = s.run_microbench(&req, run);
    assert_eq!(
        line.row.status,
        RowStatus::Ok,
        "{bench:?} {bytes:?}: {:?}",
        line.row.message
    );
    let stats = line.row.stats.expect("an ok row has statistics");
    assert!(stats.count >= run.repetitions, "{stats:?}");
    let note = line.note.unwrap_or_default();
    eprintln!(
        "{processor} {bench:?} {bytes:?}: median {:.2} µs ({note})",
        stats.median_us
    );
    (note, stats)
}

/// Runs the full suite on one processor; panics on the first violation.
pub fn check_backend(b: &mut dyn Backend) {
    check_backend_with(b, &Options::default());
}

/// Runs the suite with chosen shapes, dtypes and orders.
pub fn check_backend_with(b: &mut dyn Backend, opts: &Options) {
    let p = b.processor().clone();
    let id = p.id.clone();
    assert!(!id.is_empty(), "processor id is empty");
    assert!(!p.name.is_empty(), "{id}: processor name is empty");
    assert!(!p.capabilities.dtypes.is_empty(), "{id}: lists no dtype");
    if p.api == ProcessorApi::Sim {
        assert!(p.simulated, "{id}: the simulator API must say simulated");
    }
    if p.capabilities.static_graphs {
        assert!(
            p.capabilities.tile.is_some(),
            "{id}: a static-graph processor should state its tile"
        );
    }
    let dtypes = opts
        .dtypes
        .clone()
        .unwrap_or_else(|| p.capabilities.dtypes.clone());
    for &dtype in &dtypes {
        assert!(
            p.capabilities.dtypes.contains(&dtype),
            "{id}: asked to check {dtype}, which it does not list"
        );
        for &order in &opts.orders {
            for &(m, k, n) in &opts.shapes {
                if is_fixed_point(dtype) && k < MIN_K_FIXED_POINT {
                    eprintln!(
                        "skipping: {id} {dtype} {order} {m}x{k}x{n}: a fixed-point output \
                         cannot be checked element-wise at K < {MIN_K_FIXED_POINT}"
                    );
                    continue;
                }
                check_product(b, dtype, order, GemmShape::new(m, k, n).expect("non-zero"));
            }
        }
    }
    check_refusals(b);
    check_async(b, dtypes[0]);
}

/// The smallest K at which quantised (fixed-point) dtypes are checked.
///
/// [`verify::check`] bounds each output's error by `Σ|a·w|` over its row and
/// column. A fixed-point output has an absolute rounding step set by its
/// encoding range, and weight rounding is up to half a step per weight, so
/// at small K an output whose `Σ|a·w|` happens to be tiny fails any useful
/// bound (measured on the QNN HTP emulator: w8a16 at K = 1 reaches 39×,
/// w4a16 at K = 7 reaches 0.2). From K = 64 on the sum averages out.
pub const MIN_K_FIXED_POINT: u32 = 64;

/// Dtypes whose weights or outputs are fixed point.
fn is_fixed_point(dtype: DType) -> bool {
    !matches!(dtype, DType::F32 | DType::F16 | DType::Bf16)
}

fn spec(shape: GemmShape, dtype: DType, order: OperandOrder) -> GemmSpec {
    GemmSpec {
        shape,
        dtype,
        order,
        weights: WeightMode::Static,
    }
}

fn check_product(b: &mut dyn Backend, dtype: DType, order: OperandOrder, shape: GemmShape) {
    let id = b.processor().id.clone();
    let static_graphs = b.processor().capabilities.static_graphs;
    let what = format!("{id} {dtype} {order} {shape}");
    let (m, k, n) = shape.mkn();
    let (a, w) = verify::inputs(&shape, 0);
    let mut g = b
        .prepare(&spec(shape, dtype, order), &w)
        .unwrap_or_else(|e| panic!("{what}: prepare failed: {e}"));
    assert_eq!(g.spec().shape, shape, "{what}: spec() lost the shape");
    match g.prepare_us() {
        Some(t) => assert!(t.is_finite() && t >= 0.0, "{what}: prepare_us {t}"),
        None => assert!(!static_graphs, "{what}: static graph without prepare_us"),
    }
    let tol = b.tolerance(dtype, k);
    let mut c = vec![f32::NAN; m as usize * n as usize];
    for salt in [0u64, 1] {
        let a = if salt == 0 {
            a.clone()
        } else {
            verify::inputs(&shape, salt).0
        };
        g.write_input(&a)
            .unwrap_or_else(|e| panic!("{what}: write_input: {e}"));
        let t = g
            .execute()
            .unwrap_or_else(|e| panic!("{what}: execute: {e}"));
        assert!(
            t.host_us.is_finite()
                && t.host_us > 0.0
                && t.best_us().is_finite()
                && t.best_us() >= 0.0,
            "{what}: bad time {t:?}"
        );
        g.read_output(&mut c)
            .unwrap_or_else(|e| panic!("{what}: read_output: {e}"));
        let r = verify::check(&shape, &a, &w, &c);
        assert!(
            r.passes(tol),
            "{what} (input {salt}): error {:.3e} > {tol:.3e} at C[{},{}]",
            r.rel_err,
            r.worst.0,
            r.worst.1
        );
    }
}

fn check_refusals(b: &mut dyn Backend) {
    let p = b.processor().clone();
    let id = &p.id;
    let shape = GemmShape::new(3, 5, 4).expect("non-zero");
    if let Some(missing) = DType::ALL
        .iter()
        .find(|d| !p.capabilities.dtypes.contains(d))
    {
        let w = vec![0.5f32; 20];
        match b.prepare(&spec(shape, *missing, OperandOrder::Aw), &w) {
            Err(Error::Unsupported { .. }) => {}
            Err(e) => panic!("{id}: dtype {missing} should be Unsupported, got {e}"),
            Ok(_) => panic!("{id}: prepared dtype {missing}, which it does not list"),
        }
    }
    let dtype = p.capabilities.dtypes[0];
    assert!(
        b.prepare(&spec(shape, dtype, OperandOrder::Aw), &[0.0; 19])
            .is_err(),
        "{id}: accepted 19 weights for a 5x4 weight matrix"
    );
    let (a, w) = verify::inputs(&shape, 0);
    let mut g = b
        .prepare(&spec(shape, dtype, OperandOrder::Aw), &w)
        .unwrap_or_else(|e| panic!("{id}: prepare 3x5x4: {e}"));
    assert!(
        g.write_input(&a[..14]).is_err(),
        "{id}: accepted a short input"
    );
    g.write_input(&a).expect("write_input");
    g.execute().expect("execute");
    assert!(
        g.read_output(&mut [0.0; 11]).is_err(),
        "{id}: accepted a short output buffer"
    );
}

fn check_async(b: &mut dyn Backend, dtype: DType) {
    let id = b.processor().id.clone();
    let shape = GemmShape::new(7, 129, 33).expect("non-zero");
    let (a, w) = verify::inputs(&shape, 0);
    let mut g = b
        .prepare(&spec(shape, dtype, OperandOrder::Aw), &w)
        .unwrap_or_else(|e| panic!("{id}: prepare: {e}"));
    g.write_input(&a).expect("write_input");
    let tol = b.tolerance(dtype, 129);
    for mode in [SyncMode::Block, SyncMode::Poll { predicted_us: 10.0 }] {
        match g.submit() {
            Err(Error::Unsupported { .. }) => {
                eprintln!("skipping: {id} offers no asynchronous submit");
                return;
            }
            Err(e) => panic!("{id}: submit: {e}"),
            Ok(()) => {}
        }
        let t = g
            .wait(mode)
            .unwrap_or_else(|e| panic!("{id}: wait {mode:?}: {e}"));
        assert!(t.host_us > 0.0, "{id}: wait {mode:?} gave {t:?}");
        let mut c = vec![f32::NAN; 7 * 33];
        g.read_output(&mut c).expect("read_output");
        let r = verify::check(&shape, &a, &w, &c);
        assert!(r.passes(tol), "{id} async {mode:?}: {r:?}");
    }
}
