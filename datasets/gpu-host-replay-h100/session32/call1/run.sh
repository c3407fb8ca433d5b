#!/bin/bash
# Session 32, call 1 (fresh machine): binaries of the per-wait costs commit
# (op_overhead_block and op_overhead_poll profiled apart; a decision records
# what a blocking wait costs and `hetero run --sync block` predicts with it).
# The standard replay (cuda tests first), 5 processes per case and sync.
set -u
out=${1:?out}
mkdir -p "$out"
CUDA_COLD=1 CPU_COLD=1 CUDA_BUDGET=100s CPU_BUDGET=60s REPLAY_REPS=7 REPLAY_PROCS=5 \
  REPLAY_CASES="prefill:16 prefill:300 decode:1" timeout 560 bash scripts/gpu-host-replay.sh "$out/r"
echo "replay done $SECONDS s"
work=$(ls -dt /tmp/replay.* | head -1)
grep -n "op_overhead\|sync_block_us\|sync_poll_us\|max_bytes" "$work/predictor.ron" | head -20
for p in "$work"/*.ron; do
  echo "$p: $(grep -c sync_block_us "$p") decisions with sync_block_us"
done
