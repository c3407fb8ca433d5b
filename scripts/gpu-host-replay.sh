#!/usr/bin/env bash
# Replay on a GPU host: does `hetero run` take the time its plan predicts,
# per phase, on the host's real processors?
#
#   scripts/gpu-host-replay.sh --prepare   # build machine: build, fill .carry/replay/ and .carry/rx/replay.txz
#   scripts/gpu-host-replay.sh OUT_DIR     # GPU host (after unpacking .carry/rx): test, profile, fit, solve, replay
#
# The build machine needs cargo and an x86-64 Linux with a glibc no newer
# than the host's; the GPU host needs the NVIDIA driver and python3, no Rust.
# On the GPU host, in one run, the same steps a user takes on a new machine:
#   1. the cuda unit tests of the agent (conversion kernels bit for bit,
#      GEMMs from page-locked memory, the conformance suite);
#   2. `hetero profile --device local` of cuda:0 and of cpu:0 for
#      datasets/models/qwen2.5-1.5b.json (GEMMs, copies, the staged data
#      path, submit and sync), merged into one dataset;
#   3. `hetero fit`, then `hetero solve` of two plans, prefill 1..2048 and
#      decode 1: `cuda` = cuda:0 alone (f16), `mixed` = cuda:0 (f16) with
#      cpu:0 (f32), where the solver may split; with REPLAY_PLANS naming
#      `offload`, also `offload` = cuda:0 with cpu:0 under a GPU memory
#      budget (ScheInfer's CC/CG/GG row slicing: rows on the CPU, rows whose
#      weights are copied to the GPU every run, rows resident there);
#   4. per plan, one `--check` pass, then per case REPS timed passes with
#      `--sync block` and REPS with `--sync poll` (one process each, one
#      untimed warm-up pass), synthetic seeded weights with --share-weights.
# OUT_DIR gets summary.md (predicted against measured), log.txt, fit.txt and
# three archives: dataset.tgz (the profile, its predictor and fit report),
# reports.tgz (the plans and every `hetero run --json` report) and logs.tgz
# (machine.txt, cuda-tests.txt, the profile logs, plans.txt).
#
# Environment: REPLAY_BIN (default .carry/replay), REPLAY_REPS (default 9),
# REPLAY_PROCS (default 1: processes per case and sync, in rounds over the
# cases; above 1 the summary adds each case's median ratio),
# REPLAY_CASES (default "prefill:16 prefill:128 prefill:512 prefill:2048 decode:1"),
# REPLAY_PLANS (default "cuda mixed"; any of cuda, mixed, offload, cpu:
# cpu:0 alone, f32),
# REPLAY_OFFLOAD_BUDGET (default 1GiB: the offload plan's --gpu-mem-budget),
# CPU_GROUPS (default unset: cpu:0 is every core; e.g. "0-14" leaves the
# last core to the host thread and the GPU driver's threads),
# PAIR_BUDGET (default 90s: with `offload`, the microbenchmarks of cuda:0
# and cpu:0 together, for the CPU's bandwidth beside the GPU's copies),
# REPLAY_POLL (default unset: the binaries' own; e.g. "0 2000" replays
# each case with cpu:0's workers sleeping at once after a run, then polling
# 2000 µs: --cpu-poll-us), REPLAY_HOST (default unset: the host thread
# unpinned; e.g. "none rest" alternates that with --host-cores rest, the
# host thread and the GPU driver's threads on the cores CPU_GROUPS leaves),
# REPLAY_WEIGHTS (default "shared"; "shared distinct" also replays with
# every layer's weights its own, reports named PLAN+distinct),
# CUDA_BUDGET (default 150s), CPU_BUDGET (default 60s), CUDA_COLD (set:
# profile cuda:0 with --cold-cache, its L2 evicted before every timed run),
# CPU_COLD (set: profile cpu:0 with --cold-cache, the host's caches evicted
# before every timed run, by cpu:0's own workers, so its
# pool is awake when the timed run starts), CPU_ROTATE (set: profile cpu:0
# with --rotate-weights instead, cold weights by rotating through copies of
# them, the input and the workers warm), CUDA_FLAGS (extra
# words for the cuda:0 profile, e.g. --ordinary-timer), SKIP_CUDA_TESTS (set:
# leave out step 1, for a second replay on the same host), REPLAY_REFINE
# (default 0: rounds of measuring the cpu:0 GEMMs the plans run at the
# replayed cases, `hetero profile --plan`, then fitting and solving again).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
cd "$repo"
carry="$repo/.carry/replay"
model=datasets/models/qwen2.5-1.5b.json

if [ "${1:-}" = "--prepare" ]; then
    set -e
    cargo build --release -p hetero -p hetero-agent
    tests=$(cargo test --release -p hetero-agent --lib --no-run --message-format=json 2>/dev/null |
        python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and "lib" in m["target"]["kind"]:
        print(m["executable"])' | tail -n1)
    mkdir -p "$carry"
    cp target/release/hetero target/release/hetero-agent "$carry/"
    cp "$tests" "$carry/agent-tests"
    strip "$carry"/* 2>/dev/null || true
    git rev-parse HEAD > "$carry/COMMIT" 2>/dev/null || true
    git diff --quiet HEAD 2>/dev/null || echo "+ uncommitted changes" >> "$carry/COMMIT"
    du -sh "$carry"
    # The binaries as one xz archive (about 8 MB), to copy to the GPU host.
    mkdir -p "$repo/.carry/rx"
    tar cJf "$repo/.carry/rx/replay.txz" -C "$repo/.carry" replay
    du -sh "$repo/.carry/rx/replay.txz"
    echo "copy this checkout with .carry/rx to the GPU host and run there: tar xJf .carry/rx/replay.txz -C .carry/ && scripts/gpu-host-replay.sh OUT_DIR"
    exit 0
fi

out=${1:?usage: scripts/gpu-host-replay.sh OUT_DIR (or --prepare)}
mkdir -p "$out"
out=$(cd "$out" && pwd)
bin=${REPLAY_BIN:-$carry}
reps=${REPLAY_REPS:-9}
procs=${REPLAY_PROCS:-1}
cases=${REPLAY_CASES:-"prefill:16 prefill:128 prefill:512 prefill:2048 decode:1"}
weight_modes=${REPLAY_WEIGHTS:-shared}
plans=${REPLAY_PLANS:-cuda mixed}
# CPU_GROUPS: the cores of cpu:0 (e.g. "0-14"), for every profile (the
# datasets merge only when the agent saw the same processors) and run.
agent_groups=()
run_groups=()
if [ -n "${CPU_GROUPS:-}" ]; then
    agent_groups=(--agent-arg=--cpu-groups "--agent-arg=$CPU_GROUPS")
    run_groups=(--cpu-groups "$CPU_GROUPS")
fi
hetero="$bin/hetero"
work=$(mktemp -d /tmp/replay.XXXXXX)
log() { echo "[$SECONDS s] $*" | tee -a "$out/log.txt" >&2; }
logs="$work/logs"
mkdir -p "$logs"

{ uptime; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1
  nproc; cat "$bin/COMMIT" 2>/dev/null; } > "$logs/machine.txt"
cat "$logs/machine.txt" >&2

if [ -z "${SKIP_CUDA_TESTS:-}" ]; then
    log "cuda tests"
    "$bin/agent-tests" cuda:: --test-threads=1 > "$logs/cuda-tests.txt" 2>&1 \
        || log "cuda tests FAILED: $(grep -E '^test .* FAILED|panicked' "$logs/cuda-tests.txt" | head -5)"
    grep -E "^test result" "$logs/cuda-tests.txt" | tee -a "$out/log.txt" >&2
fi

log "profile cuda:0 (${CUDA_BUDGET:-150s} ${CUDA_FLAGS:-}), cpu:0 (${CPU_BUDGET:-60s})"
"$hetero" profile --device local --agent "$bin/hetero-agent" "${agent_groups[@]}" --processors cuda:0 \
    --models "$model" --budget "${CUDA_BUDGET:-150s}" --out "$work/ds-cuda" \
    ${CUDA_COLD:+--cold-cache} ${CUDA_FLAGS:-} \
    > "$logs/profile-cuda.txt" 2>&1 || log "profile cuda:0 failed: $(tail -3 "$logs/profile-cuda.txt")"
"$hetero" profile --device local --agent "$bin/hetero-agent" "${agent_groups[@]}" --processors cpu:0 \
    --models "$model" --budget "${CPU_BUDGET:-60s}" --out "$work/ds-cpu" \
    ${CPU_COLD:+--cold-cache} ${CPU_ROTATE:+--rotate-weights} \
    > "$logs/profile-cpu.txt" 2>&1 || log "profile cpu:0 failed: $(tail -3 "$logs/profile-cpu.txt")"
# An offload plan's CPU parts run beside the GPU's weight copies from host
# memory: the two processors' microbenchmarks together measure that
# (`bandwidth_concurrent` of cpu:0 beside cuda:0 copying its weights),
# which the profiles of each alone cannot. Its microbenchmarks come first
# in the merge, so that the CPU's bandwidth alone and beside the copies are
# of one run (a separate profile's alone row can be far off the pair's: 8.8
# against 15.6 GB/s on one H100 host); its one GEMM case per processor is
# dropped where the profiles have it.
pair=()
# Cold for the pair too when cpu:0 is profiled cold either way (once:
# `--cold-cache` twice is refused).
pair_cold=${CPU_COLD:-${CPU_ROTATE:-}}
if [[ " $plans " == *" offload "* ]]; then
    log "microbenchmarks of cuda:0 and cpu:0 together (${PAIR_BUDGET:-90s})"
    if "$hetero" profile --device local --agent "$bin/hetero-agent" "${agent_groups[@]}" --processors cuda:0,cpu:0 \
        --models "$model" --max-cases 1 --no-refine --budget "${PAIR_BUDGET:-90s}" \
        ${pair_cold:+--cold-cache} --out "$work/ds-pair" > "$logs/profile-pair.txt" 2>&1; then
        pair=("$work/ds-pair")
    else
        log "pair microbenchmarks failed: $(tail -3 "$logs/profile-pair.txt")"
    fi
fi
# Merge, fit and solve; again after each round of REPLAY_REFINE.
fit_and_solve() {
rm -rf "$work/ds"
"$hetero" dataset merge --out "$work/ds" "${pair[@]}" "$work/ds-cuda" "$work/ds-cpu" > /dev/null \
    || log "merge failed"
"$hetero" dataset show "$work/ds" > "$work/ds/SHOW.txt" 2>&1
tail -n 30 "$logs/profile-cuda.txt" "$logs/profile-cpu.txt" >> "$work/ds/SHOW.txt"

log "fit"
"$hetero" fit "$work/ds" --out "$work/predictor.ron" --report "$work/report.json" \
    > "$out/fit.txt" 2>&1 || log "fit failed: $(tail -3 "$out/fit.txt")"
cp "$work/predictor.ron" "$work/report.json" "$work/ds/" 2>/dev/null

log "solve"
common=(--predictor "$work/predictor.ron" --model "$model" --lengths 1..2048
    --phase both --npu-graphs none)
"$hetero" solve "${common[@]}" --processors cuda:0 --dtype cuda:0=f16 \
    --out "$work/plan-cuda.ron" > "$work/solve-cuda.txt" 2>&1 || log "solve cuda failed: $(tail -3 "$work/solve-cuda.txt")"
"$hetero" solve "${common[@]}" --processors cuda:0,cpu:0 --dtype cuda:0=f16 --dtype cpu:0=f32 \
    --out "$work/plan-mixed.ron" > "$work/solve-mixed.txt" 2>&1 || log "solve mixed failed: $(tail -3 "$work/solve-mixed.txt")"
if [[ " $plans " == *" cpu "* ]]; then
    "$hetero" solve "${common[@]}" --processors cpu:0 --dtype cpu:0=f32 \
        --out "$work/plan-cpu.ron" > "$work/solve-cpu.txt" 2>&1 || log "solve cpu failed: $(tail -3 "$work/solve-cpu.txt")"
fi
if [[ " $plans " == *" offload "* ]]; then
    "$hetero" solve "${common[@]}" --processors cuda:0,cpu:0 --dtype cuda:0=f16 --dtype cpu:0=f32 \
        --gpu-mem-budget "${REPLAY_OFFLOAD_BUDGET:-1GiB}" \
        --out "$work/plan-offload.ron" > "$work/solve-offload.txt" 2>&1 || log "solve offload failed: $(tail -3 "$work/solve-offload.txt")"
fi
for p in $plans; do
    { echo "## $p"; cat "$work/solve-$p.txt"; "$hetero" plan show "$work/plan-$p.ron" 2>&1; } >> "$logs/plans.txt"
done
}
fit_and_solve
# REPLAY_REFINE rounds: measure the cpu:0 GEMMs each plan runs at the
# replayed cases (`hetero profile --plan`) into cpu:0's profile, so that
# the fit answers them with their own medians, then fit and solve again.
at=$(echo $cases | tr ' ' ',')
for round in $(seq 1 "${REPLAY_REFINE:-0}"); do
    for p in $plans; do
        [ -e "$work/plan-$p.ron" ] || continue
        log "refine $round: cpu:0 GEMMs of $p at $at"
        "$hetero" profile --device local --agent "$bin/hetero-agent" "${agent_groups[@]}" --processors cpu:0 \
            --plan "$work/plan-$p.ron" --at "$at" --budget 60s --resume --out "$work/ds-cpu" \
            ${CPU_COLD:+--cold-cache} ${CPU_ROTATE:+--rotate-weights} \
            >> "$logs/profile-refine.txt" 2>&1 || log "refine failed: $(tail -3 "$logs/profile-refine.txt")"
    done
    for p in $plans; do
        cp "$work/plan-$p.ron" "$work/plan-$p-before-refine-$round.ron" 2>/dev/null
    done
    fit_and_solve
done

mkdir -p "$work/reports"
for p in $plans; do
    plan="$work/plan-$p.ron"
    [ -e "$plan" ] || { log "no $plan"; continue; }
    first=${cases%% *}
    log "$p: check at ${first}"
    timeout 120 "$hetero" run "$plan" --model "$model" "${run_groups[@]}" --phase "${first%%:*}" --len "${first#*:}" \
        --share-weights --check --repeat 1 --json --out "$work/reports/$p-check.json" > /dev/null \
        2> "$work/reports/$p-check.err" || log "$p: check failed: $(tail -3 "$work/reports/$p-check.err")"
    for weights in $weight_modes; do
    # `shared`: one layer's weights for every layer (--share-weights);
    # `distinct`: every layer its own, so no layer finds another's cached.
    base=$p
    share=(--share-weights)
    [ "$weights" = distinct ] && { base="$p+distinct"; share=(); }
    # Rounds of processes: every case once per round, so that the host's
    # speed, which changes between processes, is spread over the cases.
    for round in $(seq 1 "$procs"); do
    for c in $cases; do
        phase=${c%%:*}
        len=${c#*:}
        for sync in block poll; do
        # REPLAY_POLL: how long cpu:0's workers poll after a run, µs
        # (--cpu-poll-us; `default`: the binary's own), alternated.
        # REPLAY_HOST: where the host thread runs (--host-cores; `none`:
        # unpinned), alternated too.
        for pollus in ${REPLAY_POLL:-default}; do
        for hostc in ${REPLAY_HOST:-none}; do
            label=$base
            knobs=()
            [ "$pollus" = default ] || { label="$label+poll$pollus"; knobs=(--cpu-poll-us "$pollus"); }
            [ "$hostc" = none ] || { label="$label+host${hostc//[^0-9a-z]/_}"; knobs+=(--host-cores "$hostc"); }
            extra=()
            [ "$phase" = decode ] && extra=(--tokens 8)
            r="$work/reports/$label-$phase-$len-$sync"
            tag=
            [ "$procs" -gt 1 ] && { r="$r-$round"; tag=" ($round/$procs)"; }
            if timeout 150 "$hetero" run "$plan" --model "$model" "${run_groups[@]}" --phase "$phase" --len "$len" \
                "${extra[@]}" "${share[@]}" "${knobs[@]}" --sync "$sync" --repeat "$reps" --json \
                --out "$r.json" > /dev/null 2> "$r.err"; then
                log "$label $phase $len $sync$tag: done"
            else
                log "$label $phase $len $sync$tag: failed: $(tail -3 "$r.err")"
            fi
        done
        done
    done
    done
    done
    done
done
# One table: predicted against measured, per plan, phase, length and sync,
# with the copy time and its prediction summed over the operators.
python3 - "$work/reports" <<'PY' | tee "$out/summary.md"
import glob, json, os, statistics, sys
d = sys.argv[1]
print("| plan | phase | len | sync | process | predicted | measured | measured / predicted | copy measured | copy predicted | host speed |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
rows = []
for path in glob.glob(f"{d}/*-*-*-*.json"):
    parts = os.path.basename(path)[:-5].split("-")
    plan, phase, length, sync = parts[:4]
    proc = int(parts[4]) if len(parts) > 4 else 1
    r = json.load(open(path))
    ops = r.get("per_op") or []
    cm = sum((o.get("copy_us") or 0) * o["layers"] for o in ops)
    cp = sum((o.get("predicted_copy_us") or 0) * o["layers"] for o in ops)
    # The host's speed in this process against the profile's (the probe
    # of `hetero_agent::conditions`; above 1: faster than when profiled).
    speed = (r.get("host") or {}).get("speed")
    rows.append((plan, phase, int(length), sync, proc, r["predicted_us"], r["measured_us"], cm, cp, speed))
rows.sort(key=lambda r: r[:5])
for plan, phase, length, sync, proc, p, m, cm, cp, speed in rows:
    sp = f"{speed:.3f}" if speed else "-"
    print(f"| {plan} | {phase} | {length} | {sync} | {proc} | {p:.0f} µs | {m:.0f} µs | {m / p:.3f} | {cm:.0f} µs | {cp:.0f} µs | {sp} |")
# With several processes per case: the median ratio per case (both syncs),
# and per plan and phase the cases whose median is within ±5 %.
if any(r[4] > 1 for r in rows):
    cases = {}
    speeds = {}
    for plan, phase, length, sync, proc, p, m, cm, cp, speed in rows:
        cases.setdefault((plan, phase, length, sync), []).append(m / p)
        if speed:
            speeds.setdefault((plan, phase, length, sync), []).append(speed)
    print("\n| plan | phase | len | sync | processes | median ratio | range | median host speed |")
    print("|---|---|---|---|---|---|---|---|")
    phases = {}
    for (plan, phase, length, sync), v in sorted(cases.items()):
        med = statistics.median(v)
        phases.setdefault((plan, phase), []).append(med)
        sp = speeds.get((plan, phase, length, sync))
        sp = f"{statistics.median(sp):.3f}" if sp else "-"
        print(f"| {plan} | {phase} | {length} | {sync} | {len(v)} | {med:.3f} | {min(v):.3f}-{max(v):.3f} | {sp} |")
    print()
    for (plan, phase), meds in sorted(phases.items()):
        ok = sum(abs(x - 1) <= 0.05 for x in meds)
        print(f"{plan} {phase}: {ok}/{len(meds)} case medians within ±5 %, median of medians {statistics.median(meds):.3f}")
for path in sorted(glob.glob(f"{d}/*-check.json")):
    c = json.load(open(path)).get("check") or {}
    print(f"\n{os.path.basename(path)}: {c.get('passed')}/{c.get('outputs')} outputs within bound")
PY
tar -czf "$out/dataset.tgz" -C "$work" ds
tar -czf "$out/logs.tgz" -C "$work" logs
tar -czf "$out/reports.tgz" -C "$work" reports $(cd "$work" && ls plan-*.ron 2>/dev/null) 2>/dev/null \
    || tar -czf "$out/reports.tgz" -C "$work" reports
log "done"
