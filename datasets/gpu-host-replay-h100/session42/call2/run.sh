#!/bin/bash
# Session 42, call 2 (fresh machine), binaries of the commit in COMMIT.
# The offload plan (1 GiB, cpu:0 = cores 0-14 profiled with the rotation,
# distinct weights, workers polling 2000 µs after a run: the default) at
# decode 1 and prefill 16, each process run with the host thread unpinned
# and with --host-cores rest (core 15) alternated (REPLAY_HOST), 2 rounds.
set -u
out=${1:?out}
mkdir -p "$out/r"
SKIP_CUDA_TESTS=1 CUDA_COLD=1 CPU_ROTATE=1 CUDA_BUDGET=60s CPU_BUDGET=90s PAIR_BUDGET=40s \
  REPLAY_REPS=7 REPLAY_PROCS=2 CPU_GROUPS="0-14" REPLAY_PLANS="offload" REPLAY_OFFLOAD_BUDGET=1GiB \
  REPLAY_WEIGHTS="distinct" REPLAY_HOST="none rest" REPLAY_CASES="decode:1 prefill:16" timeout 560 bash scripts/gpu-host-replay.sh "$out/r/replay"
echo "replay done $SECONDS s"
tar cf "$out/call.tar" -C "$out" r && rm -rf "$out/r"
