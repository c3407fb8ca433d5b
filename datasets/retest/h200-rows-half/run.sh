#!/bin/bash
# Session 26, call 5 (nvidia-h200): (1) the agent's cuda tests with row counts up to 1.5 M;
# (2) shapes whose time jumps with M, swept with HETERO_CUDA_ROWS_MOST=1.25
# (the row counts of sessions 22-26) and with the default 1.5, `aw` (both
# forms are searched, so the order does not matter), twice, alternating,
# each choice logged; (3) the design and held-out queries.
set -u
b=$(cd "$(dirname "$0")" && pwd)
out=${1:?out}
mkdir -p "$out/ab"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; lscpu; } > "$out/machine.txt" 2>&1
timeout 200 "$b/agent-tests" cuda:: --test-threads=1 > "$out/cuda-tests.txt" 2>&1; echo "cuda tests rc $?"
tail -3 "$out/cuda-tests.txt"
shapes=146x8960x1536,158x8960x1536,233x8960x512,300x1536x8960,316x8960x1536,397x1536x8960,420x8960x1536,445x1536x8960,505x8960x512,517x8960x1536,533x1536x8960,593x8960x1536,670x8960x1536,738x1536x8960,739x8960x1024,1077x8960x768,1234x1536x8960,1253x8960x768,1279x1536x8960,2829x8960x512,2983x8960x512
export HETERO_CUDA_ROWS_LOG=1
for r in 1 2; do
  for v in 1.25 1.5; do
    HETERO_CUDA_ROWS_MOST=$v timeout 120 "$b/hetero-agent" sweep --processor cuda:0 --shapes $shapes --dtype f16 --order aw --reps 7 --kernel-timer --cold-cache \
         > "$out/ab/aw-$v-$r.jsonl" 2> "$out/ab/aw-$v-$r.err"; echo "$v $r rc $? $SECONDS s"
  done
done
unset HETERO_CUDA_ROWS_LOG
(cd "$out" && tar czf ab.tgz ab && rm -rf ab)
CUDA_COLD=1 RETEST_RUNS="7:420s 7:130s:--queries=300:1" timeout 440 bash scripts/gpu-host-retest.sh "$out/retest"
echo "done $SECONDS s"
