//! Grouped-query attention over a KV cache, on the host in f32: each
//! query head reads the key/value head of its group, sees the positions up
//! to its own (causal), and its softmax is taken in f32 as Hugging Face's
//! eager attention does.

use rayon::prelude::*;

/// The keys and values of every layer, for up to `capacity` positions.
#[derive(Debug)]
pub struct KvCache {
    kv_dim: usize,
    capacity: usize,
    /// Per layer: keys, then values, `capacity × kv_dim` each.
    layers: Vec<(Vec<f32>, Vec<f32>)>,
}

impl KvCache {
    /// Bytes a cache of `layers × capacity × kv_dim` keys and values takes.
    pub fn bytes(layers: usize, capacity: usize, kv_dim: usize) -> u128 {
        2 * layers as u128 * capacity as u128 * kv_dim as u128 * 4
    }

    /// An empty cache.
    pub fn new(layers: usize, capacity: usize, kv_dim: usize) -> KvCache {
        KvCache {
            kv_dim,
            capacity,
            layers: (0..layers)
                .map(|_| (vec![0f32; capacity * kv_dim], vec![0f32; capacity * kv_dim]))
                .collect(),
        }
    }

    /// The positions it holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Stores `rows` keys and values of a layer from position `pos0` on.
    pub fn store(&mut self, layer: usize, pos0: usize, k: &[f32], v: &[f32]) {
        let (kc, vc) = &mut self.layers[layer];
        let (a, b) = (pos0 * self.kv_dim, pos0 * self.kv_dim + k.len());
        kc[a..b].copy_from_slice(k);
        vc[a..b].copy_from_slice(v);
    }

    /// A layer's keys and values.
    pub fn layer(&self, layer: usize) -> (&[f32], &[f32]) {
        let (k, v) = &self.layers[layer];
        (k, v)
    }
}

/// The shape of attention.
#[derive(Debug, Clone, Copy)]
pub struct Heads {
    /// Query heads.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Per-head dimension.
    pub head_dim: usize,
}

/// Query rows one task takes: its scores are `ROW_BLOCK × positions`.
const ROW_BLOCK: usize = 128;

/// Attention of `q` (`rows × heads·head_dim`, row `r` at position
/// `pos0 + r`) over the cached keys and values of positions `0..=pos0 + r`;
/// the output has the shape of `q`.
///
/// Each query head and block of rows is one task: its scores `Q·Kᵀ` and
/// its output `P·V` are two products of the `gemm` crate, read in place
/// from the cache's strides; the positions a row may not see are dropped
/// before its softmax.
pub fn attend(q: &[f32], pos0: usize, keys: &[f32], values: &[f32], h: Heads) -> Vec<f32> {
    let hd = h.head_dim;
    let (kv_dim, q_dim) = (h.kv_heads * hd, h.heads * hd);
    let group = h.heads / h.kv_heads;
    let rows = q.len() / q_dim;
    let scale = 1.0 / (hd as f32).sqrt();
    let blocks = rows.div_ceil(ROW_BLOCK);
    let tasks: Vec<(usize, usize, Vec<f32>)> = (0..h.heads * blocks)
        .into_par_iter()
        .map(|t| {
            let (head, r0) = (t / blocks, (t % blocks) * ROW_BLOCK);
            let n = ROW_BLOCK.min(rows - r0);
            // Positions this block's last row sees; earlier rows see fewer.
            let cols = pos0 + r0 + n;
            let kv = (head / group) * hd;
            let qh = &q[r0 * q_dim + head * hd..];
            let mut scores = vec![0f32; n * cols];
            // Q (n × hd, rows q_dim apart) · Kᵀ (hd × cols: cache rows kv_dim apart).
            let q_rows = Strided::rows(qh, q_dim);
            let k_cols = Strided {
                at: &keys[kv..],
                row: 1,
                col: kv_dim,
            };
            product(&mut scores, (n, cols, hd), q_rows, k_cols, scale);
            for (r, row) in scores.chunks_mut(cols).enumerate() {
                let visible = pos0 + r0 + r + 1;
                softmax(&mut row[..visible]);
                row[visible..].fill(0.0);
            }
            let mut out = vec![0f32; n * hd];
            // P (n × cols) · V (cols × hd: cache rows kv_dim apart).
            let (p, v) = (
                Strided::rows(&scores, cols),
                Strided::rows(&values[kv..], kv_dim),
            );
            product(&mut out, (n, hd, cols), p, v, 1.0);
            (head, r0, out)
        })
        .collect();
    let mut out = vec![0f32; q.len()];
    for (head, r0, o) in tasks {
        for (r, src) in o.chunks(hd).enumerate() {
            let at = (r0 + r) * q_dim + head * hd;
            out[at..at + hd].copy_from_slice(src);
        }
    }
    out
}

/// A matrix read in place: element (i, j) at `at[i·row + j·col]`.
#[derive(Clone, Copy)]
struct Strided<'a> {
    at: &'a [f32],
    row: usize,
    col: usize,
}

impl<'a> Strided<'a> {
    /// Row-major, rows `row` elements apart.
    fn rows(at: &'a [f32], row: usize) -> Self {
        Strided { at, row, col: 1 }
    }

    /// Whether an `r × c` matrix lies within the slice.
    fn holds(&self, r: usize, c: usize) -> bool {
        r == 0 || c == 0 || (r - 1) * self.row + (c - 1) * self.col < self.at.len()
    }
}

/// `dst = beta · lhs · rhs`, `dst` row-major `m × n`, on this thread
/// (`gemm` crate).
fn product(
    dst: &mut [f32],
    (m, n, k): (usize, usize, usize),
    lhs: Strided,
    rhs: Strided,
    beta: f32,
) {
    assert!(dst.len() >= m * n && lhs.holds(m, k) && rhs.holds(k, n));
    // SAFETY: the assert keeps every element read or written inside its
    // slice; read_dst is false, so dst's contents and alpha are unused.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            n as isize,
            false,
            lhs.at.as_ptr(),
            lhs.col as isize,
            lhs.row as isize,
            rhs.at.as_ptr(),
            rhs.col as isize,
            rhs.row as isize,
            0.0,
            beta,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// Softmax in place (max subtracted first).
pub fn softmax(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f32;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    for v in x.iter_mut() {
        *v /= sum;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Attention in f64 over full rows, no cache.
    fn naive(q: &[f32], k: &[f32], v: &[f32], rows: usize, h: Heads) -> Vec<f64> {
        let (hd, kvd) = (h.head_dim, h.kv_heads * h.head_dim);
        let mut out = vec![0f64; q.len()];
        for r in 0..rows {
            for head in 0..h.heads {
                let kvh = head / (h.heads / h.kv_heads);
                let qh = &q[r * h.heads * hd + head * hd..][..hd];
                let s: Vec<f64> = (0..=r)
                    .map(|j| {
                        (0..hd)
                            .map(|d| qh[d] as f64 * k[j * kvd + kvh * hd + d] as f64)
                            .sum::<f64>()
                            / (hd as f64).sqrt()
                    })
                    .collect();
                let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = s.iter().map(|x| (x - m).exp()).sum();
                for (j, x) in s.iter().enumerate() {
                    for d in 0..hd {
                        out[r * h.heads * hd + head * hd + d] +=
                            (x - m).exp() / z * v[j * kvd + kvh * hd + d] as f64;
                    }
                }
            }
        }
        out
    }

    #[test]
    fn cached_steps_match_a_naive_f64_attention() {
        let h = Heads {
            heads: 4,
            kv_heads: 2,
            head_dim: 8,
        };
        let rows = 6;
        let q = hetero_agent::verify::random_vec(rows * 32, 1);
        let k = hetero_agent::verify::random_vec(rows * 16, 2);
        let v = hetero_agent::verify::random_vec(rows * 16, 3);
        let want = naive(&q, &k, &v, rows, h);
        // Prefill of 4 rows, then two single-row steps through the cache.
        let mut cache = KvCache::new(1, rows, 16);
        cache.store(0, 0, &k[..4 * 16], &v[..4 * 16]);
        let (kc, vc) = cache.layer(0);
        let mut got = attend(&q[..4 * 32], 0, kc, vc, h);
        for r in 4..rows {
            cache.store(0, r, &k[r * 16..(r + 1) * 16], &v[r * 16..(r + 1) * 16]);
            let (kc, vc) = cache.layer(0);
            got.extend(attend(&q[r * 32..(r + 1) * 32], r, kc, vc, h));
        }
        for (g, w) in got.iter().zip(&want) {
            assert!((*g as f64 - w).abs() < 1e-5, "{g} {w}");
        }
    }

    #[test]
    fn a_long_prefill_after_cached_rows_matches_in_every_block() {
        // 300 rows after 5 cached ones: three blocks of rows, the last
        // partial, each seeing a different number of positions.
        let h = Heads {
            heads: 4,
            kv_heads: 1,
            head_dim: 8,
        };
        let (cached, rows) = (5, 300);
        let all = cached + rows;
        let q = hetero_agent::verify::random_vec(all * 32, 4);
        let k = hetero_agent::verify::random_vec(all * 8, 5);
        let v = hetero_agent::verify::random_vec(all * 8, 6);
        let want = naive(&q, &k, &v, all, h);
        let mut cache = KvCache::new(1, all, 8);
        cache.store(0, 0, &k, &v);
        let (kc, vc) = cache.layer(0);
        let got = attend(&q[cached * 32..], cached, kc, vc, h);
        for (i, (g, w)) in got.iter().zip(&want[cached * 32..]).enumerate() {
            assert!((*g as f64 - w).abs() < 1e-5, "{i}: {g} {w}");
        }
    }
}
