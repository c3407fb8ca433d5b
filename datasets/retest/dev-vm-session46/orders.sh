#!/bin/bash
# Session 46: two plans solved from one predictor, side by side: plan-sum
# (each operator's operand order by the summed times over the
# representative M, the criterion before this session) and plan-geo (by
# their geometric mean). ROUNDS rounds, each plan in each wait, prefill LEN,
# 3 timed passes, one layer's weights shared (as the demo runs it).
# Usage: orders.sh DIR [ROUNDS] [LEN]   (DIR holds both plans, the
# predictor and qwen2.5-1.5b.json)
set -u
d=${1:?dir}; rounds=${2:-2}; len=${3:-64}
h=${HETERO:-target/release/hetero}
for r in $(seq 1 "$rounds"); do
  for sync in block poll; do
    for p in plan-sum plan-geo; do
      $h run "$d/$p.ron" --phase prefill --len "$len" --model "$d/qwen2.5-1.5b.json" \
        --predictor "$d/predictor.ron" --repeat 3 --share-weights --sync $sync --json \
        --out "$d/orders-$r-$sync-$p.json" > /dev/null 2>&1 || echo "run failed: $r $sync $p"
      python3 -c "import json,sys; r=json.load(open(sys.argv[1])); d={o['op']:o for o in r['per_op']}; print(sys.argv[2], sys.argv[3], sys.argv[4], 'predicted %.0f us measured %.0f us ratio %.3f; ffn_down %.0f/%.0f us, attn_k %.0f/%.0f us' % (r['predicted_us'], r['measured_us'], r['ratio'], d['ffn_down']['predicted_us'], d['ffn_down']['measured_us'], d['attn_k']['predicted_us'], d['attn_k']['measured_us']))" "$d/orders-$r-$sync-$p.json" $r $sync $p
    done
  done
done
