#!/usr/bin/env python3
"""Reference outputs from Hugging Face transformers for `hetero generate`.

Builds a decoder from a `config.json` with random weights drawn from a
fixed seed, saves it as a Hugging Face checkpoint (config.json plus
safetensors), runs greedy generation with transformers and writes what it
produced:

    OUT/config.json, OUT/model.safetensors (or shards with
    model.safetensors.index.json), OUT/expected.json

expected.json holds the prompt's token ids, the generated ids, and the raw
logits of every generated step: logits[0] is the prefill's last position
(it chose tokens[0]), logits[i] the decode step that chose tokens[i]; with
`--top-logits K`, `top_logits[i]` holds that step's K best (id, logit)
pairs instead, for vocabularies too large to store whole. With
`--f32-too`, `tokens_f32` and its logits come from the same rounded weights
computed in f32, the reference for a runtime that keeps activations in f32. It
also records the smallest gap between the best and the second-best logit
over the steps (`min_top2_gap`), so a reader can tell how much numerical
slack a greedy match has.

Random initialisation follows transformers' own (normal with
`initializer_range`); norm weights and biases, which it initialises to one
and zero, are perturbed so that a decoder that ignores them fails.

With `--time`, the script also times transformers' `generate` on the chosen
device: prefill (the prompt) and decode (`--max-new` tokens) tokens/s,
medians of `--repeats` runs, printed as JSON on stdout.

Needs torch and transformers (`pip install torch transformers safetensors`).

Examples:
    scripts/reference.py --config tests/fixtures/models/configs/llama.json \\
        --out tests/fixtures/models/llama
    scripts/reference.py --config qwen2.5-0.5b/config.json --dtype bf16 \\
        --device cuda --prompt-len 512 --max-new 64 --top-logits 5 --out /tmp/qwen --time
"""

import argparse
import json
import pathlib
import statistics
import sys
import time


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True, type=pathlib.Path,
                   help="a Hugging Face config.json")
    p.add_argument("--out", required=True, type=pathlib.Path,
                   help="folder to write (must not hold the input config)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--initializer-range", type=float, default=None,
                   help="override the config's initializer_range (a wider one gives "
                        "peakier logits, so greedy tokens depend less on rounding)")
    p.add_argument("--dtype", choices=["f32", "f16", "bf16"], default="f32")
    p.add_argument("--device", default="cpu")
    p.add_argument("--prompt-tokens", help="comma-separated token ids")
    p.add_argument("--prompt-len", type=int, default=7,
                   help="random prompt of this length (when --prompt-tokens is not given)")
    p.add_argument("--max-new", type=int, default=8)
    p.add_argument("--max-shard-size", default=None,
                   help="shard the checkpoint (e.g. 200KB) to exercise the index file")
    p.add_argument("--top-logits", type=int, default=0, metavar="K",
                   help="store each step's K best (token, logit) pairs instead of every "
                        "logit (large vocabularies)")
    p.add_argument("--f32-too", action="store_true",
                   help="also generate with the same (rounded) weights computed in f32: "
                        "tokens_f32 and its logits, the reference for a runtime that keeps "
                        "activations in f32")
    p.add_argument("--time", action="store_true",
                   help="also time transformers' generate on --device")
    p.add_argument("--repeats", type=int, default=5)
    return p.parse_args(argv)


DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


def build(args, torch, transformers):
    config = transformers.AutoConfig.from_pretrained(args.config)
    if args.initializer_range is not None:
        config.initializer_range = args.initializer_range
    torch.manual_seed(args.seed)
    model = transformers.AutoModelForCausalLM.from_config(
        config, torch_dtype=getattr(torch, DTYPES[args.dtype]), attn_implementation="eager"
    )
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                param.add_(0.1 * torch.randn_like(param))
            elif name.endswith("bias"):
                param.copy_(0.1 * torch.randn_like(param))
    return model.to(args.device).eval()


def prompt_ids(args, config):
    if args.prompt_tokens:
        ids = [int(t) for t in args.prompt_tokens.split(",") if t.strip()]
    else:
        import random
        rng = random.Random(args.seed)
        ids = [rng.randrange(config.vocab_size) for _ in range(args.prompt_len)]
    bad = [t for t in ids if not 0 <= t < config.vocab_size]
    if bad or not ids:
        sys.exit(f"{args.config}: prompt token ids must lie in 0..{config.vocab_size - 1}")
    return ids


def greedy(model, ids, max_new, torch):
    x = torch.tensor([ids], device=model.device)
    out = model.generate(
        x,
        attention_mask=torch.ones_like(x),
        max_new_tokens=max_new,
        min_new_tokens=max_new,
        do_sample=False,
        num_beams=1,
        output_logits=True,
        return_dict_in_generate=True,
        pad_token_id=0,
    )
    tokens = out.sequences[0, len(ids):].tolist()
    logits = [step[0].float().cpu() for step in out.logits]
    return tokens, logits


def store_logits(expected, suffix, logits, top_k):
    """Every step's logits, or its `top_k` best (id, logit) pairs."""
    if top_k > 0:
        expected["top_logits" + suffix] = []
        for step in logits:
            top = step.topk(top_k)
            expected["top_logits" + suffix].append(
                [[int(i), float(f"{v:.7g}")] for v, i in zip(top.values.tolist(), top.indices.tolist())]
            )
    else:
        expected["logits" + suffix] = [[float(f"{v:.7g}") for v in step.tolist()] for step in logits]


def top2_gap(logits):
    gaps = []
    for step in logits:
        top = step.topk(2).values.tolist()
        gaps.append(top[0] - top[1])
    return min(gaps)


def timing(model, ids, max_new, repeats, torch):
    """Median prefill and decode tokens/s of transformers' generate."""
    x = torch.tensor([ids], device=model.device)
    mask = torch.ones_like(x)
    sync = torch.cuda.synchronize if model.device.type == "cuda" else (lambda: None)

    def run(n):
        sync()
        t = time.perf_counter()
        model.generate(x, attention_mask=mask, max_new_tokens=n, min_new_tokens=n,
                       do_sample=False, num_beams=1, pad_token_id=0)
        sync()
        return time.perf_counter() - t

    run(max_new)  # warm-up: kernels, allocator
    prefill, total = [], []
    for _ in range(repeats):
        prefill.append(run(1))
        total.append(run(max_new))
    ttft = statistics.median(prefill)
    whole = statistics.median(total)
    per_token = (whole - ttft) / max(1, max_new - 1)
    return {
        "device": torch.cuda.get_device_name() if model.device.type == "cuda" else "cpu",
        "prompt_len": len(ids),
        "max_new": max_new,
        "repeats": repeats,
        "ttft_s": ttft,
        "prefill_tokens_per_s": len(ids) / ttft,
        "decode_s_per_token": per_token,
        "decode_tokens_per_s": 1.0 / per_token if per_token > 0 else None,
    }


def write_json(path, value):
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(value, indent=1) + "\n")
    tmp.replace(path)


def main(argv):
    args = parse_args(argv)
    if args.out.resolve() == args.config.resolve().parent:
        sys.exit(f"{args.out}: the output folder holds the input config; choose another")
    import torch
    import transformers

    torch.use_deterministic_algorithms(True, warn_only=True)
    model = build(args, torch, transformers)
    ids = prompt_ids(args, model.config)
    with torch.no_grad():
        tokens, logits = greedy(model, ids, args.max_new, torch)
    args.out.mkdir(parents=True, exist_ok=True)
    save = {"safe_serialization": True}
    if args.max_shard_size:
        save["max_shard_size"] = args.max_shard_size
    model.save_pretrained(args.out, **save)
    expected = {
        "reference": f"transformers {transformers.__version__}, torch {torch.__version__}",
        "model_type": model.config.model_type,
        "dtype": args.dtype,
        "device": args.device,
        "seed": args.seed,
        "prompt_tokens": ids,
        "max_new": args.max_new,
        "tokens": tokens,
        "min_top2_gap": top2_gap(logits),
    }
    store_logits(expected, "", logits, args.top_logits)
    write_json(args.out / "expected.json", expected)
    print(f"{args.out}: {len(tokens)} tokens {tokens}, min top-2 gap {expected['min_top2_gap']:.4g}",
          file=sys.stderr)
    if args.time:
        with torch.no_grad():
            report = timing(model, ids, args.max_new, args.repeats, torch)
        write_json(args.out / "timing.json", report)
        print(json.dumps(report))
    if args.f32_too and args.dtype != "f32":
        with torch.no_grad():
            tokens32, logits32 = greedy(model.float(), ids, args.max_new, torch)
        expected["tokens_f32"] = tokens32
        store_logits(expected, "_f32", logits32, args.top_logits)
        write_json(args.out / "expected.json", expected)


if __name__ == "__main__":
    main(sys.argv[1:])
