#!/bin/bash
# Session 39, call 6 (fresh machine), binaries of the commit in COMMIT.
# Call 5's method, with the pair's microbenchmarks first in the merge (so
# that the CPU's bandwidth alone and beside cuda:0's copies come from one
# run; call 5 took the alone row from the cpu profile, 8.8 GB/s against
# 15.6 GB/s beside the copies, a factor above 1 that the solver now clamps)
# and measured cold as the cpu profile is.
set -u
out=${1:?out}
mkdir -p "$out"
CUDA_COLD=1 CPU_COLD=1 CUDA_BUDGET=100s CPU_BUDGET=60s PAIR_BUDGET=90s REPLAY_REPS=7 REPLAY_PROCS=3 \
  REPLAY_PLANS="offload" REPLAY_OFFLOAD_BUDGET=1GiB REPLAY_WEIGHTS="distinct" \
  REPLAY_CASES="prefill:16 prefill:300 decode:1" timeout 575 bash scripts/gpu-host-replay.sh "$out/r"
echo "replay done $SECONDS s"
