#!/bin/bash
# Session 23, call 1: (1) the agent's cuda tests with K and N padded to 8;
# (2) shapes with K or N not a multiple of 8 and aligned neighbours, swept
# with HETERO_CUDA_PAD=none (K and N as they are, as before) and padded,
# both orders, twice, alternating; (3) the design and held-out queries.
set -u
b=$(cd "$(dirname "$0")" && pwd)
out=${1:?out}
mkdir -p "$out/ab"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/machine.txt" 2>&1
"$b/agent-tests" cuda:: --test-threads=1 > "$out/cuda-tests.txt" 2>&1; echo "cuda tests rc $?"
tail -3 "$out/cuda-tests.txt"
shapes=8x1536x73,8x1536x76,8x1536x80,8x1536x153,8x1536x160,127x1536x2233,128x1536x2240,128x509x1024,128x512x1024,256x8085x16307,256x8148x16384,256x8104x16384,251x6645x15193,253x7378x15777,256x2761x16230,257x1906x1906,1x627x12116,4084x627x256,990x1536x4148,990x1536x4152,239x1774x12116
for r in 1 2; do
  for v in none pad; do
    for o in aw wt_at; do
      if [ $v = none ]; then export HETERO_CUDA_PAD=none; else unset HETERO_CUDA_PAD; fi
      "$b/hetero-agent" sweep --processor cuda:0 --shapes $shapes --dtype f16 --order $o --reps 7 --kernel-timer --cold-cache \
         > "$out/ab/$o-$v-$r.jsonl" 2> "$out/ab/$o-$v-$r.err"; echo "$o $v $r rc $? $SECONDS s"
    done
  done
done
unset HETERO_CUDA_PAD
(cd "$out" && tar czf ab.tgz ab && rm -rf ab)
# (3) the whole design with a cold L2 and 300 held-out queries (as session 22).
CUDA_COLD=1 RETEST_RUNS="7:420s 7:130s:--queries=300:1" bash scripts/gpu-host-retest.sh "$out/retest"
