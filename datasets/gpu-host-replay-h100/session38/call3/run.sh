#!/bin/bash
# Session 38, call 3 (fresh machine), binaries of the commit in COMMIT
# (the run report with each operator's mean and slowest execution and
# the medians summed; timing as ae4ef33). The standard replay of session 37's
# calls 2 and 3 (cuda tests first), 5 processes per case and wait: does
# the GPU host's totals sit above their operators' medians, as this VM's do?
set -u
out=${1:?out}
mkdir -p "$out"
CUDA_COLD=1 CPU_COLD=1 CUDA_BUDGET=100s CPU_BUDGET=60s REPLAY_REPS=7 REPLAY_PROCS=5 \
  REPLAY_CASES="prefill:16 prefill:300 decode:1" timeout 570 bash scripts/gpu-host-replay.sh "$out/r"
echo "replay done $SECONDS s"
