#!/bin/bash
# Block against poll on this VM, the demo's plan (cpu:0 alone), alternating.
set -u
H=/work/main/target/release/hetero
for round in 1 2 3; do
  for phase in prefill decode; do
    for sync in block poll; do
      if [ $phase = prefill ]; then extra="--len 64"; else extra="--len 1 --tokens 8"; fi
      $H run hetero-demo/plan.ron --phase $phase $extra --model hetero-demo/qwen2.5-1.5b.json \
        --predictor hetero-demo/predictor.ron --repeat 2 --share-weights --sync $sync \
        --out sbs-$phase-$sync-$round.json > /dev/null 2>sbs-$phase-$sync-$round.err || echo "fail $phase $sync $round"
    done
  done
done
python3 - <<'PY'
import json,glob
for f in sorted(glob.glob('sbs-*.json')):
    r=json.load(open(f)); print(f, round(r['predicted_us']), round(r['measured_us']), round(r['ratio'],3), r['dispatch']['median_us'])
PY
