#!/usr/bin/env bash
# `hetero generate` against Hugging Face transformers on a GPU host: the
# same greedy tokens, and tokens/s side by side in one run.
#
#   scripts/gpu-host-generate.sh --bin BIN [--out DIR] [--models a,b]
#
# BIN holds release builds of `hetero` and `hetero-agent` (features cpu and
# cuda). The host needs python3 with torch and transformers. For each model
# config (default: datasets/models/qwen2.5-0.5b.json and llama-3.2-1b.json):
#   1. scripts/reference.py builds the model with seeded random bf16 weights,
#      saves the checkpoint, runs transformers' greedy generation on the GPU
#      (prompt 512 random token ids, 64 new tokens) and times its generate;
#   2. two plans are solved from the bundled GPU-host predictor
#      (datasets/gpu-host-h200): cuda:0 alone, and cpu:0 + cuda:0 offload
#      under a 512 MiB GPU memory budget;
#   3. `hetero generate` runs each plan on the same checkpoint and prompt;
#   4. a summary compares tokens with transformers in bf16 and with the same
#      weights computed in f32 (first divergence and the reference's logit
#      gap there) and tokens/s, written to DIR/summary.md and printed.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
bin="" out="/tmp/hetero-generate" models=""
while [ $# -gt 0 ]; do
    case "$1" in
        --bin) bin=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --models) models=$2; shift 2 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
[ -n "$bin" ] || { echo "--bin BIN is required" >&2; exit 2; }
bin=$(cd "$bin" && pwd)
export PATH="$bin:$PATH"
[ -n "$models" ] || models="$repo/datasets/models/qwen2.5-0.5b.json,$repo/datasets/models/llama-3.2-1b.json"
mkdir -p "$out"

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "$(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p')"

pred="$out/predictor.json"
[ -f "$pred" ] || hetero fit "$repo/datasets/gpu-host-h200" --out "$pred" >"$out/fit.log" 2>&1

IFS=, read -ra list <<<"$models"
for config in "${list[@]}"; do
    name=$(basename "$config" .json)
    ref="$out/$name"
    python3 "$repo/scripts/reference.py" --config "$config" --out "$ref" \
        --dtype bf16 --device cuda --prompt-len 512 --max-new 64 --top-logits 20 \
        --initializer-range 0.1 --time --repeats 5 --f32-too >"$out/$name-transformers.json"
    prompt=$(python3 -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['prompt_tokens'])))" "$ref/expected.json")
    for kind in cuda offload; do
        plan="$out/$name-$kind.ron"
        args=(--processors cuda:0)
        [ "$kind" = offload ] && args=(--processors cpu:0,cuda:0 --gpu-mem-budget 512MiB)
        hetero solve --predictor "$pred" --model "$ref/config.json" --out "$plan" \
            --lengths 1..1024 --dtype cuda:0=bf16 --dtype cpu:0=f32 "${args[@]}" \
            >"$out/$name-$kind-solve.log" 2>&1
        # Warm-up run (page cache, CUDA context), then the timed one.
        hetero generate "$plan" --model "$ref" --prompt-tokens "$prompt" --max-new 4 \
            --ignore-eos --json >/dev/null 2>"$out/$name-$kind-warm.log"
        hetero generate "$plan" --model "$ref" --prompt-tokens "$prompt" --max-new 64 \
            --ignore-eos --json >"$out/$name-$kind.json" 2>"$out/$name-$kind.log"
    done
done

python3 - "$out" "${list[@]}" <<'EOF'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])


def compare(exp, suffix, mine):
    """'n/64, first divergence at step i (gap)' against one reference."""
    ref = exp["tokens" + suffix]
    same = sum(1 for a, b in zip(ref, mine) if a == b)
    first = next((i for i, (a, b) in enumerate(zip(ref, mine)) if a != b), None)
    if first is None:
        return f"{same}/{len(ref)}"
    top = exp["top_logits" + suffix][first]
    logit = dict((t, v) for t, v in top).get(mine[first])
    gap = f"gap {top[0][1] - logit:.3g}" if logit is not None else f"not in top {len(top)}"
    return f"{same}/{len(ref)}, from step {first} ({gap})"


lines = ["| model | plan | tokens as transformers bf16 | as transformers f32 (same weights) "
         "| TTFT ms | prefill tok/s | decode tok/s | transformers decode tok/s | decode ratio |",
         "|---|---|---|---|---|---|---|---|---|"]
for config in sys.argv[2:]:
    name = pathlib.Path(config).stem
    exp = json.loads((out / name / "expected.json").read_text())
    tf = json.loads((out / f"{name}-transformers.json").read_text())
    for kind in ("cuda", "offload"):
        got = json.loads((out / f"{name}-{kind}.json").read_text())
        ratio = got["decode_tokens_per_s"] / tf["decode_tokens_per_s"]
        lines.append(
            f"| {name} | {kind} | {compare(exp, '', got['tokens'])} "
            f"| {compare(exp, '_f32', got['tokens'])} | {got['ttft_us'] / 1e3:.1f} "
            f"| {got['prefill_tokens_per_s']:.0f} | {got['decode_tokens_per_s']:.1f} "
            f"| {tf['decode_tokens_per_s']:.1f} | {ratio:.2f}x |")
    lines.append(f"| {name} | transformers (bf16) | | | {tf['ttft_s'] * 1e3:.1f} "
                 f"| {tf['prefill_tokens_per_s']:.0f} | {tf['decode_tokens_per_s']:.1f} | | |")
text = "\n".join(lines) + "\n"
(out / "summary.md").write_text(text)
print(text)
EOF
