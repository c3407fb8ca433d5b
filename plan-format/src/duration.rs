//! Durations written by people on the command line (`--budget 15m`,
//! `--prepare-budget 30s`): one parser for every command.

use std::time::Duration;

/// Parses a positive duration: a sum of numbers with units, `30s`, `500ms`,
/// `250us`, `2min`, `15m`, `1h30m`, `2.5m`, `1.5h`, or a bare number of
/// seconds (`90`). Units: `us`/`µs`, `ms`, `s`, `m`/`min`, `h`.
///
/// ```
/// # use std::time::Duration;
/// use hetero_plan::parse_duration;
/// assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
/// assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
/// assert!(parse_duration("1d").is_err());
/// ```
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("bad duration `{s}`: use e.g. 30s, 500ms, 15m, 1h30m");
    let t = s.trim();
    let total = match t.parse::<f64>() {
        Ok(secs) => secs,
        Err(_) => {
            let mut total = 0.0;
            let mut rest = t;
            while !rest.is_empty() {
                let digits = rest
                    .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                    .unwrap_or(rest.len());
                let (num, after) = rest.split_at(digits);
                let v: f64 = num.parse().map_err(|_| bad())?;
                let unit = after
                    .find(|c: char| c.is_ascii_digit() || c == '.')
                    .unwrap_or(after.len());
                let (unit, next) = after.split_at(unit);
                let scale = match unit.trim() {
                    "us" | "µs" => 1e-6,
                    "ms" => 1e-3,
                    "s" => 1.0,
                    "m" | "min" => 60.0,
                    "h" => 3600.0,
                    _ => return Err(bad()),
                };
                total += v * scale;
                rest = next;
            }
            total
        }
    };
    if !(total.is_finite() && total > 0.0) {
        return Err(bad());
    }
    Ok(Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_parses_and_nonsense_is_refused() {
        let ok = |s: &str| parse_duration(s).unwrap().as_secs_f64();
        assert_eq!(ok("60s"), 60.0);
        assert_eq!(ok("15m"), 900.0);
        assert_eq!(ok("2min"), 120.0);
        assert_eq!(ok("1h30m"), 5400.0);
        assert_eq!(ok("90"), 90.0);
        assert_eq!(ok("2.5m"), 150.0);
        assert_eq!(ok("1.5h"), 5400.0);
        assert_eq!(ok("250ms"), 0.25);
        assert!((ok("250us") - 250e-6).abs() < 1e-12);
        assert!((ok("250µs") - 250e-6).abs() < 1e-12);
        assert_eq!(ok(" 30s "), 30.0);
        for bad in [
            "",
            "0",
            "0s",
            "-5",
            "5x",
            "m",
            "10m5",
            "1d",
            "3 parsecs",
            "s30",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
