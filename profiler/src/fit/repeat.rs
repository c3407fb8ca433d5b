//! Repeatability: how often a second measurement of a case, by the
//! profile's repeat pass, falls within ±10 % of the first. No predictor
//! scored against such medians can be expected to do better, so the fit
//! report shows it beside the predictor's own share.

use std::collections::BTreeMap;

use hetero_plan::{DType, MeasurementRow};
use serde::{Deserialize, Serialize};

use super::retest::agreement;
use crate::design::repeated_id;

/// One (processor, dtype)'s repeatability.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Repeatability {
    /// Cases usable in both measurements.
    pub pairs: u32,
    /// Share of them whose repeat is within ±10 % of the first measurement.
    pub within_10pct: f64,
    /// Median of |repeat − first| / first, percent.
    pub median_abs_diff_pct: f64,
}

/// Splits the rows into first measurements and the repeat pass's rows
/// (case ids ending in [`crate::design::REPEAT_SUFFIX`]).
pub fn split_repeats(rows: &[MeasurementRow]) -> (Vec<MeasurementRow>, Vec<MeasurementRow>) {
    rows.iter()
        .cloned()
        .partition(|r| repeated_id(&r.case_id).is_none())
}

/// Each (processor, dtype)'s repeatability, from the repeats whose first
/// measurement is among `first`.
pub fn repeatability(
    first: &[MeasurementRow],
    repeats: &[MeasurementRow],
) -> BTreeMap<(String, DType), Repeatability> {
    let again: Vec<MeasurementRow> = repeats
        .iter()
        .filter_map(|r| {
            let id = repeated_id(&r.case_id)?;
            Some(MeasurementRow {
                case_id: id.to_string(),
                ..r.clone()
            })
        })
        .collect();
    agreement(first, &again)
        .into_iter()
        .map(|a| {
            (
                (a.processor, a.dtype),
                Repeatability {
                    pairs: a.pairs,
                    within_10pct: a.within_10pct,
                    median_abs_diff_pct: a.median_abs_diff_pct,
                },
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::tests::mrow;

    #[test]
    fn the_share_of_repeats_within_ten_percent_of_their_first_row() {
        let mut first = Vec::new();
        let mut repeats = Vec::new();
        for (i, again) in [100.0, 105.0, 91.0, 120.0, 70.0].into_iter().enumerate() {
            let id = format!("cpu:0/{}x64x128/f16/transposed", i + 1);
            first.push(mrow(&id, "cpu:0", i as u32 + 1, Some(100.0)));
            repeats.push(mrow(
                &format!("{id}{}", crate::design::REPEAT_SUFFIX),
                "cpu:0",
                i as u32 + 1,
                Some(again),
            ));
        }
        // A repeat whose first row failed pairs with nothing.
        first.push(mrow("cpu:0/9x64x128/f16/transposed", "cpu:0", 9, None));
        repeats.push(mrow(
            "cpu:0/9x64x128/f16/transposed@repeat",
            "cpu:0",
            9,
            Some(1.0),
        ));
        let mut all = first.clone();
        all.extend(repeats.clone());
        let (f, r) = split_repeats(&all);
        assert_eq!((f, r), (first.clone(), repeats.clone()));
        let rep = repeatability(&first, &repeats);
        let cpu = &rep[&("cpu:0".to_string(), DType::F16)];
        assert_eq!(cpu.pairs, 5);
        assert!((cpu.within_10pct - 0.6).abs() < 1e-12, "{cpu:?}");
        assert_eq!(cpu.median_abs_diff_pct, 9.0);
        assert!(repeatability(&first, &[]).is_empty());
    }
}
