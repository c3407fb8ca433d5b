use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{Processor, SchemaVersion, SweepSpec};

/// The agent that measured a device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentInfo {
    /// The agent's crate version.
    pub version: String,
    /// The sweep protocol version it speaks.
    pub protocol: u32,
    /// Target triple or `uname -m` of the agent binary.
    pub arch: String,
}

/// The host or device the agent ran on.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct HostInfo {
    /// Host name, device model or serial.
    pub name: String,
    /// Operating system and version.
    pub os: String,
    /// CPU architecture (`uname -m`).
    pub arch: String,
    /// How it was reached: `local`, `ssh://…`, `adb:SERIAL`.
    pub transport: String,
}

/// A device profile: the `device.json` of a dataset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DeviceProfile {
    /// File format version.
    pub schema_version: SchemaVersion,
    /// The device.
    pub host: HostInfo,
    /// The agent that measured it.
    pub agent: AgentInfo,
    /// Every processor the agent opened.
    pub processors: Vec<Processor>,
    /// Backends that did not open, with the reason (`opencl: libOpenCL.so.1 not found in …`).
    #[serde(default)]
    pub unavailable: Vec<String>,
    /// The sweep that produced the data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep: Option<SweepSpec>,
    /// Unix milliseconds when profiling started.
    pub started_ms: u64,
    /// Wall-clock seconds spent measuring.
    #[serde(default)]
    pub seconds: f64,
}

impl crate::Validate for DeviceProfile {
    fn validate(&self) -> Result<(), (String, String)> {
        for (i, p) in self.processors.iter().enumerate() {
            if self.processors[..i].iter().any(|q| q.id == p.id) {
                return Err((
                    format!("processors[{i}].id"),
                    format!("duplicate processor id `{}`", p.id),
                ));
            }
        }
        if let Some(spec) = &self.sweep {
            spec.validate()
                .map_err(|(f, m)| (format!("sweep.{f}"), m))?;
        }
        Ok(())
    }
}
