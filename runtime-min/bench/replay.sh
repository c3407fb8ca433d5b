#!/usr/bin/env bash
# The runtime benchmark of docs/benchmarks.md (runtime fidelity and dispatch overhead).
#
# 1. profiles this machine's CPU cores as two processors (cpu:0 = core 0,
#    cpu:1 = core 1) with hetero-agent: a GEMM sweep over the shapes of
#    bench-model.json at the lengths solved, and the microbenchmarks;
# 2. fits a predictor with `hetero fit`;
# 3. solves a plan for prefill 1..=128 and decode 1..=4 (`hetero solve`);
# 4. replays it (replay_bench): per phase and length, predicted against
#    measured, polling against blocking synchronisation alternated pass by
#    pass in one process, and the dispatch overhead per operator.
#
# Usage: runtime-min/bench/replay.sh [OUT_DIR]   (release builds; minutes)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-target/runtime-bench}
groups=${CPU_GROUPS:-"0;1"}
# The processors the plan may use: one per CPU group (`cpu:0 cpu:1` for
# "0;1"; `cpu:0` alone for CPU_GROUPS="0-1", both cores as one pool).
procs=(${PROCESSORS:-cpu:0 cpu:1})
# COLD=1: the sweep evicts the host's caches before every timed run
# (`hetero-agent sweep --cold-cache`), as the runtime's other operators do.
plist=$(IFS=,; echo "${procs[*]}")
passes=${PASSES:-7}
# MODEL: the config to profile, solve and replay. bench-model.json is small
# (its weights fit in the last-level cache of a small CPU); bench-model-large.json
# has every operator's weights larger than an 8 MiB L3, as real LLMs do.
model=${MODEL:-runtime-min/bench/bench-model.json}
# ROWS=full: sweep whole operators only (no row shares), enough when one
# processor is given and the plan cannot split.
rows=${ROWS:-shares}
mkdir -p "$out/dataset"

cargo build --release -p hetero -p hetero-agent
cargo build --release -p hetero-runtime --example replay_bench
agent=target/release/hetero-agent

# K x N of every operator of the model, from `hetero model show --json`.
target/release/hetero model show "$model" --json > "$out/model.json"
kn=$(python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); print(" ".join(sorted({"%dx%d" % (o["k"], o["n"]) for o in m["ops"]})))' "$out/model.json")

# Shapes: M at the lengths that matter, N every multiple of 128 up to N
# (the row shares a 128-aligned cut gives each side).
shapes=()
for pair in $kn; do
  k=${pair%x*}; n=${pair#*x}
  for m in 1 2 4 8 16 24 32 48 64 96 128; do
    if [[ $rows == full ]]; then shapes+=("${m}x${k}x${n}"); continue; fi
    for ((r = 128; r <= n; r += 128)); do shapes+=("${m}x${k}x${r}"); done
    if (( n % 128 )); then shapes+=("${m}x${k}x${n}"); fi
  done
done
list=$(IFS=,; echo "${shapes[*]}")
echo "sweeping ${#shapes[@]} shapes on each processor" >&2

if [[ -z "${SKIP_PROFILE:-}" ]]; then
"$agent" --cpu-groups "$groups" --processors "$plist" probe --json > "$out/probe.json"
: > "$out/sweep.jsonl"
for p in "${procs[@]}"; do
  "$agent" --cpu-groups "$groups" --processors "$p" sweep --processor "$p" \
    --shapes "$list" --dtype f32 --reps 5 --warmups 2 ${COLD:+--cold-cache} >> "$out/sweep.jsonl"
done
"$agent" --cpu-groups "$groups" --processors "$plist" microbench > "$out/microbench.jsonl"
# The dataset folder `hetero fit` reads: device.json and the rows without
# the agent's line envelope.
python3 - "$out" <<'PY'
import json, sys, time, platform
out = sys.argv[1]
for src, kind, dst in [("sweep", "measurement", "measurements"), ("microbench", "microbench", "microbench")]:
    with open(f"{out}/dataset/{dst}.jsonl", "w") as f:
        for line in open(f"{out}/{src}.jsonl"):
            row = json.loads(line)
            if row.pop("type", None) == kind:
                row.pop("note", None)
                f.write(json.dumps(row) + "\n")
probe = json.load(open(f"{out}/probe.json"))
device = {
    "schema_version": 1,
    "host": {"name": platform.node(), "os": platform.system(), "arch": platform.machine(), "transport": "local"},
    "agent": {"version": probe["hello"]["version"], "protocol": probe["hello"]["protocol"], "arch": probe["hello"]["arch"]},
    "processors": probe["processors"],
    "unavailable": [json.dumps(u) for u in probe.get("unavailable", [])],
    "started_ms": int(time.time() * 1000),
}
json.dump(device, open(f"{out}/dataset/device.json", "w"), indent=1)
PY
target/release/hetero fit "$out/dataset" --out "$out/predictor.ron" --report "$out/fit.json"
fi
target/release/hetero solve --predictor "$out/predictor.ron" --model "$model" --out "$out/plan.ron" \
  --lengths 1..128 --decode-lengths 1..4 --npu-graphs none --dtype f32 \
  --processors "$plist" --row-align 128
target/release/examples/replay_bench "$out/plan.ron" "$model" "$groups" "$passes" \
  prefill:16,prefill:64,prefill:128,decode:1,decode:4 "$out" | tee "$out/replay.md"

# Replay against the profile: per operator, the slowest part's GEMMs timed
# alone by the sweep (same shapes, same processor) against the replayed
# time. It separates what the runtime adds (concurrency, handoff, merge)
# from what the predictor gets wrong.
python3 - "$out" <<'PY' | tee "$out/profile.md"
import json, sys, glob
out = sys.argv[1]
alone = {}
for line in open(f"{out}/dataset/measurements.jsonl"):
    r = json.loads(line)
    if r.get("status") == "ok":
        alone[(r["processor"], f'{r["m"]}x{r["k"]}x{r["n"]}')] = r["median_us"]
print("| phase | len | predicted | profile (parts alone) | replayed (block) | replayed / profile | replayed / predicted |")
print("|---|---|---|---|---|---|---|")
for path in sorted(glob.glob(f"{out}/report-*.json"), key=lambda p: (p.split("-")[-2], int(p.split("-")[-1][:-5]))):
    r = json.load(open(path))
    prof, missing = 0.0, 0
    for op in r["per_op"]:
        t = 0.0
        for part in op["parts"]:
            us = [alone.get((part["processor"], g)) for g in part["gemms"]]
            if None in us:
                missing += 1
                continue
            t = max(t, sum(us))
        prof += t * op["layers"]
    note = f" ({missing} parts unprofiled)" if missing else ""
    print(f'| {r["phase"]} | {r["len"]} | {r["predicted_us"]:.0f} µs | {prof:.0f} µs{note} | {r["measured_us"]:.0f} µs | {r["measured_us"] / prof:.2f} | {r["measured_us"] / r["predicted_us"]:.2f} |')
PY
