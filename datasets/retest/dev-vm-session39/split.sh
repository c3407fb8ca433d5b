#!/usr/bin/env bash
# Session 39: a plan with splits on this VM. The two cores as two
# processors (`--cpu-groups "0;1"`: cpu:0 = core 0, cpu:1 = core 1, each a
# pinned one-thread pool), a cold profile of both (BUDGET, default 400 s,
# up to 128 rows), fit, a plan over both (the solver chooses row cuts
# where two cores beat one), the plan's decisions counted, then each wait
# in turn, prefill 64 and 4 decode steps, 3 timed passes, ROUNDS rounds.
#   split.sh OUT
set -euo pipefail
out=${1:?out}
root=$(cd "$(dirname "$0")/../../.." && pwd)
bin=$root/target/release
model=$root/datasets/models/qwen2.5-1.5b.json
groups="0;1"
mkdir -p "$out"
if [ ! -e "$out/plan.ron" ]; then
"$bin/hetero" profile --device local --agent "$bin/hetero-agent" --agent-arg=--cpu-groups --agent-arg="$groups" \
    --processors cpu:0,cpu:1 --models "$model" --budget "${BUDGET:-400s}" --max-len 128 --cold-cache \
    --out "$out/dataset" > "$out/profile.txt" 2>&1
"$bin/hetero" fit "$out/dataset" --out "$out/predictor.ron" > "$out/fit.txt"
"$bin/hetero" solve --predictor "$out/predictor.ron" --model "$model" --processors cpu:0,cpu:1 \
    --lengths 1..128 --decode-lengths 1 --out "$out/plan.ron" > "$out/solve.txt"
"$bin/hetero" plan show "$out/plan.ron" > "$out/plan-show.txt" 2>&1 || true
fi
for round in ${ROUNDS:-1 2 3}; do
    for sync in block poll; do
        for ph in prefill decode; do
            if [ $ph = decode ]; then len=(--len 1 --tokens 4); else len=(--len ${LEN:-64}); fi
            "$bin/hetero" run "$out/plan.ron" --model "$model" --predictor "$out/predictor.ron" \
                --cpu-groups "$groups" --phase $ph "${len[@]}" --repeat 3 --share-weights --sync $sync \
                --out "$out/$sync-$ph-$round.json" > /dev/null
            python3 -c 'import json,sys,time; d=json.load(open(sys.argv[1])); s=sum(1 for o in d["per_op"] if len(o["parts"])>1); print(time.strftime("%H:%M:%S"), *sys.argv[2:], "predicted %.0f measured %.0f ratio %.3f split ops %d" % (d["predicted_us"], d["measured_us"], d["ratio"], s))' \
                "$out/$sync-$ph-$round.json" "$round" "$sync" "$ph" | tee -a "$out/waits.txt"
        done
    done
done
