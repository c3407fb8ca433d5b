#!/bin/bash
# Session 33, call 6 (fresh machine): call 5 again, binaries of 856385e, for a second sample. A 16-bit CUDA
# GEMM converts an input copied on its own inside its launch; write_input is
# the copy alone. The standard replay (cuda tests first), 5 processes per
# case and sync; then stage_bench on the replay model's layer at 16 tokens.
set -u
out=${1:?out}
mkdir -p "$out"
CUDA_COLD=1 CPU_COLD=1 CUDA_BUDGET=100s CPU_BUDGET=60s REPLAY_REPS=7 REPLAY_PROCS=5 \
  REPLAY_CASES="prefill:16 prefill:300 decode:1" timeout 540 bash scripts/gpu-host-replay.sh "$out/r"
echo "replay done $SECONDS s"
work=$(ls -dt /tmp/replay.* | head -1)
grep -n "op_overhead\|max_bytes" "$work/predictor.ron" | head -20
grep -n "stage_in: Some\|stage_out: Some" -A3 "$work/predictor.ron" | head -24
sb=.carry/replay/stage_bench
{
$sb --pinned cuda:0 f16 wt_at 1536x1536 16,24,32,64,300
$sb --pinned --layers cuda:0 f16 wt_at 16 1536x1536,1536x256,1536x256,1536x1536,1536x8960,1536x8960,8960x1536 28 poll
$sb --pinned --alloc cuda:0 f16 wt_at 16x1536x1536 4
} > "$out/stage.md" 2>&1
cat "$out/stage.md"
