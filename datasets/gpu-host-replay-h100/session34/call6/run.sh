#!/bin/bash
# Session 34, call 6 (fresh machine), binaries of the commit in COMMIT: the
# code kept at the session's end (session 32's runtime and profile, the
# launch-copy bound's knob, the staged size at the bound). The standard
# replay (cuda tests first), 5 processes per case and wait.
set -u
out=${1:?out}
mkdir -p "$out"
CUDA_COLD=1 CPU_COLD=1 CUDA_BUDGET=100s CPU_BUDGET=60s REPLAY_REPS=7 REPLAY_PROCS=5 \
  REPLAY_CASES="prefill:16 prefill:300 decode:1" timeout 570 bash scripts/gpu-host-replay.sh "$out/r"
echo "replay done $SECONDS s"
work=$(ls -dt /tmp/replay.* | head -1)
grep -n "op_overhead\|max_bytes" "$work/predictor.ron" | head -20
grep -n "stage_in: Some\|stage_out: Some" -A3 "$work/predictor.ron" | head -24
