#!/bin/bash
# Side by side: cpu:0 profiled warm vs cold, each fitted, solved and replayed.
set -e
cd $(git rev-parse --show-toplevel)
H=target/release/hetero
M=datasets/models/qwen2.5-1.5b.json
O=/tmp/coldexp
for mode in warm cold; do
  extra=""; [ $mode = cold ] && extra="--cold-cache"
  rm -rf $O/$mode; mkdir -p $O/$mode
  echo "== $mode profile $(cat /proc/loadavg)"
  $H profile --device local --agent target/release/hetero-agent --processors cpu:0 --models $M --budget 150s $extra --out $O/$mode/ds > $O/$mode/profile.log 2>&1
  $H fit $O/$mode/ds --out $O/$mode/p.ron > $O/$mode/fit.log 2>&1
  $H solve --predictor $O/$mode/p.ron --model $M --out $O/$mode/plan.ron --lengths 1..128 > $O/$mode/solve.log 2>&1
done
for rep in 1 2; do
for mode in warm cold; do
  echo "== $mode replay $rep $(cat /proc/loadavg)"
  for ph in prefill decode; do
    if [ $ph = prefill ]; then a="--len 64"; else a="--len 1 --tokens 8"; fi
    $H run $O/$mode/plan.ron --phase $ph $a --model $M --predictor $O/$mode/p.ron --check --repeat 2 --share-weights --out $O/$mode/run-$ph-$rep.json > $O/$mode/run-$ph-$rep.log 2>&1
  done
done
done
echo done
