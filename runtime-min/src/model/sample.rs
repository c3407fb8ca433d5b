//! Choosing the next token from logits: greedy, or temperature, top-k and
//! top-p (nucleus) sampling from a seeded generator.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// How the next token is chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    /// 0: greedy (the largest logit; the first of equal ones).
    pub temperature: f32,
    /// Keep the `k` most likely tokens (0: all).
    pub top_k: usize,
    /// Keep the most likely tokens whose probabilities add up to `p` (1: all).
    pub top_p: f32,
    /// The generator's seed.
    pub seed: u64,
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
        }
    }
}

/// A sampler: the settings and the generator's state.
pub struct Sampler {
    s: Sampling,
    rng: StdRng,
}

impl Sampler {
    /// A sampler seeded with `s.seed`.
    pub fn new(s: Sampling) -> Sampler {
        Sampler {
            s,
            rng: StdRng::seed_from_u64(s.seed),
        }
    }

    /// The next token.
    pub fn next(&mut self, logits: &[f32]) -> u32 {
        if self.s.temperature <= 0.0 {
            return argmax(logits);
        }
        let mut ranked: Vec<(usize, f32)> = logits
            .iter()
            .map(|l| l / self.s.temperature)
            .enumerate()
            .collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        if self.s.top_k > 0 {
            ranked.truncate(self.s.top_k);
        }
        let max = ranked[0].1;
        let mut probs: Vec<f32> = ranked.iter().map(|(_, l)| (l - max).exp()).collect();
        let sum: f32 = probs.iter().sum();
        probs.iter_mut().for_each(|p| *p /= sum);
        // The smallest head whose mass reaches top_p (at least one token).
        let mut mass = 0f32;
        let keep = probs
            .iter()
            .position(|p| {
                mass += p;
                mass >= self.s.top_p
            })
            .map_or(probs.len(), |i| i + 1);
        let total: f32 = probs[..keep].iter().sum();
        let mut u = self.rng.r#gen::<f32>() * total;
        for (i, p) in probs[..keep].iter().enumerate() {
            if u < *p {
                return ranked[i].0 as u32;
            }
            u -= p;
        }
        ranked[keep - 1].0 as u32
    }
}

/// The index of the largest value (the first of equal ones).
pub fn argmax(x: &[f32]) -> u32 {
    let mut best = 0;
    for (i, v) in x.iter().enumerate() {
        if *v > x[best] {
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_top_k_and_top_p_keep_what_they_promise() {
        let logits = [0.1f32, 3.0, 2.9, -1.0, 0.5];
        assert_eq!(Sampler::new(Sampling::default()).next(&logits), 1);
        let mut k2 = Sampler::new(Sampling {
            temperature: 1.0,
            top_k: 2,
            seed: 7,
            ..Sampling::default()
        });
        let picks: Vec<u32> = (0..200).map(|_| k2.next(&logits)).collect();
        assert!(picks.iter().all(|t| *t == 1 || *t == 2));
        assert!(picks.contains(&1) && picks.contains(&2));
        // top_p small enough for the first token alone.
        let mut p = Sampler::new(Sampling {
            temperature: 1.0,
            top_p: 0.3,
            seed: 7,
            ..Sampling::default()
        });
        assert!((0..50).all(|_| p.next(&logits) == 1));
        // The same seed gives the same draws.
        let s = Sampling {
            temperature: 0.8,
            seed: 3,
            ..Sampling::default()
        };
        let (mut a, mut b) = (Sampler::new(s), Sampler::new(s));
        let da: Vec<u32> = (0..20).map(|_| a.next(&logits)).collect();
        let db: Vec<u32> = (0..20).map(|_| b.next(&logits)).collect();
        assert_eq!(da, db);
    }
}
