#!/bin/bash
# Session 41, call 4 (fresh machine), binaries of the commit in COMMIT.
# Call 3's one round of REPLAY_REFINE left the plan solved again with
# cpu:0 parts of shapes not yet measured. Three rounds here, each measuring
# the cpu:0 GEMMs the plan of the round before runs; otherwise call 2's
# replay (offload, distinct weights, decode 1 and prefill 16, 2 processes).
set -u
out=${1:?out}
SKIP_CUDA_TESTS=1 CUDA_COLD=1 CPU_ROTATE=1 CUDA_BUDGET=100s CPU_BUDGET=90s PAIR_BUDGET=60s REPLAY_REFINE=3 \
  REPLAY_REPS=7 REPLAY_PROCS=2 CPU_GROUPS="0-14" REPLAY_PLANS="offload" REPLAY_OFFLOAD_BUDGET=1GiB \
  REPLAY_WEIGHTS="distinct" REPLAY_CASES="decode:1 prefill:16" timeout 560 bash scripts/gpu-host-replay.sh "$out/r"
echo "replay done $SECONDS s"
tar cf "$out/call.tar" -C "$out" r && rm -rf "$out/r"
