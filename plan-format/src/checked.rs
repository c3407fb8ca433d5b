//! Numbers checked while they are parsed.
//!
//! A time, a rate or a fitted parameter that is not a finite number in its
//! range is refused by the deserializer itself (`#[serde(deserialize_with =
//! "checked::...")]`), so RON and JSON refuse it alike, and the error
//! carries the field path and the line:column of the value. JSON has no
//! NaN or infinity and refuses `1e400` as out of range; RON reads `NaN`,
//! `inf` and `1e400` (as infinity), and these functions refuse them.
//!
//! The fields keep their `f64` type, so code that builds these values in
//! memory is unchanged.

use std::collections::BTreeMap;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

/// Any finite number (a fitted intercept or slope, a difference of clocks).
const FINITE: u8 = 0;
/// A finite number at least 0 (a time, a cost).
const NON_NEGATIVE: u8 = 1;
/// A finite number above 0 (a rate, a bandwidth, a divisor).
const POSITIVE: u8 = 2;

/// Why `v` is out of the range `R`, or `None` when it is in it.
fn problem<const R: u8>(v: f64) -> Option<String> {
    let (ok, want) = match R {
        FINITE => (true, "a finite number"),
        NON_NEGATIVE => (v >= 0.0, "a finite number at least 0"),
        _ => (v > 0.0, "a finite number above 0"),
    };
    if ok && v.is_finite() {
        return None;
    }
    let why = if v.is_infinite() {
        " (a value beyond ±1.8e308 reads as infinity)"
    } else {
        ""
    };
    Some(format!("must be {want}, not {v}{why}"))
}

/// An `f64` in the range `R`, checked as it is deserialized.
struct Checked<const R: u8>(f64);

impl<'de, const R: u8> Deserialize<'de> for Checked<R> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = f64::deserialize(d)?;
        match problem::<R>(v) {
            None => Ok(Checked(v)),
            Some(why) => Err(D::Error::custom(why)),
        }
    }
}

fn one<'de, D: Deserializer<'de>, const R: u8>(d: D) -> Result<f64, D::Error> {
    Checked::<R>::deserialize(d).map(|c| c.0)
}

fn opt<'de, D: Deserializer<'de>, const R: u8>(d: D) -> Result<Option<f64>, D::Error> {
    Ok(Option::<Checked<R>>::deserialize(d)?.map(|c| c.0))
}

/// Any finite number.
pub(crate) fn finite<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    one::<D, FINITE>(d)
}

/// A finite number at least 0.
pub(crate) fn non_negative<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    one::<D, NON_NEGATIVE>(d)
}

/// A finite number above 0.
pub(crate) fn positive<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    one::<D, POSITIVE>(d)
}

/// An optional finite number at least 0.
pub(crate) fn opt_non_negative<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    opt::<D, NON_NEGATIVE>(d)
}

/// An optional finite number above 0.
pub(crate) fn opt_positive<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    opt::<D, POSITIVE>(d)
}

/// A list of finite numbers at least 0; an error names the element
/// (`parts_us[1]`).
pub(crate) fn non_negative_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
    let v = Vec::<Checked<NON_NEGATIVE>>::deserialize(d)?;
    Ok(v.into_iter().map(|c| c.0).collect())
}

/// A map to finite numbers above 0; an error names the key.
pub(crate) fn positive_values<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, f64>, D::Error> {
    let m = BTreeMap::<String, Checked<POSITIVE>>::deserialize(d)?;
    Ok(m.into_iter().map(|(k, c)| (k, c.0)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_refuse_what_they_should() {
        for v in [0.0, -0.0, 1.5, 1e300] {
            assert_eq!(problem::<NON_NEGATIVE>(v), None, "{v}");
        }
        for v in [-1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert!(problem::<NON_NEGATIVE>(v).is_some(), "{v}");
        }
        assert!(problem::<POSITIVE>(0.0).is_some());
        assert_eq!(problem::<POSITIVE>(1e-300), None);
        assert_eq!(problem::<FINITE>(-7.0), None);
        assert!(problem::<FINITE>(f64::NAN).is_some());
        let why = problem::<NON_NEGATIVE>(f64::INFINITY).unwrap();
        assert!(why.contains("not inf") && why.contains("infinity"), "{why}");
    }
}
