#!/bin/bash
# Session 29, call 4 (nvidia-h100-x1, fresh): binaries of 87fb155 (the
# activation-left output transposed behind the matmul). The standard replay
# (cuda tests first), then one design of the retest for issue 7 in the time
# left (the fit happens on the VM).
set -u
out=${1:?out}
mkdir -p "$out"
CUDA_COLD=1 CPU_COLD=1 CUDA_BUDGET=100s CPU_BUDGET=60s REPLAY_REPS=7 REPLAY_PROCS=3 \
  REPLAY_CASES="prefill:16 prefill:300 decode:1" timeout 330 bash scripts/gpu-host-replay.sh "$out/r"
echo "replay done $SECONDS s"
left=$((585 - SECONDS))
CUDA_COLD=1 RETEST_RUNS="7:260s" timeout $left bash scripts/gpu-host-retest.sh "$out/retest"
ls -R "$out/retest" | head
echo "done $SECONDS s"
