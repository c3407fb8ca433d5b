//! `hetero generate`: run a Hugging Face decoder model with a plan on this
//! machine's processors, prefill then decode, and report the tokens (or
//! text), time to first token, tokens per second and where the time went.

use std::path::{Path, PathBuf};

use clap::Args;
use hetero_plan::{ModelSpec, Phase, Plan};
use hetero_runtime::model::{DecoderConfig, OpKind};
use hetero_runtime::{
    Decoder, GenerateSpec, Generation, ModelFiles, Runtime, RuntimeOptions, Sampling, WeightSource,
};
use serde::Serialize;

use crate::bad;
use crate::runtime_args::RuntimeArgs;

#[derive(Debug, Args)]
#[command(after_help = "Examples:
  hetero generate plan.ron --model qwen2.5-0.5b/ --tokenizer qwen2.5-0.5b/tokenizer.json --prompt 'Hello' --max-new 32
  hetero generate plan.ron --model tiny/ --prompt-tokens 1,5,9 --max-new 8 --check --json
  hetero generate plan.ron --model qwen2.5-1.5b.json --synthetic-weights --share-weights --prompt-tokens 1,2,3 --max-new 8

--model is a folder with config.json and model.safetensors (or a sharded
model.safetensors.index.json), or with --synthetic-weights a config.json
alone. GEMMs run as the plan decides; attention, norms, RoPE, the
activation and sampling run on the host CPU in f32.")]
pub struct GenerateArgs {
    /// The plan (.ron or .json) written by `hetero solve` for this model.
    plan: PathBuf,
    /// The model folder: config.json and its safetensors checkpoint (with
    /// --synthetic-weights: a config.json, or a folder holding one).
    #[arg(long)]
    model: PathBuf,
    /// Seeded synthetic weights instead of a checkpoint: every tensor (the
    /// embedding, norms, biases, GEMMs, lm_head). The tokens are then not
    /// a model's output; the times and --check are real.
    #[arg(long, conflicts_with = "tokenizer")]
    synthetic_weights: bool,
    /// Seed of the synthetic weights.
    #[arg(long, default_value_t = 0x5eed, requires = "synthetic_weights")]
    seed_weights: u64,
    /// Every layer runs layer 0's synthetic weights (one layer in memory),
    /// so a large model's times can be measured without its checkpoint.
    #[arg(long, requires = "synthetic_weights")]
    share_weights: bool,
    /// A Hugging Face tokenizer.json: --prompt is text and the output is
    /// decoded; without it, token ids go in and out.
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// The prompt as text (needs --tokenizer).
    #[arg(
        long,
        conflicts_with = "prompt_tokens",
        required_unless_present = "prompt_tokens"
    )]
    prompt: Option<String>,
    /// The prompt as token ids: `1,5,9` or `1 5 9`.
    #[arg(long)]
    prompt_tokens: Option<String>,
    /// Tokens to generate (fewer when the model's end token comes first).
    #[arg(long)]
    max_new: u32,
    /// Keep generating past the config's eos_token_id.
    #[arg(long)]
    ignore_eos: bool,
    /// Compare every GEMM's output with a reference product on the host (f64).
    #[arg(long)]
    check: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Include every step's logits in the JSON output.
    #[arg(long, requires = "json")]
    logits: bool,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Sample from the K most likely tokens only (0: all).
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    /// Sample from the most likely tokens whose probabilities reach P.
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    /// Seed of the sampler.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    #[command(flatten)]
    rt: RuntimeArgs,
}

/// Prompts at least this long get a progress line on stderr.
const PROGRESS_FROM: usize = 128;

/// What `--json` prints.
#[derive(Serialize)]
struct Output<'a> {
    model: String,
    plan: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<String>,
    tpot_us: Option<f64>,
    prefill_tokens_per_s: f64,
    decode_tokens_per_s: Option<f64>,
    /// The plan's forecast of this generation (null for a plan without
    /// costs of the host operators, or one that does not cover its lengths).
    predicted: Option<Predicted>,
    /// The GEMMs' share, measured against the plan's prediction.
    gemms: GemmShare,
    #[serde(flatten)]
    generation: &'a Generation,
    notes: Vec<String>,
}

/// The plan's forecast (`Plan::forecast_generation`) of the figures the
/// generation measured.
#[derive(Serialize)]
pub(crate) struct Predicted {
    pub ttft_us: f64,
    /// Null with a single generated token.
    pub tpot_us: Option<f64>,
    pub prefill_tokens_per_s: f64,
    pub decode_tokens_per_s: Option<f64>,
}

/// The GEMMs' time of the prefill and of a decode step, µs.
#[derive(Serialize)]
struct GemmShare {
    prefill_measured_us: f64,
    prefill_predicted_us: f64,
    decode_step_measured_us: f64,
    decode_step_predicted_us: f64,
}

pub fn run(args: GenerateArgs) -> anyhow::Result<()> {
    check_args(&args)?;
    let (config, ckpt) = model_paths(&args.model, args.synthetic_weights)?;
    let model = hetero_plan::hf::load_config(&config)?;
    let files = match args.synthetic_weights {
        true => None,
        false => Some(ModelFiles::open(&config, &model, &ckpt)?),
    };
    let tokenizer = match &args.tokenizer {
        Some(p) => Some(load_tokenizer(p)?),
        None => None,
    };
    let prompt = prompt_ids(&args, tokenizer.as_ref())?;
    args.rt.hold_cpu_poll()?;
    let weights = match args.synthetic_weights {
        true => WeightSource::Synthetic {
            seed: args.seed_weights,
            share_layers: args.share_weights,
        },
        false => WeightSource::Safetensors(ckpt.clone()),
    };
    let opts = args.rt.options(weights, None);
    let plen = prompt.len() as u32;
    let positions = prompt.len() + args.max_new as usize;
    let model_in = (args.model.as_path(), config.as_path(), &model);
    let (mut rt, mut decoder) =
        open_generation(&args.plan, model_in, files.as_ref(), opts, plen, positions)?;
    let spec = GenerateSpec {
        prompt,
        max_new: args.max_new,
        stop: if args.ignore_eos {
            Vec::new()
        } else {
            eos_ids(&config)
        },
        sampling: Sampling {
            temperature: args.temperature,
            top_k: args.top_k,
            top_p: args.top_p,
            seed: args.seed,
        },
        keep_logits: args.logits,
    };
    let mut g = run_generation(&mut decoder, &mut rt, &spec, args.check)?;
    let text = match &tokenizer {
        Some(t) => Some(
            t.decode(&g.tokens, true)
                .map_err(|e| anyhow::anyhow!("decoding the generated tokens: {e}"))?,
        ),
        None => None,
    };
    let mut notes = notes(&args);
    let predicted = forecast(rt.plan(), &mut g, &mut notes);
    let out = summary(&args, &rt, &g, text, predicted, notes);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print!("{}", to_text(&out));
    }
    check_passed(&g)
}

/// Opens `plan` on this machine's processors and loads the model's
/// decoder for a prompt of `prompt_len` tokens and `positions` in all:
/// from `files` (a checkpoint), else from the config's synthetic weights
/// (`opts.weights`' seed and sharing). `model` is the `--model` path as
/// given, its config.json and its spec.
pub(crate) fn open_generation(
    plan: &Path,
    (model_arg, config, model): (&Path, &Path, &ModelSpec),
    files: Option<&ModelFiles>,
    opts: RuntimeOptions,
    prompt_len: u32,
    positions: usize,
) -> anyhow::Result<(Runtime, Decoder)> {
    let synthetic = match &opts.weights {
        WeightSource::Synthetic { seed, share_layers } => Some((*seed, *share_layers)),
        WeightSource::Safetensors(_) => None,
    };
    let rt = Runtime::open(plan, model.clone(), opts)?;
    let decoder = match (files, synthetic) {
        (Some(files), _) => Decoder::load(files, &rt, prompt_len, positions),
        (None, Some((seed, share))) => DecoderConfig::load(config, model)
            .and_then(|cfg| Decoder::synthetic(cfg, &rt, prompt_len, positions, seed, share)),
        (None, None) => unreachable!("a checkpoint's weights come with its files"),
    };
    let decoder = decoder.map_err(|e| match e {
        hetero_runtime::Error::Memory(_) => anyhow::Error::new(e).context(format!(
            "{}: the model is too large for this machine",
            model_arg.display()
        )),
        e => e.into(),
    })?;
    Ok((rt, decoder))
}

/// Runs `spec` through `decoder`, with a progress line on stderr for a
/// long prompt's prefill.
pub(crate) fn run_generation(
    decoder: &mut Decoder,
    rt: &mut Runtime,
    spec: &GenerateSpec,
    check: bool,
) -> anyhow::Result<Generation> {
    let show = spec.prompt.len() >= PROGRESS_FROM;
    let mut progress = |phase: Phase, done: usize, total: usize| {
        if show && phase == Phase::Prefill {
            eprint!(
                "\rprefill of {} tokens: layer {done}/{total}",
                spec.prompt.len()
            );
            if done == total {
                eprintln!();
            }
        }
    };
    Ok(decoder.generate(rt, spec, check, &mut progress)?)
}

/// A generation's measured rates.
pub(crate) struct Rates {
    /// Mean time per output token after the first, µs (none with one token).
    pub tpot_us: Option<f64>,
    pub prefill_tokens_per_s: f64,
    pub decode_tokens_per_s: Option<f64>,
}

/// The rates `g` measured.
pub(crate) fn rates(g: &Generation) -> Rates {
    let decoded: f64 = g.decode_us.iter().sum();
    let tpot = (!g.decode_us.is_empty()).then(|| decoded / g.decode_us.len() as f64);
    Rates {
        tpot_us: tpot,
        prefill_tokens_per_s: g.prompt_tokens as f64 / (g.ttft_us / 1e6),
        decode_tokens_per_s: tpot.map(|t| 1e6 / t),
    }
}

/// Arguments clap cannot check.
fn check_args(args: &GenerateArgs) -> anyhow::Result<()> {
    if args.max_new == 0 {
        return Err(bad("--max-new must be at least 1"));
    }
    if args.prompt.is_some() && args.tokenizer.is_none() {
        return Err(bad(
            "--prompt is text and needs --tokenizer tokenizer.json; give token ids with --prompt-tokens",
        ));
    }
    if !(args.temperature >= 0.0 && args.top_p > 0.0 && args.top_p <= 1.0) {
        return Err(bad(
            "--temperature must be at least 0 and --top-p in (0, 1]",
        ));
    }
    Ok(())
}

/// config.json and the checkpoint of a model folder (or of the folder of
/// a config.json named directly).
pub(crate) fn model_paths(model: &Path, synthetic: bool) -> anyhow::Result<(PathBuf, PathBuf)> {
    let dir = if model.is_dir() {
        model.to_path_buf()
    } else if model.is_file() && synthetic {
        return Ok((model.to_path_buf(), PathBuf::new()));
    } else if model.is_file() {
        model.parent().unwrap_or(Path::new(".")).to_path_buf()
    } else {
        return Err(bad(format!(
            "--model {}: no such folder (a folder with config.json and model.safetensors)",
            model.display()
        )));
    };
    let config = if model.is_file() {
        model.to_path_buf()
    } else {
        dir.join("config.json")
    };
    if !config.is_file() {
        return Err(bad(format!("{}: no such file", config.display())));
    }
    Ok((config, dir))
}

/// A `tokenizer.json`.
fn load_tokenizer(path: &Path) -> anyhow::Result<tokenizers::Tokenizer> {
    if !path.is_file() {
        return Err(bad(format!("--tokenizer {}: no such file", path.display())));
    }
    tokenizers::Tokenizer::from_file(path)
        .map_err(|e| bad(format!("{}: not a tokenizer.json: {e}", path.display())))
}

/// The prompt's token ids, from --prompt-tokens or the tokenized --prompt.
fn prompt_ids(
    args: &GenerateArgs,
    tok: Option<&tokenizers::Tokenizer>,
) -> anyhow::Result<Vec<u32>> {
    if let Some(ids) = &args.prompt_tokens {
        let parsed: Result<Vec<u32>, _> = ids
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|s| !s.is_empty())
            .map(str::parse)
            .collect();
        return match parsed {
            Ok(v) if !v.is_empty() => Ok(v),
            _ => Err(bad(format!(
                "--prompt-tokens `{ids}`: expected token ids like 1,5,9"
            ))),
        };
    }
    let (Some(text), Some(tok)) = (&args.prompt, tok) else {
        unreachable!("clap and check_args require one of them")
    };
    let enc = tok
        .encode(text.as_str(), true)
        .map_err(|e| bad(format!("--prompt: the tokenizer failed: {e}")))?;
    if enc.get_ids().is_empty() {
        return Err(bad("--prompt: the text makes no tokens"));
    }
    Ok(enc.get_ids().to_vec())
}

/// `eos_token_id` of config.json: one id or a list.
fn eos_ids(config: &Path) -> Vec<u32> {
    let v: serde_json::Value = std::fs::read_to_string(config)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    match &v["eos_token_id"] {
        serde_json::Value::Number(n) => n.as_u64().map(|n| n as u32).into_iter().collect(),
        serde_json::Value::Array(a) => a.iter().filter_map(|n| Some(n.as_u64()? as u32)).collect(),
        _ => Vec::new(),
    }
}

fn summary<'a>(
    args: &GenerateArgs,
    rt: &Runtime,
    g: &'a Generation,
    text: Option<String>,
    predicted: Option<Predicted>,
    notes: Vec<String>,
) -> Output<'a> {
    let r = rates(g);
    let (pm, pp) = g.gemm_time(Phase::Prefill);
    let (dm, dp) = g.gemm_time(Phase::Decode);
    Output {
        gemms: GemmShare {
            prefill_measured_us: pm,
            prefill_predicted_us: pp,
            decode_step_measured_us: dm,
            decode_step_predicted_us: dp,
        },
        model: rt.model().name.clone(),
        plan: args.plan.display().to_string(),
        text,
        tpot_us: r.tpot_us,
        prefill_tokens_per_s: r.prefill_tokens_per_s,
        decode_tokens_per_s: r.decode_tokens_per_s,
        predicted,
        generation: g,
        notes,
    }
}

/// The plan's forecast of `g`: TTFT and time per output token, and each
/// host operator's prediction where the plan has one (the layers'
/// attention, rope, norm, activation, residual; not the embedding, the
/// final norm or sampling). `None`, with a note saying why, for a plan
/// without costs of the host operators.
pub(crate) fn forecast(
    plan: &Plan,
    g: &mut Generation,
    notes: &mut Vec<String>,
) -> Option<Predicted> {
    let Some(ng) = &plan.non_gemm else {
        notes.push(
            "the plan has no costs of the host operators (solved before plans placed them): \
             only the GEMMs have predictions; solve it again for predicted TTFT and time per token"
                .into(),
        );
        return None;
    };
    let prompt = g.prompt_tokens as u32;
    let f = match plan.forecast_generation(prompt, g.tokens.len() as u32) {
        Ok(f) => f,
        Err(e) => {
            notes.push(format!("no forecast: {e}"));
            return None;
        }
    };
    let mut decode: Vec<(String, f64)> = Vec::new();
    for i in 0..g.decode_us.len() as u32 {
        let Ok(step) = plan.forecast_decode(prompt + 1 + i) else {
            break;
        };
        for o in step.ops.iter().filter(|o| !o.gemm) {
            match decode.iter_mut().find(|(n, _)| *n == o.op) {
                Some((_, us)) => *us += o.us,
                None => decode.push((o.op.clone(), o.us)),
            }
        }
    }
    for op in g.ops.iter_mut().filter(|o| o.kind == OpKind::Host) {
        op.predicted_us = match op.phase {
            Phase::Prefill => (f.prefill.ops.iter())
                .find(|o| !o.gemm && o.op == op.op)
                .map(|o| o.us),
            Phase::Decode => decode.iter().find(|(n, _)| *n == op.op).map(|(_, us)| *us),
        };
    }
    let elsewhere: Vec<&str> = (ng.placements.iter())
        .map(|p| p.chosen.at.as_str())
        .filter(|at| *at != hetero_plan::nongemm::HOST)
        .collect();
    if !elsewhere.is_empty() {
        notes.push(format!(
            "the plan places some layers' host operators on {}; this runtime runs them on the \
             host CPU, so their predictions are for a placement it does not run",
            elsewhere.join(", ")
        ));
    }
    let tpot = (!g.decode_us.is_empty()).then_some(f.per_token_us);
    Some(Predicted {
        ttft_us: f.ttft_us,
        tpot_us: tpot,
        prefill_tokens_per_s: prompt as f64 / (f.ttft_us / 1e6),
        decode_tokens_per_s: tpot.map(|t| 1e6 / t),
    })
}

fn notes(args: &GenerateArgs) -> Vec<String> {
    let mut n = vec![
        "GEMMs run as the plan decides; attention, norms, RoPE, the activation, residuals and sampling run on the host CPU in f32".to_string(),
        "the embedding, the final norm and sampling have no predicted figure (-): the plan costs the layers' operators".into(),
    ];
    if args.synthetic_weights {
        n.push(
            "synthetic weights: tokens are not a model's output; timings and --check are real"
                .into(),
        );
    }
    if args.check {
        n.push(
            "--check: every GEMM output of a first generation was checked; the times are a second's, of the same prompt, unchecked"
                .into(),
        );
    }
    n
}

fn to_text(o: &Output<'_>) -> String {
    use std::fmt::Write;
    let g = o.generation;
    let mut s = String::new();
    let ids: Vec<String> = g.tokens.iter().map(u32::to_string).collect();
    let _ = writeln!(s, "tokens: {}", ids.join(" "));
    if let Some(t) = &o.text {
        let _ = writeln!(s, "text: {t}");
    }
    let _ = writeln!(
        s,
        "{} prompt tokens, {} generated with {}",
        g.prompt_tokens,
        g.tokens.len(),
        o.plan
    );
    let _ = writeln!(
        s,
        "prepared the plan's GEMMs in {:.3} ms (not counted below)",
        g.prepare_us / 1e3
    );
    for (id, b) in &g.staging {
        let _ = writeln!(
            s,
            "{id} staging ring: {:.1} MiB of its memory for the weights copied every run",
            *b as f64 / (1u64 << 20) as f64
        );
    }
    let pred = |v: Option<f64>, scale: f64, unit: &str| match v {
        Some(v) => format!(", predicted {:.3} {unit}", v / scale),
        None => String::new(),
    };
    let p = o.predicted.as_ref();
    let _ = writeln!(
        s,
        "time to first token  {:>10.3} ms{}",
        g.ttft_us / 1e3,
        pred(p.map(|p| p.ttft_us), 1e3, "ms")
    );
    match o.tpot_us {
        Some(t) => {
            let _ = writeln!(
                s,
                "time per output token {:>9.3} ms{}",
                t / 1e3,
                pred(p.and_then(|p| p.tpot_us), 1e3, "ms")
            );
        }
        None => {
            let _ = writeln!(
                s,
                "time per output token         -  (one token: no decode step)"
            );
        }
    }
    let gm = &o.gemms;
    let _ = writeln!(
        s,
        "  GEMMs of the prefill  {:>9.3} ms measured, {:.3} ms predicted",
        gm.prefill_measured_us / 1e3,
        gm.prefill_predicted_us / 1e3
    );
    if o.tpot_us.is_some() {
        let _ = writeln!(
            s,
            "  GEMMs of a decode step {:>8.3} ms measured, {:.3} ms predicted",
            gm.decode_step_measured_us / 1e3,
            gm.decode_step_predicted_us / 1e3
        );
    }
    let rate = |v: Option<f64>| match v {
        Some(v) => format!(", predicted {v:.1}"),
        None => String::new(),
    };
    let _ = writeln!(
        s,
        "prefill {:>12.1} tokens/s{}",
        o.prefill_tokens_per_s,
        rate(p.map(|p| p.prefill_tokens_per_s))
    );
    if let Some(d) = o.decode_tokens_per_s {
        let _ = writeln!(
            s,
            "decode  {d:>12.1} tokens/s{}",
            rate(p.and_then(|p| p.decode_tokens_per_s))
        );
    }
    let _ = writeln!(
        s,
        "{:<8} {:<12} {:>5} {:>7} {:>13} {:>13}",
        "phase", "op", "kind", "calls", "measured µs", "predicted µs"
    );
    for op in &g.ops {
        let _ = writeln!(
            s,
            "{:<8} {:<12} {:>5} {:>7} {:>13.1} {:>13}",
            op.phase.as_str(),
            op.op,
            match op.kind {
                OpKind::Gemm => "gemm",
                OpKind::Host => "host",
            },
            op.calls,
            op.measured_us,
            op.predicted_us
                .map_or_else(|| "-".to_string(), |p| format!("{p:.1}"))
        );
    }
    if let Some(c) = &g.check {
        let _ = writeln!(
            s,
            "check: {}/{} GEMM outputs within their bound; worst {} (error {:.3e}, bound {:.3e})",
            c.passed, c.outputs, c.worst, c.worst_rel_err, c.worst_bound
        );
    }
    for n in &o.notes {
        let _ = writeln!(s, "note: {n}");
    }
    s
}

/// Exit 1 when a checked output was off its bound.
pub(crate) fn check_passed(g: &Generation) -> anyhow::Result<()> {
    match &g.check {
        Some(c) if c.passed < c.outputs => Err(hetero_runtime::Error::CheckFailed {
            failed: c.outputs - c.passed,
            checked: c.outputs,
            worst: format!(
                "{} (error {:.3e}, bound {:.3e})",
                c.worst, c.worst_rel_err, c.worst_bound
            ),
        }
        .into()),
        _ => Ok(()),
    }
}
