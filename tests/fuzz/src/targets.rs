//! The parsers under test, each with its seed files and the entry point the
//! command-line tool calls.
//!
//! Text that is UTF-8 goes to the same string parser the file loader ends
//! in (`load_str`, `hf::from_str`, `Rows::parse`, `AgentLine::parse`).
//! Bytes that are not UTF-8, and every [`VIA_FILE_EVERY`]th input besides,
//! are written to a file and loaded through the file loader itself
//! (`hetero_plan::load`, `hf::load_config`, `Dataset::load`,
//! `Journal::open`), so the byte-offset error path and the file handling
//! are fuzzed too.

use std::path::{Path, PathBuf};

use hetero_plan::protocol::AgentLine;
use hetero_plan::{Format, GemmShape, OperandOrder, Plan, Predictor, hf};
use hetero_profiler::Dataset;
use hetero_profiler::journal::{Journal, Rows};

/// One input in this many that is UTF-8 still goes through a file.
pub const VIA_FILE_EVERY: u64 = 32;

/// What a parser made of an input (a panic or a hang is caught outside).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Parsed and valid.
    Accepted,
    /// Refused with an error.
    Refused,
}

/// A worker's scratch folder, for the inputs loaded from a file.
pub struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    /// A fresh folder, in memory (`/dev/shm`) where there is one.
    pub fn new() -> std::io::Result<Scratch> {
        let shm = Path::new("/dev/shm");
        let dir = if shm.is_dir() {
            tempfile::Builder::new()
                .prefix("hetero-fuzz-")
                .tempdir_in(shm)?
        } else {
            tempfile::Builder::new().prefix("hetero-fuzz-").tempdir()?
        };
        Ok(Scratch { dir })
    }

    /// Writes `bytes` to `name` in the folder and returns its path.
    fn file(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, bytes).expect("the scratch folder is writable");
        path
    }
}

/// A parser under test.
pub struct Target {
    /// Its name on the command line.
    pub name: &'static str,
    /// What it parses, in words.
    pub what: &'static str,
    /// The seed files the inputs are mutated from.
    pub seeds: fn() -> Vec<Vec<u8>>,
    /// Runs the parser on one input; `via_file` asks for the file loader.
    pub run: fn(&Scratch, &[u8], bool) -> Outcome,
}

/// Every parser, in the order `--parser all` runs them.
pub const TARGETS: &[Target] = &[
    Target {
        name: "plan-ron",
        what: "plan, RON (hetero_plan::load::<Plan>)",
        seeds: || seeds(&[GOLDEN_PLAN_RON, GOLDEN_PLAN_COMPACT_RON]),
        run: |s, b, f| plan(s, b, f, Format::Ron),
    },
    Target {
        name: "plan-json",
        what: "plan, JSON (hetero_plan::load::<Plan>)",
        seeds: || seeds(&[GOLDEN_PLAN_JSON, GOLDEN_PLAN_COMPACT_JSON]),
        run: |s, b, f| plan(s, b, f, Format::Json),
    },
    Target {
        name: "predictor-ron",
        what: "predictor, RON (hetero_plan::load::<Predictor>)",
        seeds: || seeds(&[GOLDEN_PREDICTOR_RON, FIXTURE_DISCRETE, FIXTURE_SOC]),
        run: |s, b, f| predictor(s, b, f, Format::Ron),
    },
    Target {
        name: "predictor-json",
        what: "predictor, JSON (hetero_plan::load::<Predictor>)",
        seeds: || seeds(&[GOLDEN_PREDICTOR_JSON]),
        run: |s, b, f| predictor(s, b, f, Format::Json),
    },
    Target {
        name: "hf-config",
        what: "Hugging Face config.json (hf::load_config)",
        seeds: || seeds(HF_CONFIGS),
        run: hf_config,
    },
    Target {
        name: "device",
        what: "dataset device.json (Dataset::load)",
        seeds: || seeds(&[GOLDEN_DEVICE_JSON, H200_DEVICE_JSON]),
        run: device,
    },
    Target {
        name: "row",
        what: "one JSON Lines measurement or microbench row (Rows::parse)",
        seeds: || AGENT_LINES.lines().map(|l| l.as_bytes().to_vec()).collect(),
        run: row,
    },
    Target {
        name: "journal",
        what: "journal.jsonl, many lines (Rows::parse, Journal::open)",
        seeds: journal_seeds,
        run: journal,
    },
    Target {
        name: "protocol",
        what: "agent protocol line (AgentLine::parse)",
        seeds: || AGENT_LINES.lines().map(|l| l.as_bytes().to_vec()).collect(),
        run: protocol,
    },
];

/// The target called `name`.
pub fn find(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}

const GOLDEN_PLAN_RON: &[u8] = include_bytes!("../../../plan-format/tests/golden/plan.ron");
const GOLDEN_PLAN_COMPACT_RON: &[u8] =
    include_bytes!("../../../plan-format/tests/golden/plan-compact.ron");
const GOLDEN_PLAN_JSON: &[u8] = include_bytes!("../../../plan-format/tests/golden/plan.json");
const GOLDEN_PLAN_COMPACT_JSON: &[u8] =
    include_bytes!("../../../plan-format/tests/golden/plan-compact.json");
const GOLDEN_PREDICTOR_RON: &[u8] =
    include_bytes!("../../../plan-format/tests/golden/predictor.ron");
const GOLDEN_PREDICTOR_JSON: &[u8] =
    include_bytes!("../../../plan-format/tests/golden/predictor.json");
const FIXTURE_DISCRETE: &[u8] =
    include_bytes!("../../../tests/fixtures/predictors/discrete-cpu-gpu.ron");
const FIXTURE_SOC: &[u8] = include_bytes!("../../../tests/fixtures/predictors/soc-npu-gpu.ron");
const GOLDEN_DEVICE_JSON: &[u8] =
    include_bytes!("../../../plan-format/tests/golden/device-profile.json");
const H200_DEVICE_JSON: &[u8] = include_bytes!("../../../datasets/gpu-host-h200/device.json");
const HF_CONFIGS: &[&[u8]] = &[
    include_bytes!("../../../datasets/models/internlm2-1.8b.json"),
    include_bytes!("../../../datasets/models/llama-3.1-8b.json"),
    include_bytes!("../../../datasets/models/llama-3.2-3b.json"),
    include_bytes!("../../../datasets/models/mixtral-8x7b.json"),
    include_bytes!("../../../datasets/models/qwen2.5-1.5b.json"),
    include_bytes!("../../../tests/fixtures/configs/gemma-2b.json"),
    include_bytes!("../../../tests/fixtures/configs/gemma2-2b.json"),
    include_bytes!("../../../tests/fixtures/configs/llama-70b-class.json"),
    include_bytes!("../../../tests/fixtures/configs/mistral-7b.json"),
    include_bytes!("../../../tests/fixtures/configs/phi3-mini.json"),
    include_bytes!("../../../tests/fixtures/configs/qwen1.5-moe-a2.7b.json"),
    include_bytes!("../../../tests/fixtures/configs/qwen3-0.6b.json"),
];
/// A handshake, measurement and microbench rows (typed and untyped) and a
/// `done` line, taken from `datasets/gpu-host-h200`.
const AGENT_LINES: &str = include_str!("../seeds/agent-lines.jsonl");

fn seeds(files: &[&[u8]]) -> Vec<Vec<u8>> {
    files.iter().map(|f| f.to_vec()).collect()
}

/// Whole journals: all the lines, the rows alone, and one cut mid-line as
/// a killed run leaves it.
fn journal_seeds() -> Vec<Vec<u8>> {
    let all = AGENT_LINES.as_bytes().to_vec();
    let rows: String = AGENT_LINES
        .lines()
        .skip(1)
        .take(5)
        .map(|l| format!("{l}\n"))
        .collect();
    let torn = all[..all.len() * 2 / 3].to_vec();
    vec![all, rows.into_bytes(), torn]
}

fn extension(format: Format) -> &'static str {
    match format {
        Format::Ron => "ron",
        Format::Json => "json",
    }
}

/// Loads a `T` the way the command-line tool does: from a file when
/// `via_file` or when the bytes are not UTF-8, else from the text.
fn load<T: serde::de::DeserializeOwned + hetero_plan::Validate>(
    scratch: &Scratch,
    bytes: &[u8],
    via_file: bool,
    stem: &str,
    format: Format,
) -> Option<T> {
    let name = format!("{stem}.{}", extension(format));
    match std::str::from_utf8(bytes) {
        Ok(text) if !via_file => hetero_plan::load_str(Path::new(&name), text, format).ok(),
        _ => hetero_plan::load(&scratch.file(&name, bytes)).ok(),
    }
}

fn outcome<T>(v: Option<T>, then: impl FnOnce(T)) -> Outcome {
    match v {
        Some(v) => {
            then(v);
            Outcome::Accepted
        }
        None => Outcome::Refused,
    }
}

/// Shapes a loaded plan or predictor is asked about, as `run` and
/// `predict` would.
const LENGTHS: [u32; 4] = [1, 7, 512, 65536];

fn plan(scratch: &Scratch, bytes: &[u8], via_file: bool, format: Format) -> Outcome {
    outcome(
        load::<Plan>(scratch, bytes, via_file, "plan", format),
        |p| {
            for op in &p.ops {
                for len in LENGTHS {
                    let _ = op.at(len);
                }
                let _ = p.op(&op.op, op.phase);
                let _ = op.order("cpu:0");
            }
            let _ = p.to_text(format);
        },
    )
}

fn predictor(scratch: &Scratch, bytes: &[u8], via_file: bool, format: Format) -> Outcome {
    outcome(
        load::<Predictor>(scratch, bytes, via_file, "predictor", format),
        |p| {
            for m in &p.models {
                for len in LENGTHS {
                    let shape = GemmShape::new(len, 4096, 4096).expect("non-zero");
                    let _ = m.predict_us(shape, OperandOrder::Aw);
                    let _ = p.gemm_us(&m.processor, shape, m.dtype, OperandOrder::Aw);
                }
                let _ = p.overheads(&m.processor);
            }
            let _ = hetero_plan::to_string(&p, format);
        },
    )
}

fn hf_config(scratch: &Scratch, bytes: &[u8], via_file: bool) -> Outcome {
    let spec = match std::str::from_utf8(bytes) {
        Ok(text) if !via_file => hf::from_str(Path::new("config.json"), text, "model").ok(),
        _ => hf::load_config(&scratch.file("config.json", bytes)).ok(),
    };
    outcome(spec, |s| {
        let _ = hetero_plan::to_string(&s, Format::Json);
    })
}

/// `device.json` is always read from a dataset folder: `Dataset::load`
/// falls back to another reader when the typed one refuses the file.
fn device(scratch: &Scratch, bytes: &[u8], _via_file: bool) -> Outcome {
    let dir = scratch.dir.path().join("dataset");
    std::fs::create_dir_all(&dir).expect("the scratch folder is writable");
    std::fs::write(dir.join("device.json"), bytes).expect("the scratch folder is writable");
    outcome(Dataset::load_with_sources(&dir).ok(), |(ds, src)| {
        let _ = ds.summary("fuzz", &src);
    })
}

fn rows_outcome(rows: &Rows) -> Outcome {
    if rows.measurements.is_empty() && rows.microbench.is_empty() {
        Outcome::Refused
    } else {
        Outcome::Accepted
    }
}

fn row(scratch: &Scratch, bytes: &[u8], via_file: bool) -> Outcome {
    match std::str::from_utf8(bytes) {
        Ok(text) if !via_file => rows_outcome(&Rows::parse(text)),
        _ => Rows::read(&scratch.file("rows.jsonl", bytes))
            .map_or(Outcome::Refused, |r| rows_outcome(&r)),
    }
}

/// From a file, through `Journal::open`, which cuts a torn last line and
/// reads the rest leniently.
fn journal(scratch: &Scratch, bytes: &[u8], via_file: bool) -> Outcome {
    match std::str::from_utf8(bytes) {
        Ok(text) if !via_file => rows_outcome(&Rows::parse(text)),
        _ => Journal::open(&scratch.file("journal.jsonl", bytes))
            .map_or(Outcome::Refused, |(_, r, _)| rows_outcome(&r)),
    }
}

/// The agent's output is read line by line and decoded leniently
/// (`String::from_utf8_lossy`) before `AgentLine::parse`.
fn protocol(_scratch: &Scratch, bytes: &[u8], _via_file: bool) -> Outcome {
    let text = String::from_utf8_lossy(bytes);
    match AgentLine::parse(&text) {
        Ok(Some(line)) => {
            let _ = line.case_id();
            let _ = line.to_json();
            Outcome::Accepted
        }
        Ok(None) | Err(_) => Outcome::Refused,
    }
}
