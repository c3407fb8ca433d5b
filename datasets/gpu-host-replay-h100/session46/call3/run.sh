#!/bin/bash
# Session 46, call 3, binaries of the commit in COMMIT.
# The final code's standing: session 45's protocol (cuda:0 60 s cold,
# cpu:0 90 s with --rotate-weights, the pair 60 s, two REPLAY_REFINE
# rounds, decode 1 and prefill 16, distinct weights, 2 processes per case
# and wait, 7 timed passes each) for the offload and cpu:0-alone plans, with this session's final code (the operand order by the geometric mean).
set -u
out=${1:?out}
mkdir -p "$out/r"
SKIP_CUDA_TESTS=1 CUDA_COLD=1 CPU_ROTATE=1 CUDA_BUDGET=60s CPU_BUDGET=90s PAIR_BUDGET=60s REPLAY_REFINE=2 \
  REPLAY_REPS=7 REPLAY_PROCS=2 CPU_GROUPS="0-14" REPLAY_PLANS="offload cpu" REPLAY_OFFLOAD_BUDGET=1GiB \
  REPLAY_WEIGHTS="distinct" REPLAY_CASES="decode:1 prefill:16" timeout 570 bash scripts/gpu-host-replay.sh "$out/r/replay"
echo "replay done $SECONDS s"
grep -h "bandwidth\|operator overhead\|mean / median" "$out/r/replay/fit.txt"
tar xzf "$out/r/replay/logs.tgz" -O logs/plans.txt 2>/dev/null | grep -h "op_overhead_after\|more per launch\|mean / median" | sort | uniq -c | head
cat "$out/r/replay/summary.md" 2>/dev/null | tail -12
tar cf "$out/call.tar" -C "$out" r && rm -rf "$out/r"
