//! What a profile run tells the user: JSON events on stdout (`--json`), a
//! progress bar per processor on stderr when it is a terminal, warnings on
//! stderr.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

/// One event of `hetero profile --json`: one JSON object per line, with an
/// `"event"` key.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The run starts.
    Start {
        /// The device string.
        target: String,
        /// The output folder.
        out: String,
        /// The time budget, seconds.
        budget_s: f64,
        /// Whether `--resume` was given.
        resume: bool,
    },
    /// The agent answered the handshake.
    Connected {
        /// Host name or device model.
        host: String,
        /// `uname -m`.
        arch: String,
        /// `uname -sr`.
        os: String,
        /// Agent version.
        agent: String,
        /// Protocol version.
        protocol: u32,
        /// The agent binary used.
        agent_path: String,
    },
    /// The processors the agent opened.
    Processors {
        /// Ids that will be measured.
        selected: Vec<String>,
        /// Every id found.
        found: Vec<String>,
        /// Backends that did not open, with the reason.
        unavailable: Vec<String>,
    },
    /// Rows taken over from the journal of an earlier run.
    Resumed {
        /// Rows already measured.
        rows: usize,
        /// Bytes of a cut-off last line removed from the journal.
        cut_bytes: u64,
    },
    /// How the run will spend its budget, before the first case: GEMM rows
    /// per processor and seconds per stage.
    Plan(crate::profile::BudgetPlan),
    /// A batch of cases is sent to the agent.
    Batch {
        /// Batch number, from 1.
        batch: u32,
        /// GEMM cases in it.
        cases: usize,
        /// Microbenchmarks in it.
        microbench: usize,
        /// Estimated seconds.
        estimated_s: f64,
        /// Budget seconds left.
        remaining_s: f64,
    },
    /// A row arrived and is in the journal.
    Row {
        /// Case id.
        case_id: String,
        /// Processor.
        processor: String,
        /// `ok`, `failed`, ...
        status: String,
        /// Median µs, for ok rows.
        #[serde(skip_serializing_if = "Option::is_none")]
        median_us: Option<f64>,
    },
    /// A command failed for a reason of the link and is tried again.
    Retry {
        /// The exact command.
        command: String,
        /// The try that failed.
        attempt: u32,
        /// Tries allowed.
        attempts: u32,
        /// Wait before the next try, ms.
        wait_ms: u64,
        /// What went wrong.
        detail: String,
    },
    /// The agent stopped before the end of a batch; the rest is sent again.
    AgentStopped {
        /// The command.
        command: String,
        /// What happened.
        detail: String,
        /// Rows the batch produced before it stopped.
        rows: usize,
        /// Wait before the restart, ms.
        restart_in_ms: u64,
    },
    /// Refinement added cases where the throughput guide is inaccurate.
    Refine {
        /// Processor.
        processor: String,
        /// Element type.
        dtype: String,
        /// Operand order.
        order: String,
        /// Points the held-out error was computed on.
        points: usize,
        /// Median leave-one-out relative error.
        held_out_median: f64,
        /// Share of points above the threshold.
        above_threshold: f64,
        /// Cases added.
        new_cases: usize,
    },
    /// Something the user should know.
    Warning {
        /// The message.
        message: String,
    },
    /// The run ended and the dataset is written.
    Done {
        /// The output folder.
        out: String,
        /// GEMM rows in the dataset.
        measurements: usize,
        /// Microbenchmark rows in the dataset.
        microbench: usize,
        /// Rows measured by this run.
        new_rows: usize,
        /// Seconds this run took.
        seconds: f64,
        /// Why it stopped: `complete`, `converged` or `budget`.
        stopped: String,
        /// Planned cases left out because the budget ran out.
        left_for_budget: usize,
        /// Microbenchmark repeats the budget plan skipped (listed in the
        /// dataset's `budget.json`).
        skipped_microbench: usize,
        /// The dataset's SHA-256.
        fingerprint: String,
    },
}

/// Sends events to stdout (JSON) and to the progress bars.
pub struct Reporter {
    json: bool,
    quiet: bool,
    multi: Option<MultiProgress>,
    bars: Mutex<BTreeMap<String, ProgressBar>>,
}

impl Reporter {
    /// A reporter: JSON lines on stdout when `json`; bars when stderr is a
    /// terminal; warnings on stderr unless `quiet`.
    pub fn new(json: bool, quiet: bool) -> Reporter {
        let multi = std::io::stderr()
            .is_terminal()
            .then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()));
        Reporter {
            json,
            quiet,
            multi,
            bars: Mutex::new(BTreeMap::new()),
        }
    }

    /// A reporter that shows nothing (tests, library use).
    pub fn silent() -> Reporter {
        Reporter {
            json: false,
            quiet: true,
            multi: None,
            bars: Mutex::new(BTreeMap::new()),
        }
    }

    /// Reports an event.
    pub fn emit(&self, e: &Event) {
        if self.json {
            let line = serde_json::to_string(e).expect("events serialise");
            let print = || {
                use std::io::Write;
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{line}");
                let _ = out.flush();
            };
            match &self.multi {
                Some(m) => m.suspend(print),
                None => print(),
            }
        }
        if self.quiet {
            return;
        }
        let text = match e {
            Event::Retry {
                command,
                attempt,
                attempts,
                wait_ms,
                detail,
            } => Some(format!(
                "retry {attempt}/{attempts} in {:.1} s: `{command}`: {detail}",
                *wait_ms as f64 / 1e3
            )),
            Event::AgentStopped {
                command,
                detail,
                rows,
                restart_in_ms,
            } => Some(format!(
                "the agent stopped after {rows} row(s) (`{command}`: {detail}); \
                 restarting with the rest in {:.1} s",
                *restart_in_ms as f64 / 1e3
            )),
            Event::Warning { message } => Some(format!("warning: {message}")),
            Event::Plan(plan) if !self.json => {
                let print = || {
                    for line in plan.lines() {
                        println!("{line}");
                    }
                };
                match &self.multi {
                    Some(m) => m.suspend(print),
                    None => print(),
                }
                None
            }
            Event::Resumed { rows, cut_bytes } if *cut_bytes > 0 => Some(format!(
                "resuming with {rows} row(s); removed a cut-off last line ({cut_bytes} bytes) \
                 from the journal"
            )),
            _ => None,
        };
        if let Some(t) = text {
            match &self.multi {
                Some(m) => m.suspend(|| eprintln!("{t}")),
                None if !self.json => eprintln!("{t}"),
                None => {}
            }
        }
    }

    /// Sets a processor's bar: `done` of `total` cases, `eta` left.
    pub fn progress(&self, processor: &str, done: u64, total: u64, eta: Duration) {
        let Some(multi) = &self.multi else {
            return;
        };
        let mut bars = self.bars.lock().expect("not poisoned");
        let bar = bars.entry(processor.to_string()).or_insert_with(|| {
            let b = multi.add(ProgressBar::new(total));
            b.set_style(
                ProgressStyle::with_template(
                    "{prefix:>14} [{bar:32}] {pos:>4}/{len:<4} {elapsed_precise} {msg}",
                )
                .expect("a valid template")
                .progress_chars("=> "),
            );
            b.set_prefix(processor.to_string());
            b
        });
        bar.set_length(total.max(done));
        bar.set_position(done);
        bar.set_message(format!("eta {}", human(eta)));
    }

    /// Ends every bar.
    pub fn finish(&self) {
        let bars = self.bars.lock().expect("not poisoned");
        for b in bars.values() {
            b.finish_with_message("done");
        }
    }
}

/// `1h02m`, `3m20s`, `42s`.
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

/// Parses a duration: `90`, `90s`, `15m`, `1h`, `1h30m`, `2.5m`
/// ([`hetero_plan::parse_duration`]).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    hetero_plan::parse_duration(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("60s").unwrap(), Duration::from_secs(60));
        assert_eq!(parse_duration("15m").unwrap(), Duration::from_secs(900));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("2.5m").unwrap(), Duration::from_secs(150));
        for bad in ["", "0", "-5", "5x", "m", "10m5", "1d"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert_eq!(human(Duration::from_secs(3725)), "1h02m");
        assert_eq!(human(Duration::from_secs(200)), "3m20s");
    }

    #[test]
    fn events_are_tagged_json() {
        let e = Event::Row {
            case_id: "a".into(),
            processor: "cpu:0".into(),
            status: "ok".into(),
            median_us: Some(1.5),
        };
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"event":"row","case_id":"a","processor":"cpu:0","status":"ok","median_us":1.5}"#
        );
    }
}
