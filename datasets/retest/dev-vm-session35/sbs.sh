#!/bin/bash
# Side by side on this VM: the runtime before (6b17e6b: row-by-row
# transposes) and after (c1ad4cc: the transpose crate) on one plan (the
# session-35 demo's, which charges the cpu backend's copies), both waits,
# alternating, three rounds.
set -u
OLD=${OLD:-/tmp/wt-old/target/release/hetero}
NEW=${NEW:-/work/main/target/release/hetero}
D=hetero-demo
for round in 1 2 3; do
  for bin in old new; do
    if [ $bin = old ]; then H=$OLD; else H=$NEW; fi
    for sync in poll block; do
      for phase in prefill decode; do
        if [ $phase = prefill ]; then extra="--len 64"; else extra="--len 1 --tokens 8"; fi
        $H run $D/plan.ron --phase $phase $extra --model $D/qwen2.5-1.5b.json \
          --predictor $D/predictor.ron --check --repeat 3 --share-weights --sync $sync \
          --out sbs-$phase-$bin-$sync-$round.json > /dev/null 2>sbs-$phase-$bin-$sync-$round.err \
          || echo "fail $phase $bin $sync $round"
      done
    done
  done
done
