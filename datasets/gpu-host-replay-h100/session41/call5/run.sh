#!/bin/bash
# Session 41, call 5 (fresh machine), binaries of the commit in COMMIT.
# cpu:0 alone on the GPU host: a plan for cpu:0 (f32, cores 0-14) from a
# profile under the default rotation and two rounds of REPLAY_REFINE,
# replayed with distinct weights (decode 1, prefill 16, 2 processes), so
# that the rotation is judged without cuda:0's copies beside it; and the
# offload plan again, as in call 4, for more processes.
set -u
out=${1:?out}
SKIP_CUDA_TESTS=1 CUDA_COLD=1 CPU_ROTATE=1 CUDA_BUDGET=90s CPU_BUDGET=90s PAIR_BUDGET=50s REPLAY_REFINE=2 \
  REPLAY_REPS=7 REPLAY_PROCS=2 CPU_GROUPS="0-14" REPLAY_PLANS="cpu offload" REPLAY_OFFLOAD_BUDGET=1GiB \
  REPLAY_WEIGHTS="distinct" REPLAY_CASES="decode:1 prefill:16" timeout 570 bash scripts/gpu-host-replay.sh "$out/r"
echo "replay done $SECONDS s"
tar cf "$out/call.tar" -C "$out" r && rm -rf "$out/r"
