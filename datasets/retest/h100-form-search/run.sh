#!/bin/bash
# Session 26, call 1: (1) the agent's cuda tests with the form search;
# (2) shapes whose two operand orders ran apart in session 24's H100 design,
# swept with HETERO_CUDA_FORM=order (each order's own cuBLAS form, the
# search of session 24) and with both forms searched, both orders, twice,
# alternating, each choice logged; (3) the design and held-out queries.
set -u
b=$(cd "$(dirname "$0")" && pwd)
out=${1:?out}
mkdir -p "$out/ab"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; lscpu; } > "$out/machine.txt" 2>&1
timeout 200 "$b/agent-tests" cuda:: --test-threads=1 > "$out/cuda-tests.txt" 2>&1; echo "cuda tests rc $?"
tail -3 "$out/cuda-tests.txt"
shapes=146x8960x1536,298x8960x1536,512x8960x1536,1024x8960x1536,1536x8960x1536,1024x8960x768,1024x8960x543,80x8960x386,116x8960x669,533x1536x8960,768x1536x8960,1234x1536x8960,512x1536x8960,256x8192x2048,4096x256x256,300x1536x8960
export HETERO_CUDA_ROWS_LOG=1
for r in 1 2; do
  for v in order both; do
    for o in aw wt_at; do
      if [ $v = order ]; then export HETERO_CUDA_FORM=order; else unset HETERO_CUDA_FORM; fi
      timeout 120 "$b/hetero-agent" sweep --processor cuda:0 --shapes $shapes --dtype f16 --order $o --reps 7 --kernel-timer --cold-cache \
         > "$out/ab/$o-$v-$r.jsonl" 2> "$out/ab/$o-$v-$r.err"; echo "$o $v $r rc $? $SECONDS s"
    done
  done
done
unset HETERO_CUDA_FORM HETERO_CUDA_ROWS_LOG
(cd "$out" && tar czf ab.tgz ab && rm -rf ab)
CUDA_COLD=1 RETEST_RUNS="7:420s 7:130s:--queries=300:1" timeout 440 bash scripts/gpu-host-retest.sh "$out/retest"
echo "done $SECONDS s"
