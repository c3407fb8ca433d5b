#!/bin/bash
# Session 42, call 1 (fresh machine), binaries of the commit in COMMIT.
# 1. stage_bench --idle: a decode GEMV of cpu:0 (cores 0-14, f32 wt_at)
#    submitted and waited for after 0–3000 µs of idling, with the workers
#    sleeping at once (HETERO_CPU_POLL_US=0) and polling 2000 µs after a run.
# 2. The replay of session 41's call 5 (cpu:0 alone and offload, distinct
#    weights, rotation-profiled cpu:0) at decode 1, each process run with
#    --cpu-poll-us 0 and 2000 alternated (REPLAY_POLL), no refinement.
set -u
out=${1:?out}
mkdir -p "$out/r"
b=.carry/replay
for pu in 0 2000; do
  for shape in 1x1536x256 1x1536x768 1x1536x2304 1x8960x1536; do
    echo "## HETERO_CPU_POLL_US=$pu" >> "$out/r/idle.txt"
    HETERO_CPU_POLL_US=$pu HETERO_CPU_GROUPS=0-14 timeout 60 "$b/stage_bench" --idle cpu:0 f32 wt_at $shape 0,20,100,500,1500,3000 >> "$out/r/idle.txt" 2>&1
  done
done
echo "idle done $SECONDS s"
SKIP_CUDA_TESTS=1 CUDA_COLD=1 CPU_ROTATE=1 CUDA_BUDGET=60s CPU_BUDGET=90s PAIR_BUDGET=40s \
  REPLAY_REPS=7 REPLAY_PROCS=2 CPU_GROUPS="0-14" REPLAY_PLANS="cpu offload" REPLAY_OFFLOAD_BUDGET=1GiB \
  REPLAY_WEIGHTS="distinct" REPLAY_POLL="0 2000" REPLAY_CASES="decode:1" timeout 540 bash scripts/gpu-host-replay.sh "$out/r/replay"
echo "replay done $SECONDS s"
tar cf "$out/call.tar" -C "$out" r && rm -rf "$out/r"
