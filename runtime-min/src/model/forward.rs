//! One forward pass of the decoder over `rows` new tokens: the GEMMs
//! through the plan ([`Runtime::linear`]), everything else on the host in
//! f32 (embedding, RMSNorm, RoPE, attention over the KV cache, SwiGLU,
//! residuals, the final norm), each timed under its operator's name.

use std::time::Instant;

use hetero_plan::Phase;
use rayon::prelude::*;

use super::Decoder;
use super::attention::{Heads, attend};
use crate::{Result, Runtime};

/// Where a pass runs: its phase, the plan length its GEMMs run at, its
/// rows and the position of its first row.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Step {
    pub phase: Phase,
    pub len: u32,
    pub rows: usize,
    pub pos0: usize,
}

impl Decoder {
    /// The logits of the last row after `tokens` at `step`.
    pub(crate) fn forward(
        &mut self,
        rt: &mut Runtime,
        tokens: &[u32],
        step: Step,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Vec<f32>> {
        let h = self.cfg.hidden;
        let t = Instant::now();
        let mut x = Vec::with_capacity(tokens.len() * h);
        for &tok in tokens {
            self.host.embed.push_row(tok, h, &mut x);
        }
        self.host_time("embedding", step.phase, t);
        for l in 0..self.cfg.layers {
            self.attention_block(rt, l, &mut x, step)?;
            self.mlp_block(rt, l, &mut x, step)?;
            progress(l + 1, self.cfg.layers);
        }
        let t = Instant::now();
        let last = rms_norm(
            &x[(step.rows - 1) * h..],
            &self.host.final_norm,
            self.cfg.eps,
        );
        self.host_time("final_norm", step.phase, t);
        self.gemm(rt, "lm_head", step, 0, &last, self.cfg.vocab)
    }

    /// `x += o_proj(attention(rope(q), rope(k), v))` of `norm(x)`.
    fn attention_block(
        &mut self,
        rt: &mut Runtime,
        l: usize,
        x: &mut [f32],
        s: Step,
    ) -> Result<()> {
        let (qd, kvd) = (self.cfg.q_dim(), self.cfg.kv_dim());
        let t = Instant::now();
        let hn = rms_norm(x, &self.host.layer(l).attn_norm, self.cfg.eps);
        self.host_time("norm", s.phase, t);
        let (mut q, mut k, v) = if self.cfg.fused {
            let qkv = self.gemm(rt, "attn_qkv", s, l, &hn, qd + 2 * kvd)?;
            split_columns(&qkv, s.rows, &[qd, kvd, kvd])
        } else {
            let q = self.gemm(rt, "attn_q", s, l, &hn, qd)?;
            let k = self.gemm(rt, "attn_k", s, l, &hn, kvd)?;
            let v = self.gemm(rt, "attn_v", s, l, &hn, kvd)?;
            (q, k, v)
        };
        let mut v = v;
        let t = Instant::now();
        if let Some([bq, bk, bv]) = &self.host.layer(l).qkv_bias {
            add_bias(&mut q, bq);
            add_bias(&mut k, bk);
            add_bias(&mut v, bv);
        }
        self.rope.apply(&mut q, self.cfg.heads, s.pos0);
        self.rope.apply(&mut k, self.cfg.kv_heads, s.pos0);
        self.host_time("rope", s.phase, t);
        let t = Instant::now();
        self.kv.store(l, s.pos0, &k, &v);
        let (kc, vc) = self.kv.layer(l);
        let heads = Heads {
            heads: self.cfg.heads,
            kv_heads: self.cfg.kv_heads,
            head_dim: self.cfg.head_dim,
        };
        let a = attend(&q, s.pos0, kc, vc, heads);
        self.host_time("attention", s.phase, t);
        let mut o = self.gemm(rt, "attn_o", s, l, &a, self.cfg.hidden)?;
        let t = Instant::now();
        if let Some(b) = &self.host.layer(l).o_bias {
            add_bias(&mut o, b);
        }
        x.iter_mut().zip(&o).for_each(|(a, b)| *a += b);
        self.host_time("residual", s.phase, t);
        Ok(())
    }

    /// `x += down(silu(gate(norm(x))) · up(norm(x)))`.
    fn mlp_block(&mut self, rt: &mut Runtime, l: usize, x: &mut [f32], s: Step) -> Result<()> {
        let i = self.cfg.inter;
        let t = Instant::now();
        let hn = rms_norm(x, &self.host.layer(l).mlp_norm, self.cfg.eps);
        self.host_time("norm", s.phase, t);
        let (gate, up) = if self.cfg.fused {
            let gu = self.gemm(rt, "ffn_gate_up", s, l, &hn, 2 * i)?;
            let (g, u, _) = split_columns(&gu, s.rows, &[i, i, 0]);
            (g, u)
        } else {
            let g = self.gemm(rt, "ffn_gate", s, l, &hn, i)?;
            let u = self.gemm(rt, "ffn_up", s, l, &hn, i)?;
            (g, u)
        };
        let t = Instant::now();
        let silu_times = |(g, u): (&f32, &f32)| g / (1.0 + (-g).exp()) * u;
        let act: Vec<f32> = if gate.len() < PARALLEL_MIN {
            gate.iter().zip(&up).map(silu_times).collect()
        } else {
            gate.par_iter()
                .zip(&up)
                .with_min_len(PARALLEL_MIN / 2)
                .map(silu_times)
                .collect()
        };
        self.host_time("activation", s.phase, t);
        let d = self.gemm(rt, "ffn_down", s, l, &act, self.cfg.hidden)?;
        let t = Instant::now();
        x.iter_mut().zip(&d).for_each(|(a, b)| *a += b);
        self.host_time("residual", s.phase, t);
        Ok(())
    }

    /// One GEMM of layer `l` as the plan decides, timed (and checked
    /// against the host's f64 reference when asked).
    fn gemm(
        &mut self,
        rt: &mut Runtime,
        op: &str,
        s: Step,
        l: usize,
        input: &[f32],
        n: usize,
    ) -> Result<Vec<f32>> {
        let rows = input.len() / rt.model().op(op).map_or(1, |o| o.k as usize);
        let mut out = vec![0f32; rows * n];
        let timing = rt.linear(op, s.phase, l as u32, s.len, input, &mut out)?;
        self.times.gemm(op, s.phase, &timing);
        if let Some(checks) = self.checks.as_mut() {
            let t = Instant::now();
            let c = rt.check_linear(op, s.phase, l as u32, s.len, input, &out)?;
            checks.push(c);
            self.check_us += t.elapsed().as_secs_f64() * 1e6;
        }
        Ok(out)
    }

    fn host_time(&mut self, op: &str, phase: Phase, since: Instant) {
        self.times
            .host(op, phase, since.elapsed().as_secs_f64() * 1e6);
    }
}

/// RMSNorm of every row of `x` (`rows × w.len()`), as Hugging Face's
/// llama: `x / sqrt(mean(x²) + eps) · w`.
pub(crate) fn rms_norm(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    let norm = |(o, r): (&mut [f32], &[f32])| {
        let ms = r.iter().map(|v| v * v).sum::<f32>() / r.len() as f32;
        let inv = 1.0 / (ms + eps).sqrt();
        for ((o, v), w) in o.iter_mut().zip(r).zip(w) {
            *o = w * (v * inv);
        }
    };
    if x.len() < PARALLEL_MIN {
        out.chunks_mut(w.len())
            .zip(x.chunks(w.len()))
            .for_each(norm);
    } else {
        let rows_per_task = (PARALLEL_MIN / 2 / w.len().max(1)).max(1);
        out.par_chunks_mut(w.len())
            .zip(x.par_chunks(w.len()))
            .with_min_len(rows_per_task)
            .for_each(norm);
    }
    out
}

/// Below this many elements a host operator runs on the calling thread.
/// A parallel iterator started outside rayon's pool hands its work to a
/// pool thread and waits for it even when it is one piece, which a decode
/// step's norm (one row) need not pay.
const PARALLEL_MIN: usize = 1 << 15;

/// Adds `b` to every row of `x`.
fn add_bias(x: &mut [f32], b: &[f32]) {
    for r in x.chunks_exact_mut(b.len()) {
        r.iter_mut().zip(b).for_each(|(x, b)| *x += b);
    }
}

/// Splits `rows` rows of `x` into three column blocks of `widths`.
fn split_columns(x: &[f32], rows: usize, widths: &[usize; 3]) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let total: usize = widths.iter().sum();
    let mut parts: [Vec<f32>; 3] = Default::default();
    for r in 0..rows {
        let mut at = r * total;
        for (p, w) in parts.iter_mut().zip(widths) {
            p.extend_from_slice(&x[at..at + w]);
            at += w;
        }
    }
    let [a, b, c] = parts;
    (a, b, c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rms_norm_and_column_splits() {
        let x = [3.0f32, 4.0, 0.0, 0.0];
        let y = rms_norm(&x, &[1.0, 2.0], 1e-12);
        let r = (12.5f32).sqrt();
        assert!((y[0] - 3.0 / r).abs() < 1e-6 && (y[1] - 8.0 / r).abs() < 1e-6);
        assert_eq!(&y[2..], &[0.0, 0.0]);
        let m: Vec<f32> = (0..10).map(|v| v as f32).collect();
        let (a, b, c) = split_columns(&m, 2, &[2, 2, 1]);
        assert_eq!(
            (a, b, c),
            (vec![0., 1., 5., 6.], vec![2., 3., 7., 8.], vec![4., 9.])
        );
    }
}
