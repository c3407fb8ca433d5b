#!/bin/bash
# Session 40, call 1 (fresh machine), binaries of the commit in COMMIT.
# 1. Side by side on cpu:0 = cores 0-14: the decode GEMVs of the offload
#    plans, cold, with session 39's agent (`agent-old`: the gemm crate ran
#    a GEMV on one thread) and this session's (the GEMV split by output
#    columns over the group's threads), three rounds alternated.
# 2. Session 39's call 7 again with the new agent: profiles, fit, offload
#    plan (1 GiB), distinct weights, prefill 16 and decode 1, 3 processes.
set -u
out=${1:?out}
mkdir -p "$out"
xz -dc .carry/rx/agent-old.xz > /tmp/agent-old && chmod +x /tmp/agent-old
shapes=1x1536x1280,1x1536x8960,1x8960x1536,1x1536x9728,1x4096x4096
for round in 1 2 3; do
    for b in /tmp/agent-old .carry/replay/hetero-agent; do
        timeout 60 "$b" --cpu-groups "0-14" sweep --processor cpu:0 --shapes "$shapes" \
            --dtype f32 --cold-cache --reps 9 > "$out/gemv-$(basename "$b")-$round.jsonl" 2>> "$out/gemv.err"
    done
done
echo "gemv done $SECONDS s"
CUDA_COLD=1 CPU_COLD=1 CUDA_BUDGET=100s CPU_BUDGET=60s PAIR_BUDGET=90s REPLAY_REPS=7 REPLAY_PROCS=3 \
  CPU_GROUPS="0-14" REPLAY_PLANS="offload" REPLAY_OFFLOAD_BUDGET=1GiB REPLAY_WEIGHTS="distinct" \
  REPLAY_CASES="prefill:16 decode:1" timeout $((585 - SECONDS)) bash scripts/gpu-host-replay.sh "$out/r"
echo "replay done $SECONDS s"
