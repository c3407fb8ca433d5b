//! The agent protocol: the lines `hetero-agent` writes and the host reads.
//!
//! A sweep's standard output is JSON Lines with a `"type"` key: a `hello`
//! line first, then one `measurement` or `microbench` line per case as soon
//! as it is measured, and a `done` line at the end. The measurement and
//! microbenchmark lines are [`MeasurementRow`] and [`MicrobenchRow`] with a
//! `"type"` key added, so a reader that ignores unknown keys can parse them
//! as those types directly. `docs/agent-protocol.md` is the full
//! specification.
//!
//! The agent writes these types; the host reads them with
//! [`AgentLine::parse`], which is lenient on purpose: keys it does not know
//! are ignored, lines without a `type` key are rows when they parse as rows,
//! and a line that is not JSON (a warning a shell printed, a line cut off by
//! a dropped connection) is an `Err` to report and skip, never a panic.

use serde::{Deserialize, Serialize};

use crate::{MeasurementRow, MicrobenchRow, Processor};

/// The protocol version of this build; the host refuses an agent whose
/// `hello` says another.
pub const PROTOCOL_VERSION: u32 = 1;

/// The name every agent answers with in its `hello`.
pub const AGENT_NAME: &str = "hetero-agent";

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
    #[serde(default)]
    pub os: String,
    /// Backends compiled into this binary (cargo features).
    #[serde(default)]
    pub features: Vec<String>,
}

impl Hello {
    /// The handshake of an agent of `version` built for this target with
    /// the backends `features`.
    pub fn new(version: &str, features: Vec<String>) -> Hello {
        Hello {
            agent: AGENT_NAME.into(),
            version: version.into(),
            protocol: PROTOCOL_VERSION,
            arch: std::env::consts::ARCH.into(),
            os: std::env::consts::OS.into(),
            features,
        }
    }

    /// Checks that the program is an agent and speaks this build's protocol;
    /// `Err` says what to do.
    pub fn check(&self) -> Result<(), String> {
        if self.agent != AGENT_NAME {
            return Err(format!(
                "the program answered as `{}`, not {AGENT_NAME}",
                self.agent
            ));
        }
        if self.protocol != PROTOCOL_VERSION {
            return Err(format!(
                "{} {} speaks protocol {}, this hetero speaks protocol {}: push an agent built \
                 from the same hetero version (--agent PATH)",
                self.agent, self.version, self.protocol, PROTOCOL_VERSION
            ));
        }
        Ok(())
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
#[serde(default)]
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

    /// Parses one line, leniently. `Ok(None)`: a line of a type this build
    /// does not know, or an untyped line that is not a row (a benchmark
    /// summary, a log record): not a row and not an error. `Err` carries
    /// the reason the line is unusable.
    pub fn parse(text: &str) -> Result<Option<AgentLine>, String> {
        let text = text.trim_end_matches(['\r', '\n']);
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("not a JSON line: {e}"))?;
        let Some(ty) = v.get("type").and_then(|t| t.as_str()).map(str::to_string) else {
            return Ok(Self::untyped_row(v));
        };
        let bad = |kind: &str, e: serde_json::Error| format!("bad {kind} line: {e}");
        let line = match ty.as_str() {
            "hello" => AgentLine::Hello(serde_json::from_value(v).map_err(|e| bad("hello", e))?),
            "measurement" => AgentLine::Measurement(
                serde_json::from_value(v).map_err(|e| bad("measurement", e))?,
            ),
            "microbench" => {
                AgentLine::Microbench(Self::microbench(v).map_err(|e| bad("microbench", e))?)
            }
            "done" => AgentLine::Done(serde_json::from_value(v).map_err(|e| bad("done", e))?),
            _ => return Ok(None),
        };
        Ok(Some(line))
    }

    /// Older files and hand-made JSON Lines have no `type`: a line that
    /// parses as a row is one.
    fn untyped_row(v: serde_json::Value) -> Option<AgentLine> {
        v.get("case_id")?;
        if v.get("m").is_some()
            && let Ok(r) = serde_json::from_value::<MeasurementRow>(v.clone())
        {
            return Some(AgentLine::Measurement(r));
        }
        if v.get("bench").is_some() {
            return Self::microbench(v).ok().map(AgentLine::Microbench);
        }
        None
    }

    /// A microbenchmark line; a `note` that is not a string is ignored.
    fn microbench(v: serde_json::Value) -> serde_json::Result<MicrobenchLine> {
        let note = v.get("note").and_then(|n| n.as_str()).map(str::to_string);
        let row = serde_json::from_value::<MicrobenchRow>(v)?;
        Ok(MicrobenchLine { row, note })
    }

    /// The case id of a row line.
    pub fn case_id(&self) -> Option<&str> {
        match self {
            AgentLine::Measurement(r) => Some(&r.case_id),
            AgentLine::Microbench(l) => Some(&l.row.case_id),
            _ => None,
        }
    }
}

/// A backend that did not open, as `probe --json` lists it. `E` is the
/// structured reason: the agent's error type where it writes the report,
/// any JSON where the host reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnavailableBackend<E = serde_json::Value> {
    /// Backend name.
    #[serde(default)]
    pub backend: String,
    /// The reason, as a sentence.
    #[serde(default)]
    pub reason: String,
    /// The reason, structured (a missing library names the paths tried).
    #[serde(default)]
    pub error: E,
}

/// The output of `probe --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(bound(deserialize = "E: Deserialize<'de> + Default"))]
pub struct ProbeReport<E = serde_json::Value> {
    /// The handshake.
    pub hello: Hello,
    /// Every processor opened (after `--processors`).
    pub processors: Vec<Processor>,
    /// Backends that did not open, and why.
    #[serde(default = "Vec::new")]
    pub unavailable: Vec<UnavailableBackend<E>>,
}

#[cfg(test)]
mod tests {
    use crate::{
        Conditions, DType, MicrobenchKind, OperandOrder, RowStatus, Stats, Timing, WeightMode,
    };

    use super::*;

    const ROW: &str = r#"{"type":"measurement","case_id":"cpu:0/64x256x256/f32/aw","processor":"cpu:0","m":64,"k":256,"n":256,"dtype":"f32","order":"aw","weights":"static","status":"ok","timing":"real","warmups":2,"repetitions":7,"median_us":226.9,"min_us":210.3,"p90_us":260.4,"cv":0.08,"verified":true,"rel_err":8.7e-8,"tolerance":0.00016,"conditions":{"timestamp_ms":1795313073903,"cpu_mhz":2596.1}}"#;

    fn parse(text: &str) -> AgentLine {
        AgentLine::parse(text).unwrap().unwrap()
    }

    fn measurement() -> MeasurementRow {
        MeasurementRow {
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
        }
    }

    #[test]
    fn lines_carry_a_type_and_parse_back() {
        let row = measurement();
        let line = AgentLine::Measurement(row.clone());
        let json = line.to_json();
        assert!(
            json.starts_with(r#"{"type":"measurement","case_id":"c""#),
            "{json}"
        );
        assert_eq!(parse(&json), line);
        // A reader that knows only MeasurementRow ignores the type key.
        assert_eq!(serde_json::from_str::<MeasurementRow>(&json).unwrap(), row);
        let hello = AgentLine::Hello(Hello::new("0.1.0", vec!["cpu".into()])).to_json();
        assert!(hello.contains(r#""protocol":1"#), "{hello}");
        let mb = MicrobenchLine {
            row: MicrobenchRow {
                case_id: "mb".into(),
                processor: "cpu:0".into(),
                bench: MicrobenchKind::CopyH2d,
                bytes: Some(4096),
                peer: None,
                shape: None,
                status: RowStatus::Ok,
                timing: Timing::Real,
                stats: Stats::from_samples(&[1.0, 2.0]),
                gbps: Some(1.0),
                stream: None,
                peer_stream: None,
                message: None,
                conditions: Conditions::default(),
            },
            note: Some("memcpy".into()),
        };
        let line = AgentLine::Microbench(mb);
        assert_eq!(parse(&line.to_json()), line);
        let done = AgentLine::Done(Done {
            rows: 2,
            ..Done::default()
        });
        assert_eq!(parse(&done.to_json()), done);
    }

    #[test]
    fn the_wire_format_is_stable() {
        let hello = Hello {
            agent: "hetero-agent".into(),
            version: "0.1.0".into(),
            protocol: 1,
            arch: "aarch64".into(),
            os: "android".into(),
            features: vec!["cpu".into()],
        };
        assert_eq!(
            AgentLine::Hello(hello).to_json(),
            r#"{"type":"hello","agent":"hetero-agent","version":"0.1.0","protocol":1,"arch":"aarch64","os":"android","features":["cpu"]}"#
        );
        assert_eq!(
            AgentLine::Done(Done {
                rows: 3,
                ok: 3,
                seconds: 1.5,
                ..Done::default()
            })
            .to_json(),
            r#"{"type":"done","rows":3,"ok":3,"failed":0,"unsupported":0,"timeout":0,"error":0,"skipped":0,"seconds":1.5}"#
        );
    }

    #[test]
    fn protocol_lines_parse() {
        let hello = r#"{"type":"hello","agent":"hetero-agent","version":"0.1.0","protocol":1,"arch":"aarch64","os":"android","features":["cpu"]}"#;
        let AgentLine::Hello(h) = parse(hello) else {
            panic!()
        };
        assert!(h.check().is_ok());
        let AgentLine::Measurement(r) = parse(&format!("{ROW}\r\n")) else {
            panic!()
        };
        assert_eq!(r.median_us, Some(226.9));
        let mb = r#"{"type":"microbench","case_id":"mb","processor":"cpu:0","bench":"copy_h2d","bytes":4096,"status":"ok","timing":"real","stats":{"median_us":1.0,"min_us":1.0,"p90_us":1.0,"count":3,"cv":0.0},"note":"memcpy","conditions":{"timestamp_ms":1}}"#;
        assert!(
            matches!(parse(mb), AgentLine::Microbench(l) if l.note.as_deref() == Some("memcpy"))
        );
        let done = r#"{"type":"done","rows":3,"ok":3,"failed":0,"unsupported":0,"timeout":0,"error":0,"skipped":0,"seconds":1.5}"#;
        assert!(matches!(parse(done), AgentLine::Done(d) if d.rows == 3));
        assert_eq!(AgentLine::parse(r#"{"type":"progress"}"#), Ok(None));
    }

    #[test]
    fn untyped_rows_are_recognised() {
        let untyped = ROW.replacen(r#""type":"measurement","#, "", 1);
        assert!(matches!(parse(&untyped), AgentLine::Measurement(_)));
    }

    #[test]
    fn cut_lines_and_garbage_are_errors_not_panics() {
        assert!(AgentLine::parse(&ROW[..100]).is_err());
        assert!(AgentLine::parse("WARNING: linker: unused DT entry").is_err());
        // A typed row that does not parse is an error; an untyped line that
        // is not a row is just not a row.
        assert!(AgentLine::parse(r#"{"type":"measurement","case_id":"x"}"#).is_err());
        assert_eq!(
            AgentLine::parse(r#"{"bench":"bench_gemm","size":4096}"#),
            Ok(None)
        );
    }

    #[test]
    fn protocol_mismatch_is_explained() {
        let mut h = Hello::new("9.0.0", vec![]);
        assert!(h.check().is_ok());
        h.protocol = PROTOCOL_VERSION + 1;
        let e = h.check().unwrap_err();
        assert!(
            e.contains("speaks protocol 2") && e.contains("--agent"),
            "{e}"
        );
        h.agent = "sh".into();
        assert!(h.check().unwrap_err().contains("not hetero-agent"));
    }
}
