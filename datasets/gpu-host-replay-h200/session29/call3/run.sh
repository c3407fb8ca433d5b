#!/bin/bash
# Session 29, call 3 (nvidia-h200, fresh): the activation-left output is
# transposed behind the matmul, inside the timed part (uncommitted change on
# bd7dc50). The cuda tests first (every row count, form and algorithm against
# the CPU reference), then the standard replay as in call 1.
set -u
out=${1:?out}
mkdir -p "$out"
CUDA_COLD=1 CPU_COLD=1 CUDA_BUDGET=100s CPU_BUDGET=60s REPLAY_REPS=7 REPLAY_PROCS=3 \
  REPLAY_CASES="prefill:16 prefill:300 decode:1" timeout 560 bash scripts/gpu-host-replay.sh "$out/r2"
tar -xzOf "$out/r2/logs.tgz" logs/machine.txt > "$out/machine.txt" 2>/dev/null
echo "done $SECONDS s"
