#!/bin/bash
# Session 22: (1) the agent's cuda tests with both orders padded to M
# rounded up to 8; (2) the same shapes swept wt_at with the old agent
# (888f8d0: aw padded, wt_at not) and the new one (9b86706), and aw with the
# new one, twice, alternating; (3) the whole design with a cold L2 and 300
# held-out queries (as session 21's call 2).
set -u
b=$(cd "$(dirname "$0")" && pwd)
out=${1:?out}
mkdir -p "$out/ab"
[ -f "$b/hetero" ] || gunzip -k "$b/hetero.gz"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/machine.txt" 2>&1
"$b/agent-tests" cuda:: --test-threads=1 > "$out/cuda-tests.txt" 2>&1; echo "cuda tests rc $?"
tail -3 "$out/cuda-tests.txt"
shapes=1x1536x1536,3x1536x8960,7x8960x1536,13x1536x1536,129x1536x1536,257x1536x256,295x1536x7168,445x1536x8960,593x8960x1536,640x1536x8960,651x1536x8960,670x8960x1536,985x1536x1536,990x1536x4148,1025x1536x1536,2045x8960x1536,2048x8960x1536,3561x1536x8960
for r in 1 2; do
  for v in old new; do
    a="$b/hetero-agent"; [ $v = old ] && a="$b/hetero-agent-old"
    "$a" sweep --processor cuda:0 --shapes $shapes --dtype f16 --order wt_at --reps 7 --kernel-timer --cold-cache \
       > "$out/ab/wt_at-$v-$r.jsonl" 2> "$out/ab/wt_at-$v-$r.err"; echo "wt_at $v $r rc $?"
  done
  "$b/hetero-agent" sweep --processor cuda:0 --shapes $shapes --dtype f16 --order aw --reps 7 --kernel-timer --cold-cache \
     > "$out/ab/aw-new-$r.jsonl" 2> "$out/ab/aw-new-$r.err"; echo "aw new $r rc $?"
done
(cd "$out" && tar czf ab.tgz ab && rm -rf ab)
CUDA_COLD=1 RETEST_RUNS="7:380s 7:100s:--queries=300:1" bash scripts/gpu-host-retest.sh "$out/retest"
