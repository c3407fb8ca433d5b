#!/bin/bash
# Session 22, call 5: the whole design (240 random queries, the row search)
# with a cold L2, then 300 held-out queries, as calls 1 and 4.
set -u
b=$(cd "$(dirname "$0")" && pwd)
out=${1:?out}
mkdir -p "$out"
[ -f "$b/hetero" ] || gunzip -k "$b/hetero.gz"
CUDA_COLD=1 RETEST_RUNS="7:420s 7:130s:--queries=300:1" bash scripts/gpu-host-retest.sh "$out/retest"
