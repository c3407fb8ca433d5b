//! The memory that preparing operators will take, estimated before
//! anything is allocated and compared with what the host and each
//! processor with memory of its own can hold. A model too large for this
//! machine is refused as bad input ([`Error::Memory`]) instead of aborting
//! the process in an allocation.
//!
//! The estimate follows what preparing allocates: per GEMM not yet
//! prepared, its weights in the processor's dtype and its input and output
//! buffers (in the processor's own memory where it has some, else in the
//! host's); on the host, the weights copied every run, each operator's
//! input, and the largest scratch at once (one instance's weights as f32
//! while they are generated or read, a column slice of them, the pool's
//! output and staging buffers). Sizes are added in `u128`, so no config can
//! overflow them.
//!
//! A processor whose GEMMs with host weights share staging buffers
//! ([`Backend::staging_slots`](hetero_agent::Backend::staging_slots): a
//! CUDA device's staging ring) holds no weights for those GEMMs, only
//! their activations, and the staging buffers once: as many as it has
//! slots, each the size of the largest such GEMM's weights, counted as
//! the `staging ring` entry.

use std::collections::{BTreeMap, HashSet};

use hetero_agent::GemmSpec;
use hetero_plan::{LinearOp, Phase};

use super::Runtime;
use super::prepare::OpTarget;
use crate::{Error, MemoryShortfall, Result};

/// Where prepared data lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Place {
    /// The host's memory (CPU groups, processors sharing the host's
    /// memory, simulated ones).
    Host,
    /// The own memory of `plan.processors[i]`.
    Device(usize),
}

/// What one place will need.
#[derive(Debug, Default)]
pub(super) struct Tally {
    /// Bytes per operator: its GEMMs' weights and buffers, and its input.
    pub per_op: BTreeMap<String, u128>,
    /// The largest scratch held at once while preparing (host only).
    pub scratch: u128,
}

impl Tally {
    /// All of it.
    pub fn total(&self) -> u128 {
        self.per_op.values().sum::<u128>() + self.scratch
    }
}

/// What a place can hold now, and where the figure comes from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Capacity {
    /// Bytes.
    pub bytes: u64,
    /// Where the figure comes from, in words.
    pub basis: String,
}

/// Bytes a prepared GEMM holds: weights `K×N`, input `M×K` and output
/// `M×N` in its dtype (the CPU's dense GEMM and the GPU backends allocate
/// these three).
pub(super) fn gemm_bytes(spec: &GemmSpec) -> u128 {
    let (m, k, n) = (
        spec.shape.m.get() as u128,
        spec.shape.k.get() as u128,
        spec.shape.n.get() as u128,
    );
    let bits = k * n * spec.dtype.weight_bits() as u128
        + m * (k + n) * spec.dtype.activation_bits() as u128;
    bits.div_ceil(8)
}

/// Bytes of a prepared GEMM's weights `K×N` in its dtype.
pub(super) fn weight_bytes(spec: &GemmSpec) -> u128 {
    let (k, n) = (spec.shape.k.get() as u128, spec.shape.n.get() as u128);
    (k * n * spec.dtype.weight_bits() as u128).div_ceil(8)
}

/// What a [`Tally`] calls the staging buffers of GEMMs with host weights.
const STAGING: &str = "staging ring";

/// `n` bytes in words: `24576000000000 bytes (22888.2 GiB)`.
pub(crate) fn bytes(n: u128) -> String {
    format!("{n} bytes ({:.1} GiB)", n as f64 / (1u64 << 30) as f64)
}

/// Host memory available to a new allocation now.
///
/// Linux and Android: `MemAvailable` of `/proc/meminfo` (what can be
/// allocated without swapping), or `MemTotal` on kernels without it; macOS:
/// the physical memory `sysctl hw.memsize` reports. Elsewhere, or when
/// neither can be read, the most one allocation may ask for (`isize::MAX`),
/// so that at least a size no process can hold is refused.
pub(crate) fn host_available() -> Capacity {
    let meminfo = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| parse_meminfo(&t));
    meminfo.or_else(sysctl_memsize).unwrap_or(Capacity {
        bytes: isize::MAX as u64,
        basis: "the most one allocation may ask for (this system reports no available memory)"
            .into(),
    })
}

/// `MemAvailable`, else `MemTotal`, of a `/proc/meminfo` text.
fn parse_meminfo(text: &str) -> Option<Capacity> {
    let field = |name: &str| {
        text.lines().find_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix(':')?.trim();
            let kb: u64 = rest
                .strip_suffix("kB")
                .unwrap_or(rest)
                .trim()
                .parse()
                .ok()?;
            kb.checked_mul(1024)
        })
    };
    if let Some(b) = field("MemAvailable") {
        return Some(Capacity {
            bytes: b,
            basis: "available (MemAvailable in /proc/meminfo)".into(),
        });
    }
    field("MemTotal").map(|b| Capacity {
        bytes: b,
        basis: "in all (MemTotal in /proc/meminfo; this kernel reports no MemAvailable)".into(),
    })
}

#[cfg(target_os = "macos")]
fn sysctl_memsize() -> Option<Capacity> {
    let out = std::process::Command::new("sysctl")
        .args(["-n", "hw.memsize"])
        .output()
        .ok()?;
    let bytes = String::from_utf8_lossy(&out.stdout).trim().parse().ok()?;
    Some(Capacity {
        bytes,
        basis: "of physical memory (sysctl hw.memsize)".into(),
    })
}

#[cfg(not(target_os = "macos"))]
fn sysctl_memsize() -> Option<Capacity> {
    None
}

impl Runtime {
    /// Refuses to prepare the plan operators `ops` of `phase` at `len`
    /// when what they need is more than a place can hold.
    pub(super) fn check_memory(&self, phase: Phase, len: u32, ops: &[usize]) -> Result<()> {
        let need = self.memory_need(phase, len, ops)?;
        self.refuse_over(&need, phase, len)
    }

    /// Refuses a generation whose prefill at `prompt_len`, decode steps
    /// at length 1, and `host_bytes` more on the host for `what` (a
    /// decoder's KV cache and tensors) need more than a place can hold.
    pub fn check_generation_memory(
        &self,
        prompt_len: u32,
        host_bytes: u128,
        what: &str,
    ) -> Result<()> {
        let mut need =
            self.memory_need(Phase::Prefill, prompt_len, &self.phase_ops(Phase::Prefill))?;
        for (place, tally) in self.memory_need(Phase::Decode, 1, &self.phase_ops(Phase::Decode))? {
            let t = need.entry(place).or_default();
            for (op, b) in tally.per_op {
                *t.per_op.entry(op).or_default() += b;
            }
            t.scratch = t.scratch.max(tally.scratch);
        }
        add(&mut need, Place::Host, what, host_bytes);
        self.refuse_over(&need, Phase::Prefill, prompt_len)
    }

    /// The first place whose need is over its capacity, as an error.
    fn refuse_over(&self, need: &BTreeMap<Place, Tally>, phase: Phase, len: u32) -> Result<()> {
        for (place, tally) in need {
            let cap = match *place {
                Place::Host => host_available(),
                Place::Device(p) => match self.device_capacity(p) {
                    Some(c) => c,
                    None => continue,
                },
            };
            if tally.total() > cap.bytes as u128 {
                return Err(self.memory_error(phase, len, *place, tally, cap));
            }
        }
        Ok(())
    }

    /// Where `plan.processors[p]` keeps what it prepares.
    fn place(&self, p: usize) -> Place {
        let caps = &self.backends[p].processor().capabilities;
        match caps.memory_bytes {
            Some(_) if !caps.unified_memory => Place::Device(p),
            _ => Place::Host,
        }
    }

    /// What `plan.processors[p]`'s own memory can still hold: its size less
    /// the GEMMs this runtime has prepared on it.
    fn device_capacity(&self, p: usize) -> Option<Capacity> {
        let total = self.backends[p].processor().capabilities.memory_bytes?;
        let held: u128 = self
            .shared
            .keys()
            .filter(|k| k.proc == p)
            .map(|k| self.device_gemm_bytes(p, &k.spec, k.upload))
            .sum::<u128>()
            + self.backends[p].staging_bytes().unwrap_or(0) as u128;
        let free = (total as u128).saturating_sub(held) as u64;
        let basis = if held == 0 {
            "of device memory".to_string()
        } else {
            format!(
                "of device memory left ({} in all, {} held by GEMMs prepared before)",
                bytes(total as u128),
                bytes(held)
            )
        };
        Some(Capacity { bytes: free, basis })
    }

    /// Bytes a GEMM of `spec` on `plan.processors[p]` holds in the
    /// processor's memory: all of [`gemm_bytes`], less the weights where
    /// they are copied every run (`upload`) into staging buffers the
    /// processor's such GEMMs share.
    fn device_gemm_bytes(&self, p: usize, spec: &GemmSpec, upload: bool) -> u128 {
        let staged = upload && self.backends[p].staging_slots().is_some();
        gemm_bytes(spec) - if staged { weight_bytes(spec) } else { 0 }
    }

    /// Adds to `need` the staging buffers that GEMMs with host weights of
    /// up to `largest[p]` weight bytes need on `plan.processors[p]`,
    /// beyond those it holds already.
    fn add_staging(&self, need: &mut BTreeMap<Place, Tally>, largest: &BTreeMap<usize, u128>) {
        for (&p, &w) in largest {
            let Some(slots) = self.backends[p].staging_slots() else {
                continue;
            };
            let held = self.backends[p].staging_bytes().unwrap_or(0) as u128;
            let more = (slots as u128 * w).saturating_sub(held);
            if more > 0 {
                add(need, self.place(p), STAGING, more);
            }
        }
    }

    /// What preparing `ops` (plan operator indices) of `phase` at `len`
    /// will allocate, per place; operators and GEMMs already prepared
    /// count nothing.
    pub(super) fn memory_need(
        &self,
        phase: Phase,
        len: u32,
        ops: &[usize],
    ) -> Result<BTreeMap<Place, Tally>> {
        let mut need: BTreeMap<Place, Tally> = BTreeMap::new();
        let mut seen = HashSet::new();
        let mut scratch = 0u128;
        // Per processor, the largest weights copied every run.
        let mut largest: BTreeMap<usize, u128> = BTreeMap::new();
        for &oi in ops {
            let name = self.plan.ops[oi].op.clone();
            if self.prepared.contains_key(&(oi, len)) {
                continue;
            }
            let (d, mi) = self.lookup_table(oi, len)?;
            let d = &d;
            let lop = &self.model.ops[mi];
            let target = OpTarget {
                oi,
                op: &name,
                phase,
                len,
                lop,
            };
            target.check_decision(d)?;
            // Every layer of the table's group holds its own GEMMs unless
            // the weights are shared.
            let copies = self
                .weight_layers(lop)
                .min(self.plan.ops[oi].layers as u128)
                * d.instances as u128;
            let (k, n, m) = (lop.k as u128, lop.n as u128, d.rows_m() as u128);
            let mut staging = 0u128;
            for pl in self.layout(oi, d, lop.n)? {
                let part = self.part_target(oi, pl.proc);
                for sl in &pl.steps {
                    let (rows, cols) = (sl.pad_to as u128, sl.cols.len() as u128);
                    staging = staging.max(rows * (k + cols) * 4);
                    if sl.upload || part.weights_input {
                        // The f32 weights it copies every run, on the host.
                        add(&mut need, Place::Host, &name, k * cols * 4 * copies);
                    }
                    let key = target.step_key(&part, sl, self.weights.weight_layer(0), 0)?;
                    if sl.upload {
                        let w = largest.entry(pl.proc).or_default();
                        *w = (*w).max(weight_bytes(&key.spec));
                    }
                    if self.shared.contains_key(&key) {
                        continue;
                    }
                    let bytes = match self.place(pl.proc) {
                        Place::Device(p) => self.device_gemm_bytes(p, &key.spec, sl.upload),
                        Place::Host => gemm_bytes(&key.spec),
                    } * copies;
                    if seen.insert(key) {
                        add(&mut need, self.place(pl.proc), &name, bytes);
                    }
                }
            }
            if !self.inputs.contains_key(&(oi, m as u32)) {
                add(&mut need, Place::Host, &name, m * k * 4);
            }
            // One instance's f32 weights and a slice of them, the pool's
            // output, and the staging buffers.
            scratch = scratch.max(2 * k * n * 4 + m * n * 4 + staging);
        }
        if scratch > 0 {
            need.entry(Place::Host).or_default().scratch = scratch;
        }
        self.add_staging(&mut need, &largest);
        Ok(need)
    }

    /// The layers whose weights (and GEMMs) are distinct for `lop`.
    fn weight_layers(&self, lop: &LinearOp) -> u128 {
        if self.weights.weight_layer(1) == 0 {
            1
        } else {
            lop.layers as u128
        }
    }

    /// The refusal: what needs how much where, and what the place holds.
    fn memory_error(
        &self,
        phase: Phase,
        len: u32,
        place: Place,
        tally: &Tally,
        cap: Capacity,
    ) -> Error {
        let (place_name, on) = match place {
            Place::Device(p) => (format!("`{}`", self.plan.processors[p]), String::new()),
            Place::Host => {
                let ids: Vec<&str> = (0..self.backends.len())
                    .filter(|&p| self.place(p) == Place::Host)
                    .map(|p| self.plan.processors[p].as_str())
                    .collect();
                ("the host".to_string(), format!(" on {}", ids.join(", ")))
            }
        };
        let largest = tally
            .per_op
            .iter()
            .max_by_key(|(_, b)| **b)
            .map(|(op, b)| match self.model.op(op) {
                Some(o) => format!(
                    "; the largest, `{op}` (K×N {}×{}, {} layer(s) × {} instance(s)), takes {}",
                    o.k,
                    o.n,
                    o.layers,
                    o.count,
                    bytes(*b)
                ),
                None => format!("; the largest, {op}, takes {}", bytes(*b)),
            })
            .unwrap_or_default();
        Error::Memory(Box::new(MemoryShortfall {
            plan: self.plan_path.clone(),
            model: self.model.name.clone(),
            phase,
            len,
            place: place_name,
            needed: tally.total(),
            what: format!(
                "the weights, inputs and outputs of {} operator(s){on}{largest}",
                tally
                    .per_op
                    .keys()
                    .filter(|o| self.model.op(o).is_some())
                    .count()
            ),
            available: cap.bytes,
            basis: cap.basis,
        }))
    }
}

fn add(need: &mut BTreeMap<Place, Tally>, place: Place, op: &str, bytes: u128) {
    *need
        .entry(place)
        .or_default()
        .per_op
        .entry(op.to_string())
        .or_default() += bytes;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_gives_available_then_total() {
        let text = "MemTotal:       16315764 kB\nMemFree:          400000 kB\nMemAvailable:    8000000 kB\n";
        let c = parse_meminfo(text).unwrap();
        assert_eq!(c.bytes, 8_000_000 * 1024);
        assert!(c.basis.contains("MemAvailable"), "{}", c.basis);
        let old = "MemTotal:       16315764 kB\nMemFree:          400000 kB\n";
        let c = parse_meminfo(old).unwrap();
        assert_eq!(c.bytes, 16_315_764 * 1024);
        assert!(c.basis.contains("MemTotal"), "{}", c.basis);
        assert_eq!(parse_meminfo("garbage"), None);
        assert_eq!(parse_meminfo("MemAvailable: 99999999999999999999 kB"), None);
    }

    #[test]
    fn this_host_reports_some_memory() {
        let c = host_available();
        assert!(c.bytes > 1 << 20, "{c:?}");
    }

    #[test]
    fn gemm_bytes_count_weights_and_activations_in_their_dtype() {
        use hetero_plan::{DType, GemmShape, OperandOrder, WeightMode};
        let spec = |m, k, n, dtype| GemmSpec {
            shape: GemmShape::new(m, k, n).unwrap(),
            dtype,
            order: OperandOrder::Aw,
            weights: WeightMode::Static,
        };
        assert_eq!(gemm_bytes(&spec(2, 3, 5, DType::F32)), (15 + 2 * 8) * 4);
        assert_eq!(gemm_bytes(&spec(2, 3, 5, DType::F16)), (15 + 2 * 8) * 2);
        // 4-bit weights, 16-bit activations: 15 half bytes round up.
        assert_eq!(gemm_bytes(&spec(2, 3, 5, DType::W4a16)), 8 + 2 * 8 * 2);
        // The largest shape a plan can name does not overflow.
        let max = gemm_bytes(&spec(u32::MAX, u32::MAX, u32::MAX, DType::F32));
        assert!(max > u64::MAX as u128);
    }

    #[test]
    fn bytes_are_given_in_gib_too() {
        assert_eq!(
            bytes(24_576_000_000_000),
            "24576000000000 bytes (22888.2 GiB)"
        );
    }
}
