//! Datasets: a folder with `device.json`, `measurements.parquet` and
//! `microbench.parquet`.
//!
//! The Parquet columns are the flat fields of [`MeasurementRow`] and
//! [`MicrobenchRow`] (nested `conditions`, `stats` and the bandwidth rows'
//! `stream` and `peer_stream` are flattened, enums are their lowercase
//! names), so the files open in any Parquet reader. A folder
//! without Parquet files loads from its JSON Lines files (`*.jsonl`, the
//! agent's own output format, `journal.jsonl` included), so a sweep
//! captured by hand with `hetero-agent sweep > measurements.jsonl` is a
//! dataset too.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use hetero_plan::{
    Conditions, DeviceProfile, Fingerprint, MeasurementRow, MicrobenchRow, Setup, SweepSpec,
};
use serde::Serialize;

use crate::journal::{Journal, Rows};
use crate::{Error, Result};

mod parquet;
mod summary;

#[cfg(test)]
use parquet::col;
use parquet::{measurements_frame, microbench_frame, write_csv, write_parquet};
pub use parquet::{read_measurements, read_microbench};
pub use summary::{DeviceSummary, FailedRow, ProcessorSummary, Summary};

/// `device.json`.
pub const DEVICE_FILE: &str = "device.json";
/// `measurements.parquet`.
pub const MEASUREMENTS_FILE: &str = "measurements.parquet";
/// `microbench.parquet`.
pub const MICROBENCH_FILE: &str = "microbench.parquet";

/// A dataset in memory.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Dataset {
    /// The device, its processors, the agent and the sweep (`device.json`);
    /// `None` for a folder of bare JSON Lines rows.
    pub profile: Option<DeviceProfile>,
    /// GEMM rows, each case id once.
    pub measurements: Vec<MeasurementRow>,
    /// Microbenchmark rows, each case id once.
    pub microbench: Vec<MicrobenchRow>,
    /// What the agent said a microbenchmark really measured, by case id
    /// (a cpu "copy" is a memcpy).
    pub notes: BTreeMap<String, String>,
}

/// Where a loaded dataset came from.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Sources {
    /// Files the rows were read from.
    pub files: Vec<PathBuf>,
    /// Journal rows not in the tables: a run that was interrupted (finish
    /// it with `hetero profile --resume`).
    pub unfinished_rows: usize,
    /// Lines of JSON Lines files that were not rows, with file and line.
    pub skipped_lines: Vec<String>,
    /// Rows dropped because their case id came earlier.
    pub duplicates: usize,
    /// What the loader had to interpret.
    pub notes: Vec<String>,
}

/// A `device.json` of another shape that carries the agent's handshake
/// (`agent`) and `probe --json` report (`probe`), as
/// `scripts/gpu-host-profile.sh` writes it: the profile is rebuilt from
/// those.
fn adapt_foreign_device(path: &Path) -> Option<DeviceProfile> {
    let text = std::fs::read_to_string(path).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    let probe = v.get("probe")?;
    let processors: Vec<hetero_plan::Processor> =
        serde_json::from_value(probe.get("processors")?.clone()).ok()?;
    let hello = v.get("agent").or_else(|| probe.get("hello"))?;
    let s = |x: &serde_json::Value, k: &str| {
        x.get(k)
            .and_then(|y| y.as_str())
            .unwrap_or_default()
            .to_string()
    };
    let unavailable = probe
        .get("unavailable")
        .and_then(|u| u.as_array())
        .map(|a| {
            a.iter()
                .map(|u| {
                    let r = s(u, "reason");
                    if r.is_empty() { s(u, "backend") } else { r }
                })
                .collect()
        })
        .unwrap_or_default();
    let name = match v.get("host") {
        Some(serde_json::Value::String(h)) => h.clone(),
        Some(serde_json::Value::Array(a)) => a
            .first()
            .and_then(|x| x.as_str())
            .unwrap_or_default()
            .to_string(),
        Some(h) => s(h, "name"),
        None => String::new(),
    };
    Some(DeviceProfile {
        schema_version: hetero_plan::SchemaVersion,
        host: hetero_plan::HostInfo {
            name,
            os: s(hello, "os"),
            arch: s(hello, "arch"),
            transport: "local".into(),
        },
        agent: hetero_plan::AgentInfo {
            version: s(hello, "version"),
            protocol: hello.get("protocol")?.as_u64()? as u32,
            arch: s(hello, "arch"),
        },
        processors,
        unavailable,
        sweep: None,
        started_ms: v
            .get("started_unix")
            .and_then(|x| x.as_u64())
            .map_or(0, |t| t * 1000),
        seconds: v.get("seconds").and_then(|x| x.as_f64()).unwrap_or(0.0),
    })
}

impl Dataset {
    /// Loads a dataset folder: `device.json` when present, the Parquet
    /// tables when present, otherwise every `*.jsonl` file.
    pub fn load(dir: &Path) -> Result<Dataset> {
        Ok(Dataset::load_with_sources(dir)?.0)
    }

    /// [`Dataset::load`], also saying which files were read.
    pub fn load_with_sources(dir: &Path) -> Result<(Dataset, Sources)> {
        if !dir.is_dir() {
            return Err(Error::io(
                dir,
                std::io::Error::new(std::io::ErrorKind::NotFound, "no such dataset folder"),
            ));
        }
        let device = dir.join(DEVICE_FILE);
        let mut src = Sources::default();
        let profile = if device.exists() {
            match hetero_plan::load::<DeviceProfile>(&device) {
                Ok(p) => Some(p),
                Err(e) => match adapt_foreign_device(&device) {
                    Some(p) => {
                        src.notes.push(format!(
                            "{}: not a DeviceProfile; host, agent and processors taken from \
                             its `agent` and `probe` keys",
                            device.display()
                        ));
                        Some(p)
                    }
                    None => return Err(e.into()),
                },
            }
        } else {
            None
        };
        let meas = dir.join(MEASUREMENTS_FILE);
        let micro = dir.join(MICROBENCH_FILE);
        let mut ds = Dataset {
            profile,
            ..Dataset::default()
        };
        let journal = dir.join(Journal::FILE);
        if meas.exists() || micro.exists() {
            if meas.exists() {
                ds.measurements = read_measurements(&meas)?;
                src.files.push(meas);
            }
            if micro.exists() {
                let (rows, notes) = read_microbench(&micro)?;
                ds.microbench = rows;
                ds.notes = notes;
                src.files.push(micro);
            }
            if journal.exists() {
                let j = Rows::read(&journal)?;
                let have: BTreeSet<&str> = ds.case_ids().collect();
                src.unfinished_rows = j
                    .ids()
                    .iter()
                    .filter(|id| !have.contains(id.as_str()))
                    .count();
            }
        } else {
            let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
                .map_err(|e| Error::io(dir, e))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "jsonl") && p.is_file())
                .collect();
            files.sort();
            let mut rows = Rows::default();
            for f in &files {
                let text = hetero_plan::read_text(f)?;
                let part = Rows::parse(&text);
                if let Some((line, why)) = part.invalid.first() {
                    return Err(Error::dataset(f, format!("line {line}: {why}")));
                }
                for (line, why) in &part.skipped_lines {
                    src.skipped_lines
                        .push(format!("{}:{line}: {why}", f.display()));
                }
                rows.duplicates += part.duplicates;
                for r in part.measurements {
                    rows.push_measurement(r);
                }
                for r in part.microbench {
                    rows.push_microbench(r);
                }
                ds.notes.extend(read_notes(&text));
            }
            src.duplicates = rows.duplicates;
            ds.measurements = rows.measurements;
            ds.microbench = rows.microbench;
            src.files = files;
            if src.files.is_empty() && ds.profile.is_none() {
                return Err(Error::dataset(
                    dir,
                    "not a dataset: no device.json, no .parquet and no .jsonl files",
                ));
            }
        }
        Ok((ds, src))
    }

    /// Writes `measurements.parquet`, `microbench.parquet` and (when there
    /// is a profile) `device.json`, each atomically.
    pub fn save(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let meas = dir.join(MEASUREMENTS_FILE);
        write_parquet(&meas, &mut measurements_frame(&self.measurements, &meas)?)?;
        let micro = dir.join(MICROBENCH_FILE);
        write_parquet(
            &micro,
            &mut microbench_frame(&self.microbench, &self.notes, &micro)?,
        )?;
        if let Some(p) = &self.profile {
            hetero_plan::save(&dir.join(DEVICE_FILE), p)?;
        }
        Ok(())
    }

    /// Every case id, measurements then microbenchmarks.
    pub fn case_ids(&self) -> impl Iterator<Item = &str> {
        self.measurements
            .iter()
            .map(|r| r.case_id.as_str())
            .chain(self.microbench.iter().map(|r| r.case_id.as_str()))
    }

    /// The dataset's fingerprint: the SHA-256 of its profile and its rows in
    /// case-id order, so the same data hashes the same whether it was read
    /// from Parquet or JSON Lines. `name` is the folder name.
    pub fn fingerprint(&self, name: impl Into<String>) -> Fingerprint {
        let mut m: Vec<&MeasurementRow> = self.measurements.iter().collect();
        m.sort_by(|a, b| a.case_id.cmp(&b.case_id));
        let mut b: Vec<&MicrobenchRow> = self.microbench.iter().collect();
        b.sort_by(|x, y| x.case_id.cmp(&y.case_id));
        Fingerprint::of(name, &(&self.profile, m, b, &self.notes))
    }

    /// The processor ids of the profile, or of the rows when there is none.
    pub fn processor_ids(&self) -> Vec<String> {
        if let Some(p) = &self.profile
            && !p.processors.is_empty()
        {
            return p.processors.iter().map(|p| p.id.clone()).collect();
        }
        let mut ids: Vec<String> = self
            .measurements
            .iter()
            .map(|r| r.processor.clone())
            .chain(self.microbench.iter().map(|r| r.processor.clone()))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        ids.dedup();
        ids
    }

    /// Merges datasets of one device: rows are united (the first dataset's
    /// row wins for a case id present in several), sweeps are united, times
    /// are added. Datasets of different devices are refused.
    pub fn merge(parts: &[(PathBuf, Dataset)]) -> Result<(Dataset, usize)> {
        let mut out = Dataset::default();
        let mut first_device: Option<(PathBuf, Fingerprint)> = None;
        let mut ids = BTreeSet::new();
        let mut dropped = 0;
        for (path, d) in parts {
            if let Some(p) = &d.profile {
                let f = device_fingerprint(p);
                match &first_device {
                    Some((first, f0)) if !f0.matches(&f) => {
                        return Err(Error::dataset(
                            path,
                            format!(
                                "holds another device's data than {} ({} vs {}); only datasets \
                                 of one device can be merged",
                                first.display(),
                                p.host.name,
                                out.profile
                                    .as_ref()
                                    .map(|p| p.host.name.as_str())
                                    .unwrap_or("?")
                            ),
                        ));
                    }
                    Some(_) => {}
                    None => first_device = Some((path.clone(), f)),
                }
                match &mut out.profile {
                    None => out.profile = Some(p.clone()),
                    Some(o) => merge_profile(o, p),
                }
            }
            for r in &d.measurements {
                if ids.insert(r.case_id.clone()) {
                    out.measurements.push(r.clone());
                } else {
                    dropped += 1;
                }
            }
            for r in &d.microbench {
                if ids.insert(r.case_id.clone()) {
                    out.microbench.push(r.clone());
                } else {
                    dropped += 1;
                }
            }
            for (k, v) in &d.notes {
                out.notes.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
        Ok((out, dropped))
    }

    /// Writes `measurements.csv` and `microbench.csv` into `dir`, atomically.
    pub fn export_csv(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let meas = dir.join("measurements.csv");
        let micro = dir.join("microbench.csv");
        write_csv(&meas, &mut measurements_frame(&self.measurements, &meas)?)?;
        write_csv(
            &micro,
            &mut microbench_frame(&self.microbench, &self.notes, &micro)?,
        )?;
        Ok(vec![meas, micro])
    }
}

fn merge_profile(into: &mut DeviceProfile, other: &DeviceProfile) {
    for p in &other.processors {
        if !into.processors.iter().any(|q| q.id == p.id) {
            into.processors.push(p.clone());
        }
    }
    for u in &other.unavailable {
        if !into.unavailable.contains(u) {
            into.unavailable.push(u.clone());
        }
    }
    into.seconds += other.seconds;
    into.started_ms = into.started_ms.min(other.started_ms);
    match (&mut into.sweep, &other.sweep) {
        (Some(a), Some(b)) => add_new_items(a, b),
        (None, Some(b)) => into.sweep = Some(b.clone()),
        _ => {}
    }
}

/// Adds the cases and benchmarks of `from` whose ids `into` lacks.
pub(crate) fn add_new_items(into: &mut SweepSpec, from: &SweepSpec) {
    let have: BTreeSet<String> = into
        .cases
        .iter()
        .map(|c| c.id.clone())
        .chain(into.microbench.iter().map(|m| m.id.clone()))
        .collect();
    into.cases
        .extend(from.cases.iter().filter(|c| !have.contains(&c.id)).cloned());
    into.microbench.extend(
        from.microbench
            .iter()
            .filter(|m| !have.contains(&m.id))
            .cloned(),
    );
}

/// The measuring conditions of a row: its own, or for a row of an older
/// dataset, which has none, those of its dataset's run parameters
/// (`device.json`'s sweep), with the CPU groups and cores not recorded.
pub fn setup_of(c: &Conditions, profile: Option<&DeviceProfile>) -> Option<Setup> {
    c.setup.clone().or_else(|| {
        let run = &profile?.sweep.as_ref()?.run;
        Some(Setup::of_run(run, None, None))
    })
}

/// Identifies a device: host name, architecture and its processors. Two
/// runs on the same device have the same fingerprint; `--resume` refuses a
/// folder whose device fingerprint differs.
pub fn device_fingerprint(p: &DeviceProfile) -> Fingerprint {
    let procs: Vec<(&str, String, String, &str)> = p
        .processors
        .iter()
        .map(|q| {
            (
                q.id.as_str(),
                enum_str(&q.kind),
                enum_str(&q.api),
                q.name.as_str(),
            )
        })
        .collect();
    Fingerprint::of(
        format!("device {}", p.host.name),
        &(&p.host.name, &p.host.arch, procs),
    )
}

/// The serde name of a unit enum variant (`transposed`, `copy_h2d`).
pub(crate) fn enum_str<T: Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        other => format!("{other:?}"),
    }
}

fn notes_of(text: &str) -> impl Iterator<Item = (String, String)> + '_ {
    text.lines().filter_map(|l| {
        let v: serde_json::Value = serde_json::from_str(l).ok()?;
        let note = v.get("note")?.as_str()?.to_string();
        let id = v.get("case_id")?.as_str()?.to_string();
        Some((id, note))
    })
}

/// Microbenchmark notes (`"note"` keys) of JSON Lines text, by case id.
pub fn read_notes(text: &str) -> BTreeMap<String, String> {
    notes_of(text).collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use hetero_plan::{
        Conditions, DType, GemmShape, GemvStream, MicrobenchKind, OperandOrder, RowStatus, Stats,
        Timing, WeightMode,
    };
    use polars::prelude::*;

    use super::*;

    pub(crate) fn mrow(id: &str, proc_: &str, m: u32, median: Option<f64>) -> MeasurementRow {
        MeasurementRow {
            case_id: id.into(),
            processor: proc_.into(),
            m,
            k: 64,
            n: 128,
            dtype: DType::F16,
            order: OperandOrder::Transposed,
            weights: WeightMode::Input,
            status: if median.is_some() {
                RowStatus::Ok
            } else {
                RowStatus::Failed
            },
            timing: Timing::Simulated,
            warmups: 2,
            repetitions: 7,
            median_us: median,
            min_us: median.map(|x| x * 0.9),
            p90_us: median.map(|x| x * 1.1),
            cv: median.map(|_| 0.05),
            mean_us: None,
            host_median_us: None,
            launch_us: None,
            prepare_us: Some(1234.5),
            verified: median.is_some(),
            rel_err: Some(1e-3),
            tolerance: Some(2e-3),
            message: median.is_none().then(|| "wrong result".to_string()),
            conditions: Conditions {
                timestamp_ms: 1_700_000_000_123,
                cpu_mhz: Some(2400.5),
                temp_c: None,
                host_probe_us: Some(4.5),
                setup: Some(Setup {
                    cold_cache: true,
                    rotate_weights: false,
                    kernel_timer: true,
                    cpu_groups: Some("0-3;4-7".into()),
                    host_cores: Some(8),
                }),
            },
        }
    }

    fn brow(id: &str) -> MicrobenchRow {
        MicrobenchRow {
            case_id: id.into(),
            processor: "cpu:0".into(),
            bench: MicrobenchKind::BandwidthConcurrent,
            bytes: Some(1 << 26),
            peer: Some("cpu:1".into()),
            shape: GemmShape::new(1, 2, 3),
            status: RowStatus::Ok,
            timing: Timing::Real,
            stats: Stats::from_samples(&[1.0, 2.0, 3.5]),
            gbps: Some(12.5),
            stream: Some(GemvStream {
                copies: 9,
                host_weights: false,
                runs: None,
            }),
            peer_stream: Some(GemvStream {
                copies: 9,
                host_weights: true,
                runs: Some(30),
            }),
            message: None,
            conditions: Conditions {
                timestamp_ms: 5,
                cpu_mhz: None,
                temp_c: Some(41.0),
                host_probe_us: None,
                setup: None,
            },
        }
    }

    fn temp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("hetero-ds-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn parquet_round_trip_is_exact_and_fingerprint_stable() {
        let d = temp("rt");
        let mut ds = Dataset {
            profile: None,
            measurements: vec![
                mrow("a", "cpu:0", 1, Some(10.25)),
                mrow("b", "gpu", 7, None),
            ],
            microbench: vec![brow("mb")],
            notes: BTreeMap::new(),
        };
        ds.notes.insert("mb".into(), "memcpy".into());
        ds.save(&d).unwrap();
        let back = Dataset::load(&d).unwrap();
        assert_eq!(back, ds);
        assert_eq!(back.fingerprint("x"), ds.fingerprint("x"));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn empty_dataset_round_trips() {
        let d = temp("empty");
        let ds = Dataset::default();
        ds.save(&d).unwrap();
        assert_eq!(Dataset::load(&d).unwrap(), ds);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn jsonl_folder_loads_like_parquet() {
        let d = temp("jsonl");
        let rows = [
            mrow("a", "cpu:0", 1, Some(3.0)),
            mrow("b", "cpu:0", 2, Some(4.0)),
        ];
        let mut text = String::new();
        for r in &rows {
            text.push_str(&serde_json::to_string(r).unwrap());
            text.push('\n');
        }
        text.push_str("{\"type\":\"done\",\"rows\":2}\n");
        std::fs::write(d.join("measurements.jsonl"), &text).unwrap();
        let (ds, src) = Dataset::load_with_sources(&d).unwrap();
        assert_eq!(ds.measurements, rows);
        assert_eq!(src.files.len(), 1);
        let p = temp("jsonl-pq");
        ds.save(&p).unwrap();
        assert_eq!(
            Dataset::load(&p).unwrap().fingerprint("n"),
            ds.fingerprint("n")
        );
        let _ = std::fs::remove_dir_all(&d);
        let _ = std::fs::remove_dir_all(&p);
    }

    #[test]
    fn bad_parquet_names_the_file_and_column() {
        let d = temp("bad");
        let mut df = DataFrame::new(
            1,
            vec![
                col("case_id", vec!["a"]),
                col("processor", vec!["cpu:0"]),
                col("m", vec![1u32]),
                col("k", vec![1u32]),
                col("n", vec![1u32]),
                col("dtype", vec!["f99"]),
                col("status", vec!["ok"]),
            ],
        )
        .unwrap();
        write_parquet(&d.join(MEASUREMENTS_FILE), &mut df).unwrap();
        let e = Dataset::load(&d).unwrap_err();
        assert!(e.is_bad_input());
        let s = e.to_string();
        assert!(
            s.contains("measurements.parquet") && s.contains("dtype") && s.contains("f99"),
            "{s}"
        );
        let _ = std::fs::remove_dir_all(&d);
        let e = Dataset::load(&d).unwrap_err();
        assert!(e.is_bad_input(), "{e}");
    }

    /// `datasets/gpu-host-h200` is JSON Lines with a device.json of
    /// `scripts/gpu-host-profile.sh`'s shape: it loads, and survives Parquet.
    #[test]
    fn gpu_host_jsonl_dataset_loads_and_round_trips() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../datasets/gpu-host-h200");
        if !dir.is_dir() {
            eprintln!("skipping: {} is not in this checkout", dir.display());
            return;
        }
        let (ds, src) = Dataset::load_with_sources(&dir).unwrap();
        assert!(src.skipped_lines.is_empty(), "{:?}", src.skipped_lines);
        assert_eq!(src.notes.len(), 1, "device.json was adapted");
        let p = ds.profile.as_ref().unwrap();
        assert!(p.processors.iter().any(|q| q.id == "cuda:0"));
        assert_eq!(p.agent.protocol, 1);
        assert!(ds.measurements.iter().any(|r| r.processor == "cuda:0"));
        assert!(ds.measurements.len() > 1000 && !ds.microbench.is_empty());
        assert!(ds.measurements.iter().all(|r| r.timing == Timing::Real));
        let out = temp("gpu-host");
        ds.save(&out).unwrap();
        let back = Dataset::load(&out).unwrap();
        assert_eq!(back.fingerprint("h200"), ds.fingerprint("h200"));
        let _ = std::fs::remove_dir_all(&out);
    }

    #[test]
    fn merge_unites_rows_once() {
        let a = Dataset {
            measurements: vec![
                mrow("a", "cpu:0", 1, Some(1.0)),
                mrow("b", "cpu:0", 2, Some(2.0)),
            ],
            ..Dataset::default()
        };
        let b = Dataset {
            measurements: vec![
                mrow("b", "cpu:0", 2, Some(9.0)),
                mrow("c", "cpu:0", 3, Some(3.0)),
            ],
            ..Dataset::default()
        };
        let (m, dropped) =
            Dataset::merge(&[("a".into(), a.clone()), ("b".into(), b.clone())]).unwrap();
        assert_eq!(dropped, 1);
        let ids: Vec<&str> = m.case_ids().collect();
        assert_eq!(ids, ["a", "b", "c"]);
        assert_eq!(m.measurements[1].median_us, Some(2.0));

        // Two devices do not merge.
        let profile = |host: &str| DeviceProfile {
            schema_version: hetero_plan::SchemaVersion,
            host: hetero_plan::HostInfo {
                name: host.into(),
                os: "linux".into(),
                arch: "aarch64".into(),
                transport: "adb:X".into(),
            },
            agent: hetero_plan::AgentInfo {
                version: "0.1.0".into(),
                protocol: 1,
                arch: "aarch64".into(),
            },
            processors: vec![],
            unavailable: vec![],
            sweep: None,
            started_ms: 0,
            seconds: 1.0,
        };
        let a = Dataset {
            profile: Some(profile("phone-a")),
            ..a
        };
        let b2 = Dataset {
            profile: Some(profile("phone-b")),
            ..b.clone()
        };
        let e = Dataset::merge(&[("a".into(), a.clone()), ("b".into(), b2)]).unwrap_err();
        assert!(
            e.is_bad_input() && e.to_string().contains("another device"),
            "{e}"
        );
        let b = Dataset {
            profile: Some(profile("phone-a")),
            ..b
        };
        let (m, _) = Dataset::merge(&[("a".into(), a), ("b".into(), b)]).unwrap();
        assert_eq!(m.profile.unwrap().seconds, 2.0);
    }

    #[test]
    fn rows_without_conditions_take_those_of_their_device_json() {
        let mut row = mrow("a", "cpu:0", 4, Some(10.0));
        let own = row.conditions.setup.clone();
        assert!(own.is_some());
        assert_eq!(setup_of(&row.conditions, None), own);
        row.conditions.setup = None;
        assert_eq!(setup_of(&row.conditions, None), None);
        let profile: DeviceProfile = serde_json::from_value(serde_json::json!({
            "schema_version": 1,
            "host": {"name": "h", "os": "linux", "arch": "x86_64", "transport": "local"},
            "agent": {"version": "0", "protocol": 1, "arch": "x86_64"},
            "processors": [],
            "sweep": {"schema_version": 1, "run": {"warmups": 1, "repetitions": 3,
                      "timeout_ms": 100, "cold_cache": true}},
            "started_ms": 0
        }))
        .unwrap();
        let s = setup_of(&row.conditions, Some(&profile)).unwrap();
        assert!(s.cold_cache && s.cpu_groups.is_none() && s.host_cores.is_none());
    }
}
