//! The journal: every row the agent sends, appended as it arrives.
//!
//! `journal.jsonl` in the output folder holds the agent's row lines as
//! received (one JSON object per line, with its `"type"`), each with the
//! run's measuring conditions added (`conditions.setup`). Each line is
//! written with a single `write` call, so a killed host loses nothing the
//! kernel accepted; `fsync` runs once per batch ([`Journal::SYNC_ROWS`] rows
//! or [`Journal::SYNC_EVERY`]) and at the end of every agent run, so a power
//! cut loses at most one batch, whose cases simply count as not done and are
//! measured again on `--resume`. A line cut in half by a crash is removed
//! when the journal is reopened. Rows are keyed by case id: the first row of
//! an id wins, so no row is ever counted twice.

use std::collections::HashSet;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hetero_plan::protocol::AgentLine;
use hetero_plan::{MeasurementRow, MicrobenchRow, Validate};

use crate::{Error, Result};

/// Rows read from a JSON Lines file, each case id once.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rows {
    /// GEMM rows, in file order.
    pub measurements: Vec<MeasurementRow>,
    /// Microbenchmark rows, in file order.
    pub microbench: Vec<MicrobenchRow>,
    /// Lines that were not rows (a cut-off line, garbage), with the reason.
    pub skipped_lines: Vec<(usize, String)>,
    /// Rows dropped because their case id came earlier in the file.
    pub duplicates: usize,
    /// Rows that parsed but contradict themselves (a verified row above
    /// its tolerance), with the line and the reason; not added.
    pub invalid: Vec<(usize, String)>,
    ids: HashSet<String>,
}

impl Rows {
    /// True when a row for this case id is present.
    pub fn has(&self, id: &str) -> bool {
        self.ids.contains(id)
    }

    /// Every case id present.
    pub fn ids(&self) -> &HashSet<String> {
        &self.ids
    }

    /// Rows in all.
    pub fn len(&self) -> usize {
        self.measurements.len() + self.microbench.len()
    }

    /// True when there are no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds a parsed line; returns false (and adds nothing) for a line that
    /// is not a row or whose case id is already present.
    pub fn push(&mut self, line: AgentLine) -> bool {
        match line {
            AgentLine::Measurement(r) => self.push_measurement(r),
            AgentLine::Microbench(l) => self.push_microbench(l.row),
            _ => false,
        }
    }

    /// Adds a GEMM row unless its case id is already present.
    pub fn push_measurement(&mut self, row: MeasurementRow) -> bool {
        let new = self.insert_id(&row.case_id);
        if new {
            self.measurements.push(row);
        }
        new
    }

    /// Adds a microbenchmark row unless its case id is already present.
    pub fn push_microbench(&mut self, row: MicrobenchRow) -> bool {
        let new = self.insert_id(&row.case_id);
        if new {
            self.microbench.push(row);
        }
        new
    }

    fn insert_id(&mut self, id: &str) -> bool {
        let new = self.ids.insert(id.to_string());
        if !new {
            self.duplicates += 1;
        }
        new
    }

    /// Parses JSON Lines text.
    pub fn parse(text: &str) -> Rows {
        let mut rows = Rows::default();
        for (i, l) in text.lines().enumerate() {
            if l.trim().is_empty() {
                continue;
            }
            match AgentLine::parse(l) {
                Ok(Some(line)) => {
                    if let AgentLine::Measurement(r) = &line
                        && let Err((field, why)) = r.validate()
                    {
                        rows.invalid
                            .push((i + 1, format!("field `{field}`: {why}")));
                        continue;
                    }
                    rows.push(line);
                }
                Ok(None) => {}
                Err(e) => rows.skipped_lines.push((i + 1, e)),
            }
        }
        rows
    }

    /// Reads a JSON Lines file.
    pub fn read(path: &Path) -> Result<Rows> {
        let text = hetero_plan::read_text(path)?;
        Ok(Rows::parse(&text))
    }
}

/// An open journal.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: std::fs::File,
    /// Bytes of whole lines in the file: where a failed write is cut back to.
    len: u64,
    unsynced: usize,
    last_sync: Instant,
}

impl Journal {
    /// The file name inside a dataset folder.
    pub const FILE: &'static str = "journal.jsonl";
    /// Rows between two fsyncs.
    pub const SYNC_ROWS: usize = 16;
    /// Longest time between two fsyncs while rows arrive.
    pub const SYNC_EVERY: Duration = Duration::from_secs(1);

    /// Opens (or creates) the journal, cuts off a partial last line left by
    /// a crash, and returns the rows already in it.
    pub fn open(path: &Path) -> Result<(Journal, Rows, u64)> {
        let io = |e| Error::io(path, e);
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(path)
            .map_err(io)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io)?;
        let keep = match bytes.iter().rposition(|&b| b == b'\n') {
            Some(i) => i + 1,
            None => 0,
        };
        let cut = (bytes.len() - keep) as u64;
        if cut > 0 {
            file.set_len(keep as u64).map_err(io)?;
            file.sync_data().map_err(io)?;
            file.seek(SeekFrom::End(0)).map_err(io)?;
        }
        let rows = Rows::parse(&String::from_utf8_lossy(&bytes[..keep]));
        Ok((
            Journal {
                path: path.to_path_buf(),
                file,
                len: keep as u64,
                unsynced: 0,
                last_sync: Instant::now(),
            },
            rows,
            cut,
        ))
    }

    /// Appends one row line (without its newline) in a single write, and
    /// syncs when the batch is full. A write that fails part way (a full
    /// disk) is cut back off, so the file ends with a whole line.
    pub fn append(&mut self, line: &str) -> Result<()> {
        let mut buf = Vec::with_capacity(line.len() + 1);
        buf.extend_from_slice(line.trim_end_matches(['\r', '\n']).as_bytes());
        buf.push(b'\n');
        if let Err(e) = self.file.write_all(&buf) {
            let _ = self.file.set_len(self.len);
            return Err(Error::io(&self.path, e));
        }
        self.len += buf.len() as u64;
        self.unsynced += 1;
        if self.unsynced >= Self::SYNC_ROWS || self.last_sync.elapsed() >= Self::SYNC_EVERY {
            self.sync()?;
        }
        Ok(())
    }

    /// Flushes the batch to disk.
    pub fn sync(&mut self) -> Result<()> {
        if self.unsynced > 0 {
            self.file
                .sync_data()
                .map_err(|e| Error::io(&self.path, e))?;
            self.unsynced = 0;
        }
        self.last_sync = Instant::now();
        Ok(())
    }

    /// The journal's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        let _ = self.sync();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str) -> String {
        format!(
            r#"{{"type":"measurement","case_id":"{id}","processor":"cpu:0","m":1,"k":2,"n":3,"dtype":"f32","order":"aw","status":"ok","timing":"real","warmups":1,"repetitions":3,"median_us":5.0,"verified":true,"conditions":{{"timestamp_ms":1}}}}"#
        )
    }

    fn temp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("hetero-journal-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d.join(Journal::FILE)
    }

    #[test]
    fn partial_last_line_is_cut_and_ids_stay_unique() {
        let p = temp("cut");
        {
            let (mut j, rows, cut) = Journal::open(&p).unwrap();
            assert!(rows.is_empty() && cut == 0);
            j.append(&row("a")).unwrap();
            j.append(&row("b")).unwrap();
            j.append(&row("a")).unwrap();
        }
        // A crash in the middle of a write.
        let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(&row("c").as_bytes()[..40]).unwrap();
        drop(f);
        let (mut j, rows, cut) = Journal::open(&p).unwrap();
        assert_eq!(cut, 40);
        assert_eq!(rows.measurements.len(), 2);
        assert_eq!(rows.duplicates, 1);
        assert!(rows.has("a") && rows.has("b") && !rows.has("c"));
        j.append(&row("c")).unwrap();
        drop(j);
        let rows = Rows::read(&p).unwrap();
        assert_eq!(rows.measurements.len(), 3);
        assert!(rows.skipped_lines.is_empty(), "{:?}", rows.skipped_lines);
        let _ = std::fs::remove_dir_all(p.parent().unwrap());
    }
}
