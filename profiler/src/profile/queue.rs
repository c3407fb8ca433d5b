//! Step 4, design: the queue of items to measure. It starts as the
//! initial design (or the given cases or queries), plus what an earlier run
//! sent and did not measure, less what the journal already has; refinement
//! adds to it later.

use std::collections::{HashMap, HashSet, VecDeque};

use hetero_plan::{DeviceProfile, Processor, SweepCase};

use super::ProfileOptions;
use super::budget::{self, BudgetPlan};
use crate::design::{self, Item, Planned, Stratum};
use crate::journal::Rows;
use crate::report::{Event, Reporter};

/// What is left to measure.
pub(super) struct Queue {
    /// Items to measure, in priority order.
    pub pending: Vec<Planned>,
    /// Every item id planned by this run (measured or not).
    pub planned_ids: HashSet<String>,
    /// Rounds of the host-path microbenchmarks, one for each of the
    /// batches (agent processes) after no `early` item is pending: see
    /// `design::MICRO_PROCESSES`.
    pub repeats: VecDeque<Vec<Planned>>,
    /// Ids of the budget plan's stages before the microbenchmark repeats
    /// (the fit rows, the repeat pass, the first microbenchmark round).
    pub early: HashSet<String>,
    /// Ids of the first GEMM stage's rows beyond the fit rows (see
    /// [`Queue::demote_extension`]).
    pub extension: HashSet<String>,
    /// The design in priority order, cases measured before included (and
    /// at most `--max-cases` per processor): what the budget plan chooses
    /// the fit rows and the repeat pass from.
    pub design: Vec<Planned>,
    /// Whether `--max-cases` left planned cases out.
    pub capped: bool,
    max_cases: Option<usize>,
}

impl Queue {
    /// The queue of a run over `selected`, whose device profile is `profile`
    /// (that of an earlier run, whose unmeasured cases it takes over) and
    /// whose journal holds `rows`.
    pub fn design(
        opts: &ProfileOptions,
        selected: &[Processor],
        profile: Option<&DeviceProfile>,
        rows: &Rows,
        rep: &Reporter,
    ) -> Queue {
        let mut q = Queue {
            pending: Vec::new(),
            planned_ids: HashSet::new(),
            repeats: VecDeque::new(),
            early: HashSet::new(),
            extension: HashSet::new(),
            design: Vec::new(),
            capped: false,
            max_cases: opts.max_cases,
        };
        let selected_ids: HashSet<&str> = selected.iter().map(|p| p.id.as_str()).collect();
        warn_of_unmatched(opts, selected, &selected_ids, rep);
        // A given design stands alone: a resumed profile's unmeasured cases
        // wait for a resume without one.
        let earlier = match profile {
            Some(p) if opts.cases.is_none() => sent_earlier(p),
            _ => Vec::new(),
        };
        let mut design: Vec<Planned> = initial(opts, selected)
            .into_iter()
            .filter(|p| selected_ids.contains(p.item.processor()))
            .collect();
        if let Some(cap) = opts.max_cases {
            cap_cases(&mut design, &Rows::default(), cap);
        }
        for p in design.iter().cloned().chain(earlier) {
            if selected_ids.contains(p.item.processor())
                && !rows.has(p.item.id())
                && q.planned_ids.insert(p.item.id().to_string())
            {
                q.pending.push(p);
            }
        }
        if opts.microbench && !chosen(opts) {
            q.repeats = q.microbench_repeats(selected, rows);
        }
        q.design = design;
        q.capped = q.cap(rows);
        q
    }

    /// Orders the queue by the budget plan ([`budget::schedule`]) and
    /// returns the plan.
    pub fn schedule(&mut self, inputs: &budget::Inputs) -> BudgetPlan {
        let design = std::mem::take(&mut self.design);
        let inputs = budget::Inputs {
            design: &design,
            max_cases: self.max_cases,
            ..*inputs
        };
        let s = budget::schedule(
            &inputs,
            std::mem::take(&mut self.pending),
            std::mem::take(&mut self.repeats),
        );
        self.planned_ids
            .extend(s.pending.iter().map(|p| p.item.id().to_string()));
        self.pending = s.pending;
        self.repeats = s.repeats;
        self.early = s.early;
        self.extension = s.extension;
        s.plan
    }

    /// Moves the first stage's rows beyond the fit rows that are still
    /// pending behind the first microbenchmark round, and out of the early
    /// stages: the stage has had its share of the budget.
    pub fn demote_extension(&mut self) {
        if self.extension.is_empty() {
            return;
        }
        let ext = std::mem::take(&mut self.extension);
        for id in &ext {
            self.early.remove(id);
        }
        let (moved, mut kept): (Vec<Planned>, Vec<Planned>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|p| ext.contains(p.item.id()));
        let at = kept
            .iter()
            .rposition(|p| self.early.contains(p.item.id()))
            .map_or(0, |i| i + 1);
        kept.splice(at..at, moved);
        self.pending = kept;
    }

    /// True while an item of the plan's early stages waits.
    pub fn early_pending(&self) -> bool {
        self.pending
            .iter()
            .any(|p| self.early.contains(p.item.id()))
    }

    /// Adds the cases of a refinement round, then applies `--max-cases`;
    /// true when that dropped cases.
    pub fn add_refined(&mut self, cases: Vec<SweepCase>, rows: &Rows) -> bool {
        for c in cases {
            self.planned_ids.insert(c.id.clone());
            self.pending.push(Planned {
                item: Item::Case(c),
                stratum: Stratum::Refine,
            });
        }
        let capped = self.cap(rows);
        self.capped |= capped;
        capped
    }

    /// Applies `--max-cases`; true when it dropped cases.
    fn cap(&mut self, rows: &Rows) -> bool {
        self.max_cases
            .is_some_and(|cap| cap_cases(&mut self.pending, rows, cap) > 0)
    }

    fn microbench_repeats(
        &mut self,
        selected: &[Processor],
        rows: &Rows,
    ) -> VecDeque<Vec<Planned>> {
        design::microbench_repeats(selected)
            .into_iter()
            .map(|round| {
                round
                    .into_iter()
                    .filter(|b| !rows.has(&b.id) && self.planned_ids.insert(b.id.clone()))
                    .map(|b| Planned {
                        item: Item::Bench(b),
                        stratum: Stratum::Microbench,
                    })
                    .collect::<Vec<_>>()
            })
            .filter(|round| !round.is_empty())
            .collect()
    }
}

/// True when the run measures a chosen set (given cases or queries) rather
/// than the design: a held-out set stays as drawn, without microbenchmarks
/// or refinement.
pub(super) fn chosen(opts: &ProfileOptions) -> bool {
    opts.queries.is_some() || opts.cases.is_some()
}

/// The design the options ask for.
fn initial(opts: &ProfileOptions, selected: &[Processor]) -> Vec<Planned> {
    match (opts.cases.as_deref(), opts.queries) {
        (Some(cases), _) => design::given(cases),
        (None, Some((count, seed))) => design::queries(
            selected,
            &opts.models,
            opts.dtypes.as_deref(),
            count,
            seed,
            opts.max_len,
        ),
        (None, None) => design::initial(
            selected,
            &opts.models,
            opts.dtypes.as_deref(),
            opts.microbench,
            opts.max_len,
        ),
    }
}

/// The cases and benchmarks an earlier run of this dataset sent.
fn sent_earlier(profile: &DeviceProfile) -> Vec<Planned> {
    profile
        .sweep
        .iter()
        .flat_map(|s| {
            s.cases
                .iter()
                .map(|c| Planned {
                    item: Item::Case(c.clone()),
                    stratum: Stratum::Refine,
                })
                .chain(s.microbench.iter().map(|b| Planned {
                    item: Item::Bench(b.clone()),
                    stratum: Stratum::Microbench,
                }))
        })
        .collect()
}

/// Warns of `--dtypes` a processor lacks, and of given cases none of whose
/// processors is selected.
fn warn_of_unmatched(
    opts: &ProfileOptions,
    selected: &[Processor],
    selected_ids: &HashSet<&str>,
    rep: &Reporter,
) {
    let ids = |ps: &[Processor]| {
        ps.iter()
            .map(|p| p.id.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(dt) = &opts.dtypes {
        for p in selected {
            if design::dtypes_for(p, Some(dt)).is_empty() {
                rep.emit(&Event::Warning {
                    message: format!(
                        "{} supports none of the --dtypes asked for (it has {})",
                        p.id,
                        p.capabilities
                            .dtypes
                            .iter()
                            .map(|d| d.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                });
            }
        }
    }
    if let Some(cases) = opts.cases.as_deref()
        && !cases
            .iter()
            .any(|c| selected_ids.contains(c.processor.as_str()))
    {
        let mut asked: Vec<&str> = cases.iter().map(|c| c.processor.as_str()).collect();
        asked.sort_unstable();
        asked.dedup();
        rep.emit(&Event::Warning {
            message: format!(
                "none of the given cases' processors ({}) is among those selected here ({})",
                asked.join(", "),
                ids(selected)
            ),
        });
    }
}

/// Keeps, per processor, only as many pending GEMM cases as `cap` leaves
/// after the cases already measured; the first ones (highest priority) stay.
/// Returns how many were dropped.
fn cap_cases(pending: &mut Vec<Planned>, rows: &Rows, cap: usize) -> usize {
    let before = pending.len();
    let mut used: HashMap<String, usize> = HashMap::new();
    for r in &rows.measurements {
        *used.entry(r.processor.clone()).or_default() += 1;
    }
    pending.retain(|p| match &p.item {
        Item::Case(_) if p.stratum == Stratum::Repeat => true,
        Item::Case(c) => {
            let n = used.entry(c.processor.clone()).or_default();
            *n += 1;
            *n <= cap
        }
        Item::Bench(_) => true,
    });
    before - pending.len()
}

#[cfg(test)]
mod tests {
    use hetero_plan::{DType, GemmShape, MicrobenchKind};

    use super::*;
    use crate::dataset;

    #[test]
    fn max_cases_keeps_the_first_cases_per_processor() {
        let shape = |m| GemmShape::new(m, 64, 64).unwrap();
        let planned = |p: &str, m| Planned {
            item: Item::Case(design::case(
                p,
                shape(m),
                DType::F32,
                hetero_plan::OperandOrder::Aw,
            )),
            stratum: Stratum::Model,
        };
        let mut pending: Vec<Planned> = (1..=5)
            .flat_map(|m| [planned("cpu:0", m), planned("npu-sim", m)])
            .collect();
        pending.push(Planned {
            item: Item::Bench(hetero_plan::MicrobenchRequest {
                id: "mb/cpu:0/submit_empty".into(),
                processor: "cpu:0".into(),
                bench: MicrobenchKind::SubmitEmpty,
                bytes: None,
                peer: None,
                shape: None,
            }),
            stratum: Stratum::Microbench,
        });
        // cpu:0 has two rows measured already: one more case fits a cap of 3.
        let mut rows = Rows::default();
        for id in ["a", "b"] {
            rows.push_measurement(dataset::tests::mrow(id, "cpu:0", 7, Some(1.0)));
        }
        let dropped = cap_cases(&mut pending, &rows, 3);
        let ids: Vec<&str> = pending.iter().map(|p| p.item.id()).collect();
        assert_eq!(dropped, 2 + 4, "{ids:?}");
        assert_eq!(
            ids,
            [
                "cpu:0/1x64x64/f32/aw",
                "npu-sim/1x64x64/f32/aw",
                "npu-sim/2x64x64/f32/aw",
                "npu-sim/3x64x64/f32/aw",
                "mb/cpu:0/submit_empty",
            ]
        );
    }

    #[test]
    fn the_first_stage_beyond_the_fit_rows_moves_behind_the_first_microbenchmarks() {
        let case = |p: &str, m| Planned {
            item: Item::Case(design::case(
                p,
                GemmShape::new(m, 64, 64).unwrap(),
                DType::F32,
                hetero_plan::OperandOrder::Aw,
            )),
            stratum: Stratum::Model,
        };
        let bench = Planned {
            item: Item::Bench(hetero_plan::MicrobenchRequest {
                id: "mb/cpu:0/submit_empty".into(),
                processor: "cpu:0".into(),
                bench: MicrobenchKind::SubmitEmpty,
                bytes: None,
                peer: None,
                shape: None,
            }),
            stratum: Stratum::Microbench,
        };
        // Fit row 1, extension rows 2 and 3, the first microbenchmark
        // round, the rest (4).
        let pending = vec![
            case("cpu:0", 1),
            case("cpu:0", 2),
            case("cpu:0", 3),
            bench,
            case("cpu:0", 4),
        ];
        let ids: Vec<String> = pending.iter().map(|p| p.item.id().to_string()).collect();
        let mut q = Queue {
            pending,
            planned_ids: HashSet::new(),
            repeats: VecDeque::new(),
            early: ids[..4].iter().cloned().collect(),
            extension: ids[1..3].iter().cloned().collect(),
            design: Vec::new(),
            capped: false,
            max_cases: None,
        };
        assert!(q.early_pending());
        q.demote_extension();
        let order: Vec<&str> = q.pending.iter().map(|p| p.item.id()).collect();
        assert_eq!(order, [&ids[0], &ids[3], &ids[1], &ids[2], &ids[4]]);
        assert!(!q.early.contains(&ids[1]) && q.extension.is_empty());
        // Once the early items are sent, the microbenchmark repeats may go.
        q.pending.drain(..2);
        assert!(!q.early_pending());
    }
}
