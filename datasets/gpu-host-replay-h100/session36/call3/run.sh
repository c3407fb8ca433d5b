#!/bin/bash
# Session 36, call 3 (fresh machine, the session's last 288 s of device
# time): a short replay with the binaries in COMMIT (the predictor's
# measured table and the order-gap rule), cuda tests left out (the agent
# is unchanged since call 1): 60 s cuda and 30 s cpu profiles, prefill 16
# and decode, one process per case and wait, 5 passes.
set -u
out=${1:?out}
mkdir -p "$out"
SKIP_CUDA_TESTS=1 CUDA_COLD=1 CPU_COLD=1 CUDA_BUDGET=60s CPU_BUDGET=30s REPLAY_REPS=5 REPLAY_PROCS=1 \
  REPLAY_CASES="prefill:16 decode:1" timeout 160 bash scripts/gpu-host-replay.sh "$out/r"
echo "replay done $SECONDS s"
work=$(ls -dt /tmp/replay.* | head -1)
grep -c "shape: (" "$work/predictor.ron"
