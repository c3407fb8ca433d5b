#!/usr/bin/env bash
# Replay on the GPU host (issue 10): does `hetero run` take the time its plan
# predicts, per phase, on the lent GPU host's real processors?
#
#   scripts/gpu-host-replay.sh --prepare   # here: build, fit, solve, fill .carry/replay/
#   scripts/gpu-host-replay.sh OUT_DIR     # there: replay every case, write OUT_DIR
#
# The predictor is `hetero fit datasets/gpu-host-h200` (an NVIDIA H200 host),
# so the plans hold for that machine: run it on an H200 host. Plans (solved
# here, for datasets/models/qwen2.5-1.5b.json, prefill 1..2048 and decode 1):
#   cuda   cuda:0 alone (f16)
#   mixed  cuda:0 (f16) and cpu:0 (f32) together: the solver may split
# Per plan and case, `hetero run` runs REPS timed passes with `--sync block`
# and then with `--sync poll` (medians, one process each), after one pass
# with `--check` at the smallest length. Synthetic seeded weights, one layer
# in memory (`--share-weights`); every layer still runs.
#
# Environment: REPLAY_BIN (default .carry/replay), REPLAY_REPS (default 9),
# REPLAY_CASES (default "prefill:16 prefill:128 prefill:512 prefill:2048 decode:1").
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
cd "$repo"
carry="$repo/.carry/replay"
model=datasets/models/qwen2.5-1.5b.json

if [ "${1:-}" = "--prepare" ]; then
    set -e
    cargo build --release -p hetero
    mkdir -p "$carry"
    cp target/release/hetero "$carry/"
    strip "$carry/hetero" 2>/dev/null || true
    "$carry/hetero" fit datasets/gpu-host-h200 --out "$carry/predictor.ron" > "$carry/fit.txt"
    common=(--predictor "$carry/predictor.ron" --model "$model" --lengths 1..2048
        --phase both --npu-graphs none)
    "$carry/hetero" solve "${common[@]}" --processors cuda:0 --dtype cuda:0=f16 \
        --out "$carry/plan-cuda.ron"
    "$carry/hetero" solve "${common[@]}" --processors cuda:0,cpu:0 \
        --dtype cuda:0=f16 --dtype cpu:0=f32 --out "$carry/plan-mixed.ron"
    for p in cuda mixed; do "$carry/hetero" plan show "$carry/plan-$p.ron" > "$carry/plan-$p.txt"; done
    git rev-parse HEAD > "$carry/COMMIT" 2>/dev/null || true
    du -sh "$carry"
    echo "carry .carry/replay and run: scripts/gpu-host-replay.sh \"\$OUT\""
    exit 0
fi

out=${1:?usage: scripts/gpu-host-replay.sh OUT_DIR (or --prepare)}
mkdir -p "$out"
bin=${REPLAY_BIN:-$carry}
reps=${REPLAY_REPS:-9}
cases=${REPLAY_CASES:-"prefill:16 prefill:128 prefill:512 prefill:2048 decode:1"}
hetero="$bin/hetero"
log() { echo "[$SECONDS s] $*" | tee -a "$out/log.txt" >&2; }

{ uptime; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1; nproc; } \
    > "$out/machine.txt"
cat "$out/machine.txt" >&2
for p in cuda mixed; do
    plan="$bin/plan-$p.ron"
    [ -e "$plan" ] || { log "no $plan"; continue; }
    first=${cases%% *}
    log "$p: check at ${first}"
    timeout 120 "$hetero" run "$plan" --model "$model" --phase "${first%%:*}" --len "${first#*:}" \
        --share-weights --check --repeat 1 --json --out "$out/$p-check.json" > /dev/null \
        2> "$out/$p-check.err" || log "$p: check failed: $(tail -3 "$out/$p-check.err")"
    for c in $cases; do
        phase=${c%%:*}
        len=${c#*:}
        for sync in block poll; do
            extra=()
            [ "$phase" = decode ] && extra=(--tokens 8)
            if timeout 150 "$hetero" run "$plan" --model "$model" --phase "$phase" --len "$len" \
                "${extra[@]}" --share-weights --sync "$sync" --repeat "$reps" --json \
                --out "$out/$p-$phase-$len-$sync.json" > /dev/null 2> "$out/$p-$phase-$len-$sync.err"; then
                log "$p $phase $len $sync: done"
            else
                log "$p $phase $len $sync: failed: $(tail -3 "$out/$p-$phase-$len-$sync.err")"
            fi
        done
    done
done
# One table: predicted against measured, per plan, phase, length and sync.
python3 - "$out" <<'PY' | tee "$out/summary.md"
import glob, json, os, sys
out = sys.argv[1]
print("| plan | phase | len | sync | predicted | measured | measured / predicted |")
print("|---|---|---|---|---|---|---|")
rows = []
for path in glob.glob(f"{out}/*-*-*-*.json"):
    plan, phase, length, sync = os.path.basename(path)[:-5].split("-")
    r = json.load(open(path))
    rows.append((plan, phase, int(length), sync, r["predicted_us"], r["measured_us"]))
for plan, phase, length, sync, p, m in sorted(rows):
    print(f"| {plan} | {phase} | {length} | {sync} | {p:.0f} µs | {m:.0f} µs | {m / p:.3f} |")
for path in sorted(glob.glob(f"{out}/*-check.json")):
    c = json.load(open(path)).get("check") or {}
    print(f"\n{os.path.basename(path)}: {c.get('passed')}/{c.get('outputs')} outputs within bound")
PY
