#!/bin/bash
# Session 39, call 5 (fresh machine), binaries of the commit in COMMIT: the
# CPU's bandwidth beside a discrete GPU copying its weights from host memory
# is measured (`bandwidth_concurrent` of cpu:0 with cuda:0 as the peer, from
# a profile of the two together, merged with the standard profiles), and
# the solver slows an offload plan's CPU part by it while CG weights cross
# PCIe. The offload plan at 1 GiB, every layer's weights its own (call 4's
# `offload+distinct`, where the CPU parts ran about 2x their prediction),
# 3 processes per case and wait.
set -u
out=${1:?out}
mkdir -p "$out"
CUDA_COLD=1 CPU_COLD=1 CUDA_BUDGET=100s CPU_BUDGET=60s PAIR_BUDGET=90s REPLAY_REPS=7 REPLAY_PROCS=3 \
  REPLAY_PLANS="offload" REPLAY_OFFLOAD_BUDGET=1GiB REPLAY_WEIGHTS="distinct" \
  REPLAY_CASES="prefill:16 prefill:300 decode:1" timeout 575 bash scripts/gpu-host-replay.sh "$out/r"
echo "replay done $SECONDS s"
