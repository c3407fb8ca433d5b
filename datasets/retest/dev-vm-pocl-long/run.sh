#!/bin/bash
# PoCL (opencl:0:0) profiled for 600 s instead of 150 s, warm caches, then
# fitted, solved and replayed twice (prefill 64, decode 8 tokens), as in
# ../dev-vm-cold-cache/run.sh. Run it on a quiet machine: nothing else
# should be running (no builds).
set -e
cd $(git rev-parse --show-toplevel)
H=target/release/hetero
M=datasets/models/qwen2.5-1.5b.json
O=${1:-/tmp/pocl-long}
P=opencl:0:0
rm -rf $O; mkdir -p $O
echo "== profile $(cat /proc/loadavg)"
$H profile --device local --agent target/release/hetero-agent --processors $P --models $M --budget 600s --out $O/ds > $O/profile.log 2>&1
$H fit $O/ds --out $O/p.ron > $O/fit.log 2>&1
$H solve --predictor $O/p.ron --model $M --out $O/plan.ron --lengths 1..128 > $O/solve.log 2>&1
for rep in 1 2; do
  echo "== replay $rep $(cat /proc/loadavg)"
  for ph in prefill decode; do
    if [ $ph = prefill ]; then a="--len 64"; else a="--len 1 --tokens 8"; fi
    $H run $O/plan.ron --phase $ph $a --model $M --predictor $O/p.ron --check --repeat 2 --share-weights --json --out $O/run-$ph-$rep.json > $O/run-$ph-$rep.log 2>&1
  done
done
echo done
