#!/bin/bash
# Session 28, call 7 (nvidia-h200, fresh): binaries at 7d20cf2 (the joint
# search of rows, forms and algorithms by default): the agent's cuda tests,
# then the one-order design and the held-out queries.
set -u
b=$(cd "$(dirname "$0")" && pwd)
out=${1:?out}
mkdir -p "$out"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; lscpu; } > "$out/machine.txt" 2>&1
timeout 200 "$b/agent-tests" cuda:: --test-threads=1 > "$out/cuda-tests.txt" 2>&1; rc=$?; echo "cuda tests rc $rc $SECONDS s"
tail -3 "$out/cuda-tests.txt"
if [ $rc != 0 ]; then grep -E "panicked|FAILED|error" "$out/cuda-tests.txt" | head -20; exit 1; fi
CUDA_COLD=1 RETEST_RUNS="7:420s 7:130s:--queries=300:1" timeout $((580 - SECONDS)) bash scripts/gpu-host-retest.sh "$out/retest"
echo "done $SECONDS s"
