#!/bin/bash
# Session 28, call 8 (nvidia-h100-x1, fresh): binaries at 7d20cf2 (the joint
# search by default, no environment set): the one-order design twice.
set -u
b=$(cd "$(dirname "$0")" && pwd)
out=${1:?out}
mkdir -p "$out"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; lscpu; } > "$out/machine.txt" 2>&1
CUDA_COLD=1 RETEST_RUNS="7:420s 7:420s" timeout 580 bash scripts/gpu-host-retest.sh "$out/retest"
echo "done $SECONDS s"
