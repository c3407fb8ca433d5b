//! What to solve: phases, lengths, graph choice, budgets, and the parsers
//! for their command-line spellings.

use std::path::Path;

use hetero_plan::{DType, Phase};

use crate::{Error, Result};

/// How the static graph set is chosen.
#[derive(Debug, Clone, PartialEq)]
pub enum GraphChoice {
    /// Choose sizes under the budgets to minimise expected prefill latency.
    Auto,
    /// No prefill graphs (decode graphs are still prepared).
    None,
    /// Exactly these prefill sizes.
    Sizes(Vec<u32>),
}

impl std::str::FromStr for GraphChoice {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.trim() {
            "auto" => Ok(GraphChoice::Auto),
            "none" => Ok(GraphChoice::None),
            list => {
                let sizes = parse_list(list)?;
                if sizes.is_empty() {
                    return Err("expected auto, none, or sizes like 128,256,512".into());
                }
                Ok(GraphChoice::Sizes(sizes))
            }
        }
    }
}

/// A prompt-length distribution: lengths with probabilities summing to 1.
#[derive(Debug, Clone, PartialEq)]
pub struct Distribution {
    /// How it was given (`uniform 1..=2048`, `prompts.csv`).
    pub name: String,
    /// `(length, probability)`, lengths strictly increasing.
    pub points: Vec<(u32, f64)>,
}

impl Distribution {
    /// Uniform over `lo..=hi`.
    pub fn uniform(lo: u32, hi: u32) -> Distribution {
        let (lo, hi) = (lo.max(1), hi.max(lo.max(1)));
        let p = 1.0 / (hi - lo + 1) as f64;
        Distribution {
            name: format!("uniform {lo}..={hi}"),
            points: (lo..=hi).map(|l| (l, p)).collect(),
        }
    }

    /// Parses a histogram CSV: one `length,count` per line (a header line
    /// and `#` comments are allowed; counts may be fractional).
    pub fn from_csv(path: &Path, text: &str) -> Result<Distribution> {
        let bad = |line: usize, message: String| Error::BadHistogram {
            path: path.to_path_buf(),
            line,
            message,
        };
        let mut counts: std::collections::BTreeMap<u32, f64> = Default::default();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let cols: Vec<&str> = line.split(',').map(str::trim).collect();
            if cols.len() != 2 {
                return Err(bad(i + 1, format!("expected `length,count`, got `{line}`")));
            }
            let len = match cols[0].parse::<u32>() {
                Ok(l) => l,
                Err(_) if counts.is_empty() && cols[1].parse::<f64>().is_err() => continue, // header
                Err(_) => {
                    return Err(bad(
                        i + 1,
                        format!("length `{}` is not a positive integer", cols[0]),
                    ));
                }
            };
            let count: f64 = cols[1]
                .parse()
                .map_err(|_| bad(i + 1, format!("count `{}` is not a number", cols[1])))?;
            if len == 0 {
                return Err(bad(i + 1, "length must be at least 1".into()));
            }
            if !(count.is_finite() && count >= 0.0) {
                return Err(bad(
                    i + 1,
                    format!("count {count} must be a non-negative number"),
                ));
            }
            *counts.entry(len).or_default() += count;
        }
        let total: f64 = counts.values().sum();
        if total <= 0.0 {
            return Err(bad(
                text.lines().count().max(1),
                "the histogram has no positive counts".into(),
            ));
        }
        Ok(Distribution {
            name: path.display().to_string(),
            points: counts
                .into_iter()
                .filter(|(_, c)| *c > 0.0)
                .map(|(l, c)| (l, c / total))
                .collect(),
        })
    }

    /// The largest length with positive probability.
    pub fn max_len(&self) -> u32 {
        self.points.last().map(|p| p.0).unwrap_or(0)
    }
}

/// The ways of running a model whose weights exceed the GPU memory budget
/// (offload mode), each a plan the runtime runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OffloadStrategy {
    /// The solver's choice among every way below, per operator and layer.
    #[default]
    Best,
    /// ScheInfer's slicing: per operator CC/CG/GG rows, with the resident
    /// (GG) weights chosen per layer.
    Sliced,
    /// The GPU alone: the resident weights, and every other weight copied
    /// to the GPU as it is needed, overlapped with compute.
    GpuStream,
    /// llama.cpp's `-ngl`: the first layers whole on the GPU, the rest on
    /// the CPU.
    LayerSplit,
    /// The CPU alone.
    Cpu,
}

impl OffloadStrategy {
    /// Every strategy, in the order reports list them.
    pub const ALL: [OffloadStrategy; 5] = [
        OffloadStrategy::Best,
        OffloadStrategy::Sliced,
        OffloadStrategy::GpuStream,
        OffloadStrategy::LayerSplit,
        OffloadStrategy::Cpu,
    ];

    /// The name `--offload-strategy` takes and reports print.
    pub fn name(self) -> &'static str {
        match self {
            OffloadStrategy::Best => "best",
            OffloadStrategy::Sliced => "sliced",
            OffloadStrategy::GpuStream => "gpu-stream",
            OffloadStrategy::LayerSplit => "layer-split",
            OffloadStrategy::Cpu => "cpu",
        }
    }

    /// The strategy of a name ([`OffloadStrategy::name`]).
    pub fn from_name(name: &str) -> Option<OffloadStrategy> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// Everything a solve needs besides the device and the model.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Phases to solve.
    pub phases: Vec<Phase>,
    /// Prefill sequence lengths, strictly increasing.
    pub prefill_lengths: Vec<u32>,
    /// Decode step sizes (tokens per step: 1, or n for speculative decoding).
    pub decode_lengths: Vec<u32>,
    /// How to choose the prefill graph set.
    pub graphs: GraphChoice,
    /// Prompt lengths the graph set is chosen for; `None`: uniform over
    /// 1..=2048 (clipped to the solved lengths).
    pub prompt_lengths: Option<Distribution>,
    /// Graph prepare-time budget, µs (`None`: 30 s).
    pub prepare_budget_us: Option<f64>,
    /// Graph memory budget, bytes (`None`: the static processor's memory if known).
    pub graph_mem_budget: Option<u64>,
    /// GPU memory budget for weights; turns on offload mode (ScheInfer).
    pub gpu_mem_budget: Option<u64>,
    /// In offload mode, which way of running a model larger than the
    /// budget the plan takes ([`OffloadStrategy::Best`]: the solver's choice).
    pub offload_strategy: OffloadStrategy,
    /// Dtype per processor (`None` for the processor: f16 if it has a
    /// model for it, else its first dtype).
    pub dtypes: Vec<(Option<String>, DType)>,
    /// Only these processors (all when empty).
    pub processors: Vec<String>,
    /// Only these operators (all when empty).
    pub ops: Vec<String>,
    /// Row cuts are multiples of this (HeteroLLM: 256).
    pub row_align: u32,
    /// Cost every candidate at every length. Off (the default), a length
    /// inside a block whose lower bounds prove the neighbouring decision's
    /// family optimal within [`TOLERANCE`] takes that family without the
    /// other candidates being costed (`docs/solver.md`, "Which lengths are
    /// costed").
    pub exhaustive: bool,
}

/// How far above the exhaustive solve's optimum a length that is not
/// costed in full may be: its decision costs at most `1 + TOLERANCE` times
/// the least cost of every candidate there.
pub const TOLERANCE: f64 = 0.005;

/// The longest length `--lengths` takes: 2²⁰ tokens.
pub const MAX_LENGTH: u32 = 1 << 20;

/// The prepare-time budget when none is given: 30 s.
pub const DEFAULT_PREPARE_BUDGET_US: f64 = 30e6;

/// At most this many prefill graph sizes are chosen automatically.
pub const MAX_AUTO_GRAPHS: usize = 32;

impl Default for Settings {
    fn default() -> Self {
        Settings {
            phases: vec![Phase::Prefill, Phase::Decode],
            prefill_lengths: (1..=2048).collect(),
            decode_lengths: vec![1],
            graphs: GraphChoice::Auto,
            prompt_lengths: None,
            prepare_budget_us: None,
            graph_mem_budget: None,
            gpu_mem_budget: None,
            offload_strategy: OffloadStrategy::Best,
            dtypes: vec![],
            processors: vec![],
            ops: vec![],
            row_align: 256,
            exhaustive: false,
        }
    }
}

impl Settings {
    /// Checks the settings that do not need the model or the device.
    pub fn check(&self) -> Result<()> {
        if self.phases.is_empty() {
            return Err(Error::arg("--phase", "no phase to solve"));
        }
        for (what, lens, phase) in [
            ("--lengths", &self.prefill_lengths, Phase::Prefill),
            ("--decode-lengths", &self.decode_lengths, Phase::Decode),
        ] {
            if !self.phases.contains(&phase) {
                continue;
            }
            if lens.is_empty() {
                return Err(Error::EmptyLengths { what: what.into() });
            }
            if lens[0] == 0 || lens.windows(2).any(|w| w[0] >= w[1]) {
                return Err(Error::arg(
                    what,
                    "lengths must be positive and strictly increasing",
                ));
            }
            if lens.last().is_some_and(|&l| l > MAX_LENGTH) {
                return Err(Error::arg(what, format!("lengths go up to {MAX_LENGTH}")));
            }
        }
        if let GraphChoice::Sizes(s) = &self.graphs
            && (s.contains(&0) || s.windows(2).any(|w| w[0] >= w[1]))
        {
            return Err(Error::arg(
                "--npu-graphs",
                "sizes must be positive and strictly increasing",
            ));
        }
        if self.row_align == 0 {
            return Err(Error::arg("--row-align", "must be at least 1"));
        }
        if self.gpu_mem_budget.is_none() && self.offload_strategy != OffloadStrategy::Best {
            return Err(Error::arg(
                "--offload-strategy",
                "chooses among ways of running a model larger than the GPU: give --gpu-mem-budget with it",
            ));
        }
        if let Some(b) = self.prepare_budget_us
            && !(b.is_finite() && b >= 0.0)
        {
            return Err(Error::arg("--prepare-budget", "must be a duration ≥ 0"));
        }
        Ok(())
    }
}

/// Parses `1..4096` (both ends included), `1..=4096`, or a single length.
pub fn parse_range(s: &str) -> std::result::Result<Vec<u32>, String> {
    let s = s.trim();
    let bad = || format!("bad length range `{s}`: expected LO..HI (inclusive), e.g. 1..4096");
    if let Some((lo, hi)) = s.split_once("..") {
        let hi = hi.strip_prefix('=').unwrap_or(hi);
        let lo: u32 = lo.trim().parse().map_err(|_| bad())?;
        let hi: u32 = hi.trim().parse().map_err(|_| bad())?;
        if lo == 0 {
            return Err(format!("bad length range `{s}`: lengths start at 1"));
        }
        if hi > MAX_LENGTH {
            return Err(format!(
                "bad length range `{s}`: lengths go up to {MAX_LENGTH}"
            ));
        }
        Ok((lo..=hi).collect())
    } else {
        let l: u32 = s.parse().map_err(|_| bad())?;
        if l == 0 {
            return Err(format!("bad length `{s}`: lengths start at 1"));
        }
        Ok(vec![l])
    }
}

/// Parses a comma-separated list of positive integers, sorted and deduplicated.
pub fn parse_list(s: &str) -> std::result::Result<Vec<u32>, String> {
    let mut v = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let x: u32 = part
            .parse()
            .map_err(|_| format!("`{part}` is not a positive integer"))?;
        if x == 0 {
            return Err("sizes must be at least 1".into());
        }
        v.push(x);
    }
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

/// Parses a duration into µs: `30s`, `500ms`, `2min`, `250us`, `1.5h`
/// ([`hetero_plan::parse_duration`]).
pub fn parse_duration_us(s: &str) -> std::result::Result<f64, String> {
    hetero_plan::parse_duration(s).map(|d| d.as_secs_f64() * 1e6)
}

/// Parses a size in bytes: `8GiB`, `512MiB`, `8GB`, `1000000`.
pub fn parse_bytes(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("bad size `{s}`: expected e.g. 8GiB, 512MiB"))?;
    let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kib" | "k" => 1024.0,
        "mib" | "m" => 1024.0 * 1024.0,
        "gib" | "g" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024f64.powi(4),
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        u => {
            return Err(format!(
                "bad size unit `{u}` in `{s}`: use B, KiB, MiB, GiB, KB, MB or GB"
            ));
        }
    };
    Ok((v * scale).round() as u64)
}

/// Formats µs for people: `850 µs`, `12.3 ms`, `4.20 s`.
pub fn fmt_us(us: f64) -> String {
    if us < 1e3 {
        format!("{us:.0} µs")
    } else if us < 1e6 {
        format!("{:.1} ms", us / 1e3)
    } else {
        format!("{:.2} s", us / 1e6)
    }
}

/// Formats bytes for people: `512 MiB`.
pub fn fmt_bytes(b: u64) -> String {
    let b = b as f64;
    if b >= 1024f64.powi(3) {
        format!("{:.2} GiB", b / 1024f64.powi(3))
    } else if b >= 1024f64.powi(2) {
        format!("{:.1} MiB", b / 1024f64.powi(2))
    } else if b >= 1024.0 {
        format!("{:.1} KiB", b / 1024.0)
    } else {
        format!("{b:.0} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_lists_durations_sizes() {
        assert_eq!(parse_range("1..4").unwrap(), vec![1, 2, 3, 4]);
        assert_eq!(parse_range("3..=5").unwrap(), vec![3, 4, 5]);
        assert_eq!(parse_range("7").unwrap(), vec![7]);
        assert!(parse_range("5..4").unwrap().is_empty());
        assert!(parse_range("0..4").is_err());
        assert!(parse_range("a..b").is_err());
        // Long contexts, up to a bound that keeps the list in memory.
        assert_eq!(parse_range("1..131072").unwrap().len(), 131072);
        assert!(
            parse_range("1..4294967295")
                .unwrap_err()
                .contains("up to 1048576")
        );
        assert_eq!(parse_list("64, 32,64").unwrap(), vec![32, 64]);
        assert!(parse_list("32,x").is_err());
        assert_eq!(parse_duration_us("30s").unwrap(), 30e6);
        assert_eq!(parse_duration_us("250ms").unwrap(), 250e3);
        assert_eq!(parse_duration_us("2min").unwrap(), 120e6);
        assert!(parse_duration_us("3 parsecs").is_err());
        assert_eq!(parse_bytes("8GiB").unwrap(), 8 << 30);
        assert_eq!(parse_bytes("1.5KiB").unwrap(), 1536);
        assert_eq!(parse_bytes("2GB").unwrap(), 2_000_000_000);
        assert!(parse_bytes("8 furlongs").is_err());
    }

    #[test]
    fn histogram_csv() {
        let p = Path::new("h.csv");
        let d = Distribution::from_csv(p, "length,count\n# comment\n100,3\n50,1\n100,0\n").unwrap();
        assert_eq!(d.points, vec![(50, 0.25), (100, 0.75)]);
        let e = Distribution::from_csv(p, "length,count\n10,1\n0,2\n").unwrap_err();
        assert!(e.to_string().starts_with("h.csv:3:"), "{e}");
        let e = Distribution::from_csv(p, "10,1\n20,x\n").unwrap_err();
        assert!(e.to_string().contains("h.csv:2: count `x`"), "{e}");
        assert!(Distribution::from_csv(p, "length,count\n").is_err());
    }

    #[test]
    fn graph_choice_parses() {
        assert_eq!("auto".parse::<GraphChoice>().unwrap(), GraphChoice::Auto);
        assert_eq!("none".parse::<GraphChoice>().unwrap(), GraphChoice::None);
        assert_eq!(
            "256,128".parse::<GraphChoice>().unwrap(),
            GraphChoice::Sizes(vec![128, 256])
        );
        assert!("".parse::<GraphChoice>().is_err());
    }
}
