#!/usr/bin/env bash
# Session 36: the predictor's measured table (real-execution mode) against
# the model alone, side by side on one dataset (the demo's profile of this
# VM): fit both ways, solve both, then run both plans in turn, three rounds,
# prefill 64 and 8 decode steps, polling, 3 timed passes each.
#
#   datasets/retest/dev-vm-session36/sbs.sh DATASET MODEL OUT
set -euo pipefail
ds=${1:?dataset}; model=${2:?model config}; out=${3:?out}
h=${HETERO:-target/release/hetero}
mkdir -p "$out"
"$h" fit "$ds" --out "$out/pred-table.ron" > "$out/fit-table.txt"
"$h" fit "$ds" --out "$out/pred-model.ron" --model-only > "$out/fit-model.txt"
for v in table model; do
    "$h" solve --predictor "$out/pred-$v.ron" --model "$model" --out "$out/plan-$v.ron" \
        --lengths 1..1024 > "$out/solve-$v.txt"
done
for round in 1 2 3; do
    for v in table model; do
        common=(--model "$model" --predictor "$out/pred-$v.ron" --repeat 3 --share-weights)
        "$h" run "$out/plan-$v.ron" --phase prefill --len 64 "${common[@]}" \
            --out "$out/$v-prefill-$round.json" > /dev/null
        "$h" run "$out/plan-$v.ron" --phase decode --len 1 --tokens 8 "${common[@]}" \
            --out "$out/$v-decode-$round.json" > /dev/null
        for ph in prefill decode; do
            python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], sys.argv[3], sys.argv[4], "predicted %.0f measured %.0f ratio %.3f host %.2f" % (d["predicted_us"], d["measured_us"], d["ratio"], d["host"]["speed"]))' \
                "$out/$v-$ph-$round.json" "$round" "$v" "$ph" | tee -a "$out/summary.txt"
        done
    done
done
