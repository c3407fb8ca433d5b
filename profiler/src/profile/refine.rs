//! Step 6, refine: once the design is measured (or nothing left fits), add
//! shapes where the throughput guide's held-out error is high, round by
//! round, until a round adds nothing or the rounds run out.

use std::collections::HashSet;

use hetero_plan::SweepCase;

use super::cost::CostModel;
use super::queue::Queue;
use crate::design::{self, Group, REFINE_THRESHOLD};
use crate::guide::{HeldOut, ThroughputGuide};
use crate::journal::Rows;
use crate::report::{Event, Reporter};

/// Where refinement stands.
pub(super) struct Refiner {
    enabled: bool,
    rounds: u32,
    max_rounds: u32,
    /// A round found nothing more to add (or the case limit left nothing).
    pub converged: bool,
}

impl Refiner {
    /// Refinement of `max_rounds` rounds at most, or none.
    pub fn new(enabled: bool, max_rounds: u32) -> Refiner {
        Refiner {
            enabled,
            rounds: 0,
            max_rounds,
            converged: false,
        }
    }

    /// Runs one round into `queue`; false when refinement is over.
    pub fn round(
        &mut self,
        cost: &CostModel,
        queue: &mut Queue,
        rows: &Rows,
        rep: &Reporter,
    ) -> bool {
        if !self.enabled || self.converged || self.rounds >= self.max_rounds {
            return false;
        }
        self.rounds += 1;
        let added = refine_round(cost, &queue.planned_ids, rep);
        if added.is_empty() {
            self.converged = true;
        }
        if queue.add_refined(added, rows) && queue.pending.is_empty() {
            self.converged = true;
        }
        true
    }
}

/// Why the run stopped when nothing more is sent: `budget` (planned items
/// are left), `max_cases`, `converged` or `complete`.
pub(super) fn stop_reason(queue: &Queue, refiner: &Refiner) -> &'static str {
    if !queue.pending.is_empty() {
        "budget"
    } else if queue.capped {
        "max_cases"
    } else if refiner.converged {
        "converged"
    } else {
        "complete"
    }
}

/// One refinement round over every group; returns the new cases.
fn refine_round(cost: &CostModel, known: &HashSet<String>, rep: &Reporter) -> Vec<SweepCase> {
    let mut groups: Vec<(&Group, &ThroughputGuide)> = cost.guides.iter().collect();
    groups.sort_by(|a, b| a.0.cmp(b.0));
    let mut out = Vec::new();
    for (g, q) in groups {
        if q.len() < 4 {
            continue;
        }
        let errs: Vec<f64> = q.held_out().into_iter().map(|(_, e)| e).collect();
        let h = HeldOut::of(&errs, REFINE_THRESHOLD);
        let new = design::refine(g, q, REFINE_THRESHOLD, known, 16);
        rep.emit(&Event::Refine {
            processor: g.0.clone(),
            dtype: g.1.to_string(),
            order: g.2.to_string(),
            points: h.points,
            held_out_median: h.median,
            above_threshold: h.above,
            new_cases: new.len(),
        });
        out.extend(new);
    }
    out
}

/// The held-out error of every group's guide, sorted by group.
pub(super) fn held_out_summary(cost: &CostModel) -> Vec<(Group, HeldOut)> {
    let mut v: Vec<(Group, HeldOut)> = cost
        .guides
        .iter()
        .map(|(g, q)| {
            let e: Vec<f64> = q.held_out().into_iter().map(|(_, e)| e).collect();
            (g.clone(), HeldOut::of(&e, REFINE_THRESHOLD))
        })
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}
