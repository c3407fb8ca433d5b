#!/bin/bash
# Session 39, call 3 (fresh machine), binaries of the commit in COMMIT.
# Call 2's method and binaries with a 2 GiB GPU memory budget instead of
# 1 GiB: more rows resident, so that less of each operator streams over
# PCIe while a CPU part runs beside it.
set -u
out=${1:?out}
mkdir -p "$out"
CUDA_COLD=1 CPU_COLD=1 CUDA_BUDGET=100s CPU_BUDGET=60s REPLAY_REPS=7 REPLAY_PROCS=5 \
  REPLAY_PLANS="cuda offload" REPLAY_OFFLOAD_BUDGET=2GiB \
  REPLAY_CASES="prefill:16 prefill:300 decode:1" timeout 570 bash scripts/gpu-host-replay.sh "$out/r"
echo "replay done $SECONDS s"
