#!/usr/bin/env bash
# Session 38: one processor (PROC, default opencl:0:0: PoCL, the CPU
# through OpenCL) replayed on this VM after a longer profile than session
# 37's pocl.sh and demos (BUDGET, default 300 s, of PROC alone, cold, up to
# 128 rows), so that more of the model's own shapes (lm_head's above all)
# are measured rather than fitted. Fit, a plan for PROC alone, then each
# wait in turn, prefill 64 and 4 decode steps, 3 timed passes, ROUNDS
# rounds (default "1 2 3"). Since session 41: COLD (default --cold-cache;
# --rotate-weights for cold weights by rotation) and SHARE (default
# --share-weights; empty for every layer's weights its own).
#   long-profile.sh OUT
set -euo pipefail
out=${1:?out}
root=$(cd "$(dirname "$0")/../../.." && pwd)
bin=$root/target/release
model=$root/datasets/models/qwen2.5-1.5b.json
mkdir -p "$out"
"$bin/hetero" profile --device local --agent "$bin/hetero-agent" --processors "${PROC:-opencl:0:0}" \
    --models "$model" --budget "${BUDGET:-300s}" --max-len 128 ${COLD:---cold-cache} --out "$out/dataset" > "$out/profile.txt" 2>&1
"$bin/hetero" fit "$out/dataset" --out "$out/predictor.ron" > "$out/fit.txt"
"$bin/hetero" solve --predictor "$out/predictor.ron" --model "$model" --processors "${PROC:-opencl:0:0}" \
    --lengths 1..128 --decode-lengths 1 --out "$out/plan.ron" > "$out/solve.txt"
for round in ${ROUNDS:-1 2 3}; do
    for sync in block poll; do
        for ph in prefill decode; do
            if [ $ph = decode ]; then len=(--len 1 --tokens 4); else len=(--len 64); fi
            "$bin/hetero" run "$out/plan.ron" --model "$model" --predictor "$out/predictor.ron" \
                --phase $ph "${len[@]}" --repeat 3 ${SHARE---share-weights} --sync $sync \
                --out "$out/$sync-$ph-$round.json" > /dev/null
            python3 -c 'import json,sys,time; d=json.load(open(sys.argv[1])); print(time.strftime("%H:%M:%S"), *sys.argv[2:], "predicted %.0f measured %.0f ratio %.3f" % (d["predicted_us"], d["measured_us"], d["ratio"]))' \
                "$out/$sync-$ph-$round.json" "$round" "$sync" "$ph" | tee -a "$out/waits.txt"
        done
    done
done
