//! One agent process of a batch: its output read line by line as the
//! agent writes it, each row journaled the moment it arrives.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ExitStatus};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hetero_plan::Setup;
use hetero_plan::protocol::AgentLine;

use super::cost::CostModel;
use crate::dataset;
use crate::design::Item;
use crate::journal::{Journal, Rows};
use crate::report::{Event, Reporter};
use crate::transport::{self, Transport, spawn_piped};
use crate::{Error, Result};

/// How one agent run ended.
pub(super) struct BatchEnd {
    /// Rows this run added.
    pub new_rows: usize,
    /// The agent wrote its `done` line.
    pub done_line: bool,
    /// The exit status, when the process could be waited for.
    pub status: Option<ExitStatus>,
    /// Killed at the hard deadline.
    pub killed_for_budget: bool,
    /// Killed for writing nothing for too long.
    pub stalled: bool,
    /// The tail of its standard error.
    pub stderr: String,
    /// The command, as a user would type it.
    pub command: String,
}

/// Where a batch's rows go.
pub(super) struct Sink<'a> {
    /// The items the batch asked for, by id.
    pub items: &'a HashMap<String, Item>,
    /// The journal.
    pub journal: &'a mut Journal,
    /// The rows so far.
    pub rows: &'a mut Rows,
    /// Calibrated with each row's wall time.
    pub cost: &'a mut CostModel,
    /// Where events go.
    pub rep: &'a Reporter,
    /// Rows this run, per processor.
    pub done: &'a mut BTreeMap<String, u64>,
    /// The run's measuring conditions, added to each row.
    pub setup: &'a Setup,
}

/// When to give up on the agent.
pub(super) struct Limits {
    /// The end of the budget: the agent is stopped at its first line after
    /// it (a case just ended, so nothing measured is lost).
    pub deadline: Instant,
    /// Killed at this instant, in the middle of a case: the budget and at
    /// most one case's timeout.
    pub hard_deadline: Instant,
    /// Killed after this long without a line.
    pub stall_limit: Duration,
}

/// Runs the agent with `args` and journals its rows as they arrive.
pub(super) fn run_batch(
    tr: &Transport,
    args: &[String],
    mut sink: Sink<'_>,
    limits: Limits,
) -> Result<BatchEnd> {
    let mut agent = AgentProcess::spawn(tr, args)?;
    let mut end = BatchEnd {
        new_rows: 0,
        done_line: false,
        status: None,
        killed_for_budget: false,
        stalled: false,
        stderr: String::new(),
        command: agent.command.clone(),
    };
    let mut last_line = Instant::now();
    let mut last_row_at: Option<Instant> = None;
    loop {
        match agent.lines.recv_timeout(Duration::from_millis(100)) {
            Ok(Ok(text)) => {
                last_line = Instant::now();
                let at = agent.started;
                if let Err(e) = sink.line(&text, at, &mut end, &mut last_row_at) {
                    agent.kill();
                    return Err(e);
                }
                if last_line >= limits.deadline && !end.killed_for_budget {
                    end.killed_for_budget = true;
                    let _ = agent.child.kill();
                }
            }
            Ok(Err(e)) => {
                sink.rep.emit(&Event::Warning {
                    message: format!("reading the agent's output: {e}"),
                });
                break;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let now = Instant::now();
                if now >= limits.hard_deadline {
                    end.killed_for_budget = true;
                    let _ = agent.child.kill();
                } else if now - last_line >= limits.stall_limit {
                    end.stalled = true;
                    let _ = agent.child.kill();
                }
            }
        }
    }
    agent.finish(&mut end);
    Ok(end)
}

impl Sink<'_> {
    /// Handles one line of the agent's output. `Err`: a hello of another
    /// protocol, or a journal that cannot be written.
    fn line(
        &mut self,
        text: &str,
        started: Instant,
        end: &mut BatchEnd,
        last_row_at: &mut Option<Instant>,
    ) -> Result<()> {
        if !text.ends_with('\n') {
            // A line cut off by the end of the stream.
            if !text.trim().is_empty() {
                self.rep.emit(&Event::Warning {
                    message: format!(
                        "ignored a cut-off last line from the agent ({} bytes)",
                        text.len()
                    ),
                });
            }
            return Ok(());
        }
        match AgentLine::parse(text) {
            Ok(Some(AgentLine::Hello(h))) => {
                self.cost.startup = 0.5 * self.cost.startup + 0.5 * started.elapsed().as_secs_f64();
                *last_row_at = Some(Instant::now());
                h.check().map_err(|message| Error::Handshake {
                    command: end.command.clone(),
                    message,
                })?;
            }
            Ok(Some(AgentLine::Done(_))) => end.done_line = true,
            Ok(None) => {}
            Ok(Some(line)) => self.row(text, line, end, last_row_at)?,
            Err(why) => self.rep.emit(&Event::Warning {
                message: format!("ignored a line from the agent: {why}"),
            }),
        }
        Ok(())
    }

    /// Journals a row the batch asked for and has not got yet.
    fn row(
        &mut self,
        text: &str,
        mut line: AgentLine,
        end: &mut BatchEnd,
        last_row_at: &mut Option<Instant>,
    ) -> Result<()> {
        let id = line.case_id().expect("a row").to_string();
        let Some(item) = self.items.get(&id) else {
            self.rep.emit(&Event::Warning {
                message: format!(
                    "the agent sent a row for `{id}`, which was not asked for; ignored"
                ),
            });
            return Ok(());
        };
        if self.rows.has(&id) {
            return Ok(());
        }
        self.journal
            .append(&super::setup::stamp(text, &mut line, self.setup))?;
        let (processor, status, median) = match &line {
            AgentLine::Measurement(r) => (r.processor.clone(), r.status, r.median_us),
            AgentLine::Microbench(l) => (
                l.row.processor.clone(),
                l.row.status,
                l.row.stats.map(|s| s.median_us),
            ),
            _ => unreachable!("rows only"),
        };
        self.rows.push(line);
        end.new_rows += 1;
        let now = Instant::now();
        if let Some(prev) = *last_row_at {
            self.cost.observe(item, (now - prev).as_secs_f64());
        }
        *last_row_at = Some(now);
        *self.done.entry(processor.clone()).or_default() += 1;
        self.rep.emit(&Event::Row {
            case_id: id,
            processor,
            status: dataset::enum_str(&status),
            median_us: median,
        });
        Ok(())
    }
}

/// A running agent: its stdout read line by line on one thread, the tail
/// of its stderr kept by another.
struct AgentProcess {
    child: Child,
    command: String,
    started: Instant,
    lines: mpsc::Receiver<std::io::Result<String>>,
    reader: JoinHandle<()>,
    err_reader: JoinHandle<String>,
}

impl AgentProcess {
    fn spawn(tr: &Transport, args: &[String]) -> Result<AgentProcess> {
        let cmd = tr.agent_command(args, "agent.log");
        let command = transport::display_command(&cmd);
        let mut child = spawn_piped(cmd)?;
        let started = Instant::now();
        let stdout = child.stdout.take().expect("piped");
        let mut stderr = child.stderr.take().expect("piped");
        let (tx, lines) = mpsc::channel::<std::io::Result<String>>();
        let reader = std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            loop {
                let mut buf = Vec::new();
                match r.read_until(b'\n', &mut buf) {
                    Ok(0) => break,
                    Ok(_) => {
                        let complete = buf.last() == Some(&b'\n');
                        let line = String::from_utf8_lossy(&buf).into_owned();
                        if tx.send(Ok(line)).is_err() || !complete {
                            break;
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        break;
                    }
                }
            }
        });
        let err_reader = std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = stderr.read_to_end(&mut v);
            let s = String::from_utf8_lossy(&v).into_owned();
            // Keep the tail only.
            let mut cut = s.len().saturating_sub(16 << 10);
            while !s.is_char_boundary(cut) {
                cut += 1;
            }
            s[cut..].to_string()
        });
        Ok(AgentProcess {
            child,
            command,
            started,
            lines,
            reader,
            err_reader,
        })
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The stream has ended: waits for the process (killing it if it
    /// lingers) and keeps its status and stderr.
    fn finish(mut self, end: &mut BatchEnd) {
        let wait_until = Instant::now() + Duration::from_secs(10);
        end.status = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if Instant::now() >= wait_until => {
                    let _ = self.child.kill();
                    break self.child.wait().ok();
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(_) => break None,
            }
        };
        let _ = self.reader.join();
        end.stderr = self.err_reader.join().unwrap_or_default();
    }
}
