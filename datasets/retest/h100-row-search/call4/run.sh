#!/bin/bash
# Session 22, call 4: (1) the agent's cuda tests with the row search;
# (2) shapes whose time jumps with M, swept with HETERO_CUDA_ROWS=8 (M
# rounded up to 8, as before) and with the search, both orders, twice,
# alternating; (3) the whole design with a cold L2 and 300 held-out
# queries (as call 1).
set -u
b=$(cd "$(dirname "$0")" && pwd)
out=${1:?out}
mkdir -p "$out/ab"
[ -f "$b/hetero" ] || gunzip -k "$b/hetero.gz"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/machine.txt" 2>&1
"$b/agent-tests" cuda:: --test-threads=1 > "$out/cuda-tests.txt" 2>&1; echo "cuda tests rc $?"
tail -3 "$out/cuda-tests.txt"
shapes=1x1536x1536,158x8960x1536,191x8960x1536,300x1536x1536,397x1536x8960,420x8960x1536,445x1536x8960,512x1536x8960,593x8960x1536,651x1536x8960,670x8960x1536,738x1536x8960,768x1536x8960,787x1536x256,1000x1536x8960,1024x8960x1536,1279x1536x8960,1303x1536x1536,2045x8960x1536
for r in 1 2; do
  for v in rows8 search; do
    for o in aw wt_at; do
      if [ $v = rows8 ]; then export HETERO_CUDA_ROWS=8; else unset HETERO_CUDA_ROWS; fi
      "$b/hetero-agent" sweep --processor cuda:0 --shapes $shapes --dtype f16 --order $o --reps 7 --kernel-timer --cold-cache \
         > "$out/ab/$o-$v-$r.jsonl" 2> "$out/ab/$o-$v-$r.err"; echo "$o $v $r rc $?"
    done
  done
done
unset HETERO_CUDA_ROWS
(cd "$out" && tar czf ab.tgz ab && rm -rf ab)
CUDA_COLD=1 RETEST_RUNS="7:380s 7:100s:--queries=300:1" bash scripts/gpu-host-retest.sh "$out/retest"
