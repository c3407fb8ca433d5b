//! The one least-squares line fit of the crate: `alpha + beta·x` through
//! `(x, t)` points by relative least squares, for latency models (α+β·work)
//! and for overhead costs (copy α+β·bytes, graph prepare).

/// A fitted line, both coefficients non-negative.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Line {
    /// Value at x = 0.
    pub alpha: f64,
    /// Slope.
    pub beta: f64,
}

/// Minimises Σ ((α + β·x − t) / t)², so that small and large points weigh
/// the same relative error, with α ≥ 0 and β ≥ 0 (a negative fixed cost or
/// rate is not physical: the other coefficient is refitted alone).
///
/// `None` with fewer than two distinct x, or a non-positive t.
pub fn relative_line(points: &[(f64, f64)]) -> Option<Line> {
    let distinct = points
        .iter()
        .map(|p| p.0.to_bits())
        .collect::<std::collections::HashSet<_>>();
    if distinct.len() < 2 || !points.iter().all(|&(_, t)| t > 0.0) {
        return None;
    }
    // Normal equations of the weighted problem with weights 1/t².
    let (mut s00, mut s01, mut s11, mut b0, mut b1) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for &(x, t) in points {
        let q = 1.0 / (t * t);
        s00 += q;
        s01 += q * x;
        s11 += q * x * x;
        b0 += q * t;
        b1 += q * x * t;
    }
    let det = s00 * s11 - s01 * s01;
    let mut alpha = (b0 * s11 - b1 * s01) / det;
    let mut beta = (s00 * b1 - s01 * b0) / det;
    if alpha < 0.0 {
        alpha = 0.0;
        beta = b1 / s11;
    }
    if beta < 0.0 {
        beta = 0.0;
        alpha = b0 / s00;
    }
    (alpha.is_finite() && beta.is_finite()).then_some(Line { alpha, beta })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovers_an_exact_line() {
        let pts: Vec<(f64, f64)> = [4096.0, 65536.0, 1048576.0, 16777216.0]
            .iter()
            .map(|&b| (b, 7.0 + b / 55_000.0))
            .collect();
        let l = relative_line(&pts).unwrap();
        assert!((l.alpha - 7.0).abs() < 1e-6, "{l:?}");
        assert!((l.beta - 1.0 / 55_000.0).abs() < 1e-12);
        assert!(relative_line(&pts[..1]).is_none());
    }

    #[test]
    fn keeps_coefficients_non_negative() {
        // Points through the origin with a negative intercept when fitted freely.
        let pts = [(1.0, 0.5), (2.0, 2.0), (3.0, 3.5)];
        let l = relative_line(&pts).unwrap();
        assert_eq!(l.alpha, 0.0);
        assert!(l.beta > 0.0);
        // Falling times: no negative slope, a constant instead.
        let l = relative_line(&[(1.0, 4.0), (2.0, 3.0), (3.0, 2.0)]).unwrap();
        assert_eq!(l.beta, 0.0);
        assert!(l.alpha > 2.0 && l.alpha < 4.0);
        assert!(relative_line(&[(1.0, 1.0), (2.0, 0.0)]).is_none());
    }
}
