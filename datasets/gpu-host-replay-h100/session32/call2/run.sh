#!/bin/bash
# Session 32, call 2 (fresh machine): call 1's binaries plus a 128 KiB
# staged-copy size in the profile design (the first size above CUDA's 64 KiB
# launch-copy bound, where 16-token prefill inputs fall). The standard
# replay (cuda tests first), 5 processes per case and sync.
set -u
out=${1:?out}
mkdir -p "$out"
CUDA_COLD=1 CPU_COLD=1 CUDA_BUDGET=100s CPU_BUDGET=60s REPLAY_REPS=7 REPLAY_PROCS=5 \
  REPLAY_CASES="prefill:16 prefill:300 decode:1" timeout 560 bash scripts/gpu-host-replay.sh "$out/r"
echo "replay done $SECONDS s"
work=$(ls -dt /tmp/replay.* | head -1)
grep -n "op_overhead\|sync_block_us\|sync_poll_us\|max_bytes" "$work/predictor.ron" | head -20
grep -n "stage_in: Some\|stage_out: Some\|stage_out_aw: Some" -A3 "$work/predictor.ron" | head -40
