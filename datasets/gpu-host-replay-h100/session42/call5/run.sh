#!/bin/bash
# Session 42, call 5 (fresh machine), binaries of the commit in COMMIT: a
# polled chain of steps (an offload GPU part: resident rows, then rows whose
# weights are copied) now spins on its first steps and sleeps toward the
# part's predicted end on its last. The offload plan (1 GiB, cpu:0 = cores
# 0-14 rotation-profiled, distinct weights) at decode 1 and prefill 16,
# both waits, 2 processes, no refinement.
set -u
out=${1:?out}
mkdir -p "$out/r"
SKIP_CUDA_TESTS=1 CUDA_COLD=1 CPU_ROTATE=1 CUDA_BUDGET=60s CPU_BUDGET=90s PAIR_BUDGET=40s \
  REPLAY_REPS=7 REPLAY_PROCS=2 CPU_GROUPS="0-14" REPLAY_PLANS="offload" REPLAY_OFFLOAD_BUDGET=1GiB \
  REPLAY_WEIGHTS="distinct" REPLAY_CASES="decode:1 prefill:16" timeout 500 bash scripts/gpu-host-replay.sh "$out/r/replay"
echo "replay done $SECONDS s"
tar cf "$out/call.tar" -C "$out" r && rm -rf "$out/r"
