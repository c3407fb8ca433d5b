#!/bin/bash
# Session 25, one call on nvidia-h100-x1: profile (with the new op_alone
# microbenchmark), fit, solve and replay, binaries at b69f087 carried in
# .carry/replay (scripts/gpu-host-replay.sh --prepare).
[ -f .carry/replay/hetero ] || gunzip -k .carry/replay/hetero.gz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
CUDA_COLD=1 CPU_COLD=1 CUDA_BUDGET=100s CPU_BUDGET=60s REPLAY_REPS=7 REPLAY_PROCS=3 \
  REPLAY_CASES="prefill:16 prefill:300 decode:1" \
  timeout 570 bash scripts/gpu-host-replay.sh $OUT/r1
