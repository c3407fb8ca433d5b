//! `--check`: every output against the host's f64 reference of the whole
//! product (one processor computing everything), within a bound per dtype.
//!
//! The metric is the agent's ([`hetero_agent::verify`]): for each compared
//! output, `|C − Σ A·W| / Σ |A|·|W|`, both sums in f64. The positions are
//! the agent's sample (every output of a small result, else the corners and
//! 256 random ones) **plus the corners of every part**, so a merge that
//! puts a share's rows or columns in the wrong place cannot slip between
//! the samples.

use hetero_agent::verify;

/// The outcome of checking one output.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OutputCheck {
    /// Largest normalised error (infinite for a non-finite output).
    pub rel_err: f64,
    /// Where: (row, column).
    pub worst: (usize, usize),
    /// Outputs compared.
    pub sampled: usize,
}

/// Checks `c[M,N]` against `a[M,K]·w[K,N]` at the sampled positions plus
/// the corners of the given `(rows, cols)` blocks.
pub fn check(
    (m, k, n): (usize, usize, usize),
    a: &[f32],
    w: &[f32],
    c: &[f32],
    blocks: &[(std::ops::Range<usize>, std::ops::Range<usize>)],
) -> OutputCheck {
    if let Some(bad) = c.iter().position(|x| !x.is_finite()) {
        return OutputCheck {
            rel_err: f64::INFINITY,
            worst: (bad / n, bad % n),
            sampled: 1,
        };
    }
    let mut pos = verify::sample_positions(m, n);
    for (r, cl) in blocks {
        if r.is_empty() || cl.is_empty() {
            continue;
        }
        for i in [r.start, r.end - 1, (r.start + r.end) / 2] {
            for j in [cl.start, cl.end - 1, (cl.start + cl.end) / 2] {
                pos.push((i, j));
            }
        }
    }
    let mut out = OutputCheck {
        rel_err: 0.0,
        worst: (0, 0),
        sampled: pos.len(),
    };
    for (&(i, j), &(dot, scale)) in pos.iter().zip(&verify::reference(a, w, k, n, &pos)) {
        let err = (c[i * n + j] as f64 - dot).abs() / scale.max(f64::MIN_POSITIVE);
        if err > out.rel_err {
            out.rel_err = err;
            out.worst = (i, j);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_misplaced_block_fails_even_when_the_samples_miss_it() {
        let (m, k, n) = (40, 8, 300);
        let a = verify::random_vec(m * k, 1);
        let w = verify::random_vec(k * n, 2);
        let mut c = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|p| a[i * k + p] * w[p * n + j]).sum();
            }
        }
        let blocks = [(0..m, 0..256), (0..m, 256..300)];
        assert!(check((m, k, n), &a, &w, &c, &blocks).rel_err < 1e-6);
        // Corrupt one column at a block edge.
        let mut bad = c.clone();
        for i in 0..m {
            bad[i * n + 256] += 1.0;
        }
        assert!(check((m, k, n), &a, &w, &bad, &blocks).rel_err > 1e-2);
        bad[5] = f32::NAN;
        assert!(
            check((m, k, n), &a, &w, &bad, &blocks)
                .rel_err
                .is_infinite()
        );
    }
}
