#!/bin/bash
# Session 40, call 2 (fresh machine), binaries of the commit in COMMIT.
# Call 1's replay again (its reports did not come back: the device tool
# returns at most 8 files), with each layer's weights its own and shared,
# 2 processes per case and wait; everything packed into one archive.
set -u
out=${1:?out}
mkdir -p "$out"
CUDA_COLD=1 CPU_COLD=1 CUDA_BUDGET=100s CPU_BUDGET=60s PAIR_BUDGET=90s REPLAY_REPS=7 REPLAY_PROCS=2 \
  CPU_GROUPS="0-14" REPLAY_PLANS="offload" REPLAY_OFFLOAD_BUDGET=1GiB REPLAY_WEIGHTS="distinct shared" \
  REPLAY_CASES="prefill:16 decode:1" timeout 560 bash scripts/gpu-host-replay.sh "$out/r"
echo "replay done $SECONDS s"
tar cf "$out/call.tar" -C "$out" r && rm -rf "$out/r"
