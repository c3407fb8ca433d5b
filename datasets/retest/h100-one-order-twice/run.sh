#!/bin/bash
# Session 27, call 5 (nvidia-h100-x1): the one-order design twice around the
# held-out queries, to see how far two designs of one machine differ.
set -u
b=$(cd "$(dirname "$0")" && pwd)
out=${1:?out}
mkdir -p "$out"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; lscpu; } > "$out/machine.txt" 2>&1
echo "cuda tests: not carried (tree size)"
CUDA_COLD=1 RETEST_RUNS="7:420s 7:130s:--queries=300:1 7:420s" timeout 560 bash scripts/gpu-host-retest.sh "$out/retest"
echo "done $SECONDS s"
