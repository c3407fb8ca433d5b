#!/bin/bash
# Session 46: a demo's plan replayed at once in both waits, alternated,
# ROUNDS rounds of prefill LEN and 8 decode steps, 3 timed passes each,
# one layer's weights shared (as the demo runs it). Prints one line per run.
# Usage: waits.sh DEMO_DIR [ROUNDS] [LEN]
set -u
d=${1:?demo dir}; rounds=${2:-2}; len=${3:-64}
h=${HETERO:-target/release/hetero}
for r in $(seq 1 "$rounds"); do
  for sync in block poll; do
    for phase in prefill decode; do
      if [ $phase = prefill ]; then a=(--len "$len"); else a=(--len 1 --tokens 8); fi
      $h run "$d/plan.ron" --phase $phase "${a[@]}" --model "$d/qwen2.5-1.5b.json" \
        --predictor "$d/predictor.ron" --repeat 3 --share-weights --sync $sync --json \
        --out "$d/waits-$r-$sync-$phase.json" > /dev/null 2>&1 || echo "run failed: $r $sync $phase"
      python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[2], sys.argv[3], sys.argv[4], 'predicted %.0f us measured %.0f us ratio %.3f host %.3f' % (r['predicted_us'], r['measured_us'], r['ratio'], r['host']['speed']))" "$d/waits-$r-$sync-$phase.json" $r $sync $phase
    done
  done
done
