#!/usr/bin/env bash
# Session 36: the demo's plan (cpu:0 alone) with each wait in turn, two
# rounds, prefill 64 and 8 decode steps, 3 timed passes: does the host
# thread's polling slow the cpu backend's workers on this 2-vCPU VM?
#   poll-block.sh DEMO_DIR OUT
set -euo pipefail
demo=${1:?demo folder}; out=${2:?out}
h=${HETERO:-target/release/hetero}
mkdir -p "$out"
for round in 1 2; do
    for sync in poll block; do
        for ph in decode prefill; do
            if [ $ph = decode ]; then len=(--len 1 --tokens 8); else len=(--len 64); fi
            "$h" run "$demo/plan.ron" --model "$demo/qwen2.5-1.5b.json" --predictor "$demo/predictor.ron" \
                --phase $ph "${len[@]}" --repeat 3 --share-weights --sync $sync \
                --out "$out/$sync-$ph-$round.json" > /dev/null
            python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); o={x["op"]: x for x in d["per_op"]}; print(*sys.argv[2:], "ratio %.3f measured %.0f lm_head %.0f ffn_gate %.0f attn_k %.0f host %.2f" % (d["ratio"], d["measured_us"], o["lm_head"]["measured_us"], o["ffn_gate"]["measured_us"], o["attn_k"]["measured_us"], d["host"]["speed"]))' \
                "$out/$sync-$ph-$round.json" "$round" "$sync" "$ph" | tee -a "$out/poll-block.txt"
        done
    done
done
