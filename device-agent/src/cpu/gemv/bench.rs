//! `hetero-agent bench-gemv`: a small-row product against a plain
//! streaming read of the same weight bytes, with the same threads, in one
//! run.
//!
//! Both read copies of the weights in turn, as many as
//! `crate::evict::rotation_bytes` asks (four times the last-level cache,
//! at most 2 GiB), so that each run finds its bytes in memory rather than
//! in a cache, as a decode step's layers find theirs. The stream sums the
//! bytes as 64-bit words, split in parts as the product splits them.

use std::time::Instant;

use gemm::Parallelism;
use hetero_plan::{DType, Stats};
use rayon::prelude::*;

use super::{Gemv, PARTS_PER_THREAD};
use crate::cpu::CpuBackend;
use crate::dense::Dense;
use crate::{Error, GemmSpec, Result, verify};

/// What one `bench-gemv` case measured.
#[derive(Debug, Clone)]
pub struct GemvBench {
    /// Weight bytes one run reads.
    pub weight_bytes: u64,
    /// Copies read in turn.
    pub copies: usize,
    /// The streaming read, µs per run.
    pub stream: Stats,
    /// The product, µs per run.
    pub gemv: Stats,
    /// The `gemm` crate on the same product (f32 and f16), when asked.
    pub gemm_crate: Option<Stats>,
    /// The product's error against the host reference.
    pub rel_err: f64,
    /// How the product ran, in words.
    pub how: String,
}

impl GemvBench {
    /// GB/s of weight bytes at the median of `s`.
    pub fn gbps(&self, s: &Stats) -> f64 {
        self.weight_bytes as f64 / s.median_us / 1e3
    }

    /// The product's speed as a fraction of the stream's (medians).
    pub fn ratio(&self) -> f64 {
        self.stream.median_us / self.gemv.median_us
    }

    /// The case as one JSON object.
    pub fn json(&self, backend: &CpuBackend, spec: &GemmSpec) -> serde_json::Value {
        let (m, k, n) = spec.shape.mkn();
        let gemm = self.gemm_crate.as_ref();
        serde_json::json!({
            "bench": "bench_gemv",
            "processor": backend.processor.id,
            "cores": super::super::topology::format_list(backend.cores()),
            "dtype": spec.dtype,
            "order": spec.order,
            "m": m, "k": k, "n": n,
            "weight_bytes": self.weight_bytes,
            "copies": self.copies,
            "reps": self.gemv.count,
            "stream_median_us": self.stream.median_us,
            "gemv_median_us": self.gemv.median_us,
            "stream_gbps": self.gbps(&self.stream),
            "gemv_gbps": self.gbps(&self.gemv),
            "ratio": self.ratio(),
            "stream_cv": self.stream.cv,
            "gemv_cv": self.gemv.cv,
            "gemm_crate_median_us": gemm.map(|s| s.median_us),
            "gemm_crate_gbps": gemm.map(|s| self.gbps(s)),
            "how": self.how,
            "verified_rel_err": self.rel_err,
        })
    }

    /// One line for a reader.
    pub fn summary(&self, spec: &GemmSpec) -> String {
        let gemm = match &self.gemm_crate {
            Some(s) => format!(", gemm crate {:.1} GB/s", self.gbps(s)),
            None => String::new(),
        };
        format!(
            "{} {} {}: GEMV {:.1} GB/s, stream {:.1} GB/s, ratio {:.0}%{gemm} (medians of {}, {} copies of {:.1} MiB; {})",
            spec.shape,
            spec.dtype,
            spec.order,
            self.gbps(&self.gemv),
            self.gbps(&self.stream),
            100.0 * self.ratio(),
            self.gemv.count,
            self.copies,
            self.weight_bytes as f64 / (1u64 << 20) as f64,
            self.how
        )
    }
}

/// Times `spec` (at most [`super::MAX_M`] rows) on `backend`'s pool against
/// a streaming read of its weights: `reps` runs of each, alternated, after
/// one untimed pass over every copy; with `gemm_crate`, the `gemm` crate's
/// product of the same shape too (not in bf16, which it lacks).
pub fn run(
    backend: &CpuBackend,
    spec: &GemmSpec,
    reps: u32,
    gemm_crate: bool,
) -> Result<GemvBench> {
    let id = backend.processor.id.as_str();
    let threads = backend.cores().len();
    let (a, w) = verify::inputs(&spec.shape, 0);
    let mut first = Gemv::new(id, spec, &w, threads)?;
    first.write_input(id, &a)?;
    backend.install(|| first.run());
    let rel_err = checked(id, spec, &a, &w, |c| first.read_output(id, c))?;
    let weight_bytes = first.weight_bytes().len();
    // Odd, so that the stream and the product, which take turns, each
    // read every copy rather than half of them.
    let copies = (crate::evict::rotation_bytes().div_ceil(weight_bytes) + 1) | 1;
    let how = format!("{}, {threads} threads", first.describe());
    let mut gemvs = vec![first; copies];
    let mut turn = 0;
    let mut stream_us = Vec::new();
    let mut gemv_us = Vec::new();
    for rep in 0..=reps.max(1) {
        // Pass 0 goes over every copy once, untimed.
        for _ in 0..if rep == 0 { copies } else { 1 } {
            let g = &gemvs[turn % copies];
            let s = timed(backend, || stream_sum(g.weight_bytes(), threads));
            let g = &mut gemvs[(turn + 1) % copies];
            let p = timed(backend, || g.run());
            if rep > 0 {
                stream_us.push(s);
                gemv_us.push(p);
            }
            turn += 2;
        }
    }
    drop(gemvs);
    // The `gemm` crate has no bf16.
    let gemm_crate = match gemm_crate && spec.dtype != DType::Bf16 {
        true => Some(gemm_crate_runs(backend, spec, (&a, &w), copies, reps)?),
        false => None,
    };
    let stats = |s: &[f64]| Stats::from_samples(s).expect("at least one run");
    Ok(GemvBench {
        weight_bytes: weight_bytes as u64,
        copies,
        stream: stats(&stream_us),
        gemv: stats(&gemv_us),
        gemm_crate,
        rel_err,
        how,
    })
}

/// The `gemm` crate's product of `spec` on the same pool, on as many
/// copies: `reps` timed runs after one pass over every copy. f32 and f16
/// only.
fn gemm_crate_runs(
    backend: &CpuBackend,
    spec: &GemmSpec,
    (a, w): (&[f32], &[f32]),
    copies: usize,
    reps: u32,
) -> Result<Stats> {
    let id = backend.processor.id.as_str();
    let par = Parallelism::Rayon(backend.cores().len());
    let mut dense = (0..copies)
        .map(|_| {
            let mut d = Dense::new(id, spec, w)?;
            d.write_input(id, a)?;
            Ok(d)
        })
        .collect::<Result<Vec<_>>>()?;
    let mut us = Vec::new();
    for i in 0..copies + reps.max(1) as usize {
        let d = &mut dense[i % copies];
        let t = timed(backend, || d.run(par));
        if i >= copies {
            us.push(t);
        }
    }
    checked(id, spec, a, w, |c| dense[0].read_output(id, c))?;
    Ok(Stats::from_samples(&us).expect("at least one run"))
}

/// µs that `f` takes on one of `backend`'s workers.
fn timed<R>(backend: &CpuBackend, f: impl FnOnce() -> R + Send) -> f64 {
    backend.install(|| {
        let t = Instant::now();
        std::hint::black_box(f());
        t.elapsed().as_secs_f64() * 1e6
    })
}

/// The error of the output `read` gives against the host reference, or an
/// error past the dtype's tolerance.
fn checked(
    id: &str,
    spec: &GemmSpec,
    a: &[f32],
    w: &[f32],
    read: impl FnOnce(&mut [f32]) -> Result<()>,
) -> Result<f64> {
    let (m, k, n) = spec.shape.mkn();
    let mut c = vec![0f32; m as usize * n as usize];
    read(&mut c)?;
    let r = verify::check(&spec.shape, a, w, &c);
    let tol = crate::default_tolerance(spec.dtype, k);
    if !r.passes(tol) {
        let (row, col) = r.worst;
        let why = format!(
            "wrong result: error {:.3e} > {tol:.3e} at C[{row},{col}]",
            r.rel_err
        );
        return Err(Error::backend(id, why));
    }
    Ok(r.rel_err)
}

/// Sums `bytes` as 64-bit words on the current pool's threads, in
/// `PARTS_PER_THREAD` parts per thread: a plain read of every byte.
pub fn stream_sum(bytes: &[u8], threads: usize) -> u64 {
    let part = bytes
        .len()
        .div_ceil(threads.max(1) * PARTS_PER_THREAD)
        .div_ceil(64)
        * 64;
    let sum = bytes
        .par_chunks(part.max(64))
        .map(|c| {
            // SAFETY: any 8 bytes are a u64; `align_to` keeps the words
            // aligned and leaves the ends to the byte loops.
            let (head, words, tail) = unsafe { c.align_to::<u64>() };
            let bytes = head.iter().chain(tail).map(|&b| b as u64);
            words.iter().fold(0u64, |s, &x| s.wrapping_add(x)) + bytes.sum::<u64>()
        })
        .reduce(|| 0, u64::wrapping_add);
    std::hint::black_box(sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_reads_every_byte() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        let words: Vec<u64> = (0..12_501u64)
            .map(|i| i.wrapping_mul(0x9E37_79B9))
            .collect();
        // SAFETY: the bytes of the words, within the vector.
        let bytes = unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), 100_008) };
        let sum = |b: &[u8]| pool.install(|| stream_sum(b, 3));
        // Aligned: the words' own sum.
        let want = words.iter().fold(0u64, |s, &x| s.wrapping_add(x));
        assert_eq!(sum(bytes), want);
        // Unaligned starts: one byte changed anywhere, at the ends and
        // around the parts' edges too, changes the sum.
        for skip in [1, 5] {
            let mut b = bytes[skip..].to_vec();
            let base = sum(&b);
            let part = b.len().div_ceil(3 * PARTS_PER_THREAD).div_ceil(64) * 64;
            for at in [0, part - 1, part, b.len() / 2, b.len() - 1] {
                b[at] = b[at].wrapping_add(1);
                assert_ne!(sum(&b), base, "byte {at} of {} not read", b.len());
                b[at] = b[at].wrapping_sub(1);
            }
        }
    }
}
