#!/bin/bash
# Session 33, call 3 (fresh machine): binaries of 94eef06. The staged-copy
# microbenchmarks wait as the runtime does by default (polling the host
# flag), and 128 KiB is a staged size again. The standard replay (cuda tests
# first), 5 processes per case and sync.
set -u
out=${1:?out}
mkdir -p "$out"
CUDA_COLD=1 CPU_COLD=1 CUDA_BUDGET=100s CPU_BUDGET=60s REPLAY_REPS=7 REPLAY_PROCS=5 \
  REPLAY_CASES="prefill:16 prefill:300 decode:1" timeout 560 bash scripts/gpu-host-replay.sh "$out/r"
echo "replay done $SECONDS s"
work=$(ls -dt /tmp/replay.* | head -1)
grep -n "op_overhead\|sync_block_us\|sync_poll_us\|max_bytes" "$work/predictor.ron" | head -20
grep -n "stage_in: Some\|stage_out: Some\|stage_out_aw: Some" -A3 "$work/predictor.ron" | head -40
