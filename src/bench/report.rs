//! What `hetero bench offload` reports: per strategy, the plan's forecast
//! beside the measurement; the bandwidths and the floor; the ratio of the
//! solver's own plan to the best of the alternatives users run today.

use std::fmt::Write;

use hetero_solver::OffloadStrategy;
use hetero_solver::settings::fmt_bytes;
use serde::Serialize;

use super::bandwidth::Bandwidths;
use super::floor::Floor;

/// The whole report (`--json`).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The model's name.
    pub model: String,
    /// The predictor file the plans were solved with.
    pub predictor: String,
    pub gpu_mem_budget: u64,
    /// Prompt tokens, then decode steps after the first token.
    pub prompt: u32,
    pub decode_steps: u32,
    pub bandwidths: Bandwidths,
    pub floor: Floor,
    pub strategies: Vec<StrategyRun>,
    /// `best`'s decode tokens/s over the best of gpu-stream, layer-split
    /// and cpu (null unless `best` and one of them ran).
    pub best_over_alternatives: Option<f64>,
    pub notes: Vec<String>,
}

/// One figure predicted and measured; `ratio` is measured over predicted.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Figure {
    pub predicted: Option<f64>,
    pub measured: f64,
    pub ratio: Option<f64>,
}

impl Figure {
    pub fn new(predicted: Option<f64>, measured: f64) -> Figure {
        Figure {
            predicted,
            measured,
            ratio: predicted.map(|p| measured / p),
        }
    }
}

/// One strategy's plan, run end to end.
#[derive(Debug, Clone, Serialize)]
pub struct StrategyRun {
    pub strategy: &'static str,
    /// Weight bytes the plan keeps resident on the GPU.
    pub resident_bytes: u64,
    /// Host time preparing the plan's GEMMs (weights converted, copied to
    /// their processors), before any timed run, s.
    pub prepare_s: f64,
    pub ttft_us: Figure,
    pub prefill_tokens_per_s: Figure,
    pub tpot_us: Figure,
    pub decode_tokens_per_s: Figure,
    /// The floor's decode step over the measured one.
    pub floor_fraction: f64,
    /// `--check`: GEMM outputs within their bound, of those checked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check: Option<Check>,
}

/// GEMM outputs within their bound (`passed`) of those compared with the
/// host's reference (`outputs`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Check {
    pub passed: usize,
    pub outputs: usize,
}

/// `best`'s decode rate over the best alternative's.
pub fn best_over_alternatives(runs: &[StrategyRun]) -> Option<f64> {
    use OffloadStrategy as S;
    let rate = |s: S| {
        (runs.iter())
            .find(|r| r.strategy == s.name())
            .map(|r| r.decode_tokens_per_s.measured)
    };
    let others = [S::GpuStream, S::LayerSplit, S::Cpu];
    let alt = others.into_iter().filter_map(rate).reduce(f64::max)?;
    Some(rate(S::Best)? / alt)
}

/// `a` or `-`.
fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| "-".to_string(), f)
}

impl Report {
    /// The table and the floor's inputs, for a reader.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{}: prompt {} tokens, {} decode steps, GPU memory budget {}, synthetic weights (every layer its own)",
            self.model,
            self.prompt,
            self.decode_steps,
            fmt_bytes(self.gpu_mem_budget)
        );
        let _ = writeln!(
            s,
            "{:<12} {:>10} {:>9} {:>21} {:>21} {:>21} {:>21} {:>7}",
            "strategy",
            "resident",
            "prepare s",
            "TTFT ms (pred)",
            "prefill tok/s (pred)",
            "ms/token (pred)",
            "decode tok/s (pred)",
            "floor"
        );
        for r in &self.strategies {
            let fig = |f: &Figure, scale: f64, prec: usize| {
                let p = opt(f.predicted, |p| format!("{:.prec$}", p / scale));
                let ratio = opt(f.ratio, |x| format!("{x:.2}x"));
                format!("{:.prec$} ({p}, {ratio})", f.measured / scale)
            };
            let _ = writeln!(
                s,
                "{:<12} {:>10} {:>9.2} {:>21} {:>21} {:>21} {:>21} {:>6.0}%",
                r.strategy,
                fmt_bytes(r.resident_bytes),
                r.prepare_s,
                fig(&r.ttft_us, 1e3, 1),
                fig(&r.prefill_tokens_per_s, 1.0, 0),
                fig(&r.tpot_us, 1e3, 2),
                fig(&r.decode_tokens_per_s, 1.0, 2),
                100.0 * r.floor_fraction
            );
        }
        let _ = writeln!(
            s,
            "(measured, then the plan's forecast and measured/predicted)"
        );
        if let Some(x) = self.best_over_alternatives {
            let _ = writeln!(
                s,
                "best decodes {x:.2}x as fast as the best of gpu-stream, layer-split and cpu"
            );
        }
        self.write_floor(&mut s);
        for r in &self.strategies {
            if let Some(c) = r.check {
                let _ = writeln!(
                    s,
                    "check {}: {}/{} GEMM outputs within their bound",
                    r.strategy, c.passed, c.outputs
                );
            }
        }
        for n in &self.notes {
            let _ = writeln!(s, "note: {n}");
        }
        s
    }

    fn write_floor(&self, s: &mut String) {
        let (b, f) = (&self.bandwidths, &self.floor);
        let _ = writeln!(
            s,
            "floor of a decode step: {:.2} ms = {} from host memory at {:.1} GB/s + {} resident at {:.1} GB/s",
            f.decode_step_us / 1e3,
            fmt_bytes(f.host_bytes),
            f.host_gbps,
            fmt_bytes(f.resident_bytes),
            f.gpu_gbps
        );
        let _ = writeln!(
            s,
            "  {} (cores {}): stream {:.1} GB/s, GEMV {:.1} GB/s; {} host-to-device {:.1} GB/s (page-locked); {} reads its memory at {:.1} GB/s",
            b.cpu,
            b.cpu_cores,
            b.cpu_stream_gbps,
            b.cpu_gemv_gbps,
            b.gpu,
            b.h2d_gbps,
            b.gpu,
            b.gpu_memory_gbps
        );
        let _ = writeln!(
            s,
            "  side by side: {} {:.1} GB/s + {} {:.1} GB/s = {:.1} GB/s",
            b.cpu, b.cpu_beside_gpu_gbps, b.gpu, b.gpu_beside_cpu_gbps, b.host_gbps
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(strategy: OffloadStrategy, decode: f64) -> StrategyRun {
        StrategyRun {
            strategy: strategy.name(),
            resident_bytes: 4 << 30,
            prepare_s: 12.5,
            ttft_us: Figure::new(Some(400_000.0), 440_000.0),
            prefill_tokens_per_s: Figure::new(Some(1280.0), 1163.6),
            tpot_us: Figure::new(Some(1e6 / decode / 1.1), 1e6 / decode),
            decode_tokens_per_s: Figure::new(Some(decode * 1.1), decode),
            floor_fraction: 0.5,
            check: None,
        }
    }

    fn report() -> Report {
        let bw = Bandwidths {
            cpu: "cpu:0".into(),
            cpu_cores: "0-14".into(),
            gpu: "cuda:0".into(),
            cpu_stream_gbps: 95.0,
            cpu_gemv_gbps: 80.0,
            h2d_gbps: 25.0,
            cpu_beside_gpu_gbps: 85.0,
            gpu_beside_cpu_gbps: 24.0,
            host_gbps: 109.0,
            gpu_memory_gbps: 3000.0,
            notes: vec![],
        };
        let floor = Floor::new(15_009_316_864, 4 << 30, bw.host_gbps, bw.gpu_memory_gbps);
        let strategies = vec![
            run(OffloadStrategy::Best, 6.0),
            run(OffloadStrategy::GpuStream, 3.0),
            run(OffloadStrategy::Cpu, 2.0),
        ];
        Report {
            model: "meta-llama/Llama-3.1-8B".into(),
            predictor: "h100.ron".into(),
            gpu_mem_budget: 4 << 30,
            prompt: 512,
            decode_steps: 32,
            bandwidths: bw,
            floor,
            best_over_alternatives: best_over_alternatives(&strategies),
            strategies,
            notes: vec!["an example".into()],
        }
    }

    #[test]
    fn best_is_compared_with_the_fastest_alternative() {
        let r = report();
        assert_eq!(r.best_over_alternatives, Some(2.0));
        // Without `best`, or without an alternative, there is no ratio.
        assert_eq!(best_over_alternatives(&r.strategies[1..]), None);
        assert_eq!(best_over_alternatives(&r.strategies[..1]), None);
    }

    #[test]
    fn the_report_keeps_its_table_and_json_formats() {
        let r = report();
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
        let json = serde_json::to_string_pretty(&r).unwrap() + "\n";
        hetero_test_support::golden(&root.join("bench-offload.json"), &json);
        hetero_test_support::golden(&root.join("bench-offload.txt"), &r.to_text());
    }
}
