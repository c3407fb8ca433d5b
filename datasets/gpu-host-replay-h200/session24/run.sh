#!/bin/bash
# Session 24, call 5 (the machine of call 4): a replay whose profile
# measures the host-path microbenchmarks in four agent processes.
set -u
out=${1:?out}
CUDA_COLD=1 CPU_COLD=1 CUDA_BUDGET=100s CPU_BUDGET=60s REPLAY_REPS=7 REPLAY_PROCS=3 REPLAY_CASES="prefill:16 prefill:300 prefill:1000 decode:1" SKIP_CUDA_TESTS=1 \
  timeout 560 bash scripts/gpu-host-replay.sh "$out/replay"
echo "done $SECONDS s"
