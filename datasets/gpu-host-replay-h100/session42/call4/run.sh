#!/bin/bash
# Session 42, call 4 (fresh machine), binaries of the commit in COMMIT
# (call 2's). Session 41's call 5 with this session's defaults (cpu:0's
# workers polling 2000 µs after a run): plans for cpu:0 alone and offload
# (1 GiB) from a rotation-profiled cpu:0 (cores 0-14) and two rounds of
# REPLAY_REFINE, replayed with distinct weights at decode 1 and prefill 16,
# 2 processes per case and wait.
set -u
out=${1:?out}
mkdir -p "$out/r"
SKIP_CUDA_TESTS=1 CUDA_COLD=1 CPU_ROTATE=1 CUDA_BUDGET=60s CPU_BUDGET=90s PAIR_BUDGET=40s REPLAY_REFINE=2 \
  REPLAY_REPS=7 REPLAY_PROCS=2 CPU_GROUPS="0-14" REPLAY_PLANS="cpu offload" REPLAY_OFFLOAD_BUDGET=1GiB \
  REPLAY_WEIGHTS="distinct" REPLAY_CASES="decode:1 prefill:16" timeout 560 bash scripts/gpu-host-replay.sh "$out/r/replay"
echo "replay done $SECONDS s"
tar cf "$out/call.tar" -C "$out" r && rm -rf "$out/r"
