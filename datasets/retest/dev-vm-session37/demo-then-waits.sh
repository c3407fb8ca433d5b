#!/usr/bin/env bash
# Session 37: `hetero demo` on this VM as a new user runs it (cold profile,
# now evicted by cpu:0's own workers), then its plan at once with each wait
# in turn, two rounds, prefill 64 and 8 decode steps, 3 timed passes.
#   demo-then-waits.sh OUT
set -euo pipefail
out=${1:?out}
bin=$(cd "$(dirname "$0")/../../.." && pwd)/target/release
mkdir -p "$out"
(cd "$out" && "$bin/hetero" demo > demo.txt 2>&1)
demo=$out/hetero-demo
for round in ${ROUNDS:-1 2}; do
    for sync in block poll; do
        for ph in prefill decode; do
            if [ $ph = decode ]; then len=(--len 1 --tokens 8); else len=(--len 64); fi
            "$bin/hetero" run "$demo/plan.ron" --model "$demo/qwen2.5-1.5b.json" --predictor "$demo/predictor.ron" \
                --phase $ph "${len[@]}" --repeat 3 --share-weights --sync $sync \
                --out "$out/$sync-$ph-$round.json" > /dev/null
            python3 -c 'import json,sys,time; d=json.load(open(sys.argv[1])); print(time.strftime("%H:%M:%S"), *sys.argv[2:], "predicted %.0f measured %.0f ratio %.3f host %.2f" % (d["predicted_us"], d["measured_us"], d["ratio"], d["host"]["speed"]))' \
                "$out/$sync-$ph-$round.json" "$round" "$sync" "$ph" | tee -a "$out/waits.txt"
        done
    done
done
