//! The options `hetero run` and `hetero generate` share: how the runtime
//! opens the plan's processors and waits for them.

use std::path::PathBuf;

use clap::Args;
use hetero_agent::OpenOptions;
use hetero_runtime::{RuntimeOptions, SyncChoice, WeightSource};

use crate::bad;

/// Processor and wait options of a command that opens a runtime.
#[derive(Args, Debug)]
pub struct RuntimeArgs {
    /// How the host waits for a submitted part: sleep for the predicted time
    /// then poll a completion flag (HeteroLLM §4.2), or block.
    #[arg(long, default_value = "poll")]
    pub sync: SyncChoice,
    /// The predictor the plan was solved with: its fingerprint and
    /// processors must match this machine's.
    #[arg(long)]
    pub predictor: Option<PathBuf>,
    /// CPU core groups, `0-3;4-7` (as for hetero-agent).
    #[arg(long)]
    pub cpu_groups: Option<String>,
    /// How long a CPU group's workers poll for work after a run before they
    /// sleep, µs (0: at once); else HETERO_CPU_POLL_US, else 2000.
    #[arg(long)]
    pub cpu_poll_us: Option<u64>,
    /// NPU simulator parameters (RON).
    #[arg(long)]
    pub sim_params: Option<PathBuf>,
    /// Graphs compiled ahead of time for this plan (`hetero compile`): the
    /// QNN processor loads them, checked against the plan and the weights,
    /// and prepares only what the folder lacks (the report says which).
    #[arg(long, value_name = "DIR")]
    pub graphs: Option<PathBuf>,
}

impl RuntimeArgs {
    /// Sets the CPU workers' poll time for this process (exit 2 when
    /// invalid); call before the runtime opens.
    pub fn hold_cpu_poll(&self) -> anyhow::Result<()> {
        hetero_agent::cpu::poll_hold(self.cpu_poll_us).map_err(|e| bad(e.to_string()))?;
        Ok(())
    }

    /// The runtime's options with these processor and wait settings.
    pub fn options(
        &self,
        weights: WeightSource,
        fail_after: Option<(String, u32)>,
    ) -> RuntimeOptions {
        RuntimeOptions {
            open: OpenOptions {
                cpu_groups: self.cpu_groups.clone(),
                cpu_poll_us: self.cpu_poll_us,
                sim_params: self.sim_params.clone(),
                ..Default::default()
            },
            sync: self.sync,
            weights,
            predictor: self.predictor.clone(),
            graphs: self.graphs.clone(),
            fail_after,
        }
    }
}
