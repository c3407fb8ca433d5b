//! Rotary position embeddings as Hugging Face applies them: the head's
//! first and second halves rotate as pairs (`rotate_half`), with
//! frequencies `theta^(-2i/d)`, scaled per `rope_scaling`.

use super::config::RopeScaling;

/// The inverse frequencies of one head.
#[derive(Debug, Clone)]
pub struct Rope {
    inv_freq: Vec<f64>,
}

impl Rope {
    /// The frequencies of a head of `head_dim` with base `theta`.
    pub fn new(head_dim: usize, theta: f64, scaling: RopeScaling) -> Rope {
        let half = head_dim / 2;
        let inv_freq = (0..half)
            .map(|i| {
                let f = 1.0 / theta.powf((2 * i) as f64 / head_dim as f64);
                scale(f, scaling)
            })
            .collect();
        Rope { inv_freq }
    }

    /// Rotates every head of every row of `x` (`rows × heads·head_dim`),
    /// row `r` at position `pos0 + r`.
    pub fn apply(&self, x: &mut [f32], heads: usize, pos0: usize) {
        let half = self.inv_freq.len();
        let hd = 2 * half;
        let row = heads * hd;
        if row == 0 {
            return;
        }
        for (r, xr) in x.chunks_exact_mut(row).enumerate() {
            let pos = (pos0 + r) as f64;
            let (cos, sin): (Vec<f32>, Vec<f32>) = self
                .inv_freq
                .iter()
                .map(|f| {
                    // As Hugging Face: the angle in f32, then cos and sin.
                    let a = (pos as f32 * *f as f32) as f64;
                    (a.cos() as f32, a.sin() as f32)
                })
                .unzip();
            for h in xr.chunks_exact_mut(hd) {
                let (a, b) = h.split_at_mut(half);
                for i in 0..half {
                    let (x1, x2) = (a[i], b[i]);
                    a[i] = x1 * cos[i] - x2 * sin[i];
                    b[i] = x2 * cos[i] + x1 * sin[i];
                }
            }
        }
    }
}

/// One inverse frequency under `rope_scaling`.
fn scale(f: f64, scaling: RopeScaling) -> f64 {
    match scaling {
        RopeScaling::None => f,
        RopeScaling::Linear { factor } => f / factor,
        RopeScaling::Llama3 {
            factor,
            low_freq_factor: low,
            high_freq_factor: high,
            original_max_position_embeddings: old,
        } => {
            let wavelen = 2.0 * std::f64::consts::PI / f;
            if wavelen < old / high {
                f
            } else if wavelen > old / low {
                f / factor
            } else {
                let smooth = (old / wavelen - low) / (high - low);
                (1.0 - smooth) * f / factor + smooth * f
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_keeps_norms_and_dot_products_depend_on_distance_only() {
        let rope = Rope::new(8, 10_000.0, RopeScaling::None);
        let q0: Vec<f32> = (0..8).map(|i| (i as f32 * 0.37).sin()).collect();
        let k0: Vec<f32> = (0..8).map(|i| (i as f32 * 0.91).cos()).collect();
        let at = |v: &[f32], p: usize| {
            let mut v = v.to_vec();
            rope.apply(&mut v, 1, p);
            v
        };
        let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
        let n0 = dot(&q0, &q0);
        assert!((dot(&at(&q0, 17), &at(&q0, 17)) - n0).abs() < 1e-5);
        assert_eq!(at(&q0, 0), q0, "position 0 is the identity");
        let d1 = dot(&at(&q0, 5), &at(&k0, 2));
        let d2 = dot(&at(&q0, 13), &at(&k0, 10));
        assert!((d1 - d2).abs() < 1e-4, "{d1} {d2}");
    }

    #[test]
    fn llama3_scaling_keeps_high_frequencies_and_divides_low_ones() {
        let s = RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192.0,
        };
        let plain = Rope::new(128, 500_000.0, RopeScaling::None);
        let scaled = Rope::new(128, 500_000.0, s);
        assert_eq!(plain.inv_freq[0], scaled.inv_freq[0]);
        let last = plain.inv_freq.len() - 1;
        assert!((plain.inv_freq[last] / 8.0 - scaled.inv_freq[last]).abs() < 1e-15);
    }
}
