//! Step 7, finish: derive the dataset's files from the journal, each
//! written atomically, and say what the run did.

use super::batches::update_bars;
use super::{Outcome, Run, budget, refine};
use crate::dataset::{self, Dataset};
use crate::journal::{Journal, Rows};
use crate::report::Event;
use crate::{Error, Result};

impl Run {
    /// Closes the journal and the link, writes the dataset and reports the
    /// outcome.
    pub(super) fn finish(self, stopped: &'static str) -> Result<Outcome> {
        let Run {
            opts,
            rep,
            link,
            selected,
            mut profile,
            old_seconds,
            mut journal,
            rows_before,
            queue,
            plan,
            cost,
            done_this_run,
            t0,
            ..
        } = self;
        journal.sync()?;
        drop(journal);
        drop(link);
        let out = opts.out;
        let journal_path = out.join(Journal::FILE);
        let all = Rows::read(&journal_path)?;
        let notes = dataset::read_notes(
            &std::fs::read_to_string(&journal_path).map_err(|e| Error::io(&journal_path, e))?,
        );
        profile.seconds = old_seconds + t0.elapsed().as_secs_f64();
        let ds = Dataset {
            profile: Some(profile),
            measurements: all.measurements,
            microbench: all.microbench,
            notes,
        };
        ds.save(&out)?;
        if let Some(p) = &plan {
            budget::save(&out, p)?;
        }
        let name = out
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| out.display().to_string());
        let outcome = Outcome {
            out: out.clone(),
            measurements: ds.measurements.len(),
            microbench: ds.microbench.len(),
            new_rows: ds.measurements.len() + ds.microbench.len() - rows_before,
            seconds: t0.elapsed().as_secs_f64(),
            stopped,
            left_for_budget: queue.pending.len(),
            fingerprint: ds.fingerprint(name),
            held_out: refine::held_out_summary(&cost),
            plan,
        };
        update_bars(&rep, &selected, [].iter(), &done_this_run, &cost, 0.0);
        rep.finish();
        rep.emit(&Event::Done {
            out: out.display().to_string(),
            measurements: outcome.measurements,
            microbench: outcome.microbench,
            new_rows: outcome.new_rows,
            seconds: outcome.seconds,
            stopped: outcome.stopped.to_string(),
            left_for_budget: outcome.left_for_budget,
            skipped_microbench: outcome
                .plan
                .as_ref()
                .map_or(0, |p| p.skipped_microbench.len()),
            fingerprint: outcome.fingerprint.sha256.clone(),
        });
        Ok(outcome)
    }
}
