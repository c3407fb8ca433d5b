#!/bin/bash
# Session 37, call 1 (fresh machine), binaries of the commit in COMMIT
# (bd82b37: the predictor's measured table and the order-gap rule of
# session 36). The standard replay of session 34's call 6 (cuda tests
# first), 5 processes per case and wait: the full replay session 36's
# short call 3 left out, prefill 300 included.
set -u
out=${1:?out}
mkdir -p "$out"
CUDA_COLD=1 CPU_COLD=1 CUDA_BUDGET=100s CPU_BUDGET=60s REPLAY_REPS=7 REPLAY_PROCS=5 \
  REPLAY_CASES="prefill:16 prefill:300 decode:1" timeout 570 bash scripts/gpu-host-replay.sh "$out/r"
echo "replay done $SECONDS s"
