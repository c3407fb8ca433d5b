#!/bin/bash
# Session 28, call 6 (nvidia-h100-x1, fresh): the design twice (no queries: two
# designs and the queries do not fit in one call) with HETERO_CUDA_SEARCH=joint (every algorithm of every row count
# and form timed in one search, instead of the algorithms of the pair kept),
# to compare with the two-stage designs of calls 1 and 2.
set -u
b=$(cd "$(dirname "$0")" && pwd)
out=${1:?out}
mkdir -p "$out"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; lscpu; } > "$out/machine.txt" 2>&1
HETERO_CUDA_SEARCH=joint CUDA_COLD=1 RETEST_RUNS="7:420s 7:420s" timeout 580 bash scripts/gpu-host-retest.sh "$out/retest"
echo "done $SECONDS s"
