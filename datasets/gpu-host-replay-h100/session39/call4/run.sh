#!/bin/bash
# Session 39, call 4 (fresh machine), binaries of the commit in COMMIT
# (call 2's offload model; the split of each decision's cost into sync and
# copy made consistent, totals unchanged). The offload plan alone at a
# 1 GiB budget, 3 processes per case and wait, once with one layer's
# weights for every layer (--share-weights, as in calls 1-3) and once with
# every layer's weights its own: how much of the CPU parts' timing in the
# shared replays comes from weights left in the host's caches.
set -u
out=${1:?out}
mkdir -p "$out"
CUDA_COLD=1 CPU_COLD=1 CUDA_BUDGET=100s CPU_BUDGET=60s REPLAY_REPS=7 REPLAY_PROCS=3 \
  REPLAY_PLANS="offload" REPLAY_OFFLOAD_BUDGET=1GiB REPLAY_WEIGHTS="shared distinct" \
  REPLAY_CASES="prefill:16 prefill:300 decode:1" timeout 570 bash scripts/gpu-host-replay.sh "$out/r"
echo "replay done $SECONDS s"
