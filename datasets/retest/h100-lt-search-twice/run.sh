#!/bin/bash
# Session 28, call 2 (nvidia-h100-x1, fresh): the binaries of call 1 (cuBLASLt
# algorithm search), the one-order design twice around the held-out queries.
set -u
b=$(cd "$(dirname "$0")" && pwd)
out=${1:?out}
mkdir -p "$out"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; lscpu; } > "$out/machine.txt" 2>&1
CUDA_COLD=1 RETEST_RUNS="7:420s 7:130s:--queries=300:1 7:420s" timeout 575 bash scripts/gpu-host-retest.sh "$out/retest"
echo "done $SECONDS s"
