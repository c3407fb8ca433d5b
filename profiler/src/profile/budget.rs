//! Step 4b, the budget plan: how a profile spends its time budget, decided
//! before the first case runs, from the cost model's estimates.
//!
//! The stages, in the order they run:
//! 1. **gemm**: GEMM rows for every processor, first the fit rows: the
//!    design's first [`FIT_ROWS`] cases per (processor, dtype) that the
//!    cost model's priors put at most [`FIT_CASE_MAX_S`] each (a resume
//!    measures those it lacks); then,
//!    after the repeat pass, more
//!    in the design's order until the stage holds [`GEMM_SHARE`] of the
//!    budget (those move behind the microbenchmarks if the stage runs
//!    past its share);
//! 2. **repeat pass**: [`REPEAT_ROWS`] of the fit rows per (processor,
//!    dtype), measured again by a later agent process (`hetero fit`
//!    reports how often the two agree: the predictor's ceiling);
//! 3. **microbench**: one round of the microbenchmarks;
//! 4. **microbench repeats**: the host-path repeat rounds
//!    ([`design::MICRO_PROCESSES`]) that [`MICROBENCH_SHARE`] of the budget
//!    affords; those it does not are skipped and recorded as skipped;
//! 5. **more gemm**: the rest of the design, then refinement, until the
//!    budget is spent.
//!
//! A budget shorter than stages 1 and 2 for the fit rows
//! ([`BudgetPlan::minimum_s`]) is refused before any case runs. Under
//! `--max-cases` the fit rows are at most that many and there is no
//! repeat pass: the cap bounds every GEMM row.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::Path;
use std::time::Duration;

use hetero_plan::{DType, Processor, SweepCase};
use serde::{Deserialize, Serialize};

use super::cost::CostModel;
use crate::design::{self, Item, Planned, Stratum};
use crate::journal::Rows;
use crate::{Error, Result};

/// The file in a dataset folder that holds the last run's [`BudgetPlan`].
pub const BUDGET_FILE: &str = "budget.json";

/// GEMM rows per (processor, dtype) that the first stage guarantees:
/// three times the fit's minimum ([`crate::fit::MIN_ROWS`]), so that each
/// of its five folds holds out seven rows and trains on about thirty.
pub const FIT_ROWS: usize = 3 * crate::fit::MIN_ROWS;
/// The share of the budget the first GEMM stage takes at least (more where
/// the [`FIT_ROWS`] need more).
pub const GEMM_SHARE: f64 = 0.5;
/// The share of the budget the microbenchmarks may take: their first round
/// always, then as many repeat rounds as fit.
pub const MICROBENCH_SHARE: f64 = 0.25;
/// Cases per (processor, dtype) the repeat pass measures again.
pub const REPEAT_ROWS: usize = 10;
/// A case estimated above this many seconds waits for the last stage
/// rather than delay the fit rows (a 4096-row GEMM on a CPU).
pub const FIT_CASE_MAX_S: f64 = 3.0;
/// The minimum budget is the estimate times this: the cost model's
/// estimates before any row is measured are rough.
const MARGIN: f64 = 1.25;
/// Seconds of work per agent process (`batches`): each costs a start.
const BATCH_S: f64 = 30.0;

/// How a profile spends its budget: `hetero profile` prints it before the
/// first case, and writes it to the dataset's `budget.json` at the end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BudgetPlan {
    /// The budget, seconds.
    pub budget_s: f64,
    /// The shortest budget that measures the fit rows and the repeat
    /// pass of every processor, seconds (0: nothing needed, as when a
    /// resumed dataset has them).
    pub minimum_s: f64,
    /// Per processor.
    pub processors: Vec<ProcessorBudget>,
    /// Per stage, in the order they run.
    pub stages: Vec<StageBudget>,
    /// Rounds of the host-path microbenchmarks planned, the first included
    /// (of [`design::MICRO_PROCESSES`]; 0 without microbenchmarks).
    pub microbench_rounds: usize,
    /// Microbenchmark repeats the budget does not afford: never sent (a
    /// resume with a longer budget measures them).
    pub skipped_microbench: Vec<String>,
}

/// One processor's part of a [`BudgetPlan`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessorBudget {
    /// Processor id.
    pub processor: String,
    /// Usable GEMM rows already in the dataset (a resume).
    pub rows_before: usize,
    /// GEMM rows of the first stage.
    pub gemm_rows: usize,
    /// Their estimated seconds.
    pub gemm_s: f64,
    /// Cases the repeat pass measures again.
    pub repeat_rows: usize,
    /// Their estimated seconds.
    pub repeat_s: f64,
    /// Microbenchmarks planned (every round).
    pub microbench: usize,
    /// Their estimated seconds.
    pub microbench_s: f64,
}

/// One stage of a [`BudgetPlan`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageBudget {
    /// `gemm`, `repeat_pass`, `microbench`, `microbench_repeats` or
    /// `more_gemm`.
    pub stage: String,
    /// Items planned (for `more_gemm`: the design's cases left, which the
    /// budget may not all afford).
    pub items: usize,
    /// Estimated seconds (for `more_gemm`: what the others leave).
    pub seconds: f64,
}

impl BudgetPlan {
    /// The minimum budget as a duration, rounded up to whole seconds.
    pub fn minimum(&self) -> Duration {
        Duration::from_secs(self.minimum_s.ceil() as u64)
    }

    /// The plan as lines of text, for a terminal.
    pub fn lines(&self) -> Vec<String> {
        let mut out = vec![format!(
            "budget plan for {} (at least {} for a fit):",
            fmt_secs(self.budget_s),
            fmt_secs(self.minimum_s)
        )];
        out.push(format!(
            "  {:<16} {:>9} {:>8} {:>8} {:>8} {:>11} {:>8}",
            "processor", "GEMM rows", "s", "repeats", "s", "microbench", "s"
        ));
        for p in &self.processors {
            out.push(format!(
                "  {:<16} {:>9} {:>8.1} {:>8} {:>8.1} {:>11} {:>8.1}",
                p.processor,
                p.gemm_rows,
                p.gemm_s,
                p.repeat_rows,
                p.repeat_s,
                p.microbench,
                p.microbench_s
            ));
        }
        let stages: Vec<String> = self
            .stages
            .iter()
            .map(|s| format!("{} {} in {:.0} s", s.stage, s.items, s.seconds))
            .collect();
        out.push(format!("  stages: {}", stages.join(" · ")));
        if !self.skipped_microbench.is_empty() {
            out.push(format!(
                "  skipped for the budget: {} microbenchmark repeat(s) ({} of {} rounds planned)",
                self.skipped_microbench.len(),
                self.microbench_rounds,
                design::MICRO_PROCESSES
            ));
        }
        out
    }
}

/// Writes `plan` to the dataset folder's [`BUDGET_FILE`] (atomically).
pub(super) fn save(dir: &Path, plan: &BudgetPlan) -> Result<()> {
    let text = serde_json::to_string_pretty(plan).expect("a plan serialises") + "\n";
    hetero_plan::write_atomic(&dir.join(BUDGET_FILE), text.as_bytes())?;
    Ok(())
}

/// The budget plan of the last run that wrote the dataset in `dir`, if
/// it has one (a dataset of an older profile, or merged, has none).
pub fn read(dir: &Path) -> Result<Option<BudgetPlan>> {
    let path = dir.join(BUDGET_FILE);
    if !path.exists() {
        return Ok(None);
    }
    let text = hetero_plan::read_text(&path)?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| Error::dataset(&path, format!("line {}:{}: {e}", e.line(), e.column())))
}

/// Seconds as `--budget` takes them: `40s`, `2m30s`.
pub fn fmt_secs(s: f64) -> String {
    let s = s.max(0.0).ceil() as u64;
    match (s / 60, s % 60) {
        (0, sec) => format!("{sec}s"),
        (m, 0) => format!("{m}m"),
        (m, sec) => format!("{m}m{sec}s"),
    }
}

/// The queue in the plan's order, and the plan.
pub(super) struct Scheduled {
    pub plan: BudgetPlan,
    /// Stage 1, the repeat pass, the first microbenchmark round, the rest.
    pub pending: Vec<Planned>,
    /// The microbenchmark repeat rounds the budget affords.
    pub repeats: VecDeque<Vec<Planned>>,
    /// Ids of the stages before the microbenchmark repeats: those rounds
    /// wait until none of these is pending.
    pub early: HashSet<String>,
    /// Ids of the first stage's rows beyond the fit rows: they move behind
    /// the first microbenchmark round once the stage has had its share of
    /// the budget (the estimates may be short).
    pub extension: HashSet<String>,
}

/// What a plan is made of.
pub(super) struct Inputs<'a> {
    pub budget_s: f64,
    pub selected: &'a [Processor],
    pub dtypes: Option<&'a [DType]>,
    pub rows: &'a Rows,
    pub cost: &'a CostModel,
    /// The design's cases in priority order, those measured included:
    /// the fit rows and the repeat pass are chosen from it, so that a
    /// resumed profile chooses as an uninterrupted one does.
    pub design: &'a [Planned],
    /// `--max-cases`: fit rows at most this many per processor, and no
    /// repeat pass (the cap bounds every GEMM row).
    pub max_cases: Option<usize>,
}

/// Plans the budget over the designed queue (`pending` in priority order,
/// `repeats` the microbenchmark repeat rounds).
pub(super) fn schedule(
    inp: &Inputs,
    pending: Vec<Planned>,
    repeats: VecDeque<Vec<Planned>>,
) -> Scheduled {
    let est = |p: &Planned| inp.cost.estimate(&p.item);
    // Repeats sent by an earlier run come back as the repeat pass chooses.
    let (benches, cases): (Vec<Indexed>, Vec<Indexed>) = pending
        .into_iter()
        .filter(|p| design::repeated_id(p.item.id()).is_none())
        .enumerate()
        .partition(|(_, p)| matches!(p.item, Item::Bench(_)));
    let have = usable_rows(inp.rows);
    // Chosen by the priors, so that a resumed profile chooses as an
    // uninterrupted one did.
    let prior = inp.cost.uncalibrated();
    let fit_set = fit_rows(inp, &|p: &Planned| prior.estimate(&p.item));
    // Stage 1: the fit rows not measured yet, as many as each group lacks.
    let at: HashMap<&str, (usize, f64)> = cases
        .iter()
        .map(|(i, p)| (p.item.id(), (*i, est(p))))
        .collect();
    let mut taken: HashSet<usize> = HashSet::new();
    let mut fit_only_s = 0.0;
    for (key, ids) in &fit_set {
        let need = ids
            .len()
            .saturating_sub(have.get(key).copied().unwrap_or(0));
        for (i, secs) in ids.iter().filter_map(|id| at.get(id.as_str())).take(need) {
            taken.insert(*i);
            fit_only_s += secs;
        }
    }
    // The repeat pass, of fit rows measured before or in stage 1.
    let repeat = if inp.max_cases.is_some() {
        Vec::new()
    } else {
        repeat_pass(inp, &fit_set, &cases, &taken)
    };
    let repeat_s: f64 = repeat.iter().map(est).sum();
    // More GEMM rows, to the stage's share.
    let fit_taken = taken.clone();
    let mut gemm_s = fit_only_s;
    extend_to_share(
        &cases,
        inp.selected,
        GEMM_SHARE * inp.budget_s,
        &est,
        &mut taken,
        &mut gemm_s,
    );
    // Microbenchmarks: the first round, then the repeat rounds that fit.
    let round1_s: f64 = benches.iter().map(|(_, p)| est(p)).sum();
    let mut micro_s = round1_s;
    let mut kept = VecDeque::new();
    let mut skipped = Vec::new();
    for round in repeats {
        let s: f64 = round.iter().map(est).sum();
        if skipped.is_empty() && micro_s + s <= MICROBENCH_SHARE * inp.budget_s {
            micro_s += s;
            kept.push_back(round);
        } else {
            skipped.extend(round.into_iter().map(|p| p.item.id().to_string()));
        }
    }
    let microbench_rounds = if benches.is_empty() && kept.is_empty() {
        0
    } else {
        1 + kept.len()
    };
    let needed = fit_only_s + repeat_s;
    let starts = inp.cost.startup * ((needed / BATCH_S).ceil() + 1.0);
    let minimum_s = if needed > 0.0 {
        (MARGIN * (needed + starts)).ceil()
    } else {
        0.0
    };
    let (first, rest): (Vec<_>, Vec<_>) = cases.into_iter().partition(|(i, _)| taken.contains(i));
    let processors = per_processor(inp, &first, &repeat, &benches, &kept, &have);
    let stages = stages_of(
        inp.budget_s,
        [
            ("gemm", first.len(), gemm_s),
            ("repeat_pass", repeat.len(), repeat_s),
            ("microbench", benches.len(), round1_s),
            (
                "microbench_repeats",
                kept.iter().map(Vec::len).sum(),
                micro_s - round1_s,
            ),
        ],
        rest.len(),
    );
    let (fit, more): (Vec<_>, Vec<_>) = first.into_iter().partition(|(i, _)| fit_taken.contains(i));
    let extension = more.iter().map(|(_, p)| p.item.id().to_string()).collect();
    let mut ordered: Vec<Planned> = fit.into_iter().map(|(_, p)| p).collect();
    ordered.extend(repeat);
    ordered.extend(more.into_iter().map(|(_, p)| p));
    ordered.extend(benches.into_iter().map(|(_, p)| p));
    let early = ordered.iter().map(|p| p.item.id().to_string()).collect();
    ordered.extend(rest.into_iter().map(|(_, p)| p));
    Scheduled {
        plan: BudgetPlan {
            budget_s: inp.budget_s,
            minimum_s,
            processors,
            stages,
            microbench_rounds,
            skipped_microbench: skipped,
        },
        pending: ordered,
        repeats: kept,
        early,
        extension,
    }
}

/// An item with its place in the design's order.
type Indexed = (usize, Planned);

/// Usable GEMM rows already measured, repeats left out, per (processor,
/// dtype).
fn usable_rows(rows: &Rows) -> HashMap<(String, DType), usize> {
    let mut have = HashMap::new();
    for r in rows
        .measurements
        .iter()
        .filter(|r| r.is_usable() && design::repeated_id(&r.case_id).is_none())
    {
        *have.entry((r.processor.clone(), r.dtype)).or_default() += 1;
    }
    have
}

/// The fit rows of each (processor, dtype), as case ids in the design's
/// order: its first [`FIT_ROWS`] cases (fewer under `--max-cases`) that
/// `est` puts at most [`FIT_CASE_MAX_S`] each, measured or not.
fn fit_rows(
    inp: &Inputs,
    est: &impl Fn(&Planned) -> f64,
) -> BTreeMap<(String, DType), Vec<String>> {
    let mut out = BTreeMap::new();
    for p in inp.selected {
        let dtypes = design::dtypes_for(p, inp.dtypes);
        let target = inp
            .max_cases
            .map_or(FIT_ROWS, |m| FIT_ROWS.min(m / dtypes.len().max(1)));
        for d in dtypes {
            let ids: Vec<String> = inp
                .design
                .iter()
                .filter(|x| match &x.item {
                    Item::Case(c) => c.processor == p.id && c.dtype == d,
                    Item::Bench(_) => false,
                })
                .filter(|x| est(x) <= FIT_CASE_MAX_S)
                .take(target)
                .map(|x| x.item.id().to_string())
                .collect();
            out.insert((p.id.clone(), d), ids);
        }
    }
    out
}

/// Adds cases to the first stage, one processor after another in the
/// design's order, while it stays within `share` seconds.
fn extend_to_share(
    cases: &[Indexed],
    selected: &[Processor],
    share: f64,
    est: &impl Fn(&Planned) -> f64,
    taken: &mut HashSet<usize>,
    total: &mut f64,
) {
    let mut next: Vec<std::vec::IntoIter<(usize, f64)>> = selected
        .iter()
        .map(|p| {
            cases
                .iter()
                .filter(|(i, c)| c.item.processor() == p.id && !taken.contains(i))
                .map(|(i, c)| (*i, est(c)))
                .filter(|(_, s)| *s <= FIT_CASE_MAX_S)
                .collect::<Vec<_>>()
                .into_iter()
        })
        .collect();
    let mut open = true;
    while open {
        open = false;
        for it in &mut next {
            if let Some((i, s)) = it.next()
                && *total + s <= share
            {
                *total += s;
                taken.insert(i);
                open = true;
            }
        }
    }
}

/// The repeat pass: per (processor, dtype), [`REPEAT_ROWS`] of its fit
/// rows spread evenly over them (at most half), each under its repeat id;
/// those whose first row is neither measured nor in the first stage, and
/// those repeated already, are left out.
fn repeat_pass(
    inp: &Inputs,
    fit_set: &BTreeMap<(String, DType), Vec<String>>,
    cases: &[Indexed],
    taken: &HashSet<usize>,
) -> Vec<Planned> {
    let first: HashMap<&str, &SweepCase> = cases
        .iter()
        .filter(|(i, _)| taken.contains(i))
        .filter_map(|(_, p)| match &p.item {
            Item::Case(c) => Some((c.id.as_str(), c)),
            Item::Bench(_) => None,
        })
        .collect();
    let measured: HashMap<&str, SweepCase> = inp
        .rows
        .measurements
        .iter()
        .filter(|r| r.is_usable())
        .filter_map(|r| {
            let c = design::case(&r.processor, r.shape()?, r.dtype, r.order);
            (c.id == r.case_id).then_some((r.case_id.as_str(), c))
        })
        .collect();
    let mut out = Vec::new();
    for ids in fit_set.values() {
        let n = REPEAT_ROWS.min(ids.len() / 2);
        for j in 0..n {
            let id = ids[j * ids.len() / n].as_str();
            let Some(c) = first.get(id).copied().or_else(|| measured.get(id)) else {
                continue;
            };
            let again = design::repeat_case(c);
            if !inp.rows.has(&again.id) {
                out.push(Planned {
                    item: Item::Case(again),
                    stratum: Stratum::Repeat,
                });
            }
        }
    }
    out
}

/// Each processor's rows and seconds.
fn per_processor(
    inp: &Inputs,
    first: &[Indexed],
    repeat: &[Planned],
    benches: &[Indexed],
    rounds: &VecDeque<Vec<Planned>>,
    have: &HashMap<(String, DType), usize>,
) -> Vec<ProcessorBudget> {
    let sum = |items: &mut dyn Iterator<Item = &Planned>, id: &str| -> (usize, f64) {
        items
            .filter(|p| p.item.processor() == id)
            .fold((0, 0.0), |(n, s), p| {
                (n + 1, s + inp.cost.estimate(&p.item))
            })
    };
    inp.selected
        .iter()
        .map(|p| {
            let (gemm_rows, gemm_s) = sum(&mut first.iter().map(|(_, x)| x), &p.id);
            let (repeat_rows, repeat_s) = sum(&mut repeat.iter(), &p.id);
            let (microbench, microbench_s) = sum(
                &mut benches
                    .iter()
                    .map(|(_, x)| x)
                    .chain(rounds.iter().flatten()),
                &p.id,
            );
            ProcessorBudget {
                processor: p.id.clone(),
                rows_before: have
                    .iter()
                    .filter(|((q, _), _)| *q == p.id)
                    .map(|(_, n)| n)
                    .sum(),
                gemm_rows,
                gemm_s,
                repeat_rows,
                repeat_s,
                microbench,
                microbench_s,
            }
        })
        .collect()
}

/// The stages with their items and seconds; `more_gemm` gets what the
/// others leave of the budget.
fn stages_of(budget_s: f64, fixed: [(&str, usize, f64); 4], rest: usize) -> Vec<StageBudget> {
    let used: f64 = fixed.iter().map(|(_, _, s)| s).sum();
    let mut out: Vec<StageBudget> = fixed
        .iter()
        .map(|&(stage, items, seconds)| StageBudget {
            stage: stage.into(),
            items,
            seconds,
        })
        .collect();
    out.push(StageBudget {
        stage: "more_gemm".into(),
        items: rest,
        seconds: (budget_s - used).max(0.0),
    });
    out
}

#[cfg(test)]
mod tests {
    use hetero_plan::{OperandOrder, RunParams};

    use super::*;

    fn proc_(id: &str) -> Processor {
        Processor {
            id: id.into(),
            kind: hetero_plan::ProcessorKind::Cpu,
            api: hetero_plan::ProcessorApi::Cpu,
            name: "cores".into(),
            driver: String::new(),
            capabilities: hetero_plan::Capabilities {
                dtypes: vec![DType::F32, DType::F16],
                ..Default::default()
            },
            simulated: false,
            emulated: false,
        }
    }

    fn planned(p: &str, m: u32) -> Planned {
        let shape = hetero_plan::GemmShape::new(m, 256, 256).unwrap();
        Planned {
            item: Item::Case(design::case(p, shape, DType::F32, OperandOrder::Aw)),
            stratum: Stratum::Model,
        }
    }

    fn bench(p: &str, name: &str) -> Planned {
        Planned {
            item: Item::Bench(hetero_plan::MicrobenchRequest {
                id: format!("mb/{p}/{name}"),
                processor: p.into(),
                bench: hetero_plan::MicrobenchKind::SubmitBusy,
                bytes: None,
                peer: None,
                shape: None,
            }),
            stratum: Stratum::Microbench,
        }
    }

    /// A design of two processors with microbenchmarks first, as
    /// `design::initial` lays it out, and three repeat rounds.
    fn design_of(procs: &[Processor]) -> (Vec<Planned>, VecDeque<Vec<Planned>>) {
        let mut pending: Vec<Planned> = procs
            .iter()
            .flat_map(|p| (0..4).map(|i| bench(&p.id, &format!("b{i}"))))
            .collect();
        for m in 1..=200 {
            for p in procs {
                pending.push(planned(&p.id, m));
            }
        }
        let rounds = (2..=4)
            .map(|r| {
                procs
                    .iter()
                    .map(|p| bench(&p.id, &format!("b0@{r}")))
                    .collect()
            })
            .collect();
        (pending, rounds)
    }

    /// A usable row of `c`.
    fn row_of(c: &SweepCase) -> hetero_plan::MeasurementRow {
        let (m, k, n) = c.shape.mkn();
        let mut r = crate::dataset::tests::mrow(&c.id, &c.processor, m, Some(10.0));
        (r.k, r.n, r.dtype, r.order) = (k, n, c.dtype, c.order);
        r
    }

    fn plan_for(budget_s: f64, rows: &Rows) -> Scheduled {
        let procs = [proc_("cpu:0"), proc_("cpu:1")];
        let cost = CostModel::new(RunParams::default(), &procs);
        let (pending, rounds) = design_of(&procs);
        let design = pending.clone();
        schedule(
            &Inputs {
                budget_s,
                selected: &procs,
                dtypes: None,
                rows,
                cost: &cost,
                design: &design,
                max_cases: None,
            },
            pending,
            rounds,
        )
    }

    #[test]
    fn fit_rows_of_every_processor_come_before_any_microbenchmark() {
        let s = plan_for(600.0, &Rows::default());
        let first_bench = s
            .pending
            .iter()
            .position(|p| matches!(p.item, Item::Bench(_)))
            .unwrap();
        for id in ["cpu:0", "cpu:1"] {
            let before = s.pending[..first_bench]
                .iter()
                .filter(|p| p.stratum != Stratum::Repeat && p.item.processor() == id)
                .count();
            assert!(before >= FIT_ROWS, "{id}: {before}");
            let pb = s
                .plan
                .processors
                .iter()
                .find(|p| p.processor == id)
                .unwrap();
            assert_eq!(pb.gemm_rows, before);
            assert_eq!(pb.repeat_rows, REPEAT_ROWS);
        }
        // The repeat pass re-measures cases of the first stage, after it.
        let repeats: Vec<&Planned> = s
            .pending
            .iter()
            .filter(|p| p.stratum == Stratum::Repeat)
            .collect();
        assert_eq!(repeats.len(), 2 * REPEAT_ROWS);
        for r in &repeats {
            let of = design::repeated_id(r.item.id()).unwrap();
            let at = s.pending.iter().position(|p| p.item.id() == of).unwrap();
            assert!(at < first_bench, "{of}");
        }
        assert!(s.plan.minimum_s > 0.0 && s.plan.minimum_s < 600.0);
        assert_eq!(s.plan.stages[0].stage, "gemm");
        assert_eq!(s.plan.stages.len(), 5);
    }

    #[test]
    fn a_short_budget_skips_microbenchmark_repeats_and_says_which() {
        let long = plan_for(3600.0, &Rows::default());
        assert_eq!(long.repeats.len(), 3);
        assert!(long.plan.skipped_microbench.is_empty());
        assert_eq!(long.plan.microbench_rounds, design::MICRO_PROCESSES);
        // The first round of 8 benchmarks costs 0.16 s; a repeat round 0.04 s.
        let short = plan_for(0.9, &Rows::default());
        assert_eq!(short.repeats.len(), 1, "{:?}", short.plan);
        assert_eq!(short.plan.microbench_rounds, 2);
        assert_eq!(
            short.plan.skipped_microbench,
            [
                "mb/cpu:0/b0@3",
                "mb/cpu:1/b0@3",
                "mb/cpu:0/b0@4",
                "mb/cpu:1/b0@4"
            ]
        );
        // The fit rows stay whatever the budget.
        assert!(
            short
                .plan
                .processors
                .iter()
                .all(|p| p.gemm_rows >= FIT_ROWS)
        );
        assert!(short.plan.minimum_s > 0.9);
    }

    #[test]
    fn a_resumed_dataset_with_its_fit_rows_needs_no_minimum() {
        let mut rows = Rows::default();
        for p in ["cpu:0", "cpu:1"] {
            for m in 1..=FIT_ROWS as u32 {
                let Item::Case(c) = planned(p, m).item else {
                    unreachable!()
                };
                rows.push_measurement(row_of(&c));
            }
        }
        let s = plan_for(600.0, &rows);
        // Only the repeat pass is left to need, from the rows measured.
        assert!(s.plan.minimum_s > 0.0);
        let before = s.plan.minimum_s;
        for r in s.pending.iter().filter(|p| p.stratum == Stratum::Repeat) {
            let Item::Case(c) = &r.item else {
                panic!("a repeat is a case")
            };
            rows.push_measurement(row_of(c));
        }
        let again = plan_for(600.0, &rows);
        assert_eq!(again.plan.minimum_s, 0.0, "was {before}");
        assert!(again.pending.iter().all(|p| p.stratum != Stratum::Repeat));
    }

    #[test]
    fn seconds_print_as_budget_flags() {
        assert_eq!(fmt_secs(5.0), "5s");
        assert_eq!(fmt_secs(39.2), "40s");
        assert_eq!(fmt_secs(120.0), "2m");
        assert_eq!(fmt_secs(150.0), "2m30s");
    }
}

#[cfg(test)]
mod gpu_host {
    use std::path::Path;

    use super::*;
    use crate::{ProfileOptions, Target};

    /// The plan of a profile of the GPU host's four processors (its bundled
    /// dataset's probe) for `model`, within `budget_s`.
    fn plan_of(model: &str, budget_s: u64, keep: impl Fn(&str) -> bool) -> BudgetPlan {
        let ds = crate::Dataset::load(Path::new("../datasets/gpu-host-h200")).unwrap();
        let procs: Vec<Processor> = ds
            .profile
            .unwrap()
            .processors
            .into_iter()
            .filter(|p| !p.simulated && keep(&p.id))
            .collect();
        let mut opts = ProfileOptions::new(Target::Local, "/nonexistent".into());
        opts.models = vec![
            hetero_plan::hf::load_config(Path::new(&format!("../datasets/models/{model}.json")))
                .unwrap(),
        ];
        opts.budget = Duration::from_secs(budget_s);
        crate::profile::budget_plan(&opts, &procs).unwrap()
    }

    /// The four real processors of a 16-core Xeon host with an H200 (a
    /// PoCL and NVIDIA's OpenCL beside cpu:0 and cuda:0), whose per-case
    /// times the cost model's priors follow: each gets its fit rows in a
    /// 150 s profile of either bundled model, PoCL's being the dearest,
    /// and the microbenchmarks only one round.
    #[test]
    fn the_gpu_hosts_four_processors_get_their_fit_rows_in_150_s() {
        for m in ["qwen2.5-1.5b", "llama-3.1-8b"] {
            let p = plan_of(m, 150, |_| true);
            assert!(p.minimum_s <= 150.0, "{m}: {}", p.lines().join("\n"));
            assert!(p.minimum_s >= 60.0, "{m}: {}", p.lines().join("\n"));
            assert_eq!(p.processors.len(), 4);
            for q in &p.processors {
                assert!(q.gemm_rows >= FIT_ROWS, "{m}: {q:?}");
                assert_eq!(q.repeat_rows, REPEAT_ROWS, "{m}: {q:?}");
            }
            let pocl = &p.processors.iter().find(|q| q.processor == "opencl:0:0");
            let cuda = &p.processors.iter().find(|q| q.processor == "cuda:0");
            assert!(pocl.unwrap().gemm_s > 3.0 * cuda.unwrap().gemm_s);
            assert_eq!(p.microbench_rounds, 1, "{m}");
            assert!(!p.skipped_microbench.is_empty());
            // cpu:0 and cuda:0 alone need far less.
            let two = plan_of(m, 150, |id| id == "cpu:0" || id == "cuda:0");
            assert!(two.minimum_s < 0.6 * p.minimum_s, "{m}: {}", two.minimum_s);
        }
    }
}
