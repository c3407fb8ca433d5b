#!/bin/bash
# Session 39, call 1 (fresh machine), binaries of the commit in COMMIT.
# The standard replay (cuda tests, 100 s cold cuda profile, 60 s cold cpu
# profile, fit, 5 processes per case and wait), with the `mixed` plan (which
# has put every operator on cuda:0 in every call so far) replaced by an
# `offload` plan: cuda:0 with cpu:0 under a 1 GiB GPU memory budget, so that
# the plan splits operators between the two (rows on the CPU, rows whose
# weights are copied to the GPU every run, rows resident there). The first
# replay of splits between real processors of two kinds against their
# prediction.
set -u
out=${1:?out}
mkdir -p "$out"
CUDA_COLD=1 CPU_COLD=1 CUDA_BUDGET=100s CPU_BUDGET=60s REPLAY_REPS=7 REPLAY_PROCS=5 \
  REPLAY_PLANS="cuda offload" REPLAY_OFFLOAD_BUDGET=1GiB \
  REPLAY_CASES="prefill:16 prefill:300 decode:1" timeout 570 bash scripts/gpu-host-replay.sh "$out/r"
echo "replay done $SECONDS s"
