use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{DType, GemmShape, OperandOrder, SchemaVersion, Timing, Validate, WeightMode, is_zero};

/// How each case is timed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunParams {
    /// Untimed runs before the timed ones.
    pub warmups: u32,
    /// After the `warmups` runs, keep running untimed until this many
    /// milliseconds have passed since the first of them. A processor that
    /// lowers its clock while idle (a GPU between cases, a phone's DVFS)
    /// then runs the timed runs at its loaded clock, as it does inside a
    /// model; a couple of µs-long runs do not wake it. 0: count only.
    /// Simulated processors count only.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub warmup_ms: u64,
    /// Timed runs; the statistics are over these.
    pub repetitions: u32,
    /// A case that takes longer than this in total is abandoned with status
    /// `timeout`.
    pub timeout_ms: u64,
    /// Evict the caches the processor reads through before every timed run
    /// (outside the timer): the host's, or a CUDA GPU's L2. As a runtime
    /// running other operators in between would: a GEMM's weights no
    /// longer stay cached from one run to the next.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cold_cache: bool,
    /// With `cold_cache`: make the weights cold by rotating through copies
    /// of them instead of evicting. The case prepares enough copies that
    /// the others read four times the last-level cache (at most 2 GiB)
    /// between two runs of one, and runs them in turn, each after the
    /// input is written again (outside the timer), so that every timed run
    /// reads weights the others have pushed out of the caches, and an
    /// input and workers still warm, as a runtime's layer with weights of
    /// its own finds them. A case that would need too many copies (small
    /// weights, or activations far larger than them) is evicted instead.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rotate_weights: bool,
    /// Time the processor's work alone, without the host's launch path in
    /// the device timer, where the backend can hold its queue until the
    /// work is queued (CUDA: a stream wait on a host-written flag); the
    /// ordinary timing elsewhere. Each such timed run is followed by an
    /// ordinary one, and the row records the difference of their medians
    /// (`MeasurementRow::launch_us`), which a fitted model adds back, so
    /// that the solver and the runtime still see the whole launch.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub kernel_timer: bool,
}

/// The default [`RunParams::warmup_ms`]: long enough for a GPU to leave
/// its idle clock (nvidia-smi showed an idle H100 at 345 MHz; its boost
/// clock is 1980 MHz), short beside a case's preparation and check.
pub const DEFAULT_WARMUP_MS: u64 = 25;

impl Default for RunParams {
    fn default() -> Self {
        RunParams {
            warmups: 2,
            warmup_ms: DEFAULT_WARMUP_MS,
            repetitions: 7,
            timeout_ms: 30_000,
            cold_cache: false,
            rotate_weights: false,
            kernel_timer: false,
        }
    }
}

/// The timing flags `hetero profile` and `hetero-agent sweep` share.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunFlags {
    /// `--warmups`.
    pub warmups: u32,
    /// `--warmup-ms`.
    pub warmup_ms: u64,
    /// `--reps`.
    pub reps: u32,
    /// `--timeout-ms`.
    pub timeout_ms: u64,
    /// `--cold-cache`.
    pub cold_cache: bool,
    /// `--rotate-weights`, which implies `--cold-cache`.
    pub rotate_weights: bool,
    /// Whether the kernel timer is on.
    pub kernel_timer: bool,
}

impl RunParams {
    /// The run parameters of the shared timing flags, or the message for
    /// the first flag out of range (named as the flag).
    pub fn from_flags(f: RunFlags) -> Result<Self, String> {
        if f.reps == 0 {
            return Err("--reps: must be at least 1".into());
        }
        if f.timeout_ms == 0 {
            return Err("--timeout-ms: must be at least 1".into());
        }
        Ok(RunParams {
            warmups: f.warmups,
            warmup_ms: f.warmup_ms,
            repetitions: f.reps,
            timeout_ms: f.timeout_ms,
            cold_cache: f.cold_cache || f.rotate_weights,
            rotate_weights: f.rotate_weights,
            kernel_timer: f.kernel_timer,
        })
    }
}

/// One GEMM to measure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SweepCase {
    /// Unique within the sweep; a resumed sweep skips ids already measured.
    pub id: String,
    /// Processor id from `probe`.
    pub processor: String,
    /// M×K×N.
    pub shape: GemmShape,
    /// Element type.
    pub dtype: DType,
    /// Operand order.
    #[serde(default)]
    pub order: OperandOrder,
    /// Weights as graph constants or inputs (static-graph processors only).
    #[serde(default)]
    pub weights: WeightMode,
    /// Overrides the sweep's run parameters for this case.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunParams>,
}

/// The microbenchmarks the agent knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MicrobenchKind {
    /// Host to device copy of `bytes`.
    CopyH2d,
    /// Device to host copy of `bytes`.
    CopyD2h,
    /// Launch of a tiny kernel on an empty queue, to completion.
    SubmitEmpty,
    /// Launch of a tiny kernel behind a queue that is already busy.
    SubmitBusy,
    /// Handoff with a blocking wait (clFinish, event wait, thread join).
    SyncBlock,
    /// Handoff by polling a host-visible flag written last by the kernel.
    SyncPoll,
    /// A memory-bound GEMV streaming `bytes` of weights, alone.
    BandwidthAlone,
    /// The same GEMV while `peer` streams at the same time.
    BandwidthConcurrent,
    /// Preparing (building, finalising) a static graph of `shape`.
    GraphPrepare,
    /// A prepared GEMM's `write_input` of `bytes` of f32 activations, from
    /// the host memory a runtime keeps them in: the whole data path the
    /// runtime drives (conversion, DMA, synchronisation), not the DMA alone.
    StageIn,
    /// A prepared GEMM's `read_output` of `bytes` of f32 results in `transposed`
    /// order, into the same kind of memory.
    StageOut,
    /// The same in `aw` order, whose output a GPU may have to transpose.
    StageOutAw,
    /// What the host adds around the device-timed part of one operator: a
    /// prepared `1×1024×1024` GEMM is submitted and waited for (blocking
    /// and polling waits alternately, where the processor has a host flag);
    /// each sample is the host clock from `submit` to the wait's return
    /// less that run's device time. Through the backend's own launch path,
    /// so that it is the cost runtime-min meets, beyond the device time
    /// and the staged copies, for one operator run alone. The two kinds
    /// below measure each wait apart; the fit reads this one where a
    /// dataset has neither.
    OpOverhead,
    /// [`OpOverhead`](Self::OpOverhead) with every wait blocking: what a
    /// runtime that waits with `--sync block` pays.
    OpOverheadBlock,
    /// [`OpOverhead`](Self::OpOverhead) with every wait polling the host
    /// flag (processors with a host flag only): what `--sync poll` pays.
    OpOverheadPoll,
    /// [`OpOverhead`](Self::OpOverhead) as a plan that also runs `peer` (a
    /// processor on host memory: the CPU) meets it: after each run of the
    /// peer's streaming GEMV, a few of a rotation of `1×1024×1024` GEMMs,
    /// each with its own weights, are submitted and waited for in turn
    /// (blocking and polling alternately). Each sample is the host clock
    /// from `submit` to the wait's return less that GEMM's device time
    /// measured alone and warm, so that a device timer stretched by a slow
    /// launch counts too. The peer's workers still polling for work, its
    /// weights gone through the host's caches, and each operator's own
    /// launch state cold: on a host with one H100 the runtime's GPU-alone
    /// operators paid 3–5 µs more per launch than
    /// [`OpOverhead`](Self::OpOverhead) beside a CPU pool. Files written
    /// before this name call it `op_overhead_after`, which still loads.
    #[serde(alias = "op_overhead_after")]
    LaunchOverheadAfterCpu,
    /// `op_alone`, one operator timed as one piece (staged copies, launch,
    /// wait), which is no longer measured: the solver sums those parts
    /// instead. Rows of it in older datasets still load, and nothing reads
    /// them.
    #[serde(rename = "op_alone")]
    #[schemars(skip)]
    Retired,
}

impl MicrobenchKind {
    /// Runs with a second processor, the request's `peer`.
    pub fn needs_peer(self) -> bool {
        matches!(
            self,
            MicrobenchKind::BandwidthConcurrent | MicrobenchKind::LaunchOverheadAfterCpu
        )
    }

    /// A transfer of `bytes` (a copy, or the staged data path): the request
    /// must give `bytes`, and the row's rate is `bytes` over the median.
    pub fn is_transfer(self) -> bool {
        matches!(
            self,
            MicrobenchKind::CopyH2d
                | MicrobenchKind::CopyD2h
                | MicrobenchKind::StageIn
                | MicrobenchKind::StageOut
                | MicrobenchKind::StageOutAw
        )
    }
}

/// One microbenchmark to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MicrobenchRequest {
    /// Unique within the sweep.
    pub id: String,
    /// Processor id.
    pub processor: String,
    /// Which benchmark.
    pub bench: MicrobenchKind,
    /// Transfer or stream size, for copies and bandwidth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// The other processor, for concurrent bandwidth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
    /// The graph shape, for graph prepare.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<GemmShape>,
}

/// A sweep request: what the host asks the agent to measure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SweepSpec {
    /// File format version.
    pub schema_version: SchemaVersion,
    /// Default run parameters.
    #[serde(default)]
    pub run: RunParams,
    /// GEMM cases.
    #[serde(default)]
    pub cases: Vec<SweepCase>,
    /// Microbenchmarks.
    #[serde(default)]
    pub microbench: Vec<MicrobenchRequest>,
}

impl Validate for SweepSpec {
    fn validate(&self) -> Result<(), (String, String)> {
        let mut seen = std::collections::HashSet::new();
        for (i, c) in self.cases.iter().enumerate() {
            if !seen.insert(c.id.as_str()) {
                return Err((
                    format!("cases[{i}].id"),
                    format!("duplicate case id `{}`", c.id),
                ));
            }
        }
        for (i, b) in self.microbench.iter().enumerate() {
            if !seen.insert(b.id.as_str()) {
                return Err((
                    format!("microbench[{i}].id"),
                    format!("duplicate id `{}`", b.id),
                ));
            }
        }
        let runs = std::iter::once(("run".to_string(), &self.run)).chain(
            self.cases
                .iter()
                .enumerate()
                .filter_map(|(i, c)| c.run.as_ref().map(|r| (format!("cases[{i}].run"), r))),
        );
        for (path, r) in runs {
            if r.repetitions == 0 {
                return Err((format!("{path}.repetitions"), "must be at least 1".into()));
            }
            if r.timeout_ms == 0 {
                return Err((format!("{path}.timeout_ms"), "must be at least 1".into()));
            }
        }
        Ok(())
    }
}

/// The outcome of one case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RowStatus {
    /// Verified and timed.
    Ok,
    /// Ran, but the result did not match the CPU reference: never timed as valid.
    Failed,
    /// The processor lacks the dtype or operation.
    Unsupported,
    /// Abandoned after the case's timeout.
    Timeout,
    /// The backend reported an error.
    Error,
}

/// Summary statistics of the timed repetitions, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Stats {
    /// Median.
    pub median_us: f64,
    /// Minimum.
    pub min_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// Number of timed repetitions.
    pub count: u32,
    /// Coefficient of variation (standard deviation / mean).
    pub cv: f64,
    /// Mean; absent from rows of older agents. A sum of many runs grows
    /// with the mean, which runs far slower than the rest pull above the
    /// median.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_us: Option<f64>,
}

impl Stats {
    /// Statistics of a non-empty sample; `None` when it is empty.
    pub fn from_samples(samples: &[f64]) -> Option<Stats> {
        if samples.is_empty() {
            return None;
        }
        let mut s = samples.to_vec();
        s.sort_by(|a, b| a.total_cmp(b));
        let n = s.len();
        let median = if n % 2 == 1 {
            s[n / 2]
        } else {
            0.5 * (s[n / 2 - 1] + s[n / 2])
        };
        // Nearest-rank percentile.
        let p90 = s[((0.9 * n as f64).ceil() as usize).clamp(1, n) - 1];
        let mean = s.iter().sum::<f64>() / n as f64;
        let var = s.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        let cv = if mean > 0.0 { var.sqrt() / mean } else { 0.0 };
        Some(Stats {
            median_us: median,
            min_us: s[0],
            p90_us: p90,
            count: n as u32,
            cv,
            mean_us: Some(mean),
        })
    }
}

/// The conditions a row was measured under, as far as the device shows them.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct Conditions {
    /// Wall-clock time at the end of the case, Unix milliseconds.
    pub timestamp_ms: u64,
    /// Mean current frequency of the processor's CPU cores, MHz (sysfs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_mhz: Option<f64>,
    /// Hottest thermal zone, °C (sysfs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temp_c: Option<f64>,
    /// The host CPU's speed probe, µs: the median time of a fixed piece of
    /// host work (higher is slower). It shows the host's speed where the
    /// frequency does not (a virtual machine whose cores share a physical
    /// one), and `hetero run` compares it with its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_probe_us: Option<f64>,
    /// The settings the row was measured with that change its times
    /// (cache state, timer, CPU groups, cores). The agent leaves it out;
    /// `hetero profile` adds it to every row it journals. Absent from rows
    /// of older datasets, which take it from their `device.json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<crate::Setup>,
}

/// One measured GEMM: one JSON line of the agent's sweep output.
///
/// The fields are flat on purpose: a row maps one to one onto a column of the
/// Parquet dataset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MeasurementRow {
    /// The case id from the sweep spec.
    pub case_id: String,
    /// Processor id.
    pub processor: String,
    /// Rows of the activation.
    pub m: u32,
    /// Inner dimension.
    pub k: u32,
    /// Output features.
    pub n: u32,
    /// Element type.
    pub dtype: DType,
    /// Operand order.
    pub order: OperandOrder,
    /// Weights as constants or inputs.
    #[serde(default)]
    pub weights: WeightMode,
    /// Outcome.
    pub status: RowStatus,
    /// Where the time comes from; `simulated` and `emulated` rows are never
    /// NPU latency.
    pub timing: Timing,
    /// Untimed warm-up runs.
    pub warmups: u32,
    /// Timed repetitions.
    pub repetitions: u32,
    /// Median time, µs (absent unless status is `ok`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_us: Option<f64>,
    /// Minimum time, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_us: Option<f64>,
    /// 90th percentile, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p90_us: Option<f64>,
    /// Coefficient of variation of the timed runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cv: Option<f64>,
    /// Mean time, µs (absent from rows of older agents): see
    /// [`Stats::mean_us`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_us: Option<f64>,
    /// Host-clock time from submit to completion, µs, where the timer above
    /// is a device timer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_median_us: Option<f64>,
    /// With `RunParams::kernel_timer`, where the backend could leave the
    /// host's launch path out of the timer (CUDA): the timings above are
    /// the kernels alone, each timed run was followed by an ordinary one,
    /// and this is the ordinary runs' median less the kernels', µs (it can
    /// be below 0 by noise). A fitted model adds the median over its rows
    /// back (`ProcessorModel::launch_us`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_us: Option<f64>,
    /// Graph prepare time, µs, for static-graph processors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepare_us: Option<f64>,
    /// The output matched the CPU f64 reference within `tolerance`.
    pub verified: bool,
    /// Largest relative error over the sampled outputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rel_err: Option<f64>,
    /// The bound `rel_err` was checked against (depends on dtype).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance: Option<f64>,
    /// What went wrong, for rows that are not `ok`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Measurement conditions.
    pub conditions: Conditions,
}

impl MeasurementRow {
    /// The row's shape; `None` if a dimension is zero (a malformed row).
    pub fn shape(&self) -> Option<GemmShape> {
        GemmShape::new(self.m, self.k, self.n)
    }

    /// True when the row may be used for fitting: ok, verified, with a
    /// positive finite median.
    pub fn is_usable(&self) -> bool {
        self.status == RowStatus::Ok
            && self.verified
            && self.median_us.is_some_and(|t| t.is_finite() && t > 0.0)
    }

    /// Copies the statistics into the row.
    pub fn set_stats(&mut self, s: &Stats) {
        self.median_us = Some(s.median_us);
        self.min_us = Some(s.min_us);
        self.p90_us = Some(s.p90_us);
        self.cv = Some(s.cv);
        self.mean_us = s.mean_us;
        self.repetitions = s.count;
    }
}

/// A row that says it was verified must hold an error within its
/// tolerance: `verified: true` with `rel_err` above `tolerance` (or either
/// of them not a finite number at least 0) contradicts itself, and such a
/// row would count as usable for fitting.
impl Validate for MeasurementRow {
    fn validate(&self) -> Result<(), (String, String)> {
        if !self.verified {
            return Ok(());
        }
        let bad = |v: f64| !(v.is_finite() && v >= 0.0);
        for (field, v) in [("rel_err", self.rel_err), ("tolerance", self.tolerance)] {
            if let Some(v) = v.filter(|v| bad(*v)) {
                return Err((
                    field.into(),
                    format!("must be a finite number at least 0 in a verified row, not {v}"),
                ));
            }
        }
        if let (Some(e), Some(t)) = (self.rel_err, self.tolerance)
            && e > t
        {
            return Err((
                "rel_err".into(),
                format!(
                    "{e} is above the row's `tolerance` {t}, yet the row is marked \
                     `verified: true`"
                ),
            ));
        }
        Ok(())
    }
}

/// One microbenchmark result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MicrobenchRow {
    /// The request id.
    pub case_id: String,
    /// Processor id.
    pub processor: String,
    /// Which benchmark.
    pub bench: MicrobenchKind,
    /// Size, for copies and bandwidth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Peer processor, for concurrent bandwidth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
    /// Graph shape, for graph prepare.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<GemmShape>,
    /// Outcome.
    pub status: RowStatus,
    /// Where the time comes from.
    pub timing: Timing,
    /// Statistics, µs (absent unless status is `ok`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<Stats>,
    /// Achieved bandwidth, GB/s, for copies and streams.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gbps: Option<f64>,
    /// How the timed GEMV of a bandwidth row read its weights (absent from
    /// other benchmarks and from the rows of older agents, whose note says
    /// it in words).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<GemvStream>,
    /// How the peer's GEMV of a `bandwidth_concurrent` row read its weights
    /// while the timed one ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_stream: Option<GemvStream>,
    /// What went wrong, for rows that are not `ok`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Measurement conditions.
    pub conditions: Conditions,
}

/// How a bandwidth benchmark's GEMV read its weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub struct GemvStream {
    /// Copies of the GEMV, each with its own weights, run in turn so that
    /// each finds its weights gone from the host's caches (1: one copy).
    pub copies: u32,
    /// Each run first copied the weights in from page-locked host memory:
    /// a discrete GPU's traffic on the memory that processors on the host
    /// read. Otherwise the GEMV read weights kept where it runs.
    #[serde(default)]
    pub host_weights: bool,
    /// Runs while the other side's timed runs went on (the peer's stream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_flags_check_their_ranges_and_rotation_implies_cold() {
        let f = RunFlags {
            warmups: 1,
            warmup_ms: 0,
            reps: 3,
            timeout_ms: 100,
            cold_cache: false,
            rotate_weights: true,
            kernel_timer: false,
        };
        let r = RunParams::from_flags(f).unwrap();
        assert!(r.cold_cache && r.rotate_weights);
        assert_eq!((r.warmups, r.repetitions, r.timeout_ms), (1, 3, 100));
        let e = RunParams::from_flags(RunFlags { reps: 0, ..f }).unwrap_err();
        assert!(e.starts_with("--reps"), "{e}");
        let e = RunParams::from_flags(RunFlags { timeout_ms: 0, ..f }).unwrap_err();
        assert!(e.starts_with("--timeout-ms"), "{e}");
    }

    #[test]
    fn older_microbench_rows_load() {
        // An `op_alone` row, of a benchmark no longer measured, and a
        // bandwidth row without the stream fields.
        let old = r#"{"case_id": "mb/cuda:0/op_alone/8192", "processor": "cuda:0",
            "bench": "op_alone", "bytes": 8192, "status": "ok", "timing": "real",
            "conditions": {"timestamp_ms": 1}}"#;
        let r: MicrobenchRow = serde_json::from_str(old).unwrap();
        assert_eq!(r.bench, MicrobenchKind::Retired);
        assert_eq!(
            serde_json::to_value(r.bench).unwrap(),
            serde_json::json!("op_alone")
        );
        let old = old.replace("op_alone", "bandwidth_concurrent");
        let r: MicrobenchRow = serde_json::from_str(&old).unwrap();
        assert_eq!((r.stream, r.peer_stream), (None, None));
    }

    #[test]
    fn stats_of_known_sample() {
        let s = Stats::from_samples(&[5.0, 1.0, 3.0, 2.0, 4.0]).unwrap();
        assert_eq!(s.median_us, 3.0);
        assert_eq!(s.min_us, 1.0);
        assert_eq!(s.p90_us, 5.0);
        assert_eq!(s.count, 5);
        let sd = 2f64.sqrt();
        assert!((s.cv - sd / 3.0).abs() < 1e-12);
        assert!(Stats::from_samples(&[]).is_none());
        assert_eq!(Stats::from_samples(&[1.0, 3.0]).unwrap().median_us, 2.0);
    }

    #[test]
    fn duplicate_case_ids_are_refused() {
        let case = SweepCase {
            id: "a".into(),
            processor: "cpu:0".into(),
            shape: GemmShape::new(1, 2, 3).unwrap(),
            dtype: DType::F32,
            order: OperandOrder::Aw,
            weights: WeightMode::Static,
            run: None,
        };
        let spec = SweepSpec {
            schema_version: SchemaVersion,
            run: RunParams::default(),
            cases: vec![case.clone(), case],
            microbench: vec![],
        };
        let (field, msg) = spec.validate().unwrap_err();
        assert_eq!(field, "cases[1].id");
        assert!(msg.contains("duplicate"));
    }
}
