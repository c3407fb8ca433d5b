//! The agent's side of the protocol: the line types of
//! [`hetero_plan::protocol`], filled in with what this binary is.
//! `docs/agent-protocol.md` is the full specification.

pub use hetero_plan::protocol::{
    AgentLine, Done, Hello, MicrobenchLine, ProbeReport, UnavailableBackend,
};

use crate::{Error, Registry};

/// The file and protocol name of a microbenchmark (`copy_h2d`).
pub fn bench_name(kind: hetero_plan::MicrobenchKind) -> String {
    serde_json::to_value(kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{kind:?}"))
}

/// This binary's handshake: its version and the backends compiled in.
pub fn hello() -> Hello {
    let features = [
        ("cpu", cfg!(feature = "cpu")),
        ("sim", cfg!(feature = "sim")),
        ("opencl", cfg!(feature = "opencl")),
        ("qnn", cfg!(feature = "qnn")),
        ("cuda", cfg!(feature = "cuda")),
    ];
    Hello::new(
        env!("CARGO_PKG_VERSION"),
        features
            .iter()
            .filter(|f| f.1)
            .map(|f| f.0.to_string())
            .collect(),
    )
}

/// The `probe --json` report of a registry.
pub fn probe_report(reg: &Registry) -> ProbeReport<Error> {
    ProbeReport {
        hello: hello(),
        processors: reg.processors(),
        unavailable: reg
            .unavailable
            .iter()
            .map(|u| UnavailableBackend {
                backend: u.backend.clone(),
                reason: u.reason.to_string(),
                error: u.reason.clone(),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_says_who_it_is_and_speaks_this_protocol() {
        let h = hello();
        assert!(h.check().is_ok(), "{h:?}");
        assert_eq!(h.version, env!("CARGO_PKG_VERSION"));
        assert_eq!(
            h.features.contains(&"cpu".to_string()),
            cfg!(feature = "cpu")
        );
    }
}
