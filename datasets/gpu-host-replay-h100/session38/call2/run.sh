#!/bin/bash
# Session 38, call 2 (fresh machine, asked for an H200), binaries of the commit in COMMIT
# (ae4ef33: session 37's final code, with the OpenCL eviction kernel and
# the one measured-or-model formula). The standard replay of session 37's
# calls 2 and 3 (cuda tests first), 5 processes per case and wait: does
# the final code replay within ±5 % on another kind of GPU host?
set -u
out=${1:?out}
mkdir -p "$out"
CUDA_COLD=1 CPU_COLD=1 CUDA_BUDGET=100s CPU_BUDGET=60s REPLAY_REPS=7 REPLAY_PROCS=5 \
  REPLAY_CASES="prefill:16 prefill:300 decode:1" timeout 570 bash scripts/gpu-host-replay.sh "$out/r"
echo "replay done $SECONDS s"
