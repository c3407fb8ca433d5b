//! Benchmark: solve a Llama-70B-class model at every prefill length
//! 1..=32768 (plus decode at 1..=8), in blocks (the default) and
//! exhaustively.
//!
//! `cargo bench -p hetero-solver --bench solve_70b` (set RAYON_NUM_THREADS
//! to pin the thread count; HETERO_BENCH_TOP=131072 for longer prompts).
//! Three latency oracles:
//! * `analytic`: the simulated processors of `hetero_solver::synthetic`;
//! * `forest`: the same device as a predictor file whose models are forests
//!   of 64 regression trees of depth 8 (the cost of evaluating fitted tree
//!   models; their predictions approximate rooflines, for timing only);
//! * `file`: a predictor file named by `HETERO_BENCH_PREDICTOR` (say, the
//!   fit of `datasets/gpu-host-h200`), skipped when unset, with the
//!   processors `HETERO_BENCH_PROCESSORS` names (comma-separated; all when
//!   unset).

use std::path::Path;
use std::time::Instant;

use hetero_plan::predictor::{LatencyModel, Score, Tree, TreeNode};
use hetero_plan::{
    DType, Fingerprint, GemmShape, OperandOrder, Phase, Predictor, ProcessorModel, SchemaVersion,
    hf,
};
use hetero_solver::synthetic::{self, SynthModel};
use hetero_solver::{GraphChoice, LatencyOracle, Settings, solve_with_stats};

fn settings(exhaustive: bool, processors: &[String]) -> Settings {
    let top: u32 = std::env::var("HETERO_BENCH_TOP")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(32768);
    Settings {
        phases: vec![Phase::Prefill, Phase::Decode],
        prefill_lengths: (1..=top).collect(),
        decode_lengths: (1..=8).collect(),
        graphs: GraphChoice::Auto,
        // On this simulated NPU a graph of a 70B operator takes seconds to
        // prepare, 80 times that with the weights baked in (one graph per
        // layer): the budget admits a graph set with weights as inputs.
        prepare_budget_us: Some(240e6),
        processors: processors.to_vec(),
        exhaustive,
        ..Settings::default()
    }
}

/// A depth-`depth` tree over log2 m, k, n (features 3, 4, 5) whose leaves
/// hold ln(time) of `model` at the centre of their box.
fn tree(model: &SynthModel, seed: &mut u64, depth: u32) -> Tree {
    let mut nodes = vec![];
    fn rnd(seed: &mut u64) -> f64 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (*seed >> 11) as f64 / (1u64 << 53) as f64
    }
    fn build(
        nodes: &mut Vec<TreeNode>,
        model: &SynthModel,
        seed: &mut u64,
        depth: u32,
        lo: [f64; 3],
        hi: [f64; 3],
    ) -> u32 {
        let me = nodes.len() as u32;
        if depth == 0 {
            let c = |i: usize| 2f64.powf((lo[i] + hi[i]) / 2.0).round().max(1.0) as u32;
            let s = GemmShape::new(c(0), c(1), c(2)).unwrap();
            let t = model.time_us(s, DType::F16, OperandOrder::Transposed);
            nodes.push(TreeNode::Leaf { value: t.ln() });
            return me;
        }
        let f = (rnd(seed) * 3.0) as usize % 3;
        let th = lo[f] + (hi[f] - lo[f]) * (0.3 + 0.4 * rnd(seed));
        nodes.push(TreeNode::Leaf { value: 0.0 });
        let (mut lhi, mut rlo) = (hi, lo);
        lhi[f] = th;
        rlo[f] = th;
        let left = build(nodes, model, seed, depth - 1, lo, lhi);
        let right = build(nodes, model, seed, depth - 1, rlo, hi);
        nodes[me as usize] = TreeNode::Split {
            feature: 3 + f as u16,
            threshold: th,
            left,
            right,
        };
        me
    }
    build(&mut nodes, model, seed, depth, [0.0; 3], [14.0, 15.0, 17.0]);
    Tree { nodes }
}

fn forest_predictor() -> Predictor {
    let dev = synthetic::paper_like_npu_gpu();
    let mut seed = 42;
    let models = dev
        .processors()
        .iter()
        .map(|p| {
            let sm = match p.id.as_str() {
                "npu" => synthetic::mobile_npu("npu").1,
                _ => synthetic::mobile_gpu("gpu").1,
            };
            ProcessorModel {
                processor: p.id.clone(),
                dtype: DType::F16,
                model: LatencyModel::Forest {
                    trees: (0..64).map(|_| tree(&sm, &mut seed, 8)).collect(),
                },
                score: Score::default(),
                candidates: vec![],
                launch_us: None,
                order_free: false,
                measured: Vec::new(),
            }
        })
        .collect();
    Predictor {
        schema_version: SchemaVersion,
        dataset: Fingerprint::of_bytes("bench (simulated)", b"bench"),
        processors: dev.processors().to_vec(),
        models,
        overheads: dev
            .processors()
            .iter()
            .map(|p| dev.overheads(&p.id))
            .collect(),
    }
}

fn time<O: LatencyOracle>(
    name: &str,
    oracle: &O,
    model: &hetero_plan::ModelSpec,
    processors: &[String],
) {
    for exhaustive in [false, true] {
        let s = settings(exhaustive, processors);
        let fp = Fingerprint::of_bytes(name, name.as_bytes());
        let mut times = vec![];
        let mut line = String::new();
        for _ in 0..5 {
            let t = Instant::now();
            let (plan, stats) = solve_with_stats(oracle, fp.clone(), model, &s).expect("solve");
            times.push(t.elapsed().as_secs_f64());
            let decisions = plan.ops.iter().map(|o| o.length_count()).sum::<usize>();
            line = format!(
                "{decisions} decisions, {} of {} cells costed in full",
                stats.costed, stats.cells
            );
        }
        times.sort_by(f64::total_cmp);
        println!(
            "{name:>9} {}: {line}; median {:.3} s (min {:.3}, max {:.3}) over 5 runs, {} threads",
            if exhaustive { "exhaustive" } else { "blocks" },
            times[2],
            times[0],
            times[4],
            rayon::current_num_threads()
        );
    }
}

fn main() {
    // HETERO_BENCH_CONFIG overrides the fixture's path (for a copied binary).
    let path = std::env::var_os("HETERO_BENCH_CONFIG")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../tests/fixtures/configs/llama-70b-class.json")
        });
    let model = hf::load_config(&path).expect("fixture config");
    let which: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let want = |n: &str| which.is_empty() || which.iter().any(|w| w == n);
    if want("analytic") {
        time("analytic", &synthetic::paper_like_npu_gpu(), &model, &[]);
    }
    if want("forest") {
        time("forest", &forest_predictor(), &model, &[]);
    }
    if want("file") {
        match std::env::var_os("HETERO_BENCH_PREDICTOR") {
            Some(p) => {
                let p: Predictor = hetero_plan::load(Path::new(&p)).expect("predictor file");
                let procs: Vec<String> = std::env::var("HETERO_BENCH_PROCESSORS")
                    .map(|v| v.split(',').map(|x| x.trim().to_string()).collect())
                    .unwrap_or_default();
                time("file", &p, &model, &procs);
            }
            None => eprintln!("skipping file: HETERO_BENCH_PREDICTOR is not set"),
        }
    }
}
