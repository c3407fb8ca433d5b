#!/bin/bash
# Session 44, call 5 (fresh machine), binaries of the commit in COMMIT:
# call 4 again on another machine.
# Call 2 with `op_overhead_after` launching 128 GEMMs in turn (call 2: 16,
# which measured 0.9 us more than `op_overhead`). Session 43 call 8's
# replay with the `op_overhead_after` benchmark in
# the pair profile (cuda:0's GEMMs launched after cpu:0's GEMV runs), which
# the solver charges to cuda:0's operators alone in offload mode. Call 1
# showed the runtime's GPU-alone operators paying 3-5 us more per launch
# beside a polling CPU pool than `op_overhead` measured alone. cpu:0-alone
# and offload plans after two REPLAY_REFINE rounds, decode 1 and prefill
# 16, distinct weights, 2 processes per case and wait.
set -u
out=${1:?out}
mkdir -p "$out/r"
SKIP_CUDA_TESTS=1 CUDA_COLD=1 CPU_ROTATE=1 CUDA_BUDGET=60s CPU_BUDGET=90s PAIR_BUDGET=60s REPLAY_REFINE=2 \
  REPLAY_REPS=7 REPLAY_PROCS=2 CPU_GROUPS="0-14" REPLAY_PLANS="offload cpu" REPLAY_OFFLOAD_BUDGET=1GiB \
  REPLAY_WEIGHTS="distinct" REPLAY_CASES="decode:1 prefill:16" timeout 570 bash scripts/gpu-host-replay.sh "$out/r/replay"
echo "replay done $SECONDS s"
grep -h "bandwidth\|operator overhead" "$out/r/replay/fit.txt"
tar xzf "$out/r/replay/logs.tgz" -O logs/plans.txt 2>/dev/null | grep -h "op_overhead_after\|more per launch" | sort | uniq -c | head
cat "$out/r/replay/summary.md" 2>/dev/null | tail -12
tar cf "$out/call.tar" -C "$out" r && rm -rf "$out/r"
