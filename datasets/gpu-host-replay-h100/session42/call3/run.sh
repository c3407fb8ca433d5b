#!/bin/bash
# Session 42, call 3 (fresh machine), binaries of the commit in COMMIT
# (call 2's). cpu:0 alone (cores 0-14, rotation-profiled, distinct
# weights) at decode 1 and prefill 16, each process run with the workers
# sleeping at once after a run (--cpu-poll-us 0) and polling 2000 µs (the
# default) alternated, 2 rounds: call 1's comparison again, on another host.
set -u
out=${1:?out}
mkdir -p "$out/r"
SKIP_CUDA_TESTS=1 CUDA_COLD=1 CPU_ROTATE=1 CUDA_BUDGET=60s CPU_BUDGET=90s PAIR_BUDGET=40s \
  REPLAY_REPS=7 REPLAY_PROCS=2 CPU_GROUPS="0-14" REPLAY_PLANS="cpu" \
  REPLAY_WEIGHTS="distinct" REPLAY_POLL="0 2000" REPLAY_CASES="decode:1 prefill:16" timeout 560 bash scripts/gpu-host-replay.sh "$out/r/replay"
echo "replay done $SECONDS s"
tar cf "$out/call.tar" -C "$out" r && rm -rf "$out/r"
