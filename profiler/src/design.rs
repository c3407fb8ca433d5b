//! Sweep design: which GEMMs to measure, in which order, and where to add
//! more.
//!
//! The initial design has five strata, interleaved so that a short budget
//! still covers each of them:
//! - **model shapes**: every operator of every `--models` config at prefill
//!   lengths 1..4096 and decode batches 1..8 (`LinearOp::gemms`);
//! - **stage probes**: each dimension at multiples of 32, 64, 128 and 256 and
//!   one past them, to catch the stair steps of tiled processors;
//! - **split shares**: each model operator's (K, N) with N cut to a
//!   quarter and a half, at a few M, because the solver asks for the time of
//!   the share of the output features each processor computes;
//! - **a coarse grid** in log space;
//! - **random queries**: shapes drawn as the solver asks for them (a model
//!   operator at any length, N often cut to a multiple of the row
//!   alignment), so that lengths that are not powers of two, with their
//!   alignment classes, are measured too ([`query_shapes`]);
//! - **microbenchmarks** (copies, submit, sync, bandwidth, graph prepare).
//!
//! Every GEMM is measured in both operand orders, except on a processor
//! that runs both as one kernel ([`design_orders`]): there each shape is
//! measured once, and the rows saved go to as many more random queries.
//! Within a stratum the order is coarse to fine (the ends of each range
//! first, then midpoints), so an early stop still spans the range.
//! Refinement then adds shapes where the throughput guide's leave-one-out
//! error is above the threshold (nn-Meter's adaptive sampling): the
//! geometric midpoints between a badly predicted point and its nearest
//! measured neighbours.
//!
//! Case ids name the content (`cpu:0/64x256x256/f32/aw`), so the same GEMM
//! asked for by two strata is measured once and a resumed run recognises it.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use hetero_plan::{
    DType, GemmShape, MicrobenchKind, MicrobenchRequest, ModelSpec, OperandOrder, Phase, Processor,
    SweepCase, WeightMode,
};
use serde::Serialize;

use crate::guide::ThroughputGuide;

/// Prefill sequence lengths (1..4096, denser where models switch regimes).
pub const PREFILL_LENGTHS: [u32; 20] = [
    1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096,
];
/// Decode batch sizes (tokens decoded at once: 1, or n for speculative decoding).
pub const DECODE_TOKENS: [u32; 8] = [1, 2, 3, 4, 5, 6, 7, 8];
/// Held-out relative error above which refinement measures more.
pub const REFINE_THRESHOLD: f64 = 0.10;

/// Why a case is in the sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stratum {
    /// A microbenchmark.
    Microbench,
    /// A shape a model runs.
    Model,
    /// A stage-size probe.
    Stage,
    /// A share of a model operator's output features.
    Split,
    /// The coarse grid.
    Grid,
    /// Random solver-style queries.
    Query,
    /// Added by refinement.
    Refine,
    /// Given by the caller: a plan's GEMMs.
    Given,
    /// A second measurement of a case already measured (the repeat pass).
    Repeat,
}

/// One thing to measure.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// A GEMM.
    Case(SweepCase),
    /// A microbenchmark.
    Bench(MicrobenchRequest),
}

impl Item {
    /// Its id.
    pub fn id(&self) -> &str {
        match self {
            Item::Case(c) => &c.id,
            Item::Bench(b) => &b.id,
        }
    }

    /// Its processor.
    pub fn processor(&self) -> &str {
        match self {
            Item::Case(c) => &c.processor,
            Item::Bench(b) => &b.processor,
        }
    }
}

/// An item with the reason it was planned.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    /// What to measure.
    pub item: Item,
    /// Why.
    pub stratum: Stratum,
}

/// The content-named id of a GEMM case.
pub fn case_id(processor: &str, shape: GemmShape, dtype: DType, order: OperandOrder) -> String {
    format!("{processor}/{shape}/{dtype}/{order}")
}

/// What a repeat's case id adds to the id of the case it measures again
/// (`cpu:0/64x256x256/f32/aw@repeat`).
pub const REPEAT_SUFFIX: &str = "@repeat";

/// The repeat of `c`: the same GEMM under an id of its own, so that the
/// journal keeps both rows.
pub fn repeat_case(c: &SweepCase) -> SweepCase {
    SweepCase {
        id: format!("{}{REPEAT_SUFFIX}", c.id),
        ..c.clone()
    }
}

/// The id of the case that `id` repeats, if it is a repeat's.
pub fn repeated_id(id: &str) -> Option<&str> {
    id.strip_suffix(REPEAT_SUFFIX)
}

/// Builds a case.
pub fn case(processor: &str, shape: GemmShape, dtype: DType, order: OperandOrder) -> SweepCase {
    SweepCase {
        id: case_id(processor, shape, dtype, order),
        processor: processor.to_string(),
        shape,
        dtype,
        order,
        weights: WeightMode::Static,
        run: None,
    }
}

/// Orders `v` coarse to fine: both ends, then the middle, then the middles
/// of the halves, and so on.
pub fn coarse_to_fine<T: Clone>(v: &[T]) -> Vec<T> {
    let n = v.len();
    if n <= 2 {
        return v.to_vec();
    }
    let mut out = vec![v[0].clone(), v[n - 1].clone()];
    let mut queue = std::collections::VecDeque::from([(0usize, n - 1)]);
    while let Some((lo, hi)) = queue.pop_front() {
        if hi - lo < 2 {
            continue;
        }
        let mid = (lo + hi) / 2;
        out.push(v[mid].clone());
        queue.push_back((lo, mid));
        queue.push_back((mid, hi));
    }
    out
}

/// The GEMM shapes the models run, coarse to fine over the token counts.
pub fn model_shapes(models: &[ModelSpec]) -> Vec<GemmShape> {
    let mut tokens: Vec<(Phase, u32)> = DECODE_TOKENS
        .iter()
        .map(|&t| (Phase::Decode, t))
        .chain(PREFILL_LENGTHS.iter().map(|&t| (Phase::Prefill, t)))
        .collect();
    tokens.sort_by_key(|&(p, t)| (t, p));
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (phase, t) in coarse_to_fine(&tokens) {
        for model in models {
            for op in &model.ops {
                if let Some((shape, _)) = op.gemms(phase, t)
                    && seen.insert(shape)
                {
                    out.push(shape);
                }
            }
        }
    }
    out
}

/// Shares of N the solver asks about: a quarter and a half.
pub const SPLIT_SHARES: [(u32, u32); 2] = [(1, 4), (1, 2)];
/// The M of the split shares: decode, short and long prefill.
pub const SPLIT_TOKENS: [u32; 4] = [1, 8, 128, 1024];

/// Each model operator's GEMM at the [`SPLIT_TOKENS`] (decode up to 8
/// tokens, prefill above, so an lm_head stays at its one row in prefill)
/// with N cut to the [`SPLIT_SHARES`] (rounded down to a multiple of 64),
/// coarse to fine over the tokens; shapes the model stratum has already are
/// left out.
pub fn split_shapes(models: &[ModelSpec]) -> Vec<GemmShape> {
    let whole: HashSet<GemmShape> = model_shapes(models).into_iter().collect();
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for t in coarse_to_fine(&SPLIT_TOKENS) {
        let phase = if t <= 8 {
            Phase::Decode
        } else {
            Phase::Prefill
        };
        for op in models.iter().flat_map(|m| &m.ops) {
            let Some((shape, _)) = op.gemms(phase, t) else {
                continue;
            };
            let (m, k, n) = shape.mkn();
            for (num, den) in SPLIT_SHARES {
                let part = (n as u64 * num as u64 / den as u64 / 64 * 64).max(64) as u32;
                if let Some(s) = GemmShape::new(m, k, part)
                    && part < n
                    && !whole.contains(&s)
                    && seen.insert(s)
                {
                    out.push(s);
                }
            }
        }
    }
    out
}

/// Random queries in the initial design, per processor (each in both
/// operand orders). 240 rather than 96 since the H100's row search: moving
/// 150 held-out query shapes into a 914-row design took the rest from
/// 95.3–96.2 % to 97.5 % within ±10 % (`docs/benchmarks.md`, Predictors).
pub const DESIGN_QUERIES: usize = 240;
/// The seed of the design's random queries; `hetero profile --queries`
/// defaults to another, so that a held-out set is drawn apart from them.
pub const DESIGN_QUERY_SEED: u64 = 0;
/// Row shares of the queries are multiples of this: the solver's default
/// row alignment (`solver::Settings::row_align`).
pub const QUERY_ROW_ALIGN: u32 = 256;
/// Longest prefill of the queries, as of [`PREFILL_LENGTHS`].
pub const QUERY_MAX_TOKENS: u32 = 4096;

/// Keeps the shapes of at most `max_len` rows (M): `hetero profile
/// --max-len`, for a device whose plans will never see longer prompts, and
/// whose long GEMMs would take the budget (a CPU running a 4096-token
/// prefill GEMM for seconds per run). `None` keeps every shape.
fn up_to(mut shapes: Vec<GemmShape>, max_len: Option<u32>) -> Vec<GemmShape> {
    if let Some(max) = max_len {
        shapes.retain(|s| s.m.get() <= max);
    }
    shapes
}

/// `count` distinct GEMM shapes drawn as the solver asks a predictor for
/// them, from `seed` (the same seed gives the same shapes on every
/// machine): a model operator, uniformly; a token count log-uniform in
/// 1..=`max_tokens` (at most [`QUERY_MAX_TOKENS`]; decode at 8 tokens or
/// fewer, so an lm_head stays at its decode rows); and for two in five,
/// when N spans more than two [`QUERY_ROW_ALIGN`] steps, N cut to a
/// multiple of that step or to what such a cut leaves. Fewer than `count` if the models have fewer
/// distinct shapes to draw.
pub fn query_shapes(
    models: &[ModelSpec],
    count: usize,
    seed: u64,
    max_tokens: u32,
) -> Vec<GemmShape> {
    use rand::{Rng, SeedableRng};
    let ops: Vec<_> = models.iter().flat_map(|m| &m.ops).collect();
    if ops.is_empty() || count == 0 {
        return Vec::new();
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    let ln_max = (max_tokens.clamp(1, QUERY_MAX_TOKENS) as f64).ln();
    // Draws until `count` are distinct, with room for repeats (small token
    // counts repeat often) and a stop for models with few shapes.
    for _ in 0..count * 50 {
        if out.len() >= count {
            break;
        }
        let op = ops[rng.gen_range(0..ops.len())];
        let t = rng.gen_range(0.0..=ln_max).exp().round().max(1.0) as u32;
        let phase = if t <= 8 {
            Phase::Decode
        } else {
            Phase::Prefill
        };
        let Some((shape, _)) = op.gemms(phase, t) else {
            continue;
        };
        let (m, k, mut n) = shape.mkn();
        let steps = n / QUERY_ROW_ALIGN;
        if rng.gen_bool(0.4) && steps > 2 {
            let cut = rng.gen_range(1..steps) * QUERY_ROW_ALIGN;
            n = if rng.gen_bool(0.5) { cut } else { n - cut };
        }
        if let Some(s) = GemmShape::new(m, k, n)
            && seen.insert(s)
        {
            out.push(s);
        }
    }
    out
}

/// Stage probes: each dimension at multiples of 32/64/128/256 (and of the
/// processor's tile) and one past them, the other two fixed.
pub fn stage_shapes(tile: Option<u32>) -> Vec<GemmShape> {
    let mut values: BTreeSet<u32> = [32, 64, 96, 128, 192, 256, 384, 512].into_iter().collect();
    for s in [32, 64, 128, 256] {
        values.insert(s + 1);
        values.insert(2 * s + 1);
    }
    if let Some(t) = tile.filter(|&t| t > 0 && t <= 4096) {
        for v in [t, t + 1, 2 * t, 2 * t + 1] {
            values.insert(v);
        }
    }
    let values: Vec<u32> = values.into_iter().collect();
    let base = (128, 1024, 1024);
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for v in coarse_to_fine(&values) {
        for shape in [
            GemmShape::new(v, base.1, base.2),
            GemmShape::new(base.0, v, base.2),
            GemmShape::new(base.0, base.1, v),
        ]
        .into_iter()
        .flatten()
        {
            if seen.insert(shape) {
                out.push(shape);
            }
        }
    }
    out
}

/// The coarse grid, in log space.
pub fn grid_shapes() -> Vec<GemmShape> {
    let ms = [1, 16, 256, 4096];
    let ks = [256, 2048, 8192];
    let ns = [256, 2048, 16384];
    let mut v = Vec::new();
    for m in ms {
        for k in ks {
            v.extend(ns.iter().filter_map(|&n| GemmShape::new(m, k, n)));
        }
    }
    v.sort_by(|a, b| a.flops().total_cmp(&b.flops()));
    coarse_to_fine(&v)
}

/// The element types to measure on a processor: those asked for that it
/// supports, or by default one ([`Processor::default_dtype`]).
pub fn dtypes_for(p: &Processor, wanted: Option<&[DType]>) -> Vec<DType> {
    let caps = &p.capabilities.dtypes;
    match wanted {
        Some(w) => w.iter().copied().filter(|d| caps.contains(d)).collect(),
        None => p.default_dtype().into_iter().collect(),
    }
}

/// The microbenchmarks of a set of processors.
pub fn microbench(processors: &[Processor]) -> Vec<MicrobenchRequest> {
    let mut out = Vec::new();
    for p in processors {
        let staged = staged_kinds(p);
        transfers(p, staged, &mut out);
        for bench in [
            MicrobenchKind::SubmitEmpty,
            MicrobenchKind::SubmitBusy,
            MicrobenchKind::SyncBlock,
            MicrobenchKind::SyncPoll,
        ] {
            out.push(bench_request(p, bench));
        }
        launch_overheads(p, processors, &mut out);
        out.push(MicrobenchRequest {
            bytes: Some(64 << 20),
            ..bench_request(p, MicrobenchKind::BandwidthAlone)
        });
        for q in processors.iter().filter(|q| q.id != p.id) {
            out.push(MicrobenchRequest {
                bytes: Some(64 << 20),
                peer: Some(q.id.clone()),
                ..bench_request(p, MicrobenchKind::BandwidthConcurrent)
            });
        }
        if p.capabilities.static_graphs {
            for shape in [(128, 2048, 2048), (1024, 2048, 8192)] {
                out.push(MicrobenchRequest {
                    shape: GemmShape::new(shape.0, shape.1, shape.2),
                    ..bench_request(p, MicrobenchKind::GraphPrepare)
                });
            }
        }
    }
    for r in &mut out {
        r.id = bench_id(r);
    }
    out
}

/// A request of `bench` on `p` without arguments, and without its id yet.
fn bench_request(p: &Processor, bench: MicrobenchKind) -> MicrobenchRequest {
    MicrobenchRequest {
        id: String::new(),
        processor: p.id.clone(),
        bench,
        bytes: None,
        peer: None,
        shape: None,
    }
}

/// A microbenchmark's id: `mb/`, the processor, the benchmark and its
/// arguments (`mb/cpu:0/copy_h2d/4096`).
fn bench_id(r: &MicrobenchRequest) -> String {
    let mut id = format!("mb/{}/{}", r.processor, crate::dataset::enum_str(&r.bench));
    if let Some(b) = r.bytes {
        id.push_str(&format!("/{b}"));
    }
    if let Some(p) = &r.peer {
        id.push_str(&format!("/{p}"));
    }
    if let Some(s) = r.shape {
        id.push_str(&format!("/{s}"));
    }
    id
}

/// The staged transfers a processor is measured with: GEMM inputs and
/// outputs staged as the runtime does (`write_input`, `read_output`):
/// conversion, transpose, DMA and synchronisation together. On unified
/// memory too: runtime-min's backends copy there as well (the cpu backend
/// into its GEMM's own buffers, an OpenCL CPU device into its buffers with
/// the operand order's transpose), about 13 % of a 64-token prefill on a
/// 2-core x86-64 machine where the plan had charged nothing. Not on
/// static-graph processors (every size would be a graph to prepare) or
/// simulated ones (their copies are not modelled).
fn staged_kinds(p: &Processor) -> &'static [MicrobenchKind] {
    if p.simulated || (p.capabilities.unified_memory && p.capabilities.static_graphs) {
        &[]
    } else {
        &[
            MicrobenchKind::StageIn,
            MicrobenchKind::StageOut,
            MicrobenchKind::StageOutAw,
        ]
    }
}

/// Plain copies and the `staged` transfers, at every size of [`SIZES`]
/// (and, for staged ones, the bound of a CUDA device's launch copy).
fn transfers(p: &Processor, staged: &[MicrobenchKind], out: &mut Vec<MicrobenchRequest>) {
    // Where a CUDA device copies inside its launch (`launch_copy_max_bytes`),
    // the staged sizes up to that bound take a line of their own, so the
    // bound itself is measured too: the line then reaches the largest such
    // copy.
    let mut staged_sizes = SIZES.to_vec();
    if let Some(max) = p.capabilities.launch_copy_max_bytes
        && let Err(at) = staged_sizes.binary_search(&max)
    {
        staged_sizes.insert(at, max);
    }
    for &bench in [MicrobenchKind::CopyH2d, MicrobenchKind::CopyD2h]
        .iter()
        .chain(staged)
    {
        let sizes = if staged.contains(&bench) {
            &staged_sizes[..]
        } else {
            &SIZES[..]
        };
        for &bytes in sizes {
            out.push(MicrobenchRequest {
                bytes: Some(bytes),
                ..bench_request(p, bench)
            });
        }
    }
}

/// Copy sizes. Up to 64 MiB: prefill activations of a 1.5B model at 2048
/// tokens are 73 MB, and a line fitted below 16 MiB was seen 15 % off
/// there. Four sizes below 1 MiB, where decode and short prefills copy
/// (6 KB to 800 KB for that model), so that the fixed cost does not rest on
/// one point: a single 4 KiB point 3x too slow once doubled the fitted
/// fixed cost of an H100 profile. Two between 1 and 16 MiB, where prefill
/// copies of 128 to 1000 rows fall: with none, an H100's 1.8 MB copies ran
/// 5-11 % over the line, against 2-3 % at 12 MB.
const SIZES: [u64; 9] = [
    4 << 10,
    16 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
    2 << 20,
    6 << 20,
    16 << 20,
    64 << 20,
];

/// What the host adds around a device-timed operator, through the
/// backend's own launch path, per wait: the solver's cost of one launch
/// and completion notice where measured.
fn launch_overheads(p: &Processor, processors: &[Processor], out: &mut Vec<MicrobenchRequest>) {
    if !p.capabilities.device_timer || p.simulated || p.emulated {
        return;
    }
    out.push(bench_request(p, MicrobenchKind::OpOverheadBlock));
    if p.capabilities.host_flag {
        out.push(bench_request(p, MicrobenchKind::OpOverheadPoll));
    }
    // The same after each processor on host memory has run (the solver's
    // cost of the operators alone in offload mode, which only a discrete
    // GPU takes part in).
    for q in processors.iter().filter(|q| {
        !p.capabilities.unified_memory
            && q.id != p.id
            && !q.simulated
            && !q.emulated
            && (q.kind == hetero_plan::ProcessorKind::Cpu || q.capabilities.unified_memory)
    }) {
        out.push(MicrobenchRequest {
            peer: Some(q.id.clone()),
            ..bench_request(p, MicrobenchKind::LaunchOverheadAfterCpu)
        });
    }
}

/// Agent processes that measure the host-path microbenchmarks at most: the
/// batch of the first round, then one repeat round in each of the next
/// `MICRO_PROCESSES - 1` batches (each batch is its own agent process), as
/// many as the budget plan affords (`profile::budget`). The host's CUDA path
/// runs at one speed per process: on a 16-core Xeon host with one H100,
/// 24 processes of one decode plan ran at 0.74-0.94 of its prediction, the
/// launch, copy and submit costs together, whatever core, address layout or
/// huge-page setting. Measured in one process, the fixed costs of every
/// plan rest on one such draw; the fit takes the median over the processes
/// ([`crate::fit`]).
pub const MICRO_PROCESSES: usize = 4;

/// Largest copy repeated by [`microbench_repeats`]: the sizes where the
/// fixed cost dominates (decode and short prefills).
pub const REPEAT_MAX_BYTES: u64 = 256 << 10;

/// The host-path microbenchmarks of [`microbench`] (copies and staged
/// copies up to [`REPEAT_MAX_BYTES`], submit and sync), once per repeat
/// round `2..=MICRO_PROCESSES`, each id with `@round` added.
pub fn microbench_repeats(processors: &[Processor]) -> Vec<Vec<MicrobenchRequest>> {
    let host_path: Vec<MicrobenchRequest> = microbench(processors)
        .into_iter()
        .filter(|r| match r.bench {
            MicrobenchKind::CopyH2d
            | MicrobenchKind::CopyD2h
            | MicrobenchKind::StageIn
            | MicrobenchKind::StageOut
            | MicrobenchKind::StageOutAw => r.bytes.is_some_and(|b| b <= REPEAT_MAX_BYTES),
            MicrobenchKind::SubmitEmpty
            | MicrobenchKind::SubmitBusy
            | MicrobenchKind::SyncBlock
            | MicrobenchKind::SyncPoll
            | MicrobenchKind::OpOverhead
            | MicrobenchKind::OpOverheadBlock
            | MicrobenchKind::OpOverheadPoll
            | MicrobenchKind::LaunchOverheadAfterCpu => true,
            _ => false,
        })
        .collect();
    (2..=MICRO_PROCESSES)
        .map(|round| {
            host_path
                .iter()
                .map(|r| MicrobenchRequest {
                    id: format!("{}@{round}", r.id),
                    ..r.clone()
                })
                .collect()
        })
        .collect()
}

/// The initial design for the processors, highest priority first; with
/// `max_len`, only GEMMs of at most that many rows.
pub fn initial(
    processors: &[Processor],
    models: &[ModelSpec],
    dtypes: Option<&[DType]>,
    with_microbench: bool,
    max_len: Option<u32>,
) -> Vec<Planned> {
    let model = up_to(model_shapes(models), max_len);
    let split = up_to(split_shapes(models), max_len);
    let grid = up_to(grid_shapes(), max_len);
    let max_tokens = max_len.unwrap_or(QUERY_MAX_TOKENS);
    let queries = query_shapes(models, DESIGN_QUERIES, DESIGN_QUERY_SEED, max_tokens);
    let mut per_proc: Vec<Vec<Planned>> = Vec::new();
    for p in processors {
        let stage = up_to(stage_shapes(p.capabilities.tile), max_len);
        let orders = design_orders(p);
        let queries = if orders.len() == 1 {
            // One row a shape: the rows a second order would have taken go
            // to as many more queries, drawn on from the same seed.
            let shapes = model.len() + stage.len() + split.len() + grid.len() + queries.len();
            query_shapes(
                models,
                queries.len() + shapes,
                DESIGN_QUERY_SEED,
                max_tokens,
            )
        } else {
            queries.clone()
        };
        let mut strata: Vec<(Stratum, Vec<GemmShape>)> = vec![
            (Stratum::Model, model.clone()),
            (Stratum::Stage, stage),
            (Stratum::Split, split.clone()),
            (Stratum::Grid, grid.clone()),
            (Stratum::Query, queries),
        ];
        strata.retain(|(_, v)| !v.is_empty());
        let mut list = Vec::new();
        // Round-robin over the strata, one shape (in its orders, every dtype) at a time.
        let mut idx = vec![0usize; strata.len()];
        loop {
            let mut any = false;
            for (si, (stratum, shapes)) in strata.iter().enumerate() {
                if let Some(&shape) = shapes.get(idx[si]) {
                    idx[si] += 1;
                    any = true;
                    list.extend(planned_cases(p, shape, dtypes, orders, *stratum));
                }
            }
            if !any {
                break;
            }
        }
        per_proc.push(list);
    }
    let mut out = Vec::new();
    if with_microbench {
        out.extend(microbench(processors).into_iter().map(|b| Planned {
            item: Item::Bench(b),
            stratum: Stratum::Microbench,
        }));
    }
    interleave(per_proc, &mut out);
    out
}

/// A held-out design: `count` random queries of the models from `seed`
/// ([`query_shapes`], of at most `max_len` rows) on every processor, in
/// both operand orders (on an order-free processor too: the solver asks
/// for both, and the held-out rows check that they take one time), and
/// nothing else.
pub fn queries(
    processors: &[Processor],
    models: &[ModelSpec],
    dtypes: Option<&[DType]>,
    count: usize,
    seed: u64,
    max_len: Option<u32>,
) -> Vec<Planned> {
    let shapes = query_shapes(models, count, seed, max_len.unwrap_or(QUERY_MAX_TOKENS));
    let per_proc = processors
        .iter()
        .map(|p| {
            shapes
                .iter()
                .flat_map(|&s| planned_cases(p, s, dtypes, &BOTH_ORDERS, Stratum::Query))
                .collect()
        })
        .collect();
    let mut out = Vec::new();
    interleave(per_proc, &mut out);
    out
}

/// A design of the given cases alone, in their order (`hetero profile
/// --plan`: the GEMMs a plan runs).
pub fn given(cases: &[SweepCase]) -> Vec<Planned> {
    cases
        .iter()
        .map(|c| Planned {
            item: Item::Case(c.clone()),
            stratum: Stratum::Given,
        })
        .collect()
}

/// Both operand orders.
const BOTH_ORDERS: [OperandOrder; 2] = [OperandOrder::Aw, OperandOrder::Transposed];

/// The operand orders the initial design measures on `p`: `aw` alone on
/// an [`order_free`](hetero_plan::Capabilities::order_free) processor,
/// whose two orders run one kernel, else both.
pub fn design_orders(p: &Processor) -> &'static [OperandOrder] {
    if p.capabilities.order_free {
        &BOTH_ORDERS[..1]
    } else {
        &BOTH_ORDERS
    }
}

/// `shape` on `p` in every dtype to measure and each of `orders`.
fn planned_cases<'a>(
    p: &'a Processor,
    shape: GemmShape,
    dtypes: Option<&[DType]>,
    orders: &'static [OperandOrder],
    stratum: Stratum,
) -> impl Iterator<Item = Planned> + 'a {
    dtypes_for(p, dtypes).into_iter().flat_map(move |d| {
        orders.iter().map(move |&order| Planned {
            item: Item::Case(case(&p.id, shape, d, order)),
            stratum,
        })
    })
}

/// Appends the processors' lists to `out` interleaved, so that each is
/// covered early, every id once.
fn interleave(per_proc: Vec<Vec<Planned>>, out: &mut Vec<Planned>) {
    let longest = per_proc.iter().map(Vec::len).max().unwrap_or(0);
    let mut seen: HashSet<String> = out.iter().map(|p| p.item.id().to_string()).collect();
    for i in 0..longest {
        for list in &per_proc {
            if let Some(p) = list.get(i)
                && seen.insert(p.item.id().to_string())
            {
                out.push(p.clone());
            }
        }
    }
}

/// The key a throughput guide is kept per: processor, dtype, operand order.
pub type Group = (String, DType, OperandOrder);

/// New shapes where a group's held-out error is above `threshold`: the
/// geometric midpoints between each badly predicted point and its nearest
/// neighbours, worst points first, at most `limit`, none in `known`.
pub fn refine(
    group: &Group,
    guide: &ThroughputGuide,
    threshold: f64,
    known: &HashSet<String>,
    limit: usize,
) -> Vec<SweepCase> {
    let mut bad: Vec<_> = guide
        .held_out()
        .into_iter()
        .filter(|(_, e)| *e > threshold)
        .collect();
    bad.sort_by(|a, b| b.1.total_cmp(&a.1));
    let (proc_, dtype, order) = group;
    let mut out: BTreeMap<String, SweepCase> = BTreeMap::new();
    let mut ordered = Vec::new();
    'points: for (p, _) in bad {
        for q in guide.neighbours(&p.shape, 3) {
            let mid = |a: std::num::NonZeroU32, b: std::num::NonZeroU32| {
                ((a.get() as f64) * (b.get() as f64)).sqrt().round() as u32
            };
            let Some(s) = GemmShape::new(
                mid(p.shape.m, q.m),
                mid(p.shape.k, q.k),
                mid(p.shape.n, q.n),
            ) else {
                continue;
            };
            if s == p.shape || s == q {
                continue;
            }
            let c = case(proc_, s, *dtype, *order);
            if known.contains(&c.id) || out.contains_key(&c.id) {
                continue;
            }
            ordered.push(c.id.clone());
            out.insert(c.id.clone(), c);
            if out.len() >= limit {
                break 'points;
            }
        }
    }
    ordered
        .into_iter()
        .filter_map(|id| out.remove(&id))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use hetero_plan::{Capabilities, ProcessorApi, ProcessorKind};

    use super::*;
    use crate::guide::Point;

    fn cpu() -> Processor {
        Processor {
            id: "cpu:0".into(),
            kind: ProcessorKind::Cpu,
            api: ProcessorApi::Cpu,
            name: "cores".into(),
            driver: String::new(),
            capabilities: Capabilities {
                dtypes: vec![DType::F32, DType::F16],
                ..Capabilities::default()
            },
            simulated: false,
            emulated: false,
        }
    }

    /// The GEMM cases of a design, in its order.
    fn cases(d: &[Planned]) -> Vec<SweepCase> {
        d.iter()
            .filter_map(|p| match &p.item {
                Item::Case(c) => Some(c.clone()),
                Item::Bench(_) => None,
            })
            .collect()
    }

    #[test]
    fn coarse_to_fine_visits_ends_then_middles() {
        let v: Vec<u32> = (0..9).collect();
        let o = coarse_to_fine(&v);
        assert_eq!(&o[..4], &[0, 8, 4, 2]);
        let mut s = o.clone();
        s.sort();
        assert_eq!(s, v);
    }

    #[test]
    fn model_shapes_cover_every_operator_and_length() {
        let spec = hetero_plan::hf::load_config(Path::new("../datasets/models/qwen2.5-1.5b.json"))
            .unwrap();
        let shapes = model_shapes(std::slice::from_ref(&spec));
        for op in &spec.ops {
            for t in [1, 8, 4096] {
                for phase in [Phase::Prefill, Phase::Decode] {
                    let (s, _) = op.gemms(phase, t).unwrap();
                    if phase == Phase::Decode && t > 8 {
                        continue;
                    }
                    assert!(shapes.contains(&s), "{} {phase} {t}: {s}", op.name);
                }
            }
        }
        let unique: HashSet<_> = shapes.iter().collect();
        assert_eq!(unique.len(), shapes.len());
    }

    #[test]
    fn split_shares_cut_n_of_every_operator() {
        let spec = hetero_plan::hf::load_config(Path::new("../datasets/models/qwen2.5-1.5b.json"))
            .unwrap();
        let models = std::slice::from_ref(&spec);
        let split = split_shapes(models);
        let whole: HashSet<GemmShape> = model_shapes(models).into_iter().collect();
        for op in &spec.ops {
            for t in SPLIT_TOKENS {
                let phase = if t <= 8 {
                    Phase::Decode
                } else {
                    Phase::Prefill
                };
                let (m, k, n) = op.gemms(phase, t).unwrap().0.mkn();
                let half = GemmShape::new(m, k, n / 2 / 64 * 64).unwrap();
                assert!(
                    split.contains(&half) || whole.contains(&half),
                    "{}: {half}",
                    op.name
                );
            }
        }
        // No lm_head share at a prefill length: it sees one row.
        assert!(!split.iter().any(|s| s.n.get() > 20_000 && s.m.get() > 8));
        // Decode first: the ends of the M list lead.
        assert_eq!(split[0].m.get(), 1);
        assert!(split.iter().all(|s| s.n.get() % 64 == 0));
        let d = initial(&[cpu()], models, None, false, None);
        assert!(d.iter().any(|p| p.stratum == Stratum::Split));
    }

    #[test]
    fn queries_are_model_operators_at_any_length_and_row_shares() {
        let spec = hetero_plan::hf::load_config(Path::new("../datasets/models/qwen2.5-1.5b.json"))
            .unwrap();
        let models = std::slice::from_ref(&spec);
        let q = query_shapes(models, 300, 7, QUERY_MAX_TOKENS);
        assert_eq!(
            q,
            query_shapes(models, 300, 7, QUERY_MAX_TOKENS),
            "the seed fixes them"
        );
        assert_ne!(q, query_shapes(models, 300, 8, QUERY_MAX_TOKENS));
        assert_eq!(q.len(), 300);
        assert_eq!(q.iter().collect::<HashSet<_>>().len(), 300, "distinct");
        let ops: Vec<(u32, u32)> = spec.ops.iter().map(|o| (o.k, o.n)).collect();
        let mut shares = 0;
        for s in &q {
            let (m, k, n) = s.mkn();
            assert!((1..=QUERY_MAX_TOKENS).contains(&m), "{s}");
            let &(_, whole) = ops
                .iter()
                .find(|&&(ok, on)| {
                    let share =
                        |n: u32| n % QUERY_ROW_ALIGN == 0 || (on - n) % QUERY_ROW_ALIGN == 0;
                    ok == k && (on == n || (n < on && share(n)))
                })
                .unwrap_or_else(|| panic!("{s} is no operator or row share of one"));
            if n != whole {
                shares += 1;
            }
            if whole > 100_000 {
                assert!(m <= 8, "an lm_head only at decode rows: {s}");
            }
        }
        // Two in five draws are shares; whole operators repeat more often
        // (few lengths below 8), so shares are more among distinct shapes.
        assert!((75..=225).contains(&shares), "{shares} shares");
        // Lengths that are not powers of two, in every alignment class.
        for tz in 0..3 {
            assert!(
                q.iter()
                    .any(|s| s.m.get() > 8 && s.m.get().trailing_zeros() == tz),
                "no length with {tz} trailing zeros"
            );
        }
        assert!(query_shapes(&[], 10, 0, QUERY_MAX_TOKENS).is_empty());
        let d = initial(&[cpu()], models, None, false, None);
        let n_query = d.iter().filter(|p| p.stratum == Stratum::Query).count();
        assert!(
            n_query > 0 && n_query <= 2 * DESIGN_QUERIES * 2,
            "{n_query}"
        );
        // A held-out design: those queries in both orders, in f32 and f16
        // on this cpu, and nothing else.
        let held = queries(&[cpu()], models, None, 40, 7, None);
        assert_eq!(held.len(), 40 * 2);
        assert!(held.iter().all(|p| p.stratum == Stratum::Query));
        let first = query_shapes(models, 40, 7, QUERY_MAX_TOKENS)[0];
        assert!(
            held.iter()
                .any(|p| p.item.id()
                    == case_id("cpu:0", first, DType::F32, OperandOrder::Transposed))
        );
    }

    #[test]
    fn stage_probes_step_over_each_multiple() {
        let s = stage_shapes(Some(48));
        for v in [32, 33, 64, 65, 128, 129, 256, 257, 48, 49, 96, 97] {
            assert!(s.iter().any(|x| x.m.get() == v), "m={v}");
            assert!(s.iter().any(|x| x.k.get() == v), "k={v}");
            assert!(s.iter().any(|x| x.n.get() == v), "n={v}");
        }
    }

    #[test]
    fn the_launch_copy_bound_is_a_staged_size() {
        let sizes = |p: &Processor, bench: MicrobenchKind| -> Vec<u64> {
            microbench(std::slice::from_ref(p))
                .iter()
                .filter(|r| r.bench == bench)
                .filter_map(|r| r.bytes)
                .collect()
        };
        let mut p = cpu();
        let plain = sizes(&p, MicrobenchKind::StageIn);
        assert_eq!(plain.len(), 9);
        assert!(!plain.contains(&(128 << 10)));
        p.capabilities.launch_copy_max_bytes = Some(128 << 10);
        for bench in [
            MicrobenchKind::StageIn,
            MicrobenchKind::StageOut,
            MicrobenchKind::StageOutAw,
        ] {
            let s = sizes(&p, bench);
            assert_eq!(s.len(), 10, "{bench:?}");
            assert!(s.is_sorted() && s.contains(&(128 << 10)), "{s:?}");
        }
        // Plain copies keep their sizes; a bound already among them adds none.
        assert_eq!(sizes(&p, MicrobenchKind::CopyH2d), plain);
        p.capabilities.launch_copy_max_bytes = Some(64 << 10);
        assert_eq!(sizes(&p, MicrobenchKind::StageIn), plain);
    }

    #[test]
    fn initial_design_has_both_orders_and_unique_ids() {
        let d = initial(&[cpu()], &[], None, true, None);
        let ids: HashSet<&str> = d.iter().map(|p| p.item.id()).collect();
        assert_eq!(ids.len(), d.len());
        assert!(ids.contains("cpu:0/1x256x256/f32/aw"));
        assert!(ids.contains("cpu:0/1x256x256/f32/transposed"));
        assert!(d.iter().any(|p| p.stratum == Stratum::Stage));
        assert!(d.iter().any(|p| p.stratum == Stratum::Microbench));
        assert_eq!(dtypes_for(&cpu(), Some(&[DType::Bf16])), vec![]);
    }

    #[test]
    fn an_order_free_processor_gets_one_order_and_as_many_rows_in_more_shapes() {
        let spec = hetero_plan::hf::load_config(Path::new("../datasets/models/qwen2.5-1.5b.json"))
            .unwrap();
        let models = std::slice::from_ref(&spec);
        let mut free = cpu();
        free.id = "gpu:0".into();
        free.capabilities.dtypes = vec![DType::F16];
        free.capabilities.order_free = true;
        let mut plain = free.clone();
        plain.capabilities.order_free = false;
        let both = cases(&initial(&[plain.clone()], models, None, false, None));
        let one = cases(&initial(&[free.clone()], models, None, false, None));
        assert!(both.iter().any(|c| c.order == OperandOrder::Transposed));
        assert!(one.iter().all(|c| c.order == OperandOrder::Aw), "aw only");
        let shapes = |c: &[SweepCase]| c.iter().map(|c| c.shape).collect::<HashSet<_>>();
        let (s_both, s_one) = (shapes(&both), shapes(&one));
        assert_eq!(one.len(), s_one.len(), "one row a shape");
        assert!(
            s_one.is_superset(&s_both),
            "every shape of the two-order design"
        );
        // As many rows, give or take the queries that fall on a shape
        // another stratum has.
        let ratio = one.len() as f64 / both.len() as f64;
        assert!(
            (0.95..=1.05).contains(&ratio),
            "{} against {}",
            one.len(),
            both.len()
        );
        // The extra shapes are queries, drawn on from the design's seed.
        let extra: Vec<_> = one.iter().filter(|c| !s_both.contains(&c.shape)).collect();
        let drawn: HashSet<_> =
            query_shapes(models, 4 * one.len(), DESIGN_QUERY_SEED, QUERY_MAX_TOKENS)
                .into_iter()
                .collect();
        assert!(extra.len() > both.len() / 3, "{} new shapes", extra.len());
        assert!(extra.iter().all(|c| drawn.contains(&c.shape)));
        // A held-out set stays in both orders: it checks that they agree.
        let held = queries(&[free], models, None, 10, 1, None);
        assert_eq!(held.len(), 20);
        assert!(held.iter().any(|p| p.item.id().ends_with("/transposed")));
        assert_eq!(design_orders(&plain).len(), 2);
    }

    #[test]
    fn max_len_keeps_only_gemms_of_that_many_rows() {
        let spec = hetero_plan::hf::load_config(Path::new("../datasets/models/qwen2.5-1.5b.json"))
            .unwrap();
        let models = std::slice::from_ref(&spec);
        let rows =
            |d: &[Planned]| -> Vec<u32> { cases(d).iter().map(|c| c.shape.m.get()).collect() };
        let all = initial(&[cpu()], models, None, true, None);
        let short = initial(&[cpu()], models, None, true, Some(128));
        assert!(
            rows(&all).iter().any(|&m| m > 128),
            "the default goes to 4096"
        );
        let m = rows(&short);
        assert!(m.iter().all(|&m| m <= 128), "{:?}", m.iter().max());
        // Every stratum below the cap stays, and the lengths up to it too.
        for t in [1, 8, 64, 128] {
            assert!(m.contains(&t), "M = {t}");
        }
        for s in [
            Stratum::Model,
            Stratum::Split,
            Stratum::Grid,
            Stratum::Query,
        ] {
            assert!(short.iter().any(|p| p.stratum == s), "{s:?}");
        }
        // The microbenchmarks do not depend on the lengths.
        let benches = |d: &[Planned]| {
            d.iter()
                .filter(|p| p.stratum == Stratum::Microbench)
                .count()
        };
        assert_eq!(benches(&all), benches(&short));
        // Queries are drawn up to the cap, not drawn and then dropped.
        let q = queries(&[cpu()], models, None, 40, 3, Some(64));
        assert_eq!(q.len(), 80, "40 shapes in both orders");
        assert!(rows(&q).iter().all(|&m| m <= 64));
    }

    #[test]
    fn staged_copies_are_measured_wherever_the_runtime_copies() {
        let staged = |p: &Processor| -> Vec<MicrobenchKind> {
            let mut v: Vec<_> = microbench(std::slice::from_ref(p))
                .iter()
                .map(|r| r.bench)
                .filter(|b| {
                    matches!(
                        b,
                        MicrobenchKind::StageIn
                            | MicrobenchKind::StageOut
                            | MicrobenchKind::StageOutAw
                    )
                })
                .collect();
            v.dedup();
            v
        };
        let all = [
            MicrobenchKind::StageIn,
            MicrobenchKind::StageOut,
            MicrobenchKind::StageOutAw,
        ];
        let mut p = cpu();
        assert_eq!(staged(&p), all, "discrete");
        p.capabilities.unified_memory = true;
        assert_eq!(staged(&p), all, "unified: the cpu backend copies too");
        p.capabilities.static_graphs = true;
        assert_eq!(staged(&p), [], "a graph per size");
        p.capabilities.static_graphs = false;
        p.simulated = true;
        assert_eq!(staged(&p), [], "simulated");
    }

    #[test]
    fn host_path_microbenchmarks_repeat_once_per_round() {
        // A discrete processor (no unified memory) stages its copies too,
        // and with a device timer times the host's overhead around an
        // operator, per wait (blocking; polling too where it has a host
        // flag).
        let overheads = |reqs: &[MicrobenchRequest]| -> Vec<MicrobenchKind> {
            reqs.iter()
                .map(|r| r.bench)
                .filter(|b| {
                    matches!(
                        b,
                        MicrobenchKind::OpOverhead
                            | MicrobenchKind::OpOverheadBlock
                            | MicrobenchKind::OpOverheadPoll
                    )
                })
                .collect()
        };
        let mut procs = [cpu()];
        assert!(!procs[0].capabilities.unified_memory);
        assert!(!procs[0].capabilities.host_flag);
        let timerless = microbench_repeats(&procs)[0].len();
        assert_eq!(overheads(&microbench(&procs)), []);
        procs[0].capabilities.device_timer = true;
        assert_eq!(microbench_repeats(&procs)[0].len(), timerless + 1);
        assert_eq!(
            overheads(&microbench(&procs)),
            [MicrobenchKind::OpOverheadBlock]
        );
        procs[0].capabilities.host_flag = true;
        assert_eq!(microbench_repeats(&procs)[0].len(), timerless + 2);
        assert_eq!(
            overheads(&microbench(&procs)),
            [
                MicrobenchKind::OpOverheadBlock,
                MicrobenchKind::OpOverheadPoll
            ]
        );
        let once = microbench(&procs);
        let rounds = microbench_repeats(&procs);
        assert_eq!(rounds.len(), MICRO_PROCESSES - 1);
        let first: HashSet<&str> = once.iter().map(|r| r.id.as_str()).collect();
        for (i, round) in rounds.iter().enumerate() {
            let suffix = format!("@{}", i + 2);
            // 5 copy kinds at 4 sizes up to 256 KiB, submit, sync and the
            // operator's overhead per wait.
            assert_eq!(round.len(), 5 * 4 + 4 + 2, "{round:?}");
            assert_eq!(overheads(round).len(), 2);
            for r in round {
                let base = r.id.strip_suffix(&suffix).expect("the round in the id");
                assert!(first.contains(base), "{} repeats nothing", r.id);
                assert!(r.bytes.is_none_or(|b| b <= REPEAT_MAX_BYTES), "{r:?}");
                assert!(!matches!(
                    r.bench,
                    MicrobenchKind::BandwidthAlone
                        | MicrobenchKind::BandwidthConcurrent
                        | MicrobenchKind::GraphPrepare
                ));
            }
        }
        // Beside a processor on host memory, the overhead after its runs
        // too (the solver's launch cost in offload mode), in every round;
        // never after a simulated one.
        let mut gpu = procs[0].clone();
        gpu.id = "cuda:0".into();
        gpu.kind = ProcessorKind::Gpu;
        gpu.capabilities.unified_memory = false;
        let mut pair = [gpu, cpu()];
        let after = |reqs: Vec<MicrobenchRequest>| -> Vec<(String, Option<String>)> {
            reqs.into_iter()
                .filter(|r| r.bench == MicrobenchKind::LaunchOverheadAfterCpu)
                .map(|r| (r.processor, r.peer))
                .collect()
        };
        let want = vec![("cuda:0".to_string(), Some("cpu:0".to_string()))];
        assert_eq!(after(microbench(&pair)), want);
        for round in microbench_repeats(&pair) {
            assert_eq!(after(round), want);
        }
        // A GPU on host memory never runs in offload mode.
        pair[0].capabilities.unified_memory = true;
        assert_eq!(after(microbench(&pair)), []);
        pair[0].capabilities.unified_memory = false;
        pair[1].simulated = true;
        assert_eq!(after(microbench(&pair)), []);
    }

    #[test]
    fn refinement_adds_midpoints_where_the_error_is_high() {
        let mut pts = Vec::new();
        for m in [1u32, 4, 16, 64, 256, 1024] {
            let s = GemmShape::new(m, 512, 512).unwrap();
            let tput = if m >= 64 { 50e3 } else { 1e3 };
            pts.push(Point {
                shape: s,
                us: s.flops() / tput,
            });
        }
        let q = ThroughputGuide::new(pts);
        let group = ("cpu:0".to_string(), DType::F32, OperandOrder::Aw);
        let new = refine(&group, &q, REFINE_THRESHOLD, &HashSet::new(), 8);
        assert!(!new.is_empty());
        // A midpoint between 16 and 64 tokens is among them.
        assert!(new.iter().any(|c| c.shape.m.get() == 32), "{new:?}");
        let known: HashSet<String> = new.iter().map(|c| c.id.clone()).collect();
        let again = refine(&group, &q, REFINE_THRESHOLD, &known, 8);
        assert!(again.iter().all(|c| !known.contains(&c.id)));
    }
}
