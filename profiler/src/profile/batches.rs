//! Step 5, run batches: fill a batch to its time target, record it in the
//! device profile, run the agent on it, and put back what it did not
//! measure; a batch that ends badly restarts the agent after a pause, up to
//! `max_agent_failures` times in a row.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use hetero_plan::{Processor, SchemaVersion, SweepSpec};

use super::Run;
use super::agent_run::{self, BatchEnd, Limits, Sink};
use super::budget;
use super::cost::CostModel;
use super::refine;
use crate::dataset::{self, DEVICE_FILE};
use crate::design::{Item, Planned};
use crate::report::{Event, Reporter};
use crate::transport::tail;
use crate::{Error, Result};

/// A batch to send.
struct Batch {
    items: Vec<Planned>,
    /// Estimated seconds, the agent's start included.
    estimate: f64,
}

impl Run {
    /// Sends batches until the queue is empty, refinement is over or the
    /// budget is spent; returns why it stopped (see
    /// [`Outcome::stopped`](super::Outcome::stopped)).
    pub(super) fn run_batches(&mut self) -> Result<&'static str> {
        let mut batch_no = 0u32;
        let mut failures = 0u32;
        loop {
            let now = Instant::now();
            if now >= self.deadline {
                return Ok("budget");
            }
            let remaining = (self.deadline - now).as_secs_f64();
            let batch = self.fill_batch(batch_no, remaining);
            update_bars(
                &self.rep,
                &self.selected,
                self.queue.pending.iter().chain(&batch.items),
                &self.done_this_run,
                &self.cost,
                remaining,
            );
            if batch.items.is_empty() {
                // The design is done (or nothing left fits): refine.
                if self
                    .refiner
                    .round(&self.cost, &mut self.queue, &self.rows, &self.rep)
                {
                    continue;
                }
                return Ok(refine::stop_reason(&self.queue, &self.refiner));
            }
            batch_no += 1;
            let end = self.send(batch, batch_no, remaining)?;
            if end.killed_for_budget {
                return Ok("budget");
            }
            if end.done_line && end.status.is_none_or(|s| s.success()) {
                failures = 0;
                continue;
            }
            failures = self.after_failure(end, failures)?;
        }
    }

    /// Fills a batch in the queue's order: short at first (to calibrate),
    /// then up to 30 s. Items whose estimate exceeds what is left stay
    /// pending: the estimate improves as rows arrive.
    fn fill_batch(&mut self, batch_no: u32, remaining: f64) -> Batch {
        let target = if batch_no == 0 { 5.0f64 } else { 30.0 }.min(remaining);
        if self.t0.elapsed().as_secs_f64() >= budget::GEMM_SHARE * self.opts.budget.as_secs_f64() {
            self.queue.demote_extension();
        }
        let mut batch = Batch {
            items: Vec::new(),
            estimate: self.cost.startup,
        };
        // The microbenchmark repeat rounds wait for the fit rows, the
        // repeat pass and the first round: each then in its own agent
        // process.
        if batch_no > 0
            && !self.queue.early_pending()
            && let Some(round) = self.queue.repeats.pop_front()
        {
            for p in round {
                let est = self.cost.estimate(&p.item);
                if batch.estimate + est <= remaining {
                    batch.estimate += est;
                    batch.items.push(p);
                }
            }
        }
        // In the queue's order: the first item that does not fit the
        // batch ends it, so that no later item (a microbenchmark behind
        // the fit rows) passes it; an item longer than the time left is
        // passed over.
        let mut keep = Vec::new();
        let mut full = false;
        for p in self.queue.pending.drain(..) {
            let est = self.cost.estimate(&p.item);
            if full || est > remaining {
                keep.push(p);
            } else if batch.items.is_empty() || batch.estimate + est <= target {
                batch.estimate += est;
                batch.items.push(p);
            } else {
                full = true;
                keep.push(p);
            }
        }
        self.queue.pending = keep;
        batch
    }

    /// Records the batch in the device profile, runs the agent on it and
    /// puts its unmeasured items back at the front of the queue.
    fn send(&mut self, batch: Batch, batch_no: u32, remaining: f64) -> Result<BatchEnd> {
        let spec = SweepSpec {
            schema_version: SchemaVersion,
            run: self.opts.run,
            cases: batch
                .items
                .iter()
                .filter_map(|p| match &p.item {
                    Item::Case(c) => Some(c.clone()),
                    _ => None,
                })
                .collect(),
            microbench: batch
                .items
                .iter()
                .filter_map(|p| match &p.item {
                    Item::Bench(b) => Some(b.clone()),
                    _ => None,
                })
                .collect(),
        };
        // Record what is sent before sending it.
        self.record_sent(&spec);
        hetero_plan::save(&self.opts.out.join(DEVICE_FILE), &self.profile)?;
        self.rep.emit(&Event::Batch {
            batch: batch_no,
            cases: spec.cases.len(),
            microbench: spec.microbench.len(),
            estimated_s: batch.estimate,
            remaining_s: remaining,
        });
        let end = self.run_agent(&spec, &batch.items)?;
        self.journal.sync()?;
        self.cost.rebuild(&self.rows);
        self.profile.seconds = self.old_seconds + self.t0.elapsed().as_secs_f64();
        hetero_plan::save(&self.opts.out.join(DEVICE_FILE), &self.profile)?;
        let mut back: Vec<Planned> = batch
            .items
            .into_iter()
            .filter(|p| !self.rows.has(p.item.id()))
            .collect();
        back.append(&mut self.queue.pending);
        self.queue.pending = back;
        Ok(end)
    }

    /// Adds the spec's cases and benchmarks to the profile's sweep, once;
    /// cases sent under other run parameters than the sweep's (a resume
    /// with `--allow-mixed`) carry their own.
    fn record_sent(&mut self, spec: &SweepSpec) {
        let Some(s) = &mut self.profile.sweep else {
            return;
        };
        if s.run == spec.run {
            dataset::add_new_items(s, spec);
            return;
        }
        let mut own = spec.clone();
        for c in &mut own.cases {
            c.run.get_or_insert(spec.run);
        }
        dataset::add_new_items(s, &own);
    }

    /// Puts the spec on the device and runs the agent's sweep of it.
    fn run_agent(&mut self, spec: &SweepSpec, batch: &[Planned]) -> Result<BatchEnd> {
        let spec_text = serde_json::to_vec(spec).expect("a spec serialises");
        let spec_path = self.link.tr.put_file("spec.json", &spec_text)?;
        let mut args = self.opts.agent_args.clone();
        args.push("--processors".into());
        args.push(
            self.selected
                .iter()
                .map(|p| p.id.as_str())
                .collect::<Vec<_>>()
                .join(","),
        );
        args.extend(["sweep".to_string(), "--spec".to_string(), spec_path]);
        let items: HashMap<String, Item> = batch
            .iter()
            .map(|p| (p.item.id().to_string(), p.item.clone()))
            .collect();
        let stall_limit = Duration::from_secs_f64(
            (self.opts.run.timeout_ms as f64 / 1e3) * 2.0
                + batch
                    .iter()
                    .map(|p| self.cost.estimate(&p.item))
                    .fold(0.0, f64::max)
                    * 3.0
                + 30.0,
        );
        let sink = Sink {
            items: &items,
            journal: &mut self.journal,
            rows: &mut self.rows,
            cost: &mut self.cost,
            rep: &self.rep,
            done: &mut self.done_this_run,
            setup: &self.setup,
        };
        // A case in progress at the deadline may run to its timeout, no
        // further.
        let case_timeout = Duration::from_millis(self.opts.run.timeout_ms);
        let limits = Limits {
            deadline: self.deadline,
            hard_deadline: self.deadline + self.grace.min(case_timeout),
            stall_limit,
        };
        agent_run::run_batch(&self.link.tr, &args, sink, limits)
    }

    /// After an agent run that did not end well: a refusal of bad input
    /// (exit 2 before any row) is an error, and so are too many failures in
    /// a row; otherwise the agent restarts after a pause. Returns the
    /// failures in a row so far.
    fn after_failure(&mut self, end: BatchEnd, failures: u32) -> Result<u32> {
        if end.new_rows == 0 && end.status.and_then(|s| s.code()) == Some(2) && !end.stalled {
            let detail = self.agent_log_tail(&end.stderr, 6);
            return Err(Error::AgentRefused {
                command: end.command,
                detail,
            });
        }
        let failures = if end.new_rows > 0 { 1 } else { failures + 1 };
        let mut detail = match end.status {
            _ if end.stalled => "no output for too long; killed".to_string(),
            Some(s) => match s.code() {
                Some(c) => format!("exit code {c}"),
                None => format!("{s}"),
            },
            None => "killed".into(),
        };
        if !end.done_line {
            detail.push_str(", no done line");
        }
        let err_tail = self.agent_log_tail(&end.stderr, 4);
        if !err_tail.is_empty() {
            detail.push_str(": ");
            detail.push_str(&err_tail);
        }
        if failures > self.opts.max_agent_failures {
            return Err(Error::AgentStopped {
                command: end.command,
                failures: failures - 1,
                detail,
                journal: self.journal.path().to_path_buf(),
            });
        }
        let wait = self.link.retry.delay(failures + 1);
        self.rep.emit(&Event::AgentStopped {
            command: end.command,
            detail,
            rows: end.new_rows,
            restart_in_ms: wait.as_millis() as u64,
        });
        std::thread::sleep(wait);
        Ok(failures)
    }

    /// The last `n` lines of the agent's stderr: its log file on the device
    /// where the transport sends stderr there.
    fn agent_log_tail(&mut self, stderr: &str, n: usize) -> String {
        if self.link.tr.agent_stderr_is_file()
            && let Ok(log) = self.link.tr.fetch_file("agent.log")
        {
            return tail(&String::from_utf8_lossy(&log), n);
        }
        tail(stderr, n)
    }
}

/// Each processor's progress bar: rows done this run, rows `planned`, and
/// the estimated time they take (at most what is `remaining`).
pub(super) fn update_bars<'a>(
    rep: &Reporter,
    processors: &[Processor],
    planned: impl Iterator<Item = &'a Planned> + Clone,
    done: &BTreeMap<String, u64>,
    cost: &CostModel,
    remaining: f64,
) {
    for p in processors {
        let mine = planned.clone().filter(|x| x.item.processor() == p.id);
        let (n, secs) = mine.fold((0u64, 0.0), |(n, s), x| (n + 1, s + cost.estimate(&x.item)));
        let d = done.get(&p.id).copied().unwrap_or(0);
        rep.progress(
            &p.id,
            d,
            d + n,
            Duration::from_secs_f64(secs.min(remaining).max(0.0)),
        );
    }
}
