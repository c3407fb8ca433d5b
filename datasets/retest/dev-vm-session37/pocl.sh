#!/usr/bin/env bash
# Session 37: PoCL (opencl:0:0, the CPU through OpenCL) replayed on this VM.
# A fresh cold profile of cpu:0 and opencl:0:0 (90 s, up to 128 rows), fit,
# then two plans: opencl:0:0 alone, and cpu:0 with opencl:0:0 (the solver's
# choice); each run at once with each wait, prefill 64 and 4 decode steps,
# 3 timed passes, two rounds.
#   pocl.sh OUT
set -euo pipefail
out=${1:?out}
bin=$(cd "$(dirname "$0")/../../.." && pwd)/target/release
model=$(cd "$(dirname "$0")/../../.." && pwd)/datasets/models/qwen2.5-1.5b.json
mkdir -p "$out"
"$bin/hetero" profile --device local --agent "$bin/hetero-agent" --processors cpu:0,opencl:0:0 \
    --models "$model" --budget 90s --max-len 128 --cold-cache --out "$out/dataset" > "$out/profile.txt" 2>&1
"$bin/hetero" fit "$out/dataset" --out "$out/predictor.ron" > "$out/fit.txt"
"$bin/hetero" solve --predictor "$out/predictor.ron" --model "$model" --processors opencl:0:0 \
    --lengths 1..128 --decode-lengths 1 --out "$out/plan-ocl.ron" > "$out/solve-ocl.txt"
"$bin/hetero" solve --predictor "$out/predictor.ron" --model "$model" \
    --lengths 1..128 --decode-lengths 1 --out "$out/plan-both.ron" > "$out/solve-both.txt"
for round in 1 2; do
    for plan in ocl both; do
        for sync in block poll; do
            for ph in prefill decode; do
                if [ $ph = decode ]; then len=(--len 1 --tokens 4); else len=(--len 64); fi
                "$bin/hetero" run "$out/plan-$plan.ron" --model "$model" --predictor "$out/predictor.ron" \
                    --phase $ph "${len[@]}" --repeat 3 --share-weights --sync $sync \
                    --out "$out/$plan-$sync-$ph-$round.json" > /dev/null
                python3 -c 'import json,sys,time,collections; d=json.load(open(sys.argv[1])); c=collections.Counter(o["label"] for o in d["per_op"]); print(time.strftime("%H:%M:%S"), *sys.argv[2:], "predicted %.0f measured %.0f ratio %.3f" % (d["predicted_us"], d["measured_us"], d["ratio"]), dict(c))' \
                    "$out/$plan-$sync-$ph-$round.json" "$round" "$plan" "$sync" "$ph" | tee -a "$out/waits.txt"
            done
        done
    done
done
