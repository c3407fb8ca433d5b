#!/bin/bash
# Session 39, call 7 (fresh machine), binaries of the commit in COMMIT.
# (A first try merged nothing: the cuda profile ran without the groups,
# and datasets of different processor lists do not merge; call7-failed/.)
# Call 6's method with cpu:0 on cores 0-14 only (CPU_GROUPS), in its
# profiles and its runs, so that the host thread (launching, copying,
# scattering and waiting for the GPU's steps) and CUDA's own threads have a
# core the CPU pool does not use. In call 6 the offload plan's CPU parts ran
# about 2x their prediction while the CPU kept 95 % of its bandwidth beside
# the GPU's copies. Prefill 300 has no CPU part in these plans and is left
# out; 2 processes per case and wait (the device time left).
set -u
out=${1:?out}
mkdir -p "$out"
CUDA_COLD=1 CPU_COLD=1 CUDA_BUDGET=100s CPU_BUDGET=60s PAIR_BUDGET=90s REPLAY_REPS=7 REPLAY_PROCS=2 \
  CPU_GROUPS="0-14" REPLAY_PLANS="offload" REPLAY_OFFLOAD_BUDGET=1GiB REPLAY_WEIGHTS="distinct" \
  REPLAY_CASES="prefill:16 decode:1" timeout 575 bash scripts/gpu-host-replay.sh "$out/r"
echo "replay done $SECONDS s"
