//! Solves a plan for the runtime benchmark (`bench/replay.sh`): a predictor
//! fitted on this machine, a model config, the processors to use.
//!
//! `cargo run --release -p hetero-runtime --example bench_plan -- PREDICTOR CONFIG OUT.ron cpu:0,cpu:1`

use hetero_plan::{DType, Phase, Predictor};
use hetero_solver::{GraphChoice, Settings};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [pred, config, out, procs] = args.as_slice() else {
        eprintln!("usage: bench_plan PREDICTOR CONFIG OUT.ron PROCESSORS");
        std::process::exit(2);
    };
    let predictor: Predictor = hetero_plan::load(std::path::Path::new(pred)).unwrap();
    let model = hetero_plan::hf::load_config(std::path::Path::new(config)).unwrap();
    let name = std::path::Path::new(pred)
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let settings = Settings {
        phases: vec![Phase::Prefill, Phase::Decode],
        prefill_lengths: (1..=128).collect(),
        decode_lengths: vec![1, 2, 4],
        graphs: GraphChoice::None,
        row_align: 128,
        dtypes: vec![(None, DType::F32)],
        processors: procs.split(',').map(str::to_string).collect(),
        ..Default::default()
    };
    let plan = hetero_solver::solve(&predictor, predictor.fingerprint(name), &model, &settings)
        .unwrap_or_else(|e| {
            eprintln!("solve: {e}");
            std::process::exit(1)
        });
    hetero_plan::save(std::path::Path::new(out), &plan).unwrap();
    let mut kinds = std::collections::BTreeMap::<String, usize>::new();
    for op in &plan.ops {
        for d in &op.decisions {
            *kinds.entry(d.strategy.kind().to_string()).or_default() += 1;
        }
    }
    eprintln!("plan: {out}; decisions by strategy: {kinds:?}");
}
