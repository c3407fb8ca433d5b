//! Step 2, handshake: `hetero-agent version --json` must answer with a
//! `hello` of this build's protocol.

use hetero_plan::protocol::{AgentLine, Hello};

use super::connect::Link;
use crate::report::{Event, Reporter};
use crate::transport::tail;
use crate::{Error, Result};

/// Runs the agent's `version --json` and checks its answer.
pub(super) fn handshake(link: &mut Link, agent_args: &[String], rep: &Reporter) -> Result<Hello> {
    let mut args = agent_args.to_vec();
    args.extend(["version".to_string(), "--json".to_string()]);
    let o = link.tr.run_agent(&args)?;
    let hello = o
        .stdout_text()
        .lines()
        .filter_map(|l| match AgentLine::parse(l) {
            Ok(Some(AgentLine::Hello(h))) => Some(h),
            _ => None,
        })
        .next_back();
    let hello = match hello {
        Some(h) if o.success() => h,
        _ => {
            return Err(Error::Handshake {
                command: o.command.clone(),
                message: format!(
                    "expected a hello line; got {}: stdout: {} stderr: {}",
                    o.detail(),
                    tail(&o.stdout_text(), 3),
                    tail(&String::from_utf8_lossy(&o.stderr), 3)
                ),
            });
        }
    };
    hello.check().map_err(|message| Error::Handshake {
        command: o.command.clone(),
        message,
    })?;
    rep.emit(&Event::Connected {
        host: link.facts.name.clone(),
        arch: link.facts.arch.clone(),
        os: link.facts.os.clone(),
        agent: hello.version.clone(),
        protocol: hello.protocol,
        agent_path: link.agent_path.display().to_string(),
    });
    Ok(hello)
}
