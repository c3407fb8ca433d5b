#!/bin/bash
# Session 27: (1) the agent's cuda tests; (2) the probe (order_free);
# (3) the design (one order on an order-free cuda:0, more queries) and the
# held-out queries (both orders), as in session 26.
set -u
b=$(cd "$(dirname "$0")" && pwd)
out=${1:?out}
mkdir -p "$out"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; lscpu; } > "$out/machine.txt" 2>&1
timeout 200 "$b/agent-tests" cuda:: --test-threads=1 > "$out/cuda-tests.txt" 2>&1; echo "cuda tests rc $?"
tail -3 "$out/cuda-tests.txt"
"$b/hetero-agent" probe --json > "$out/probe.json" 2>&1; grep -o '"id":"cuda:0"[^}]*}' "$out/probe.json" | head -2
CUDA_COLD=1 RETEST_RUNS="7:420s 7:130s:--queries=300:1" timeout 470 bash scripts/gpu-host-retest.sh "$out/retest"
echo "done $SECONDS s"
