//! What `hetero dataset show` prints: rows, statuses and time spent per
//! processor, and the rows that failed.

use std::collections::{BTreeMap, BTreeSet};

use hetero_plan::{Fingerprint, RowStatus, Timing};
use serde::{Deserialize, Serialize};

use super::{Dataset, Sources, enum_str};

impl Dataset {
    /// A per-processor summary (rows, statuses, time spent, failed rows).
    pub fn summary(&self, name: &str, sources: &Sources) -> Summary {
        let mut per: BTreeMap<String, ProcessorSummary> = BTreeMap::new();
        let entry = |per: &mut BTreeMap<String, ProcessorSummary>, id: &str| {
            per.entry(id.to_string())
                .or_insert_with(|| ProcessorSummary {
                    id: id.to_string(),
                    ..ProcessorSummary::default()
                })
                .clone()
        };
        for id in self.processor_ids() {
            entry(&mut per, &id);
        }
        let mut failed = Vec::new();
        let mut shapes: BTreeMap<String, BTreeSet<(u32, u32, u32)>> = BTreeMap::new();
        for r in &self.measurements {
            entry(&mut per, &r.processor);
            let p = per.get_mut(&r.processor).expect("inserted");
            p.rows += 1;
            p.count(r.status);
            if r.is_usable() {
                p.usable += 1;
                let runs = (r.warmups + r.repetitions + 2) as f64;
                p.measured_seconds += r.median_us.unwrap_or(0.0) * runs * 1e-6;
            }
            if !p.dtypes.contains(&r.dtype.to_string()) {
                p.dtypes.push(r.dtype.to_string());
            }
            if r.timing != Timing::Real && !p.timing.contains(&timing_name(r.timing)) {
                p.timing.push(timing_name(r.timing));
            }
            shapes
                .entry(r.processor.clone())
                .or_default()
                .insert((r.m, r.k, r.n));
            failed.extend(FailedRow::of(
                &r.case_id,
                &r.processor,
                r.status,
                r.message.as_deref(),
            ));
        }
        for r in &self.microbench {
            entry(&mut per, &r.processor);
            let p = per.get_mut(&r.processor).expect("inserted");
            p.microbench += 1;
            failed.extend(FailedRow::of(
                &r.case_id,
                &r.processor,
                r.status,
                r.message.as_deref(),
            ));
        }
        for (id, s) in shapes {
            if let Some(p) = per.get_mut(&id) {
                p.shapes = s.len();
            }
        }
        if let Some(prof) = &self.profile {
            for p in &prof.processors {
                if let Some(s) = per.get_mut(&p.id) {
                    s.name = p.name.clone();
                    let t = timing_name(p.timing());
                    if p.timing() != Timing::Real && !s.timing.contains(&t) {
                        s.timing.push(t);
                    }
                }
            }
        }
        Summary {
            name: name.to_string(),
            fingerprint: self.fingerprint(name),
            device: self.profile.as_ref().map(|p| DeviceSummary {
                name: p.host.name.clone(),
                os: p.host.os.clone(),
                arch: p.host.arch.clone(),
                transport: p.host.transport.clone(),
                agent: format!("{} (protocol {})", p.agent.version, p.agent.protocol),
                unavailable: p.unavailable.clone(),
            }),
            seconds: self.profile.as_ref().map(|p| p.seconds),
            measurements: self.measurements.len(),
            microbench: self.microbench.len(),
            processors: per.into_values().collect(),
            failed,
            sources: sources.clone(),
        }
    }
}

/// Rows and statuses of one processor.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ProcessorSummary {
    /// Processor id.
    pub id: String,
    /// Its name, from the profile.
    #[serde(default)]
    pub name: String,
    /// `simulated` or `emulated` when its times are not a processor's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timing: Vec<String>,
    /// GEMM rows.
    pub rows: usize,
    /// Rows usable for fitting (ok, verified, positive median).
    pub usable: usize,
    /// Rows with status ok.
    pub ok: usize,
    /// Rows whose result was wrong.
    pub failed: usize,
    /// Rows the processor cannot run.
    pub unsupported: usize,
    /// Rows that timed out.
    pub timeout: usize,
    /// Rows the backend reported an error for.
    pub error: usize,
    /// Distinct shapes.
    pub shapes: usize,
    /// Element types measured.
    pub dtypes: Vec<String>,
    /// Microbenchmark rows.
    pub microbench: usize,
    /// Time the processor spent in verified runs (median × runs), seconds.
    pub measured_seconds: f64,
}

impl ProcessorSummary {
    fn count(&mut self, s: RowStatus) {
        match s {
            RowStatus::Ok => self.ok += 1,
            RowStatus::Failed => self.failed += 1,
            RowStatus::Unsupported => self.unsupported += 1,
            RowStatus::Timeout => self.timeout += 1,
            RowStatus::Error => self.error += 1,
        }
    }
}

/// The device, as `dataset show` prints it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceSummary {
    /// Host name or device model.
    pub name: String,
    /// Operating system.
    pub os: String,
    /// Architecture.
    pub arch: String,
    /// How it was reached.
    pub transport: String,
    /// Agent version and protocol.
    pub agent: String,
    /// Backends that did not open.
    pub unavailable: Vec<String>,
}

/// A row that is failed, timed out or in error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailedRow {
    /// Case id.
    pub case_id: String,
    /// Processor.
    pub processor: String,
    /// `failed`, `timeout` or `error`.
    pub status: String,
    /// The agent's message.
    pub message: String,
}

impl FailedRow {
    /// The row's entry in the list of failures, `None` when it did not fail.
    fn of(
        case_id: &str,
        processor: &str,
        status: RowStatus,
        message: Option<&str>,
    ) -> Option<Self> {
        matches!(
            status,
            RowStatus::Failed | RowStatus::Error | RowStatus::Timeout
        )
        .then(|| FailedRow {
            case_id: case_id.to_string(),
            processor: processor.to_string(),
            status: status_name(status),
            message: message.unwrap_or_default().to_string(),
        })
    }
}

/// What `hetero dataset show` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Folder name.
    pub name: String,
    /// The dataset's fingerprint.
    pub fingerprint: Fingerprint,
    /// The device, when there is a `device.json`.
    pub device: Option<DeviceSummary>,
    /// Wall-clock seconds spent profiling.
    pub seconds: Option<f64>,
    /// GEMM rows in all.
    pub measurements: usize,
    /// Microbenchmark rows in all.
    pub microbench: usize,
    /// Per processor.
    pub processors: Vec<ProcessorSummary>,
    /// Failed, timed-out and error rows.
    pub failed: Vec<FailedRow>,
    /// Files read and leftovers.
    pub sources: Sources,
}

pub(super) fn status_name(s: RowStatus) -> String {
    enum_str(&s)
}

pub(super) fn timing_name(t: Timing) -> String {
    enum_str(&t)
}
