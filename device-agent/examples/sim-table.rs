//! Prints the npu-sim model's times for the HeteroLLM §3.2 shapes (no GEMM
//! is computed): `cargo run -p hetero-agent --example sim-table [PARAMS.ron]`.

use hetero_agent::sim::{SimParams, spec};
use hetero_plan::{DType, OperandOrder};

fn main() {
    let params = match std::env::args().nth(1) {
        Some(p) => SimParams::load(std::path::Path::new(&p)).unwrap_or_else(|e| {
            eprintln!("{e}");
            std::process::exit(2)
        }),
        None => SimParams::default(),
    };
    let t = |m, k, n, o| {
        params
            .model(&spec(m, k, n, DType::F16, o))
            .expect("f16")
            .total_us
    };
    println!("stage (M x 4096 x 4096, f16, transposed), µs:");
    for m in [1, 16, 32, 33, 64, 65, 96, 128, 129] {
        println!(
            "  M={m:<4} {:>9.1}",
            t(m, 4096, 4096, OperandOrder::Transposed)
        );
    }
    println!("order (M x 4096 x 14336, f16), µs:");
    for m in [32, 64, 128, 256, 512, 1024] {
        let (aw, wt) = (
            t(m, 4096, 14336, OperandOrder::Aw),
            t(m, 4096, 14336, OperandOrder::Transposed),
        );
        println!(
            "  M={m:<5} aw {aw:>9.1}  transposed {wt:>9.1}  aw/transposed {:.2}",
            aw / wt
        );
    }
    println!("shape (equal FLOPs, aw, f16), µs:");
    println!(
        "  1024x256x1024 (tall input) {:>8.1}",
        t(1024, 256, 1024, OperandOrder::Aw)
    );
    println!(
        "  256x1024x1024 (wide input) {:>8.1}",
        t(256, 1024, 1024, OperandOrder::Aw)
    );
}
