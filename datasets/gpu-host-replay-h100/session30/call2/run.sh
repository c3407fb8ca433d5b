#!/bin/bash
# Session 30, call 2 (fresh machine): binaries with the CUDA-graph launch and
# op_overhead charged by the solver. The standard replay (cuda tests first)
# with five processes per case and sync mode.
set -u
out=${1:?out}
mkdir -p "$out"
CUDA_COLD=1 CPU_COLD=1 CUDA_BUDGET=100s CPU_BUDGET=60s REPLAY_REPS=7 REPLAY_PROCS=5 \
  REPLAY_CASES="prefill:16 prefill:300 decode:1" timeout 560 bash scripts/gpu-host-replay.sh "$out/r"
echo "replay done $SECONDS s"
work=$(ls -dt /tmp/replay.* | head -1)
grep -n "op_overhead_us\|submit_empty_us\|sync_poll_us\|sync_block_us" "$work/predictor.ron" | head
