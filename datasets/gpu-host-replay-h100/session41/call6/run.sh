#!/bin/bash
# Session 41, call 6 (fresh machine), binaries of the commit in COMMIT.
# Call 5's cpu plan (cpu:0 alone, profiled under the default rotation, two
# rounds of REPLAY_REFINE) again on another machine, three processes per
# case, with the cuda plan (cuda:0 alone) as the control of the main path.
set -u
out=${1:?out}
SKIP_CUDA_TESTS=1 CUDA_COLD=1 CPU_ROTATE=1 CUDA_BUDGET=90s CPU_BUDGET=90s REPLAY_REFINE=2 \
  REPLAY_REPS=7 REPLAY_PROCS=3 CPU_GROUPS="0-14" REPLAY_PLANS="cpu cuda" \
  REPLAY_WEIGHTS="distinct" REPLAY_CASES="decode:1 prefill:16" timeout 570 bash scripts/gpu-host-replay.sh "$out/r"
echo "replay done $SECONDS s"
tar cf "$out/call.tar" -C "$out" r && rm -rf "$out/r"
