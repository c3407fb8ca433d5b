#!/bin/bash
# Session 29, call 1 (nvidia-h200, fresh): binaries at bd7dc50.
#  1. the host: cores, NUMA nodes, the GPU's topology;
#  2. the host-path probe (scripts/cuda-host-path-probe.c) in 32 fresh
#     processes, each pinned to core i % 16, then 8 unpinned;
#  3. the standard replay (cuda tests first), session 25's method;
#  4. the probe again in 16 fresh processes.
set -u
b=$(cd "$(dirname "$0")" && pwd)
out=${1:?out}
mkdir -p "$out"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; nvidia-smi topo -m; lscpu;
  ls /sys/devices/system/node/; cat /sys/devices/system/node/node*/cpulist;
  cat /sys/kernel/mm/transparent_hugepage/enabled; uname -a; cat /proc/cmdline; } > "$out/machine.txt" 2>&1
probe() { for i in $(seq 0 $(($1 - 1))); do
    if [ "$2" = pin ]; then taskset -c $((i % 16)) "$b/probe"; else "$b/probe"; fi
  done; }
{ probe 32 pin; probe 8 free; } > "$out/probe-before.jsonl" 2> "$out/probe-before.err"
echo "probe before: $(wc -l < "$out/probe-before.jsonl") lines, $SECONDS s"
CUDA_COLD=1 CPU_COLD=1 CUDA_BUDGET=100s CPU_BUDGET=60s REPLAY_REPS=7 REPLAY_PROCS=3 \
  REPLAY_CASES="prefill:16 prefill:300 decode:1" timeout 440 bash scripts/gpu-host-replay.sh "$out/r1"
echo "replay done $SECONDS s"
probe 16 pin > "$out/probe-after.jsonl" 2> "$out/probe-after.err"
echo "probe after: $(wc -l < "$out/probe-after.jsonl") lines, $SECONDS s"
python3 - "$out" <<'PY'
import json, sys, statistics as st
for f in ["probe-before.jsonl", "probe-after.jsonl"]:
    rows = [json.loads(l) for l in open(f"{sys.argv[1]}/{f}")]
    print(f, len(rows))
    for k in rows[0]:
        if k in ("pid",): continue
        v = [r[k] for r in rows]
        print(f"  {k:18} min {min(v):9.3f} med {st.median(v):9.3f} max {max(v):9.3f}")
PY
tail -25 "$out/r1/summary.md" 2>/dev/null
echo "done $SECONDS s"
