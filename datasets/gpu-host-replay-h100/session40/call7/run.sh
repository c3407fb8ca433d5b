#!/bin/bash
# Session 40, call 7 (fresh machine), binaries of the commit in COMMIT.
# Call 2's offload replay with cpu:0 profiled under a 2 GiB eviction
# (HETERO_EVICT_MIB=2048, written), which in call 6 put ffn_down's GEMV at
# the runtime's time: distinct weights, decode 1 and prefill 16, 2
# processes per case and wait. No cuda tests, a 90 s cpu:0 profile (each
# timed run now follows 2 GiB of writes) and 60 s of pair microbenchmarks,
# to fit the device time left.
set -u
out=${1:?out}
mkdir -p "$out"
HETERO_EVICT_MIB=2048 SKIP_CUDA_TESTS=1 CUDA_COLD=1 CPU_COLD=1 CUDA_BUDGET=100s CPU_BUDGET=90s PAIR_BUDGET=60s \
  REPLAY_REPS=7 REPLAY_PROCS=2 CPU_GROUPS="0-14" REPLAY_PLANS="offload" REPLAY_OFFLOAD_BUDGET=1GiB \
  REPLAY_WEIGHTS="distinct" REPLAY_CASES="decode:1 prefill:16" timeout 430 bash scripts/gpu-host-replay.sh "$out/r"
echo "replay done $SECONDS s"
tar cf "$out/call.tar" -C "$out" r && rm -rf "$out/r"
