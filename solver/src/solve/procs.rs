//! The processors step: resolve the processors the solver may use, pair a
//! CPU with a discrete GPU in offload mode, and set up the device state
//! (static-graph processors, resident rows) every operator shares.

use std::sync::Arc;

use hetero_plan::{
    DType, LinearOp, ModelSpec, OperandOrder, Overheads, Phase, Processor, ProcessorApi,
    ProcessorKind,
};

use crate::engine::{OffloadSetup, Proc, Setup, StaticGraphs, predict};
use crate::oracle::{GemmModel, LatencyOracle};
use crate::settings::{GraphChoice, OffloadStrategy, Settings, fmt_bytes};
use crate::{Error, Result, residency};

/// Resolves the processors the solver may use: the dtype of each, its
/// overheads, and notes on every constant it has to assume.
pub(crate) fn build_procs<'a, O: LatencyOracle + ?Sized>(
    oracle: &'a O,
    only: &[String],
    dtypes: &[(Option<String>, DType)],
    notes: &mut Vec<String>,
) -> Result<Vec<Proc<'a>>> {
    let all = oracle.processors();
    check_named(all, "--processors", only.iter())?;
    check_named(
        all,
        "--dtype",
        dtypes.iter().filter_map(|(id, _)| id.as_ref()),
    )?;
    let mut procs = vec![];
    for p in all {
        if !only.is_empty() && !only.contains(&p.id) {
            continue;
        }
        let Some(dtype) = choose_dtype(&p.id, &oracle.dtypes(&p.id), only, dtypes, notes)? else {
            continue;
        };
        let model = oracle
            .gemm_model(&p.id, dtype)
            .expect("dtype is one the oracle listed");
        let ov = oracle.overheads(&p.id);
        let multi_processor = all.len() > 1;
        note_assumptions(p, &ov, multi_processor, notes);
        procs.push(resolve(p, dtype, model, &ov));
    }
    if procs.is_empty() {
        return Err(Error::NoProcessors);
    }
    Ok(procs)
}

/// Refuses a processor named on the command line (by `option`) that the
/// predictor does not have.
fn check_named<'x>(
    all: &[Processor],
    option: &str,
    named: impl Iterator<Item = &'x String>,
) -> Result<()> {
    for id in named {
        if !all.iter().any(|p| &p.id == id) {
            return Err(Error::MissingProcessor {
                strategy: option.into(),
                need: format!("processor `{id}`"),
                have: ids(all.iter().map(|p| p.id.as_str())),
            });
        }
    }
    Ok(())
}

/// The dtype processor `id` runs in: the one asked for it (or for every
/// processor), else f16, else the first it has a model for. `None` (with a
/// note) leaves it out; asking explicitly for a dtype it has no model for
/// is an error.
fn choose_dtype(
    id: &str,
    have: &[DType],
    only: &[String],
    dtypes: &[(Option<String>, DType)],
    notes: &mut Vec<String>,
) -> Result<Option<DType>> {
    let named = only.iter().any(|o| o == id);
    let asked = dtypes
        .iter()
        .find(|(p, _)| p.as_deref() == Some(id))
        .or_else(|| dtypes.iter().find(|(p, _)| p.is_none()))
        .map(|d| d.1);
    match asked {
        Some(d) if have.contains(&d) => Ok(Some(d)),
        Some(d) => {
            if dtypes.iter().any(|(p, _)| p.as_deref() == Some(id)) || named {
                return Err(Error::NoModel {
                    processor: id.into(),
                    dtype: d.to_string(),
                    available: dtype_list(have),
                });
            }
            notes.push(format!(
                "{id}: no latency model for {d} (it has {}); left out",
                dtype_list(have)
            ));
            Ok(None)
        }
        None if have.contains(&DType::F16) => Ok(Some(DType::F16)),
        None => match have.first() {
            Some(d) => Ok(Some(*d)),
            None if named => Err(Error::NoModel {
                processor: id.into(),
                dtype: "any".into(),
                available: "none".into(),
            }),
            None => {
                notes.push(format!("{id}: no latency model; left out"));
                Ok(None)
            }
        },
    }
}

/// The wait the host uses to notice completion: polling a host flag where
/// the processor has one and it was measured, else a blocking wait.
fn sync_cost(p: &Processor, ov: &Overheads) -> Option<f64> {
    if p.capabilities.host_flag && ov.sync_poll_us.is_some() {
        ov.sync_poll_us
    } else {
        ov.sync_block_us.or(ov.sync_poll_us)
    }
}

/// A processor that can take part in a split: on unified memory, or with
/// a measured cost of copying to it.
fn can_split(p: &Processor, ov: &Overheads) -> bool {
    p.capabilities.unified_memory || ov.copy_h2d.is_some() || ov.stage_in.is_some()
}

/// Notes on every constant the cost model has to assume for `p`.
fn note_assumptions(p: &Processor, ov: &Overheads, multi_processor: bool, notes: &mut Vec<String>) {
    let id = &p.id;
    if p.simulated || p.emulated {
        let (what, times) = if p.simulated {
            ("simulated", "a timing model")
        } else {
            ("emulated", "an emulator's")
        };
        notes.push(format!(
            "{id}: {what} processor; its times are {times}, not measurements of the processor"
        ));
    }
    if sync_cost(p, ov).is_none() {
        notes.push(format!("{id}: no sync cost measured; splits assume 0 µs"));
    }
    if p.kind == ProcessorKind::Gpu && ov.submit_empty_us.is_none() {
        notes.push(format!("{id}: no submit cost measured; splits assume 0 µs"));
    }
    if ov.concurrent_factor.is_none() && multi_processor {
        notes.push(format!(
            "{id}: no concurrent_factor; splits bound by bandwidth assume 1.0 (no contention)"
        ));
    }
    if p.capabilities.static_graphs && ov.prepare.is_none() {
        notes.push(format!(
            "{id}: no graph prepare cost measured; online prepare is not considered and graph sets count 0 µs to prepare"
        ));
    }
    if !can_split(p, ov) {
        notes.push(format!(
            "{id}: no host copy cost measured for this discrete processor; it runs only alone"
        ));
    }
}

/// A measured overhead the cost model can use: finite and not negative.
fn usable(t: Option<f64>) -> Option<f64> {
    t.filter(|t| t.is_finite() && *t >= 0.0)
}

/// Processor `p` as the cost model sees it, in `dtype`.
fn resolve<'a>(p: &Processor, dtype: DType, model: &'a dyn GemmModel, ov: &Overheads) -> Proc<'a> {
    // Compiled once per solve: the same predictions, faster.
    let model: Arc<dyn GemmModel + Send + 'a> = match model.compiled() {
        Some(fast) => Arc::from(fast),
        None => Arc::new(Borrowed(model)),
    };
    let model = match usable(ov.bandwidth_gbps).filter(|b| *b > 0.0) {
        Some(gbps) if p.kind == ProcessorKind::Cpu && !p.simulated => Arc::new(ReadFloor {
            inner: model,
            bytes_per_us: gbps * 1e3,
            weight_bytes: dtype.weight_bits() as f64 / 8.0,
        }),
        _ => model,
    };
    let caps = &p.capabilities;
    let sync = sync_cost(p, ov);
    Proc {
        id: p.id.clone(),
        kind: p.kind,
        on_all_host_cores: p.kind == ProcessorKind::Cpu && p.api != ProcessorApi::Cpu,
        static_graphs: caps.static_graphs,
        unified: caps.unified_memory,
        queue: p.kind == ProcessorKind::Gpu,
        tile: caps.tile.unwrap_or(32).max(1),
        dtype,
        model,
        sync_us: sync.unwrap_or(0.0),
        sync_block_us: ov.sync_block_us.or(sync).unwrap_or(0.0),
        submit_us: ov.submit_empty_us.unwrap_or(0.0),
        op_overhead_us: usable(ov.op_overhead_us),
        op_overhead_block_us: usable(ov.op_overhead_block_us),
        launch_overhead_after_cpu_us: usable(ov.launch_overhead_after_cpu_us),
        alone_extra_us: 0.0,
        // Above 1 (a run alone caught slow) is noise: no processor
        // streams faster for sharing its memory.
        concurrent: ov
            .concurrent_factor
            .filter(|f| *f > 0.0)
            .map_or(1.0, |f| f.min(1.0)),
        copy_h2d: ov.copy_h2d,
        copy_d2h: ov.copy_d2h,
        stage_in: ov.stage_in,
        stage_out: ov.stage_out,
        stage_out_aw: ov.stage_out_aw,
        stage_small: ov.stage_small,
        prepare: ov.prepare,
        graph_weights: hetero_plan::WeightMode::Static,
        can_split: can_split(p, ov),
        device_timed: caps.device_timer && !p.simulated && !p.emulated,
        memory_bytes: caps.memory_bytes,
    }
}

/// A CPU's GEMM read from memory: never faster than its weights' bytes at
/// the processor's measured read bandwidth (its cold streaming GEMV,
/// `bandwidth_gbps`). A profile times a GEMM with the same weights run
/// after run, so a host whose last-level cache holds them (a server CPU's
/// hundred megabytes hold a 4096×4096 f16 matrix) fits rows read from the
/// cache; in a model every layer's weights are new, and a decode step
/// streams them from memory. Without the floor, an 8B model's decode GEMMs
/// on a 16-core Xeon were predicted at under a third of their measured time.
struct ReadFloor<'a> {
    inner: Arc<dyn GemmModel + Send + 'a>,
    bytes_per_us: f64,
    weight_bytes: f64,
}

impl ReadFloor<'_> {
    fn floor_us(&self, k: u32, n: u32) -> f64 {
        k as f64 * n as f64 * self.weight_bytes / self.bytes_per_us
    }
}

impl GemmModel for ReadFloor<'_> {
    fn predict_us(&self, shape: hetero_plan::GemmShape, order: OperandOrder) -> Option<f64> {
        let (_, k, n) = shape.mkn();
        (self.inner.predict_us(shape, order)).map(|t| t.max(self.floor_us(k, n)))
    }

    fn lower_bound_us(
        &self,
        m: std::ops::RangeInclusive<u32>,
        k: u32,
        n: std::ops::RangeInclusive<u32>,
        order: OperandOrder,
    ) -> Option<f64> {
        let floor = self.floor_us(k, *n.start());
        (self.inner.lower_bound_us(m, k, n, order)).map(|t| t.max(floor))
    }
}

/// A model the oracle owns, used as it is.
struct Borrowed<'a>(&'a dyn GemmModel);

impl GemmModel for Borrowed<'_> {
    fn predict_us(&self, shape: hetero_plan::GemmShape, order: OperandOrder) -> Option<f64> {
        self.0.predict_us(shape, order)
    }

    fn lower_bound_us(
        &self,
        m: std::ops::RangeInclusive<u32>,
        k: u32,
        n: std::ops::RangeInclusive<u32>,
        order: OperandOrder,
    ) -> Option<f64> {
        self.0.lower_bound_us(m, k, n, order)
    }
}

/// Processor ids in words, for messages.
pub(super) fn ids<'x>(it: impl Iterator<Item = &'x str>) -> String {
    let v: Vec<&str> = it.collect();
    if v.is_empty() {
        "no processors".into()
    } else {
        v.join(", ")
    }
}

fn dtype_list(d: &[DType]) -> String {
    if d.is_empty() {
        "none".into()
    } else {
        d.iter().map(|d| d.as_str()).collect::<Vec<_>>().join(", ")
    }
}

/// The operators to solve, in model order.
pub(crate) fn select_ops<'m>(model: &'m ModelSpec, only: &[String]) -> Result<Vec<&'m LinearOp>> {
    for name in only {
        if model.op(name).is_none() {
            return Err(Error::UnknownOp {
                op: name.clone(),
                known: model.ops.iter().map(|o| o.name.clone()).collect(),
            });
        }
    }
    Ok(model
        .ops
        .iter()
        .filter(|o| only.is_empty() || only.contains(&o.name))
        .collect())
}

/// Offload mode (a GPU memory budget given) keeps the CPU and the discrete
/// GPU only; the GPU's operators alone launch after the CPU's runs. A
/// budget larger than the GPU's memory is refused.
pub(super) fn offload_mode<'a>(
    mut procs: Vec<Proc<'a>>,
    settings: &Settings,
    notes: &mut Vec<String>,
) -> Result<(Vec<Proc<'a>>, Option<OffloadSetup>)> {
    let Some(budget) = settings.gpu_mem_budget else {
        return Ok((procs, None));
    };
    let strategy = settings.offload_strategy;
    let o = offload_setup(&procs, strategy)?;
    let gpu = &procs[o.gpu];
    if let Some(memory) = gpu.memory_bytes
        && budget > memory
    {
        return Err(Error::GpuBudget {
            budget: fmt_bytes(budget),
            message: format!(
                "larger than the memory of `{}` ({}, {memory} bytes); give at most that",
                gpu.id,
                fmt_bytes(memory)
            ),
        });
    }
    let keep: Vec<String> = o
        .cpu
        .into_iter()
        .chain([o.gpu])
        .map(|i| procs[i].id.clone())
        .collect();
    for p in procs.iter().filter(|p| !keep.contains(&p.id)) {
        notes.push(format!("{}: not used in offload mode", p.id));
    }
    procs.retain(|p| keep.contains(&p.id));
    let o = offload_setup(&procs, strategy)?;
    launch_after_host(&mut procs[o.gpu], notes);
    Ok((procs, Some(o)))
}

/// Offload mode pairs the fastest CPU with the fastest discrete GPU, as
/// their models predict a 512×4096×4096 GEMM (`--processors` narrows the
/// choice). The GPU alone (`gpu-stream`, or `best` without a CPU) needs
/// no CPU.
fn offload_setup(procs: &[Proc], strategy: OffloadStrategy) -> Result<OffloadSetup> {
    let have = ids(procs.iter().map(|p| p.id.as_str()));
    let fastest = |ok: &dyn Fn(&Proc) -> bool| {
        procs
            .iter()
            .enumerate()
            .filter(|(_, p)| ok(p))
            .map(|(i, p)| {
                let t = predict(p, 512, 4096, 4096, OperandOrder::Aw);
                (i, if t.is_nan() { f64::INFINITY } else { t })
            })
            .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)))
            .map(|(i, _)| i)
    };
    let missing = |need: String, have: String| Error::MissingProcessor {
        strategy: format!(
            "offload mode (--gpu-mem-budget, --offload-strategy {})",
            strategy.name()
        ),
        need,
        have,
    };
    let cpu = fastest(&|p| p.kind == ProcessorKind::Cpu);
    let gpu_alone = matches!(strategy, OffloadStrategy::GpuStream | OffloadStrategy::Best);
    if cpu.is_none() && !gpu_alone {
        return Err(missing("a CPU processor".into(), have.clone()));
    }
    let gpu = fastest(&|p| p.kind == ProcessorKind::Gpu && !p.unified).ok_or_else(|| {
        missing(
            "a discrete GPU (unified_memory: false)".into(),
            have.clone(),
        )
    })?;
    if procs[gpu].copy_h2d.is_none() {
        return Err(missing(
            format!(
                "the host-to-device copy cost (copy_h2d) of `{}`",
                procs[gpu].id
            ),
            "no copy_h2d in its overheads".into(),
        ));
    }
    Ok(OffloadSetup {
        cpu: if strategy == OffloadStrategy::GpuStream {
            None
        } else {
            cpu
        },
        gpu,
        strategy,
        resident: Default::default(),
    })
}

/// Offload mode's GPU: every token streams weights through host memory
/// (the CPU's rows, the GPU's copied ones), and the CPU's pool polls for
/// work after its parts, so the GPU's operators alone launch in that
/// state. Their launch costs what `launch_overhead_after_cpu` measured beyond
/// `op_overhead` more, where both were measured.
pub(crate) fn launch_after_host(gpu: &mut Proc, notes: &mut Vec<String>) {
    match gpu.after_host_extra_us() {
        Some(extra) => {
            gpu.alone_extra_us = extra;
            notes.push(format!(
                "{}: operators alone cost {:.2} µs more per launch in offload mode (launch_overhead_after_cpu {:.2} µs, after the CPU's runs)",
                gpu.id,
                extra,
                gpu.launch_overhead_after_cpu_us.unwrap_or(0.0)
            ));
        }
        None if gpu.device_timed => notes.push(format!(
            "{}: no launch_overhead_after_cpu measured; its operators alone are costed as launched with nothing before them",
            gpu.id
        )),
        None => {}
    }
}

/// The device state every operator shares: the static-graph processors
/// (none in offload mode; their decode graphs are the decode lengths, their
/// prefill sizes chosen later) and, in offload mode, the rows each operator
/// keeps resident on the GPU (ScheInfer).
pub(super) fn device_setup<'a>(
    procs: Vec<Proc<'a>>,
    offload: Option<OffloadSetup>,
    ops: &[&LinearOp],
    settings: &Settings,
    notes: &mut Vec<String>,
) -> Result<Setup<'a>> {
    let statics: Vec<usize> = if offload.is_some() {
        vec![]
    } else {
        (0..procs.len())
            .filter(|&p| procs[p].static_graphs)
            .collect()
    };
    if let GraphChoice::Sizes(_) = settings.graphs
        && statics.is_empty()
    {
        return Err(Error::MissingProcessor {
            strategy: "--npu-graphs".into(),
            need: "a static-graph processor (an NPU)".into(),
            have: ids(procs.iter().map(|p| p.id.as_str())),
        });
    }
    if statics.len() > 1 {
        notes.push("several static-graph processors: each is paired with dynamic processors only, never with another static one".into());
    }
    let has_decode = settings.phases.contains(&Phase::Decode);
    let mut setup = Setup {
        procs,
        row_align: settings.row_align,
        graphs: statics
            .iter()
            .map(|&p| StaticGraphs {
                p,
                prefill: vec![],
                decode: if has_decode {
                    settings.decode_lengths.clone()
                } else {
                    vec![]
                },
            })
            .collect(),
        exhaustive: settings.exhaustive || offload.is_some(),
        offload,
    };
    if let Some(budget) = settings.gpu_mem_budget {
        let m = if has_decode {
            settings.decode_lengths[0]
        } else {
            1
        };
        setup = place_weights(setup, ops, budget, m, notes)?;
    }
    Ok(setup)
}

/// Offload mode's placement under `budget` bytes: the strategy asked for,
/// or the best of those the processors allow. Refuses a budget smaller
/// than one decoder layer's weights. The GPU alone leaves the CPU out of
/// the plan.
fn place_weights<'a>(
    mut setup: Setup<'a>,
    ops: &[&LinearOp],
    budget: u64,
    m: u32,
    notes: &mut Vec<String>,
) -> Result<Setup<'a>> {
    let layer = residency::one_layer_bytes(&setup, ops);
    if (budget as f64) < layer {
        let gpu = &setup.procs[setup.offload.as_ref().expect("offload mode").gpu];
        return Err(Error::GpuBudget {
            budget: fmt_bytes(budget),
            message: format!(
                "smaller than one layer's weights on `{}` ({}, {} bytes in {}); give at least that",
                gpu.id,
                fmt_bytes(layer.ceil() as u64),
                layer.ceil() as u64,
                gpu.dtype
            ),
        });
    }
    let o = setup.offload.as_ref().expect("offload mode");
    let placement = if o.strategy == OffloadStrategy::Best {
        let strategies: Vec<OffloadStrategy> = if o.cpu.is_some() {
            OffloadStrategy::ALL[1..].to_vec()
        } else {
            vec![OffloadStrategy::GpuStream]
        };
        let (p, note) = residency::best(&setup, ops, budget, m, &strategies);
        notes.push(note);
        p
    } else {
        residency::place(&setup, ops, budget, m)
    };
    notes.push(residency::describe(&setup, ops, &placement));
    setup = residency::with_strategy(&setup, placement.strategy);
    let o = setup.offload.as_mut().expect("offload mode");
    o.resident = placement.resident;
    if o.cpu.is_none() && setup.procs.len() > 1 {
        let gpu = setup.procs[o.gpu].id.clone();
        for p in setup.procs.iter().filter(|p| p.id != gpu) {
            notes.push(format!(
                "{}: not used by the {} strategy",
                p.id,
                o.strategy.name()
            ));
        }
        setup.procs.retain(|p| p.id == gpu);
        o.gpu = 0;
    }
    Ok(setup)
}
