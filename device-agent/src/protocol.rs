//! The lines the agent writes: a `"type"` field tells them apart.
//!
//! A sweep's standard output is JSON Lines: a `hello` line first, then one
//! `measurement` or `microbench` line per case as soon as it is measured, and a
//! `done` line at the end. The measurement and microbenchmark lines are
//! [`MeasurementRow`] and [`MicrobenchRow`] with a `"type"` key added, so a
//! reader that ignores unknown keys can parse them as those types directly.
//! `docs/agent-protocol.md` is the full specification.

use hetero_plan::{MeasurementRow, MicrobenchRow, Processor};
use serde::{Deserialize, Serialize};

use crate::{Error, PROTOCOL_VERSION, Registry};

/// The file and protocol name of a microbenchmark (`copy_h2d`).
pub fn bench_name(kind: hetero_plan::MicrobenchKind) -> String {
    serde_json::to_value(kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{kind:?}"))
}

/// The handshake: who is speaking, and which protocol.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    /// Always `hetero-agent`.
    pub agent: String,
    /// The agent's crate version.
    pub version: String,
    /// The protocol version ([`PROTOCOL_VERSION`]); the host refuses others.
    pub protocol: u32,
    /// Target architecture the binary was built for (`x86_64`, `aarch64`).
    pub arch: String,
    /// Target operating system (`linux`, `android`).
    pub os: String,
    /// Backends compiled into this binary (cargo features).
    pub features: Vec<String>,
}

impl Hello {
    /// This binary's handshake.
    pub fn current() -> Hello {
        let features = [
            ("cpu", cfg!(feature = "cpu")),
            ("sim", cfg!(feature = "sim")),
            ("opencl", cfg!(feature = "opencl")),
            ("qnn", cfg!(feature = "qnn")),
            ("cuda", cfg!(feature = "cuda")),
        ];
        Hello {
            agent: "hetero-agent".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            protocol: PROTOCOL_VERSION,
            arch: std::env::consts::ARCH.into(),
            os: std::env::consts::OS.into(),
            features: features
                .iter()
                .filter(|f| f.1)
                .map(|f| f.0.to_string())
                .collect(),
        }
    }

    /// Checks the host and agent speak the same protocol.
    pub fn check_protocol(&self, host_protocol: u32) -> Result<(), String> {
        if self.protocol == host_protocol {
            Ok(())
        } else {
            Err(format!(
                "{} {} speaks protocol {}, the host speaks {}: push a matching agent",
                self.agent, self.version, self.protocol, host_protocol
            ))
        }
    }
}

/// A microbenchmark row, with a note saying what was actually measured where
/// the benchmark's name could mislead (a cpu "copy" is a memcpy between two
/// host buffers).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MicrobenchLine {
    /// The row.
    #[serde(flatten)]
    pub row: MicrobenchRow,
    /// What was measured, where the name is not the whole story.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The end of a sweep: how many rows of each status were written.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Done {
    /// Rows written (measurements and microbenchmarks).
    pub rows: u32,
    /// Rows with status `ok`.
    pub ok: u32,
    /// Rows with status `failed` (wrong results).
    pub failed: u32,
    /// Rows with status `unsupported`.
    pub unsupported: u32,
    /// Rows with status `timeout`.
    pub timeout: u32,
    /// Rows with status `error`.
    pub error: u32,
    /// Cases skipped because a previous output already had them (`--resume`)
    /// or their processor was filtered out (`--processors`).
    pub skipped: u32,
    /// Wall-clock seconds the sweep took.
    pub seconds: f64,
}

/// One line of the agent's output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentLine {
    /// The handshake, first line of every sweep and of `version --json`.
    Hello(Hello),
    /// A measured (or failed, unsupported, timed-out) GEMM.
    Measurement(MeasurementRow),
    /// A microbenchmark result.
    Microbench(MicrobenchLine),
    /// The last line of a sweep that ran to the end.
    Done(Done),
}

impl AgentLine {
    /// Compact JSON, no newline.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("agent lines always serialise")
    }
}

/// A backend that did not open, as `probe --json` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnavailableReport {
    /// Backend name.
    pub backend: String,
    /// The reason, as a sentence.
    pub reason: String,
    /// The reason, structured (a missing library names the paths tried).
    pub error: Error,
}

/// The output of `probe --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeReport {
    /// The handshake.
    pub hello: Hello,
    /// Every processor opened (after `--processors`).
    pub processors: Vec<Processor>,
    /// Backends that did not open, and why.
    pub unavailable: Vec<UnavailableReport>,
}

impl ProbeReport {
    /// The report of a registry.
    pub fn of(reg: &Registry) -> ProbeReport {
        ProbeReport {
            hello: Hello::current(),
            processors: reg.processors(),
            unavailable: reg
                .unavailable
                .iter()
                .map(|u| UnavailableReport {
                    backend: u.backend.clone(),
                    reason: u.reason.to_string(),
                    error: u.reason.clone(),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use hetero_plan::{Conditions, DType, OperandOrder, RowStatus, Timing, WeightMode};

    use super::*;

    #[test]
    fn lines_carry_a_type_and_parse_back() {
        let row = MeasurementRow {
            case_id: "c".into(),
            processor: "cpu:0".into(),
            m: 1,
            k: 2,
            n: 3,
            dtype: DType::F32,
            order: OperandOrder::Aw,
            weights: WeightMode::Static,
            status: RowStatus::Ok,
            timing: Timing::Real,
            warmups: 1,
            repetitions: 3,
            median_us: Some(2.5),
            min_us: Some(2.0),
            p90_us: Some(3.0),
            cv: Some(0.1),
            mean_us: None,
            host_median_us: None,
            launch_us: None,
            prepare_us: None,
            verified: true,
            rel_err: Some(1e-7),
            tolerance: Some(1e-5),
            message: None,
            conditions: Conditions::default(),
        };
        let line = AgentLine::Measurement(row.clone());
        let json = line.to_json();
        assert!(
            json.starts_with(r#"{"type":"measurement","case_id":"c""#),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<AgentLine>(&json).unwrap(), line);
        // A reader that knows only MeasurementRow ignores the type key.
        assert_eq!(serde_json::from_str::<MeasurementRow>(&json).unwrap(), row);
        let hello = AgentLine::Hello(Hello::current()).to_json();
        assert!(hello.contains(r#""protocol":1"#), "{hello}");
    }

    #[test]
    fn protocol_mismatch_is_refused_with_a_reason() {
        let h = Hello::current();
        assert!(h.check_protocol(PROTOCOL_VERSION).is_ok());
        let e = h.check_protocol(PROTOCOL_VERSION + 1).unwrap_err();
        assert!(e.contains("speaks protocol"), "{e}");
    }
}
