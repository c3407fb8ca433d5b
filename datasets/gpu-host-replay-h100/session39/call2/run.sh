#!/bin/bash
# Session 39, call 2 (fresh machine), binaries of the commit in COMMIT.
# Call 1's method again with the offload cost model on runtime-min's
# timeline (activations in host memory: a GPU alone copies them as outside
# offload mode; each GPU step copies its input in and its output back and
# scatters its columns; the CG weights cross PCIe inside their step, not
# overlapped with the resident rows).
set -u
out=${1:?out}
mkdir -p "$out"
CUDA_COLD=1 CPU_COLD=1 CUDA_BUDGET=100s CPU_BUDGET=60s REPLAY_REPS=7 REPLAY_PROCS=5 \
  REPLAY_PLANS="cuda offload" REPLAY_OFFLOAD_BUDGET=1GiB \
  REPLAY_CASES="prefill:16 prefill:300 decode:1" timeout 570 bash scripts/gpu-host-replay.sh "$out/r"
echo "replay done $SECONDS s"
