//! A decoder that runs a Hugging Face model with a plan: prefill, then
//! decode token by token, every GEMM through [`Runtime::linear`] as the
//! plan decides, the other operators on the host CPU in f32.
//!
//! Families: llama (llama3 `rope_scaling` included), qwen2, mistral and
//! phi3; the others the config importer reads are refused by name with
//! the feature they miss ([`DecoderConfig::load`]).
//!
//! Opening is in two steps so that nothing is allocated before every check
//! passed: [`ModelFiles::open`] reads the config and the checkpoint's
//! headers and checks every tensor; [`Decoder::load`] checks the memory
//! the weights, the KV cache and the plan's GEMMs will take, then reads.

mod attention;
mod checkpoint;
mod config;
mod forward;
mod rope;
mod sample;
mod tensors;
mod times;

use std::path::Path;
use std::time::Instant;

use hetero_plan::{ModelSpec, Phase};
use serde::Serialize;

pub use attention::KvCache;
pub use checkpoint::Checkpoint;
pub use config::{DecoderConfig, Family, RopeScaling};
pub use sample::{Sampler, Sampling, argmax};
pub use times::{OpKind, OpTime, OpTimes};

use crate::check::OutputCheck;
use crate::{Error, Result, Runtime};
use forward::Step;
use rope::Rope;
use tensors::{HostNames, HostTensors};

/// A model's config and checkpoint, every tensor checked, nothing read.
pub struct ModelFiles {
    cfg: DecoderConfig,
    ckpt: Checkpoint,
    names: HostNames,
}

impl ModelFiles {
    /// Reads `config.json` (refusing a family the decoder does not run) and
    /// the checkpoint's headers (a `.safetensors` file, an index or a
    /// folder), and checks every tensor's presence, shape and dtype.
    pub fn open(config: &Path, model: &ModelSpec, checkpoint: &Path) -> Result<ModelFiles> {
        let cfg = DecoderConfig::load(config, model)?;
        let ckpt = Checkpoint::open(checkpoint)?;
        let names = tensors::check(&ckpt, &cfg, model)?;
        Ok(ModelFiles { cfg, ckpt, names })
    }

    /// The decoder's config.
    pub fn config(&self) -> &DecoderConfig {
        &self.cfg
    }

    /// The checkpoint.
    pub fn checkpoint(&self) -> &Checkpoint {
        &self.ckpt
    }
}

/// What to generate.
#[derive(Debug, Clone)]
pub struct GenerateSpec {
    /// The prompt's token ids.
    pub prompt: Vec<u32>,
    /// Tokens to generate (fewer when an end token comes first).
    pub max_new: u32,
    /// Token ids that end generation.
    pub stop: Vec<u32>,
    /// How each token is chosen.
    pub sampling: Sampling,
    /// Keep every step's logits in the result.
    pub keep_logits: bool,
}

/// The outcome of [`Decoder::generate`].
#[derive(Debug, Clone, Serialize)]
pub struct Generation {
    /// The prompt's length.
    pub prompt_tokens: usize,
    /// Host time preparing every GEMM of the prefill and decode lengths
    /// before the clock started, µs.
    pub prepare_us: f64,
    /// Per processor with a staging ring (GEMMs that copy their weights
    /// from the host every run share it), its id and the ring's bytes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub staging: Vec<(String, u64)>,
    /// The generated token ids.
    pub tokens: Vec<u32>,
    /// Per generated token, the logits it was chosen from (when kept).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub logits: Vec<Vec<f32>>,
    /// Time to first token: the prefill through the first token, µs.
    pub ttft_us: f64,
    /// Host wall clock of each decode step, µs.
    pub decode_us: Vec<f64>,
    /// Host time of the reference products of `--check`, µs: excluded
    /// from `ttft_us` and `decode_us` (though they disturb the caches the
    /// operators after them find).
    pub check_us: f64,
    /// Per operator and phase, measured (and predicted where known).
    pub ops: Vec<OpTime>,
    /// Every GEMM's output against the host's f64 reference (`--check`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check: Option<GemmChecks>,
}

impl Generation {
    /// The GEMMs' (measured, predicted) time, µs: the whole prefill, or a
    /// decode step's mean (zeros without one).
    pub fn gemm_time(&self, phase: Phase) -> (f64, f64) {
        let gemms = self
            .ops
            .iter()
            .filter(|o| o.phase == phase && o.kind == OpKind::Gemm);
        let (m, p) = gemms.fold((0.0, 0.0), |(m, p), o| {
            (m + o.measured_us, p + o.predicted_us.unwrap_or(0.0))
        });
        let steps = match phase {
            Phase::Prefill => 1,
            Phase::Decode => self.decode_us.len().max(1),
        };
        (m / steps as f64, p / steps as f64)
    }
}

/// The GEMM outputs checked during a generation.
#[derive(Debug, Clone, Serialize)]
pub struct GemmChecks {
    /// Outputs compared.
    pub outputs: usize,
    /// Those within their bound.
    pub passed: usize,
    /// The worst, in words.
    pub worst: String,
    /// Its normalised error.
    pub worst_rel_err: f64,
    /// Its bound.
    pub worst_bound: f64,
}

/// One checked GEMM output.
#[derive(Debug, Clone)]
pub struct LinearCheck {
    /// Which output, in words.
    pub what: String,
    /// The comparison.
    pub result: OutputCheck,
    /// The largest error its processors' dtypes allow.
    pub bound: f64,
}

/// A loaded decoder: host tensors, RoPE, the KV cache.
pub struct Decoder {
    cfg: DecoderConfig,
    host: HostTensors,
    rope: Rope,
    kv: KvCache,
    times: OpTimes,
    checks: Option<Vec<LinearCheck>>,
    /// Host time of the checks' reference products so far, µs.
    check_us: f64,
}

impl Decoder {
    /// Bytes the decoder itself will hold on the host for `positions`: the
    /// host tensors and the KV cache.
    pub fn host_bytes(files: &ModelFiles, positions: usize) -> u128 {
        files.names.bytes(&files.ckpt)
            + KvCache::bytes(files.cfg.layers, positions, files.cfg.kv_dim())
    }

    /// Checks that the host tensors, a KV cache of `positions` and the
    /// plan's GEMMs for a prompt of `prompt_len` fit the memory of the
    /// processors the plan uses; then reads the host tensors.
    pub fn load(
        files: &ModelFiles,
        rt: &Runtime,
        prompt_len: u32,
        positions: usize,
    ) -> Result<Decoder> {
        if !rt.has_checkpoint() {
            return Err(Error::arg(
                "weights",
                "the runtime was opened with synthetic weights; open it with the model's checkpoint",
            ));
        }
        files.cfg.check_context(positions)?;
        let host = Decoder::host_bytes(files, positions);
        rt.check_generation_memory(prompt_len, host, "the decoder's KV cache and host tensors")?;
        let host = files.names.read(&files.ckpt)?;
        Ok(Decoder::new(files.cfg.clone(), host, positions))
    }

    /// A decoder on seeded synthetic host tensors (norm weights near 1,
    /// small biases, an embedding drawn per token), for a runtime opened
    /// with synthetic GEMM weights ([`crate::WeightSource::Synthetic`]):
    /// its tokens mean nothing, its times and checks are real. `share`
    /// keeps one layer's host tensors, as the runtime's `share_layers`
    /// keeps one layer's GEMM weights. The memory is checked as by
    /// [`Decoder::load`].
    pub fn synthetic(
        cfg: DecoderConfig,
        rt: &Runtime,
        prompt_len: u32,
        positions: usize,
        seed: u64,
        share: bool,
    ) -> Result<Decoder> {
        if rt.has_checkpoint() {
            return Err(Error::arg(
                "weights",
                "the runtime was opened with a checkpoint; synthetic host tensors need synthetic GEMM weights",
            ));
        }
        cfg.check_context(positions)?;
        let host = HostTensors::synthetic_bytes(&cfg, share)
            + KvCache::bytes(cfg.layers, positions, cfg.kv_dim());
        rt.check_generation_memory(prompt_len, host, "the decoder's KV cache and host tensors")?;
        let host = HostTensors::synthetic(&cfg, seed, share);
        Ok(Decoder::new(cfg, host, positions))
    }

    fn new(cfg: DecoderConfig, host: HostTensors, positions: usize) -> Decoder {
        Decoder {
            host,
            rope: Rope::new(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling),
            kv: KvCache::new(cfg.layers, positions, cfg.kv_dim()),
            times: OpTimes::default(),
            checks: None,
            check_us: 0.0,
            cfg,
        }
    }

    /// Generates from `spec.prompt`; `progress(phase, done, total)` is told
    /// of each prefill layer and each decode step. With `check`, the times
    /// are a second generation's, after a first whose every GEMM output
    /// was checked.
    pub fn generate(
        &mut self,
        rt: &mut Runtime,
        spec: &GenerateSpec,
        check: bool,
        progress: &mut dyn FnMut(Phase, usize, usize),
    ) -> Result<Generation> {
        let plen = spec.prompt.len();
        if plen == 0 || spec.max_new == 0 {
            return Err(Error::arg(
                "generate",
                "the prompt and --max-new need at least one token",
            ));
        }
        if plen + spec.max_new as usize > self.kv.capacity() {
            return Err(Error::arg(
                "generate",
                format!(
                    "{plen} prompt tokens and {} new ones need more positions than the {} the KV cache holds",
                    spec.max_new,
                    self.kv.capacity()
                ),
            ));
        }
        if let Some(t) = spec.prompt.iter().find(|t| **t as usize >= self.cfg.vocab) {
            return Err(Error::arg(
                "prompt",
                format!(
                    "token id {t} is outside the vocabulary of {}",
                    self.cfg.vocab
                ),
            ));
        }
        if !check {
            return self.pass(rt, spec, false, progress);
        }
        // Every GEMM output of a first generation is checked against the
        // host's reference; a second generation of the same prompt is the
        // one timed, so the reference products (seconds for a large model,
        // the GPU idle meanwhile) neither count in its times nor change
        // what its operators find.
        let checked = self.pass(rt, spec, true, progress)?;
        let mut timed = self.pass(rt, spec, false, &mut |_, _, _| {})?;
        timed.prepare_us = checked.prepare_us;
        timed.check_us = checked.check_us;
        timed.check = checked.check;
        Ok(timed)
    }

    /// One generation from `spec.prompt` (checked when `check`), timed.
    fn pass(
        &mut self,
        rt: &mut Runtime,
        spec: &GenerateSpec,
        check: bool,
        progress: &mut dyn FnMut(Phase, usize, usize),
    ) -> Result<Generation> {
        let plen = spec.prompt.len();
        // Everything prepared and the host's worker threads started before
        // the clock starts: TTFT counts the run, not the preparation.
        let t = Instant::now();
        rt.prepare(Phase::Prefill, plen as u32)?;
        if spec.max_new > 1 {
            rt.prepare(Phase::Decode, 1)?;
        }
        rayon::broadcast(|_| ());
        let prepare_us = t.elapsed().as_secs_f64() * 1e6;
        self.times = OpTimes::default();
        self.checks = check.then(Vec::new);
        self.check_us = 0.0;
        let mut sampler = Sampler::new(spec.sampling);
        let mut out = Generation {
            prompt_tokens: plen,
            prepare_us,
            staging: rt.staging_bytes(),
            tokens: Vec::new(),
            logits: Vec::new(),
            ttft_us: 0.0,
            decode_us: Vec::new(),
            check_us: 0.0,
            ops: Vec::new(),
            check: None,
        };
        let start = Instant::now();
        let prefill = Step {
            phase: Phase::Prefill,
            len: plen as u32,
            rows: plen,
            pos0: 0,
        };
        let mut layer_progress = |d, t| progress(Phase::Prefill, d, t);
        let logits = self.forward(rt, &spec.prompt, prefill, &mut layer_progress)?;
        let mut next = self.choose(&mut sampler, logits, spec, &mut out);
        out.ttft_us = start.elapsed().as_secs_f64() * 1e6;
        for i in 1..spec.max_new as usize {
            if spec.stop.contains(&next) {
                break;
            }
            let t = Instant::now();
            let step = Step {
                phase: Phase::Decode,
                len: 1,
                rows: 1,
                pos0: plen + i - 1,
            };
            let logits = self.forward(rt, &[next], step, &mut |_, _| {})?;
            next = self.choose(&mut sampler, logits, spec, &mut out);
            out.decode_us.push(t.elapsed().as_secs_f64() * 1e6);
            progress(Phase::Decode, i, spec.max_new as usize - 1);
        }
        out.ops = self.times.list();
        out.check_us = self.check_us;
        out.check = self.checks.take().map(summarise);
        Ok(out)
    }

    /// Samples the next token from `logits` and records both.
    fn choose(
        &mut self,
        sampler: &mut Sampler,
        logits: Vec<f32>,
        spec: &GenerateSpec,
        out: &mut Generation,
    ) -> u32 {
        let t = Instant::now();
        let next = sampler.next(&logits);
        let phase = if out.tokens.is_empty() {
            Phase::Prefill
        } else {
            Phase::Decode
        };
        self.times
            .host("sampling", phase, t.elapsed().as_secs_f64() * 1e6);
        out.tokens.push(next);
        if spec.keep_logits {
            out.logits.push(logits);
        }
        next
    }
}

/// The checks of a generation in one summary.
fn summarise(checks: Vec<LinearCheck>) -> GemmChecks {
    let passed = checks
        .iter()
        .filter(|c| c.result.rel_err <= c.bound)
        .count();
    let worst = checks
        .iter()
        .max_by(|a, b| (a.result.rel_err / a.bound).total_cmp(&(b.result.rel_err / b.bound)));
    GemmChecks {
        outputs: checks.len(),
        passed,
        worst: worst.map(|c| c.what.clone()).unwrap_or_default(),
        worst_rel_err: worst.map_or(0.0, |c| c.result.rel_err),
        worst_bound: worst.map_or(0.0, |c| c.bound),
    }
}

#[cfg(test)]
mod tests;
