//! Which of the probe's processors the demo profiles, and why it leaves
//! any out.
//!
//! A processor is left out when another one the demo keeps does the same
//! work on the same hardware, better, or when its times are not this
//! machine's:
//! - an OpenCL platform on the CPU (PoCL) runs on the cores `cpu:0` already
//!   uses, so a split between the two only shares those cores;
//! - an OpenCL GPU that is also driven through CUDA (NVIDIA's OpenCL beside
//!   `cuda:0` on the same card): cuBLAS runs f16 and bf16 with a tuned
//!   kernel search, where OpenCL runs f32 kernels of its own;
//! - simulated and emulated processors, unless asked for.
//!
//! Every processor left out takes its share of the profile's budget, which
//! a short profile needs for the rows of the processors that matter.

use hetero_plan::{Processor, ProcessorApi, ProcessorKind, Timing};

/// One processor the probe found, and what the demo does with it.
#[derive(Debug, Clone, PartialEq)]
pub struct Considered {
    pub processor: Processor,
    /// `None`: profiled; otherwise why it is left out.
    pub left_out: Option<String>,
}

/// The demo's processors, with the reasons for those it leaves out.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Choice {
    pub considered: Vec<Considered>,
    /// The ids profiled, in the probe's order (or `--processors`' order).
    pub chosen: Vec<String>,
    /// True when `--processors` chose them.
    pub by_hand: bool,
}

/// The CUDA processor on the same card as an OpenCL GPU: the same device
/// name (`NVIDIA H200`), or NVIDIA's OpenCL driver (which reports its
/// CUDA version) where only one CUDA GPU is there.
fn same_card_as_cuda<'a>(p: &Processor, all: &'a [Processor]) -> Option<&'a Processor> {
    if p.api != ProcessorApi::Opencl || p.kind != ProcessorKind::Gpu {
        return None;
    }
    let cudas: Vec<&Processor> = all
        .iter()
        .filter(|q| q.api == ProcessorApi::Cuda && q.timing() == Timing::Real)
        .collect();
    let by_name = cudas
        .iter()
        .find(|q| q.name.trim().eq_ignore_ascii_case(p.name.trim()));
    match (by_name, cudas.as_slice()) {
        (Some(q), _) => Some(q),
        (None, [only]) if p.driver.contains("CUDA") => Some(only),
        _ => None,
    }
}

/// The host-threads CPU processor an OpenCL CPU device shares its cores
/// with.
fn same_cores_as_cpu<'a>(p: &Processor, all: &'a [Processor]) -> Option<&'a Processor> {
    if p.api != ProcessorApi::Opencl || p.kind != ProcessorKind::Cpu {
        return None;
    }
    all.iter()
        .find(|q| q.api == ProcessorApi::Cpu && q.timing() == Timing::Real)
}

/// Why the demo leaves `p` out by default, or `None` to profile it.
fn reason(p: &Processor, all: &[Processor], include_simulated: bool) -> Option<String> {
    match p.timing() {
        Timing::Simulated if !include_simulated => {
            return Some(
                "simulated: a timing model, not this machine (--include-simulated)".into(),
            );
        }
        Timing::Emulated if !include_simulated => {
            return Some(
                "emulated: its times are the emulator's, not the processor's (--include-simulated)"
                    .into(),
            );
        }
        _ => {}
    }
    if let Some(cpu) = same_cores_as_cpu(p, all) {
        return Some(format!(
            "OpenCL on the same CPU cores as {} ({}): a split between them only shares those cores",
            cpu.id, cpu.name
        ));
    }
    if let Some(cuda) = same_card_as_cuda(p, all) {
        return Some(format!(
            "the same GPU as {} ({}) through OpenCL; CUDA runs its GEMMs faster (cuBLAS, f16)",
            cuda.id, cuda.name
        ));
    }
    None
}

/// Chooses from the probe's processors: `--processors` when given, else
/// every processor [`reason`] keeps.
pub fn choose(found: &[Processor], by_hand: Option<&str>, include_simulated: bool) -> Choice {
    if let Some(list) = by_hand {
        let chosen: Vec<String> = list
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        let considered = found
            .iter()
            .map(|p| Considered {
                left_out: (!chosen.contains(&p.id)).then(|| "not in --processors".to_string()),
                processor: p.clone(),
            })
            .collect();
        return Choice {
            considered,
            chosen,
            by_hand: true,
        };
    }
    let considered: Vec<Considered> = found
        .iter()
        .map(|p| Considered {
            left_out: reason(p, found, include_simulated),
            processor: p.clone(),
        })
        .collect();
    let chosen = considered
        .iter()
        .filter(|c| c.left_out.is_none())
        .map(|c| c.processor.id.clone())
        .collect();
    Choice {
        considered,
        chosen,
        by_hand: false,
    }
}

impl Choice {
    /// The chosen processor `id`, where the probe found it.
    pub fn processor(&self, id: &str) -> Option<&Processor> {
        (self.considered.iter())
            .map(|c| &c.processor)
            .find(|p| p.id == id && self.chosen.iter().any(|c| c == id))
    }

    /// The chosen processors the probe found.
    fn chosen_found(&self) -> impl Iterator<Item = &Processor> {
        self.chosen.iter().filter_map(|id| self.processor(id))
    }

    /// The chosen discrete GPU (no unified memory) with real times, where
    /// a CPU is chosen too: the host where offload (ScheInfer) matters.
    pub fn discrete_gpu(&self) -> Option<&Processor> {
        let cpu = self.chosen_found().any(|p| p.kind == ProcessorKind::Cpu);
        self.chosen_found().find(|p| {
            cpu && p.kind == ProcessorKind::Gpu
                && !p.capabilities.unified_memory
                && p.timing() == Timing::Real
        })
    }

    /// True when the plan has one real processor to work with: the chosen
    /// processors with real times, less those on another one's hardware
    /// (PoCL beside cpu:0, an OpenCL GPU beside CUDA), number one or none.
    pub fn one_real(&self) -> bool {
        let real: Vec<Processor> = self
            .chosen_found()
            .filter(|p| p.timing() == Timing::Real)
            .cloned()
            .collect();
        let unfound = (self.chosen.iter())
            .filter(|id| self.processor(id).is_none())
            .count();
        let distinct = (real.iter())
            .filter(|p| {
                same_cores_as_cpu(p, &real).is_none() && same_card_as_cuda(p, &real).is_none()
            })
            .count();
        distinct + unfound <= 1
    }

    /// The lines the demo prints: each processor, used or left out and why.
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        for c in &self.considered {
            let p = &c.processor;
            let timing = match p.timing() {
                Timing::Real => String::new(),
                t => format!(" ({})", format!("{t:?}").to_lowercase()),
            };
            match &c.left_out {
                None => out.push(format!("  use       {:<12} {}{timing}", p.id, p.name)),
                Some(why) => out.push(format!("  leave out {:<12} {}: {why}", p.id, p.name)),
            }
        }
        for id in &self.chosen {
            if !self.considered.iter().any(|c| &c.processor.id == id) {
                out.push(format!(
                    "  use       {id:<12} (not in the probe; --processors)"
                ));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The probe of the 16-core Xeon host with one H200 that
    /// `datasets/gpu-host-h200` was measured on: cpu:0, PoCL, NVIDIA's
    /// OpenCL, cuda:0 and npu-sim.
    fn h200_probe() -> Vec<Processor> {
        let text = include_str!("../../datasets/gpu-host-h200/device.json");
        let v: serde_json::Value = serde_json::from_str(text).unwrap();
        serde_json::from_value(v["probe"]["processors"].clone()).unwrap()
    }

    fn left_out<'a>(c: &'a Choice, id: &str) -> Option<&'a str> {
        c.considered
            .iter()
            .find(|x| x.processor.id == id)
            .and_then(|x| x.left_out.as_deref())
    }

    #[test]
    fn on_the_gpu_host_cpu_and_cuda_are_profiled_and_the_rest_left_out_with_reasons() {
        let c = choose(&h200_probe(), None, false);
        assert_eq!(c.chosen, ["cpu:0", "cuda:0"]);
        let pocl = left_out(&c, "opencl:0:0").unwrap();
        assert!(pocl.contains("same CPU cores as cpu:0"), "{pocl}");
        let nv = left_out(&c, "opencl:1:0").unwrap();
        assert!(nv.contains("same GPU as cuda:0"), "{nv}");
        assert!(left_out(&c, "npu-sim").unwrap().contains("simulated"));
        assert_eq!(c.discrete_gpu().map(|p| p.id.as_str()), Some("cuda:0"));
        assert!(!c.one_real());
        let lines = c.lines().join("\n");
        assert!(lines.contains("leave out opencl:1:0"), "{lines}");
    }

    #[test]
    fn an_opencl_gpu_without_cuda_is_kept() {
        let mut probe = h200_probe();
        probe.retain(|p| p.id != "cuda:0");
        let c = choose(&probe, None, false);
        assert_eq!(c.chosen, ["cpu:0", "opencl:1:0"]);
        assert_eq!(c.discrete_gpu().map(|p| p.id.as_str()), Some("opencl:1:0"));
    }

    #[test]
    fn cpu_and_pocl_are_one_real_processor() {
        let mut probe = h200_probe();
        probe.retain(|p| p.kind == ProcessorKind::Cpu);
        let c = choose(&probe, None, false);
        assert_eq!(c.chosen, ["cpu:0"]);
        assert!(c.one_real());
        assert!(c.discrete_gpu().is_none());
        // Without PoCL, the same.
        probe.retain(|p| p.id == "cpu:0");
        assert_eq!(choose(&probe, None, false).chosen, ["cpu:0"]);
    }

    #[test]
    fn processors_given_by_hand_override_the_choice() {
        let c = choose(&h200_probe(), Some("cpu:0, opencl:0:0"), false);
        assert_eq!(c.chosen, ["cpu:0", "opencl:0:0"]);
        assert!(c.by_hand);
        assert_eq!(left_out(&c, "cuda:0"), Some("not in --processors"));
        assert_eq!(left_out(&c, "opencl:0:0"), None);
        // The two share the CPU's cores: one real processor.
        assert!(c.one_real());
        assert!(!choose(&h200_probe(), Some("cpu:0,opencl:1:0"), false).one_real());
        assert!(choose(&h200_probe(), Some("cuda:0,opencl:1:0"), false).one_real());
        // Simulated processors count as no second real one.
        let c = choose(&h200_probe(), Some("cpu:0,npu-sim"), false);
        assert!(c.one_real());
        let c = choose(&h200_probe(), None, true);
        assert!(c.chosen.contains(&"npu-sim".to_string()));
    }
}
