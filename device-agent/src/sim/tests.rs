//! The HeteroLLM §3.2 characteristics, checked on the model with its
//! default (illustrative) parameters.

use super::*;

fn t(m: u32, k: u32, n: u32, order: OperandOrder) -> f64 {
    SimParams::default()
        .model(&spec(m, k, n, DType::F16, order))
        .unwrap()
        .total_us
}

#[test]
fn stage_performance_latency_is_flat_between_multiples_of_the_tile() {
    for order in [OperandOrder::Aw, OperandOrder::Transposed] {
        // M: flat from 1 to 32, a step at 33, flat again to 64.
        let base = t(32, 4096, 4096, order);
        for m in [1, 7, 16, 31] {
            assert_eq!(t(m, 4096, 4096, order), base, "{order} m={m}");
        }
        let next = t(33, 4096, 4096, order);
        assert!(next > base, "{order}: 33 should cost more than 32");
        assert_eq!(t(64, 4096, 4096, order), next, "{order}");
        // K and N step too.
        assert_eq!(t(128, 4065, 4096, order), t(128, 4096, 4096, order));
        assert!(t(128, 4097, 4096, order) > t(128, 4096, 4096, order));
        assert_eq!(t(128, 4096, 4065, order), t(128, 4096, 4096, order));
        assert!(t(128, 4096, 4097, order) > t(128, 4096, 4096, order));
    }
}

#[test]
fn order_sensitivity_a_large_stationary_weight_hurts() {
    // HeteroLLM's example: a [4096, 14336] weight with few tokens.
    for (m, at_least) in [(32, 4.0), (64, 2.5), (256, 1.3)] {
        let aw = t(m, 4096, 14336, OperandOrder::Aw);
        let transposed = t(m, 4096, 14336, OperandOrder::Transposed);
        assert!(
            aw / transposed >= at_least,
            "m={m}: aw {aw:.0} µs vs transposed {transposed:.0} µs ({:.2}x)",
            aw / transposed
        );
    }
    // When the activation is the larger tensor, aw is the better order.
    assert!(t(8192, 512, 256, OperandOrder::Aw) < t(8192, 512, 256, OperandOrder::Transposed));
}

#[test]
fn shape_sensitivity_more_rows_than_columns_is_faster_at_equal_flops() {
    for order in [OperandOrder::Aw, OperandOrder::Transposed] {
        // Same FLOPs; the input [M,K] is tall in the first, wide in the second.
        let (tall, wide) = match order {
            OperandOrder::Aw => (t(1024, 256, 1024, order), t(256, 1024, 1024, order)),
            // In transposed the streamed input is Wᵀ[N,K].
            OperandOrder::Transposed => (t(1024, 256, 1024, order), t(1024, 1024, 256, order)),
        };
        assert!(
            wide / tall >= 1.2,
            "{order}: tall {tall:.0} µs, wide {wide:.0} µs"
        );
    }
}

#[test]
fn f32_is_slower_than_f16_and_other_dtypes_are_not_modelled() {
    let p = SimParams::default();
    let f16 = p
        .model(&spec(512, 2048, 2048, DType::F16, OperandOrder::Aw))
        .unwrap();
    let f32 = p
        .model(&spec(512, 2048, 2048, DType::F32, OperandOrder::Aw))
        .unwrap();
    assert!(f32.total_us > 2.0 * f16.total_us);
    assert!(
        p.model(&spec(1, 1, 1, DType::Bf16, OperandOrder::Aw))
            .is_none()
    );
}

#[test]
fn prepare_cost_grows_with_tensor_size() {
    let p = SimParams::default();
    let small = p
        .prepare_us(&spec(32, 1024, 1024, DType::F16, OperandOrder::Transposed))
        .unwrap();
    let big = p
        .prepare_us(&spec(32, 4096, 4096, DType::F16, OperandOrder::Transposed))
        .unwrap();
    let longer = p
        .prepare_us(&spec(
            1024,
            4096,
            4096,
            DType::F16,
            OperandOrder::Transposed,
        ))
        .unwrap();
    assert!(small >= p.prepare_base_us);
    assert!(big > small && longer > big, "{small} {big} {longer}");
    // Weights passed as inputs are not baked into the graph.
    let mut s = spec(32, 4096, 4096, DType::F16, OperandOrder::Transposed);
    s.weights = WeightMode::Input;
    assert!(p.prepare_us(&s).unwrap() < big);
}

#[test]
fn memory_bound_decode_is_limited_by_dram() {
    // One token through a 4096x4096 f16 weight: 32 MiB at 60 GB/s ≈ 560 µs.
    let b = SimParams::default()
        .model(&spec(1, 4096, 4096, DType::F16, OperandOrder::Transposed))
        .unwrap();
    assert!(b.memory_us >= b.compute_us, "{b:?}");
    assert!((b.memory_us - 4096.0 * 4096.0 * 2.0 / 60e3).abs() / b.memory_us < 0.05);
}

#[test]
fn the_backend_reports_model_time_and_the_real_product() {
    let mut b = SimBackend::new(SimParams::default(), "test");
    assert!(b.processor().simulated);
    assert_eq!(b.processor().timing(), hetero_plan::Timing::Simulated);
    assert_eq!(b.processor().capabilities.tile, Some(32));
    let s = spec(40, 70, 33, DType::F32, OperandOrder::Transposed);
    let (a, w) = crate::verify::inputs(&s.shape, 0);
    let mut g = b.prepare(&s, &w).unwrap();
    assert_eq!(g.prepare_us(), SimParams::default().prepare_us(&s));
    g.write_input(&a).unwrap();
    let t1 = g.execute().unwrap();
    let t2 = g.execute().unwrap();
    assert_eq!(t1.device_us, t2.device_us, "deterministic");
    assert_eq!(
        t1.device_us,
        Some(SimParams::default().model(&s).unwrap().total_us)
    );
    let mut c = vec![0f32; 40 * 33];
    g.read_output(&mut c).unwrap();
    assert!(crate::verify::check(&s.shape, &a, &w, &c).passes(1e-5));
    let bad = spec(2, 2, 2, DType::Bf16, OperandOrder::Aw);
    assert!(matches!(
        b.prepare(&bad, &[0.0; 4]),
        Err(Error::Unsupported { .. })
    ));
}

#[test]
fn params_load_from_ron_with_defaults_and_named_errors() {
    let dir = std::env::temp_dir().join(format!("hetero-sim-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("p.ron");
    std::fs::write(&good, "(rows: 64, cols: 64, dram_gbps: 100.0)").unwrap();
    let p = SimParams::load(&good).unwrap();
    assert_eq!((p.rows, p.cols, p.dram_gbps), (64, 64, 100.0));
    assert_eq!(p.clock_mhz, SimParams::default().clock_mhz);
    let bad = dir.join("bad.ron");
    std::fs::write(&bad, "(rows: 64,\n  colz: 3)").unwrap();
    let e = SimParams::load(&bad).unwrap_err().to_string();
    assert!(e.contains("bad.ron:2:") && e.contains("colz"), "{e}");
    let zero = dir.join("zero.ron");
    std::fs::write(&zero, "(arrays: 0)").unwrap();
    let e = SimParams::load(&zero).unwrap_err().to_string();
    assert!(e.contains("`arrays`"), "{e}");
    let opts = OpenOptions {
        sim_params: Some(zero),
        ..Default::default()
    };
    assert!(matches!(open(&opts), Err(Error::BadRequest { .. })));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_example_params_file_is_the_defaults() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("sim-params.example.ron");
    assert_eq!(SimParams::load(&p).unwrap(), SimParams::default());
}
