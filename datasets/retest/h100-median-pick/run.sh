#!/bin/bash
# Session 24, call 1: (1) the agent's cuda tests with the median row pick;
# (2) the jumping shapes swept with HETERO_CUDA_ROWS_PICK=min (session 23's
# rule) and with the median pick, both orders, twice, alternating, each
# choice logged; (3) the design and held-out queries.
set -u
b=$(cd "$(dirname "$0")" && pwd)
out=${1:?out}
mkdir -p "$out/ab"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; lscpu; nvidia-smi topo -m; } > "$out/machine.txt" 2>&1
timeout 200 "$b/agent-tests" cuda:: --test-threads=1 > "$out/cuda-tests.txt" 2>&1; echo "cuda tests rc $?"
tail -3 "$out/cuda-tests.txt"
shapes=158x8960x1536,233x8960x512,397x1536x8960,420x8960x1536,420x1536x1536,445x1536x8960,509x8960x1536,512x8960x1536,517x8960x1536,593x8960x1536,670x8960x1536,738x1536x8960,1024x8960x384,1279x1536x8960,1792x8960x1280,2829x8960x512,2983x8960x512,512x1536x8960
export HETERO_CUDA_ROWS_LOG=1
for r in 1 2; do
  for v in min median; do
    for o in aw wt_at; do
      if [ $v = min ]; then export HETERO_CUDA_ROWS_PICK=min; else unset HETERO_CUDA_ROWS_PICK; fi
      timeout 120 "$b/hetero-agent" sweep --processor cuda:0 --shapes $shapes --dtype f16 --order $o --reps 7 --kernel-timer --cold-cache \
         > "$out/ab/$o-$v-$r.jsonl" 2> "$out/ab/$o-$v-$r.err"; echo "$o $v $r rc $? $SECONDS s"
    done
  done
done
unset HETERO_CUDA_ROWS_PICK HETERO_CUDA_ROWS_LOG
(cd "$out" && tar czf ab.tgz ab && rm -rf ab)
CUDA_COLD=1 RETEST_RUNS="7:420s 7:130s:--queries=300:1" timeout 420 bash scripts/gpu-host-retest.sh "$out/retest"
echo "done $SECONDS s"
