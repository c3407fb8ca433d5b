#!/bin/bash
# Session 38, call 4 (fresh machine), binaries of the commit in COMMIT
# (rows record their runs' mean; plans carry each processor's summed
# means over summed medians, which scales the predicted totals). The standard replay of session 37's
# calls 2 and 3 (cuda tests first), 5 processes per case and wait: does
# the GPU host still replay within ±5 % with the totals so scaled?
set -u
out=${1:?out}
mkdir -p "$out"
CUDA_COLD=1 CPU_COLD=1 CUDA_BUDGET=100s CPU_BUDGET=60s REPLAY_REPS=7 REPLAY_PROCS=5 \
  REPLAY_CASES="prefill:16 prefill:300 decode:1" timeout 570 bash scripts/gpu-host-replay.sh "$out/r"
echo "replay done $SECONDS s"
