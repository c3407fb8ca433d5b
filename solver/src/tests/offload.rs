//! Offload strategies: each a plan of the expected shape under the GPU
//! budget, `best` no slower than any, and the budgets refused.

use hetero_plan::{Phase, Plan, Strategy};

use super::{check_plan, decode_step, fp, llama8b};
use crate::synthetic::{self, Synthetic};
use crate::{Error, GraphChoice, OffloadStrategy, Settings, solve};

const BUDGET: u64 = 4 << 30;

fn settings(strategy: OffloadStrategy, budget: u64) -> Settings {
    Settings {
        phases: vec![Phase::Prefill, Phase::Decode],
        prefill_lengths: vec![1, 16, 256],
        decode_lengths: vec![1],
        graphs: GraphChoice::None,
        gpu_mem_budget: Some(budget),
        offload_strategy: strategy,
        ..Settings::default()
    }
}

fn solved(dev: &Synthetic, strategy: OffloadStrategy) -> Plan {
    let plan = solve(dev, fp(), &llama8b(), &settings(strategy, BUDGET)).unwrap();
    check_plan(&plan);
    let o = plan.solver.as_ref().unwrap().offload.as_ref().unwrap();
    assert!(
        o.resident_bytes <= BUDGET,
        "{strategy:?}: {}",
        o.resident_bytes
    );
    plan
}

/// Every decision of the plan, with its table's first layer and layers.
fn decisions(plan: &Plan) -> Vec<(String, u32, u32, Strategy)> {
    plan.ops
        .iter()
        .flat_map(|o| {
            o.decisions()
                .map(move |d| (o.op.clone(), o.first_layer, o.layers, d.strategy))
        })
        .collect()
}

/// The weights of one decoder layer of Llama-3.1-8B in f16.
fn layer_bytes() -> u64 {
    let m = llama8b();
    m.ops
        .iter()
        .filter(|o| o.layers == m.layers)
        .map(|o| o.k as u64 * o.n as u64 * o.count as u64 * 2)
        .sum()
}

#[test]
fn gpu_stream_runs_the_gpu_alone_copying_what_is_not_resident() {
    let dev = synthetic::discrete_cpu_gpu();
    let plan = solved(&dev, OffloadStrategy::GpuStream);
    assert_eq!(plan.processors, vec!["cuda".to_string()]);
    let o = plan.solver.as_ref().unwrap().offload.as_ref().unwrap();
    assert_eq!(
        (o.cpu.as_str(), o.strategy.as_deref()),
        ("", Some("gpu-stream"))
    );
    assert!(o.resident_bytes > BUDGET / 2, "{}", o.resident_bytes);
    let mut copied = 0;
    for (op, first, _, s) in decisions(&plan) {
        match s {
            Strategy::Single { processor, .. } => assert_eq!(processor, "cuda"),
            Strategy::Offload {
                cpu,
                cc_rows,
                cg_rows,
                gg_rows,
                ..
            } => {
                assert_eq!((cpu.as_str(), cc_rows), ("", 0), "{op}");
                assert_eq!(gg_rows, o.rows_at(&op, first), "{op} from layer {first}");
                copied += (cg_rows > 0) as u32;
            }
            other => panic!("{op}: {other:?}"),
        }
    }
    assert!(copied > 0);
    // The same plan with the GPU the only processor named.
    let only = Settings {
        processors: vec!["cuda".into()],
        ..settings(OffloadStrategy::GpuStream, BUDGET)
    };
    let alone = solve(&dev, fp(), &llama8b(), &only).unwrap();
    assert_eq!(alone.ops, plan.ops);
    // `best` without a CPU can only stream.
    let best = Settings {
        offload_strategy: OffloadStrategy::Best,
        ..only.clone()
    };
    let plan = solve(&dev, fp(), &llama8b(), &best).unwrap();
    let o = plan.solver.as_ref().unwrap().offload.as_ref().unwrap();
    assert_eq!(o.strategy.as_deref(), Some("gpu-stream"));
    // The others need a CPU.
    for s in [
        OffloadStrategy::Sliced,
        OffloadStrategy::LayerSplit,
        OffloadStrategy::Cpu,
    ] {
        let e = solve(
            &dev,
            fp(),
            &llama8b(),
            &Settings {
                offload_strategy: s,
                ..only.clone()
            },
        )
        .unwrap_err();
        assert!(e.to_string().contains("a CPU processor"), "{e}");
    }
}

#[test]
fn a_streamed_step_costs_the_longer_of_its_copies_and_its_gemms() {
    // The copy of an operator's CG weights runs on a copy stream beside
    // the GEMMs: its GPU part is max(copies, GEMMs), not their sum.
    let mut dev = synthetic::discrete_cpu_gpu();
    let plan = solved(&dev, OffloadStrategy::GpuStream);
    let t = plan
        .ops
        .iter()
        .find(|o| {
            o.phase == Phase::Decode
                && matches!(o.at(1).unwrap().strategy, Strategy::Offload { gg_rows, cg_rows, .. } if gg_rows > 0 && cg_rows > 0)
        })
        .or_else(|| {
            plan.ops.iter().find(|o| {
                o.phase == Phase::Decode
                    && matches!(o.at(1).unwrap().strategy, Strategy::Offload { .. })
            })
        })
        .expect("a streamed table");
    let d = t.at(1).unwrap();
    let Strategy::Offload {
        cg_rows, gg_rows, ..
    } = d.strategy
    else {
        unreachable!()
    };
    let copy = synthetic::discrete_cpu_gpu()
        .overheads_mut("cuda")
        .unwrap()
        .copy_h2d
        .unwrap()
        .at(cg_rows as f64 * t.k as f64 * 2.0);
    let model = dev.model_mut("cuda").unwrap();
    let gemm = |rows: u32| {
        hetero_plan::GemmShape::new(1, t.k, rows).map_or(0.0, |s| {
            model.time_us(s, hetero_plan::DType::F16, hetero_plan::OperandOrder::Aw)
        })
    };
    let gemms = gemm(gg_rows) + gemm(cg_rows);
    let want = copy.max(gemms);
    assert!(copy > gemms, "decode is bound by PCIe: {copy} {gemms}");
    assert!(
        (d.cost.parts_us[0] - want).abs() < 0.02,
        "{} against max({copy}, {gemms})",
        d.cost.parts_us[0]
    );
}

#[test]
fn layer_split_keeps_the_first_layers_that_fit_on_the_gpu() {
    let dev = synthetic::discrete_cpu_gpu();
    let plan = solved(&dev, OffloadStrategy::LayerSplit);
    let n = (BUDGET / layer_bytes()) as u32;
    assert!(n > 0 && n < 32, "{n}");
    assert!((n as u64 + 1) * layer_bytes() > BUDGET);
    let o = plan.solver.as_ref().unwrap().offload.as_ref().unwrap();
    assert_eq!(o.resident_bytes, n as u64 * layer_bytes());
    for (op, first, layers, s) in decisions(&plan) {
        let Strategy::Single { processor, .. } = s else {
            panic!("{op}: {s:?}")
        };
        let want = if op == "lm_head" {
            "cpu"
        } else if first == 0 {
            assert_eq!(layers, n, "{op}");
            "cuda"
        } else {
            assert_eq!((first, layers), (n, 32 - n), "{op}");
            "cpu"
        };
        assert_eq!(processor, want, "{op} from layer {first}");
    }
}

#[test]
fn cpu_runs_every_operator_on_the_cpu() {
    let dev = synthetic::discrete_cpu_gpu();
    let plan = solved(&dev, OffloadStrategy::Cpu);
    let o = plan.solver.as_ref().unwrap().offload.as_ref().unwrap();
    assert_eq!(o.resident_bytes, 0);
    for (op, _, _, s) in decisions(&plan) {
        assert!(
            matches!(&s, Strategy::Single { processor, .. } if processor == "cpu"),
            "{op}: {s:?}"
        );
    }
}

#[test]
fn sliced_chooses_residency_per_layer_and_best_is_never_slower() {
    let dev = synthetic::discrete_cpu_gpu();
    let sliced = solved(&dev, OffloadStrategy::Sliced);
    // Some operator keeps more rows resident in its first layers than in
    // its last: one row count per operator for every layer would not.
    let o = sliced.solver.as_ref().unwrap().offload.as_ref().unwrap();
    assert!(
        sliced
            .ops
            .iter()
            .any(|t| o.rows_at(&t.op, 0) > o.rows_at(&t.op, 31)),
        "{:?}",
        o.resident
    );
    assert!(o.resident_bytes > BUDGET * 3 / 4, "{}", o.resident_bytes);
    let best = solved(&dev, OffloadStrategy::Best);
    let b = decode_step(&best);
    for s in &OffloadStrategy::ALL[1..] {
        let other = decode_step(&solved(&dev, *s));
        // Each decision's cost is rounded to 0.01 µs.
        assert!(b <= other + 1.0, "best {b} µs, {} {other} µs", s.name());
    }
    assert!(
        best.notes
            .iter()
            .any(|n| n.starts_with("offload strategy best:")),
        "{:?}",
        best.notes
    );
}

#[test]
fn budgets_offload_mode_cannot_use_are_refused_with_the_sizes() {
    let dev = synthetic::discrete_cpu_gpu();
    let m = llama8b();
    let small = settings(OffloadStrategy::Best, layer_bytes() - 1);
    let e = solve(&dev, fp(), &m, &small).unwrap_err();
    assert!(matches!(e, Error::GpuBudget { .. }), "{e}");
    assert!(
        e.to_string().contains("smaller than one layer's weights"),
        "{e}"
    );
    let need = format!("416.0 MiB, {} bytes in f16", layer_bytes());
    assert!(e.to_string().contains(&need), "{e}");
    // One layer's weights fit.
    solve(
        &dev,
        fp(),
        &m,
        &settings(OffloadStrategy::Cpu, layer_bytes()),
    )
    .unwrap();
    let big = settings(OffloadStrategy::Sliced, (16 << 30) + 1);
    let e = solve(&dev, fp(), &m, &big).unwrap_err();
    assert!(
        e.to_string()
            .contains("larger than the memory of `cuda` (16.00 GiB, 17179869184 bytes)"),
        "{e}"
    );
    let none = Settings {
        gpu_mem_budget: None,
        ..settings(OffloadStrategy::LayerSplit, BUDGET)
    };
    let e = solve(&dev, fp(), &m, &none).unwrap_err();
    assert!(e.to_string().contains("--offload-strategy"), "{e}");
}

#[test]
fn a_cpu_reads_a_models_weights_no_faster_than_its_measured_bandwidth() {
    // A CPU fitted on rows whose weights stayed in its cache (800 GB/s),
    // with a streaming read measured at 50 GB/s: a decode step of the
    // model reads every layer's weights from memory.
    let mut dev = synthetic::discrete_cpu_gpu();
    dev.processor_mut("cpu").unwrap().simulated = false;
    *dev.model_mut("cpu").unwrap() = synthetic::SynthModel::Roofline {
        peak_gflops: 1500.0,
        bw_gbps: 800.0,
        launch_us: 5.0,
    };
    let step = |dev: &Synthetic| decode_step(&solved(dev, OffloadStrategy::Cpu));
    let cached = {
        let mut d = synthetic::discrete_cpu_gpu();
        d.processor_mut("cpu").unwrap().simulated = false;
        *d.model_mut("cpu").unwrap() = dev.model_mut("cpu").unwrap().clone();
        d.overheads_mut("cpu").unwrap().bandwidth_gbps = None;
        step(&d)
    };
    dev.overheads_mut("cpu").unwrap().bandwidth_gbps = Some(50.0);
    let streamed = step(&dev);
    let m = llama8b();
    let bytes: f64 = (m.ops.iter())
        .map(|o| o.k as f64 * o.n as f64 * o.count as f64 * 2.0 * o.layers as f64)
        .sum();
    let floor = bytes / 50e3;
    assert!(cached < 0.2 * floor, "{cached} µs against {floor}");
    assert!(
        streamed > 0.999 * floor && streamed < 1.05 * floor,
        "{streamed} µs against {floor}"
    );
}
