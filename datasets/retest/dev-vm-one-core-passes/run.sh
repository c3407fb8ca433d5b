#!/bin/bash
# six identical short profiles of cpu:0 (core 1 alone), back to back
# Run from the repository root after a release build; session 29 ran it with
# absolute paths and OUT=/tmp.
for i in 1 2 3 4 5 6; do
  OUT=${OUT:-/tmp}; rm -rf $OUT/pass$i
  target/release/hetero profile --device local --processors cpu:0 --agent target/release/hetero-agent \
    --agent-arg=--cpu-groups --agent-arg=1 --models datasets/models/qwen2.5-1.5b.json --max-len 128 \
    --no-refine --no-microbench --max-cases 200 --budget 300s --reps 7 --warmups 1 --out $OUT/pass$i > $OUT/pass$i.log 2>&1
  echo "pass $i done $(date +%T) $(uptime)"
done
