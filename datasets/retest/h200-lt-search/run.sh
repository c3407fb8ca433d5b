#!/bin/bash
# Session 28, call 4 (nvidia-h200): (1) the agent's cuda tests with the
# cuBLASLt algorithm search; (2) A/B in one binary: HETERO_CUDA_ALGOS=1 (the
# heuristic's first algorithm, what cublasGemmEx runs) against the default
# search of 8, on the H100's known jump shapes and some ordinary ones, f16,
# aw, kernels alone, cold L2, 7 runs a case, alternating, twice, each choice
# logged; (3) the one-order design and the held-out queries.
set -u
b=$(cd "$(dirname "$0")" && pwd)
out=${1:?out}
mkdir -p "$out/ab"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; lscpu; } > "$out/machine.txt" 2>&1
timeout 200 "$b/agent-tests" cuda:: --test-threads=1 > "$out/cuda-tests.txt" 2>&1; rc=$?; echo "cuda tests rc $rc $SECONDS s"
tail -3 "$out/cuda-tests.txt"
if [ $rc != 0 ]; then grep -E "panicked|FAILED|error" "$out/cuda-tests.txt" | head -20; exit 1; fi
shapes=4096x256x16384,3914x627x12116,1024x8960x768,4096x8192x256,2099x1536x8960,2325x1536x8960,517x8960x1536,300x1536x8960,1024x8960x1536,128x1536x8960,16x8960x1536,1x1536x8960,8x8960x1536,2048x1536x1536,512x4096x14336,64x151936x1536
export HETERO_CUDA_ROWS_LOG=1
for r in 1 2; do
  for v in 1 8; do
    HETERO_CUDA_ALGOS=$v timeout 120 "$b/hetero-agent" sweep --processor cuda:0 --shapes $shapes --dtype f16 --order aw --reps 7 --kernel-timer --cold-cache \
       > "$out/ab/algos$v-$r.jsonl" 2> "$out/ab/algos$v-$r.err"; echo "algos $v $r rc $? $SECONDS s"
  done
done
unset HETERO_CUDA_ROWS_LOG
(cd "$out" && tar czf ab.tgz ab && rm -rf ab)
CUDA_COLD=1 RETEST_RUNS="7:420s 7:130s:--queries=300:1" timeout $((580 - SECONDS)) bash scripts/gpu-host-retest.sh "$out/retest"
echo "done $SECONDS s"
