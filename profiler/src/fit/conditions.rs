//! Measuring conditions in a fit: rows measured under different ones
//! ([`Setup`]: cache state, timer, CPU groups, cores) are never fitted
//! together. `--conditions` keeps the rows of one set; without it, a
//! (processor, dtype) whose usable rows mix sets is refused, naming each
//! set as the value that selects it.

use std::collections::BTreeMap;

use hetero_plan::{DType, DeviceProfile, MeasurementRow, MicrobenchRow, RowStatus, Setup};

use super::FitError;
use crate::dataset::setup_of;

/// The rows whose conditions have every `key=value` pair of `want` (all
/// rows when `want` is `None`; rows of unknown conditions match no pair).
pub(super) fn select(
    profile: &DeviceProfile,
    rows: &[MeasurementRow],
    micro: &[MicrobenchRow],
    want: Option<&[(String, String)]>,
) -> (Vec<MeasurementRow>, Vec<MicrobenchRow>) {
    let Some(want) = want else {
        return (rows.to_vec(), micro.to_vec());
    };
    let keep = |c| setup_of(c, Some(profile)).is_some_and(|s| s.matches(want));
    (
        rows.iter()
            .filter(|r| keep(&r.conditions))
            .cloned()
            .collect(),
        micro
            .iter()
            .filter(|r| keep(&r.conditions))
            .cloned()
            .collect(),
    )
}

/// An error for the first (processor, dtype) whose usable rows were
/// measured under conditions that disagree (those recorded on both rows).
pub(super) fn check_not_mixed(
    profile: &DeviceProfile,
    rows: &[MeasurementRow],
) -> Result<(), FitError> {
    let mut groups: BTreeMap<(&str, DType), BTreeMap<Setup, usize>> = BTreeMap::new();
    for r in rows
        .iter()
        .filter(|r| r.status == RowStatus::Ok && r.verified)
    {
        if let Some(s) = setup_of(&r.conditions, Some(profile)) {
            *groups
                .entry((r.processor.as_str(), r.dtype))
                .or_default()
                .entry(s)
                .or_default() += 1;
        }
    }
    for ((processor, dtype), sets) in groups {
        let all: Vec<&Setup> = sets.keys().collect();
        let mixed = all
            .iter()
            .enumerate()
            .any(|(i, a)| all[i + 1..].iter().any(|b| !a.agrees_with(b)));
        if mixed {
            return Err(FitError::MixedConditions {
                processor: processor.to_string(),
                dtype,
                sets: sets
                    .iter()
                    .map(|(s, n)| format!("{n} rows `{}`", s.label()))
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
    }
    Ok(())
}
