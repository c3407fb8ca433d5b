#!/bin/bash
# Profiles of only the lengths the plan is solved for (`--max-len 128`),
# for cpu:0 (both cores, cold caches, as ../dev-vm-cold-cache found best)
# and PoCL (opencl:0:0, warm caches, as ../dev-vm-pocl-long): each profiled,
# fitted, solved for 1..128 and replayed at prefill 16, 64 and 128 and at
# decode (8 tokens), blocking and polling alternated, twice. Run it on a
# quiet machine: nothing else should be running (no builds).
set -e
cd $(git rev-parse --show-toplevel)
H=target/release/hetero
M=datasets/models/qwen2.5-1.5b.json
O=${1:-/tmp/max-len}
BUDGET=${BUDGET:-300s}
mkdir -p $O
for P in cpu:0 opencl:0:0; do
  d=$O/${P//:/-}; rm -rf $d; mkdir -p $d
  extra=""; [ $P = cpu:0 ] && extra="--cold-cache"
  echo "== $P profile $(date -u +%T) $(cat /proc/loadavg)"
  $H profile --device local --agent target/release/hetero-agent --processors $P --models $M \
    --budget $BUDGET --max-len 128 $extra --out $d/ds > $d/profile.log 2>&1
  $H fit $d/ds --out $d/p.ron --report $d/fit-report.json > $d/fit.log 2>&1
  $H solve --predictor $d/p.ron --model $M --out $d/plan.ron --lengths 1..128 > $d/solve.log 2>&1
done
for rep in 1 2; do
  for P in cpu:0 opencl:0:0; do
    d=$O/${P//:/-}
    echo "== $P replay $rep $(date -u +%T) $(cat /proc/loadavg)"
    for c in prefill:16 prefill:64 prefill:128 decode:1; do
      ph=${c%:*}; len=${c#*:}
      a="--len $len"; [ $ph = decode ] && a="--len 1 --tokens 8"
      for sync in block poll; do
        $H run $d/plan.ron --phase $ph $a --model $M --predictor $d/p.ron --check --repeat 3 \
          --share-weights --sync $sync --json --out $d/run-$ph-$len-$sync-$rep.json \
          > $d/run-$ph-$len-$sync-$rep.log 2>&1
      done
    done
  done
done
echo "== done $(date -u +%T) $(cat /proc/loadavg)"
