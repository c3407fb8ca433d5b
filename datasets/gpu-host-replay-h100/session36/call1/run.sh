#!/bin/bash
# Session 36, call 1 (fresh machine), binaries of the commit in COMMIT
# (83181bb: session 35's copies on unified memory, the eviction's bounds,
# Processor::default_dtype). The standard replay of session 34's call 6
# (cuda tests first), 5 processes per case and wait: does the GPU host
# still replay as it did before session 35's changes?
set -u
out=${1:?out}
mkdir -p "$out"
CUDA_COLD=1 CPU_COLD=1 CUDA_BUDGET=100s CPU_BUDGET=60s REPLAY_REPS=7 REPLAY_PROCS=5 \
  REPLAY_CASES="prefill:16 prefill:300 decode:1" timeout 570 bash scripts/gpu-host-replay.sh "$out/r"
echo "replay done $SECONDS s"
work=$(ls -dt /tmp/replay.* | head -1)
grep -n "op_overhead\|max_bytes" "$work/predictor.ron" | head -20
grep -n "stage_in: Some\|stage_out: Some\|stage_out_aw: Some" -A3 "$work/predictor.ron" | head -40
