//! The host's side of the agent protocol (`docs/agent-protocol.md`).
//!
//! The agent writes JSON Lines with a `"type"` key: `hello`, then one
//! `measurement` or `microbench` line per case, then `done`. Reading is
//! lenient on purpose: keys the host does not know are ignored, lines without
//! a `type` key are rows when they parse as rows, and a line that is not JSON
//! (a warning a shell printed, a line cut off by a dropped connection) is
//! reported and skipped, never fatal.

use hetero_plan::{MeasurementRow, MicrobenchRow, Processor};
use serde::{Deserialize, Serialize};

/// The protocol version this host speaks; the agent's `hello` must match.
pub const PROTOCOL_VERSION: u32 = 1;

/// The handshake line (`hetero-agent version --json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    /// Always `hetero-agent`.
    pub agent: String,
    /// The agent's crate version.
    pub version: String,
    /// The protocol version it speaks.
    pub protocol: u32,
    /// The architecture it was built for.
    pub arch: String,
    /// The operating system it was built for.
    #[serde(default)]
    pub os: String,
    /// Backends compiled in.
    #[serde(default)]
    pub features: Vec<String>,
}

impl Hello {
    /// Checks the agent speaks this host's protocol.
    pub fn check(&self) -> Result<(), String> {
        if self.agent != "hetero-agent" {
            return Err(format!(
                "the program answered as `{}`, not hetero-agent",
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

/// The end of a sweep that ran to completion.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Done {
    /// Rows written.
    #[serde(default)]
    pub rows: u32,
    /// Cases skipped by the agent.
    #[serde(default)]
    pub skipped: u32,
    /// Seconds the sweep took.
    #[serde(default)]
    pub seconds: f64,
}

/// One line of the agent's output.
#[derive(Debug, Clone, PartialEq)]
pub enum Line {
    /// The handshake.
    Hello(Hello),
    /// A measured GEMM.
    Measurement(Box<MeasurementRow>),
    /// A microbenchmark.
    Microbench(Box<MicrobenchRow>),
    /// The sweep ran to the end.
    Done(Done),
    /// A line of a type this host does not know (ignored).
    Other(String),
}

impl Line {
    /// Parses one line. `Err` carries the reason the line is unusable.
    pub fn parse(text: &str) -> Result<Line, String> {
        let text = text.trim_end_matches(['\r', '\n']);
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("not a JSON line: {e}"))?;
        let ty = v.get("type").and_then(|t| t.as_str()).map(str::to_string);
        let Some(ty) = ty else {
            // Untyped lines (older files, hand-made JSON Lines): a line that
            // parses as a row is one; anything else (a benchmark summary, a
            // log record) is not a row and not an error.
            if v.get("case_id").is_some() {
                if v.get("m").is_some()
                    && let Ok(r) = serde_json::from_value::<MeasurementRow>(v.clone())
                {
                    return Ok(Line::Measurement(Box::new(r)));
                }
                if v.get("bench").is_some()
                    && let Ok(r) = serde_json::from_value::<MicrobenchRow>(v.clone())
                {
                    return Ok(Line::Microbench(Box::new(r)));
                }
            }
            return Ok(Line::Other("untyped".into()));
        };
        let row_err = |kind: &str, e: serde_json::Error| format!("bad {kind} line: {e}");
        match ty.as_str() {
            "hello" => serde_json::from_value(v)
                .map(Line::Hello)
                .map_err(|e| row_err("hello", e)),
            "measurement" => serde_json::from_value(v)
                .map(|r| Line::Measurement(Box::new(r)))
                .map_err(|e| row_err("measurement", e)),
            "microbench" => serde_json::from_value(v)
                .map(|r| Line::Microbench(Box::new(r)))
                .map_err(|e| row_err("microbench", e)),
            "done" => serde_json::from_value(v)
                .map(Line::Done)
                .map_err(|e| row_err("done", e)),
            other => Ok(Line::Other(other.to_string())),
        }
    }

    /// The case id of a row line.
    pub fn case_id(&self) -> Option<&str> {
        match self {
            Line::Measurement(r) => Some(&r.case_id),
            Line::Microbench(r) => Some(&r.case_id),
            _ => None,
        }
    }
}

/// A backend that did not open, as `probe --json` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Unavailable {
    /// Backend name.
    #[serde(default)]
    pub backend: String,
    /// The reason, as a sentence.
    #[serde(default)]
    pub reason: String,
}

/// The output of `probe --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeReport {
    /// The handshake.
    pub hello: Hello,
    /// The processors opened.
    pub processors: Vec<Processor>,
    /// The backends that did not open.
    #[serde(default)]
    pub unavailable: Vec<Unavailable>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROW: &str = r#"{"type":"measurement","case_id":"cpu:0/64x256x256/f32/aw","processor":"cpu:0","m":64,"k":256,"n":256,"dtype":"f32","order":"aw","weights":"static","status":"ok","timing":"real","warmups":2,"repetitions":7,"median_us":226.9,"min_us":210.3,"p90_us":260.4,"cv":0.08,"verified":true,"rel_err":8.7e-8,"tolerance":0.00016,"conditions":{"timestamp_ms":1795313073903,"cpu_mhz":2596.1}}"#;

    #[test]
    fn protocol_lines_parse() {
        let hello = r#"{"type":"hello","agent":"hetero-agent","version":"0.1.0","protocol":1,"arch":"aarch64","os":"android","features":["cpu"]}"#;
        let Line::Hello(h) = Line::parse(hello).unwrap() else {
            panic!()
        };
        assert!(h.check().is_ok());
        let Line::Measurement(r) = Line::parse(&format!("{ROW}\r\n")).unwrap() else {
            panic!()
        };
        assert_eq!(r.median_us, Some(226.9));
        let mb = r#"{"type":"microbench","case_id":"mb","processor":"cpu:0","bench":"copy_h2d","bytes":4096,"status":"ok","timing":"real","stats":{"median_us":1.0,"min_us":1.0,"p90_us":1.0,"count":3,"cv":0.0},"note":"memcpy","conditions":{"timestamp_ms":1}}"#;
        assert!(matches!(Line::parse(mb).unwrap(), Line::Microbench(_)));
        let done = r#"{"type":"done","rows":3,"ok":3,"failed":0,"unsupported":0,"timeout":0,"error":0,"skipped":0,"seconds":1.5}"#;
        assert!(matches!(Line::parse(done).unwrap(), Line::Done(d) if d.rows == 3));
        assert!(matches!(
            Line::parse(r#"{"type":"progress"}"#).unwrap(),
            Line::Other(_)
        ));
    }

    #[test]
    fn untyped_rows_are_recognised() {
        let untyped = ROW.replacen(r#""type":"measurement","#, "", 1);
        assert!(matches!(
            Line::parse(&untyped).unwrap(),
            Line::Measurement(_)
        ));
    }

    #[test]
    fn cut_lines_and_garbage_are_errors_not_panics() {
        assert!(Line::parse(&ROW[..100]).is_err());
        assert!(Line::parse("WARNING: linker: unused DT entry").is_err());
        // A typed row that does not parse is an error; an untyped line that
        // is not a row is just not a row.
        assert!(Line::parse(r#"{"type":"measurement","case_id":"x"}"#).is_err());
        assert!(matches!(
            Line::parse(r#"{"bench":"bench_gemm","size":4096}"#).unwrap(),
            Line::Other(_)
        ));
    }

    /// The host reads every line type the agent's own types write, and
    /// speaks the same protocol version.
    #[test]
    fn agent_lines_written_by_the_agent_types_parse_here() {
        use hetero_agent::protocol as agent;
        use hetero_plan::{
            Conditions, DType, MicrobenchKind, OperandOrder, RowStatus, Stats, Timing, WeightMode,
        };
        assert_eq!(hetero_agent::PROTOCOL_VERSION, PROTOCOL_VERSION);
        let hello = agent::AgentLine::Hello(agent::Hello::current()).to_json();
        let Line::Hello(h) = Line::parse(&hello).unwrap() else {
            panic!("{hello}")
        };
        assert!(h.check().is_ok());
        let row = MeasurementRow {
            case_id: "cpu:0/1x2x3/f32/aw".into(),
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
        let line = agent::AgentLine::Measurement(row.clone()).to_json();
        assert_eq!(
            Line::parse(&line).unwrap(),
            Line::Measurement(Box::new(row))
        );
        let mb = MicrobenchRow {
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
        };
        let line = agent::AgentLine::Microbench(agent::MicrobenchLine {
            row: mb.clone(),
            note: Some("memcpy".into()),
        })
        .to_json();
        assert_eq!(Line::parse(&line).unwrap(), Line::Microbench(Box::new(mb)));
        let done = agent::AgentLine::Done(agent::Done {
            rows: 2,
            ..agent::Done::default()
        })
        .to_json();
        assert!(matches!(Line::parse(&done).unwrap(), Line::Done(d) if d.rows == 2));
    }

    #[test]
    fn protocol_mismatch_is_explained() {
        let h = Hello {
            agent: "hetero-agent".into(),
            version: "9.0.0".into(),
            protocol: PROTOCOL_VERSION + 1,
            arch: "x86_64".into(),
            os: "linux".into(),
            features: vec![],
        };
        let e = h.check().unwrap_err();
        assert!(
            e.contains("speaks protocol 2") && e.contains("--agent"),
            "{e}"
        );
    }
}
