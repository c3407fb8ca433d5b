#!/bin/bash
# Session 37, call 3 (fresh machine), binaries of the commit in COMMIT
# (84316d4: the cpu processors evict with their own workers under
# --cold-cache). The standard replay of session 34's call 6 (cuda tests
# first), 5 processes per case and wait: the same as call 2, a second
# host for the same binaries (call 2 had prefill 16 at 0.92-0.95).
set -u
out=${1:?out}
mkdir -p "$out"
CUDA_COLD=1 CPU_COLD=1 CUDA_BUDGET=100s CPU_BUDGET=60s REPLAY_REPS=7 REPLAY_PROCS=5 \
  REPLAY_CASES="prefill:16 prefill:300 decode:1" timeout 570 bash scripts/gpu-host-replay.sh "$out/r"
echo "replay done $SECONDS s"
