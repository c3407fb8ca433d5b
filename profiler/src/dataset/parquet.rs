//! The Parquet (and CSV) tables of a dataset: flat columns of the rows,
//! enums as their lowercase names, nested `conditions` and `stats`
//! flattened.

use std::collections::BTreeMap;
use std::io::Cursor;
use std::path::Path;

use hetero_plan::{
    Conditions, GemmShape, GemvStream, MeasurementRow, MicrobenchRow, Setup, Stats, Timing,
    Validate,
};
use polars::prelude::*;
use serde::de::DeserializeOwned;

use super::enum_str;
use crate::{Error, Result};

fn enum_parse<T: DeserializeOwned>(s: &str, path: &Path, col: &str, row: usize) -> Result<T> {
    serde_json::from_value(serde_json::Value::String(s.to_string()))
        .map_err(|e| Error::dataset(path, format!("row {row}, column `{col}`: `{s}`: {e}")))
}

fn opt_enum<T: DeserializeOwned>(
    v: &Option<String>,
    path: &Path,
    col: &str,
    row: usize,
) -> Result<Option<T>> {
    match v {
        Some(s) => enum_parse(s, path, col, row).map(Some),
        None => Ok(None),
    }
}

fn polars_err(path: &Path) -> impl Fn(PolarsError) -> Error + '_ {
    move |source| Error::Polars {
        path: path.to_path_buf(),
        source,
    }
}

pub(super) fn write_parquet(path: &Path, df: &mut DataFrame) -> Result<()> {
    let mut buf = Vec::new();
    ParquetWriter::new(&mut buf)
        .finish(df)
        .map_err(polars_err(path))?;
    hetero_plan::write_atomic(path, &buf)?;
    Ok(())
}

pub(super) fn write_csv(path: &Path, df: &mut DataFrame) -> Result<()> {
    let mut buf = Vec::new();
    CsvWriter::new(&mut buf)
        .finish(df)
        .map_err(polars_err(path))?;
    hetero_plan::write_atomic(path, &buf)?;
    Ok(())
}

pub(super) fn read_parquet(path: &Path) -> Result<DataFrame> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    ParquetReader::new(Cursor::new(bytes))
        .finish()
        .map_err(|e| Error::dataset(path, format!("not a readable Parquet file: {e}")))
}

pub(super) fn frame(path: &Path, columns: Vec<Column>) -> Result<DataFrame> {
    let height = columns.first().map_or(0, |c| c.len());
    DataFrame::new(height, columns).map_err(polars_err(path))
}

pub(super) fn col<T, P: ?Sized>(name: &str, v: T) -> Column
where
    Series: NamedFrom<T, P>,
{
    Column::new(name.into(), v)
}

pub(super) fn measurements_frame(rows: &[MeasurementRow], path: &Path) -> Result<DataFrame> {
    let s = |f: fn(&MeasurementRow) -> String| rows.iter().map(f).collect::<Vec<_>>();
    let u = |f: fn(&MeasurementRow) -> u32| rows.iter().map(f).collect::<Vec<_>>();
    let of = |f: fn(&MeasurementRow) -> Option<f64>| rows.iter().map(f).collect::<Vec<_>>();
    frame(
        path,
        vec![
            col("case_id", s(|r| r.case_id.clone())),
            col("processor", s(|r| r.processor.clone())),
            col("m", u(|r| r.m)),
            col("k", u(|r| r.k)),
            col("n", u(|r| r.n)),
            col("dtype", s(|r| enum_str(&r.dtype))),
            col("order", s(|r| enum_str(&r.order))),
            col("weights", s(|r| enum_str(&r.weights))),
            col("status", s(|r| enum_str(&r.status))),
            col("timing", s(|r| enum_str(&r.timing))),
            col("warmups", u(|r| r.warmups)),
            col("repetitions", u(|r| r.repetitions)),
            col("median_us", of(|r| r.median_us)),
            col("min_us", of(|r| r.min_us)),
            col("p90_us", of(|r| r.p90_us)),
            col("cv", of(|r| r.cv)),
            col("mean_us", of(|r| r.mean_us)),
            col("host_median_us", of(|r| r.host_median_us)),
            col("launch_us", of(|r| r.launch_us)),
            col("prepare_us", of(|r| r.prepare_us)),
            col(
                "verified",
                rows.iter().map(|r| r.verified).collect::<Vec<_>>(),
            ),
            col("rel_err", of(|r| r.rel_err)),
            col("tolerance", of(|r| r.tolerance)),
            col(
                "message",
                rows.iter().map(|r| r.message.clone()).collect::<Vec<_>>(),
            ),
        ]
        .into_iter()
        .chain(condition_columns(rows.iter().map(|r| &r.conditions)))
        .collect(),
    )
}

/// The [`Conditions`] of the rows as the columns `timestamp_ms`,
/// `cpu_mhz`, `temp_c` and `host_probe_us`, and its [`Setup`] as
/// `cold_cache`, `rotate_weights`, `kernel_timer`, `cpu_groups` and
/// `host_cores` (all null in a row without one).
fn condition_columns<'a>(v: impl Iterator<Item = &'a Conditions>) -> [Column; 9] {
    let v: Vec<&Conditions> = v.collect();
    let of = |f: fn(&Conditions) -> Option<f64>| v.iter().map(|c| f(c)).collect::<Vec<_>>();
    let flag = |f: fn(&Setup) -> bool| {
        v.iter()
            .map(|c| c.setup.as_ref().map(f))
            .collect::<Vec<_>>()
    };
    [
        col(
            "timestamp_ms",
            v.iter().map(|c| c.timestamp_ms).collect::<Vec<_>>(),
        ),
        col("cpu_mhz", of(|c| c.cpu_mhz)),
        col("temp_c", of(|c| c.temp_c)),
        col("host_probe_us", of(|c| c.host_probe_us)),
        col("cold_cache", flag(|s| s.cold_cache)),
        col("rotate_weights", flag(|s| s.rotate_weights)),
        col("kernel_timer", flag(|s| s.kernel_timer)),
        col(
            "cpu_groups",
            v.iter()
                .map(|c| c.setup.as_ref().and_then(|s| s.cpu_groups.clone()))
                .collect::<Vec<_>>(),
        ),
        col(
            "host_cores",
            v.iter()
                .map(|c| c.setup.as_ref().and_then(|s| s.host_cores))
                .collect::<Vec<_>>(),
        ),
    ]
}

/// A [`GemvStream`] field as the columns `{prefix}_copies`,
/// `{prefix}_host_weights` and `{prefix}_runs`.
fn stream_columns(prefix: &str, v: impl Iterator<Item = Option<GemvStream>>) -> [Column; 3] {
    let v: Vec<Option<GemvStream>> = v.collect();
    [
        col(
            &format!("{prefix}_copies"),
            v.iter().map(|s| s.map(|s| s.copies)).collect::<Vec<_>>(),
        ),
        col(
            &format!("{prefix}_host_weights"),
            v.iter()
                .map(|s| s.map(|s| s.host_weights))
                .collect::<Vec<_>>(),
        ),
        col(
            &format!("{prefix}_runs"),
            v.iter().map(|s| s.and_then(|s| s.runs)).collect::<Vec<_>>(),
        ),
    ]
}

pub(super) fn microbench_frame(
    rows: &[MicrobenchRow],
    notes: &BTreeMap<String, String>,
    path: &Path,
) -> Result<DataFrame> {
    let s = |f: fn(&MicrobenchRow) -> String| rows.iter().map(f).collect::<Vec<_>>();
    let of = |f: fn(&MicrobenchRow) -> Option<f64>| rows.iter().map(f).collect::<Vec<_>>();
    let ou = |f: fn(&MicrobenchRow) -> Option<u32>| rows.iter().map(f).collect::<Vec<_>>();
    frame(
        path,
        vec![
            col("case_id", s(|r| r.case_id.clone())),
            col("processor", s(|r| r.processor.clone())),
            col("bench", s(|r| enum_str(&r.bench))),
            col("bytes", rows.iter().map(|r| r.bytes).collect::<Vec<_>>()),
            col(
                "peer",
                rows.iter().map(|r| r.peer.clone()).collect::<Vec<_>>(),
            ),
            col("shape_m", ou(|r| r.shape.map(|s| s.m.get()))),
            col("shape_k", ou(|r| r.shape.map(|s| s.k.get()))),
            col("shape_n", ou(|r| r.shape.map(|s| s.n.get()))),
            col("status", s(|r| enum_str(&r.status))),
            col("timing", s(|r| enum_str(&r.timing))),
            col("median_us", of(|r| r.stats.map(|s| s.median_us))),
            col("min_us", of(|r| r.stats.map(|s| s.min_us))),
            col("p90_us", of(|r| r.stats.map(|s| s.p90_us))),
            col("count", ou(|r| r.stats.map(|s| s.count))),
            col("cv", of(|r| r.stats.map(|s| s.cv))),
            col("mean_us", of(|r| r.stats.and_then(|s| s.mean_us))),
            col("gbps", of(|r| r.gbps)),
        ]
        .into_iter()
        .chain(stream_columns("stream", rows.iter().map(|r| r.stream)))
        .chain(stream_columns(
            "peer_stream",
            rows.iter().map(|r| r.peer_stream),
        ))
        .chain([
            col(
                "message",
                rows.iter().map(|r| r.message.clone()).collect::<Vec<_>>(),
            ),
            col(
                "note",
                rows.iter()
                    .map(|r| notes.get(&r.case_id).cloned())
                    .collect::<Vec<_>>(),
            ),
        ])
        .chain(condition_columns(rows.iter().map(|r| &r.conditions)))
        .collect(),
    )
}

/// Typed column access with the file and column in every error.
struct Reader<'a> {
    df: &'a DataFrame,
    path: &'a Path,
}

impl<'a> Reader<'a> {
    fn column(&self, name: &str, dtype: &DataType, required: bool) -> Result<Option<Column>> {
        match self.df.column(name) {
            Ok(c) => c
                .cast(dtype)
                .map(Some)
                .map_err(|e| Error::dataset(self.path, format!("column `{name}`: {e}"))),
            Err(_) if !required => Ok(None),
            Err(_) => Err(Error::dataset(
                self.path,
                format!("missing column `{name}`"),
            )),
        }
    }

    fn strs(&self, name: &str, required: bool) -> Result<Vec<Option<String>>> {
        let n = self.df.height();
        Ok(match self.column(name, &DataType::String, required)? {
            Some(c) => c
                .str()
                .map_err(polars_err(self.path))?
                .iter()
                .map(|o| o.map(str::to_string))
                .collect(),
            None => vec![None; n],
        })
    }

    fn req_strs(&self, name: &str) -> Result<Vec<String>> {
        self.no_nulls(name, self.strs(name, true)?)
    }

    /// The numeric column `name` cast to `T`; all `None` when it is
    /// missing and not `required`.
    fn nums<T: PolarsNumericType>(
        &self,
        name: &str,
        required: bool,
    ) -> Result<Vec<Option<T::Native>>> {
        let n = self.df.height();
        Ok(match self.column(name, &T::get_static_dtype(), required)? {
            Some(c) => c
                .as_materialized_series()
                .unpack::<T>()
                .map_err(polars_err(self.path))?
                .iter()
                .collect(),
            None => vec![None; n],
        })
    }

    fn u32s(&self, name: &str, required: bool) -> Result<Vec<Option<u32>>> {
        self.nums::<UInt32Type>(name, required)
    }

    fn req_u32s(&self, name: &str) -> Result<Vec<u32>> {
        self.no_nulls(name, self.u32s(name, true)?)
    }

    fn u64s(&self, name: &str) -> Result<Vec<Option<u64>>> {
        self.nums::<UInt64Type>(name, false)
    }

    fn f64s(&self, name: &str) -> Result<Vec<Option<f64>>> {
        self.nums::<Float64Type>(name, false)
    }

    /// The values of the required column `name`, an error at its first null.
    fn no_nulls<T>(&self, name: &str, values: Vec<Option<T>>) -> Result<Vec<T>> {
        values
            .into_iter()
            .enumerate()
            .map(|(i, o)| {
                o.ok_or_else(|| {
                    Error::dataset(self.path, format!("row {i}, column `{name}`: null"))
                })
            })
            .collect()
    }

    /// The [`GemvStream`] columns of [`stream_columns`] under `prefix`.
    fn streams(&self, prefix: &str) -> Result<Vec<Option<GemvStream>>> {
        let copies = self.u32s(&format!("{prefix}_copies"), false)?;
        let host_weights = self.bools(&format!("{prefix}_host_weights"))?;
        let runs = self.u64s(&format!("{prefix}_runs"))?;
        Ok((0..self.df.height())
            .map(|i| {
                copies[i].map(|copies| GemvStream {
                    copies,
                    host_weights: host_weights[i],
                    runs: runs[i],
                })
            })
            .collect())
    }

    /// The [`Conditions`] of [`condition_columns`]; a missing timestamp is 0,
    /// and a row whose `cold_cache` is null has no [`Setup`].
    fn conditions(&self) -> Result<Vec<Conditions>> {
        let ts = self.u64s("timestamp_ms")?;
        let [mhz, temp, probe] = ["cpu_mhz", "temp_c", "host_probe_us"].map(|c| self.f64s(c));
        let (mhz, temp, probe) = (mhz?, temp?, probe?);
        let cold = self.opt_bools("cold_cache")?;
        let (rotate, kernel) = (self.bools("rotate_weights")?, self.bools("kernel_timer")?);
        let groups = self.strs("cpu_groups", false)?;
        let cores = self.u32s("host_cores", false)?;
        Ok((0..self.df.height())
            .map(|i| Conditions {
                timestamp_ms: ts[i].unwrap_or(0),
                cpu_mhz: mhz[i],
                temp_c: temp[i],
                host_probe_us: probe[i],
                setup: cold[i].map(|cold_cache| Setup {
                    cold_cache,
                    rotate_weights: rotate[i],
                    kernel_timer: kernel[i],
                    cpu_groups: groups[i].clone(),
                    host_cores: cores[i],
                }),
            })
            .collect())
    }

    fn bools(&self, name: &str) -> Result<Vec<bool>> {
        Ok(self
            .opt_bools(name)?
            .into_iter()
            .map(|o| o.unwrap_or(false))
            .collect())
    }

    fn opt_bools(&self, name: &str) -> Result<Vec<Option<bool>>> {
        let n = self.df.height();
        Ok(match self.column(name, &DataType::Boolean, false)? {
            Some(c) => c.bool().map_err(polars_err(self.path))?.iter().collect(),
            None => vec![None; n],
        })
    }
}

/// Reads `measurements.parquet`.
pub fn read_measurements(path: &Path) -> Result<Vec<MeasurementRow>> {
    let df = read_parquet(path)?;
    let r = Reader { df: &df, path };
    let ids = r.req_strs("case_id")?;
    let procs = r.req_strs("processor")?;
    let (m, k, n) = (r.req_u32s("m")?, r.req_u32s("k")?, r.req_u32s("n")?);
    let dtype = r.req_strs("dtype")?;
    let order = r.strs("order", false)?;
    let weights = r.strs("weights", false)?;
    let status = r.req_strs("status")?;
    let timing = r.strs("timing", false)?;
    let warmups = r.u32s("warmups", false)?;
    let reps = r.u32s("repetitions", false)?;
    let [median, min, p90, cv, host, launch, prep, rel, tol] = [
        "median_us",
        "min_us",
        "p90_us",
        "cv",
        "host_median_us",
        "launch_us",
        "prepare_us",
        "rel_err",
        "tolerance",
    ]
    .map(|c| r.f64s(c));
    let (median, min, p90, cv, host, launch, prep, rel, tol) =
        (median?, min?, p90?, cv?, host?, launch?, prep?, rel?, tol?);
    // Absent from datasets of older agents.
    let mean = r.f64s("mean_us")?;
    let verified = r.bools("verified")?;
    let message = r.strs("message", false)?;
    let conditions = r.conditions()?;
    let mut out = Vec::with_capacity(df.height());
    for i in 0..df.height() {
        out.push(MeasurementRow {
            case_id: ids[i].clone(),
            processor: procs[i].clone(),
            m: m[i],
            k: k[i],
            n: n[i],
            dtype: enum_parse(&dtype[i], path, "dtype", i)?,
            order: opt_enum(&order[i], path, "order", i)?.unwrap_or_default(),
            weights: opt_enum(&weights[i], path, "weights", i)?.unwrap_or_default(),
            status: enum_parse(&status[i], path, "status", i)?,
            timing: opt_enum(&timing[i], path, "timing", i)?.unwrap_or_default(),
            warmups: warmups[i].unwrap_or(0),
            repetitions: reps[i].unwrap_or(0),
            median_us: median[i],
            min_us: min[i],
            p90_us: p90[i],
            cv: cv[i],
            mean_us: mean[i],
            host_median_us: host[i],
            launch_us: launch[i],
            prepare_us: prep[i],
            verified: verified[i],
            rel_err: rel[i],
            tolerance: tol[i],
            message: message[i].clone(),
            conditions: conditions[i].clone(),
        });
        let checked = out[i].validate();
        checked.map_err(|(f, why)| Error::dataset(path, format!("row {i}: field `{f}`: {why}")))?;
    }
    Ok(out)
}

/// Reads `microbench.parquet`, with the notes by case id.
pub fn read_microbench(path: &Path) -> Result<(Vec<MicrobenchRow>, BTreeMap<String, String>)> {
    let df = read_parquet(path)?;
    let r = Reader { df: &df, path };
    let ids = r.req_strs("case_id")?;
    let procs = r.req_strs("processor")?;
    let bench = r.req_strs("bench")?;
    let bytes = r.u64s("bytes")?;
    let peer = r.strs("peer", false)?;
    let (sm, sk, sn) = (
        r.u32s("shape_m", false)?,
        r.u32s("shape_k", false)?,
        r.u32s("shape_n", false)?,
    );
    let status = r.req_strs("status")?;
    let timing = r.strs("timing", false)?;
    let [median, min, p90, cv, gbps] =
        ["median_us", "min_us", "p90_us", "cv", "gbps"].map(|c| r.f64s(c));
    let (median, min, p90, cv, gbps) = (median?, min?, p90?, cv?, gbps?);
    let count = r.u32s("count", false)?;
    // Absent from datasets of older agents.
    let mean = r.f64s("mean_us")?;
    let message = r.strs("message", false)?;
    let note = r.strs("note", false)?;
    // Absent from datasets of older agents, whose notes say it in words.
    let stream = r.streams("stream")?;
    let peer_stream = r.streams("peer_stream")?;
    let conditions = r.conditions()?;
    let mut out = Vec::with_capacity(df.height());
    let mut notes = BTreeMap::new();
    for i in 0..df.height() {
        let shape = match (sm[i], sk[i], sn[i]) {
            (Some(m), Some(k), Some(n)) => Some(GemmShape::new(m, k, n).ok_or_else(|| {
                Error::dataset(path, format!("row {i}: shape {m}x{k}x{n} has a zero"))
            })?),
            _ => None,
        };
        let stats = match (median[i], min[i], p90[i], count[i], cv[i]) {
            (Some(median_us), Some(min_us), Some(p90_us), Some(count), Some(cv)) => Some(Stats {
                median_us,
                min_us,
                p90_us,
                count,
                cv,
                mean_us: mean[i],
            }),
            _ => None,
        };
        if let Some(n) = &note[i] {
            notes.insert(ids[i].clone(), n.clone());
        }
        out.push(MicrobenchRow {
            case_id: ids[i].clone(),
            processor: procs[i].clone(),
            bench: enum_parse(&bench[i], path, "bench", i)?,
            bytes: bytes[i],
            peer: peer[i].clone(),
            shape,
            status: enum_parse(&status[i], path, "status", i)?,
            timing: match &timing[i] {
                Some(t) => enum_parse(t, path, "timing", i)?,
                None => Timing::Real,
            },
            stats,
            gbps: gbps[i],
            stream: stream[i],
            peer_stream: peer_stream[i],
            message: message[i].clone(),
            conditions: conditions[i].clone(),
        });
    }
    Ok((out, notes))
}
