#!/bin/bash
# Session 31, call 2 (fresh machine): binaries of the features commit (host
# activation bytes as predictor features) on top of call 1's mapped launch
# copies. The standard replay (cuda tests first), 5 processes per case and
# sync.
set -u
out=${1:?out}
mkdir -p "$out"
CUDA_COLD=1 CPU_COLD=1 CUDA_BUDGET=100s CPU_BUDGET=60s REPLAY_REPS=7 REPLAY_PROCS=5 \
  REPLAY_CASES="prefill:16 prefill:300 decode:1" timeout 560 bash scripts/gpu-host-replay.sh "$out/r"
echo "replay done $SECONDS s"
work=$(ls -dt /tmp/replay.* | head -1)
grep -n "op_overhead_us\|max_bytes" "$work/predictor.ron" | head
