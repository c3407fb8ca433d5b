#!/bin/bash
# Session 41, call 3 (fresh machine), binaries of the commit in COMMIT.
# Call 2's replay (cpu:0 profiled under the default rotation, offload plan,
# distinct weights, decode 1 and prefill 16, 2 processes) with one round of
# REPLAY_REFINE: the cpu:0 GEMMs the plans run at those cases measured with
# `hetero profile --plan`, then fit and solve again before the replay. The
# cuda plan (cuda:0 alone) too, as a control of the main path.
set -u
out=${1:?out}
SKIP_CUDA_TESTS=1 CUDA_COLD=1 CPU_ROTATE=1 CUDA_BUDGET=80s CPU_BUDGET=80s PAIR_BUDGET=50s REPLAY_REFINE=1 \
  REPLAY_REPS=7 REPLAY_PROCS=2 CPU_GROUPS="0-14" REPLAY_PLANS="offload cuda" REPLAY_OFFLOAD_BUDGET=1GiB \
  REPLAY_WEIGHTS="distinct" REPLAY_CASES="decode:1 prefill:16" timeout 560 bash scripts/gpu-host-replay.sh "$out/r"
echo "replay done $SECONDS s"
tar cf "$out/call.tar" -C "$out" r && rm -rf "$out/r"
