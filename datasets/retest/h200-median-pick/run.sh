#!/bin/bash
# Session 24, call 4 (nvidia-h200): the agent's cuda tests, then the design
# and held-out queries with the median row pick (as h100 call 1).
set -u
b=$(cd "$(dirname "$0")" && pwd)
out=${1:?out}
mkdir -p "$out"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; lscpu | head -20; } > "$out/machine.txt" 2>&1
timeout 200 "$b/agent-tests" cuda:: --test-threads=1 > "$out/cuda-tests.txt" 2>&1; echo "cuda tests rc $?"
tail -3 "$out/cuda-tests.txt"
CUDA_COLD=1 RETEST_RUNS="7:420s 7:130s:--queries=300:1" timeout 450 bash scripts/gpu-host-retest.sh "$out/retest"
echo "done $SECONDS s"
