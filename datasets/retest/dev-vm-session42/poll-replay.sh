#!/usr/bin/env bash
# Session 42: session 41's VM plan (vm-rotdef-distinct) replayed with the
# workers polling after a run (HETERO_CPU_POLL_US 2000) and sleeping at once (0),
# alternated, distinct weights.
set -euo pipefail
bin=$(cd "$(dirname "$0")/../../.." && pwd)/target/release
src=${SRC:-/tmp/s42}  # session 41 vm-rotdef-distinct/runs.txz unpacked
out=${OUT:-$src/vm1}
mkdir -p "$out"
model=$bin/../../datasets/models/qwen2.5-1.5b.json
for round in 1 2; do
  for pollus in 0 2000; do
    for sync in block poll; do
        for ph in prefill decode; do
            if [ $ph = decode ]; then len=(--len 1 --tokens 4); else len=(--len 64); fi
            "$bin/hetero" run "$src/plan.ron" --model "$model" --predictor "$src/predictor.ron" \
                --phase $ph "${len[@]}" --repeat 3 --sync $sync --cpu-poll-us $pollus \
                --out "$out/$pollus-$sync-$ph-$round.json" > /dev/null
            python3 -c 'import json,sys,time; d=json.load(open(sys.argv[1])); print(time.strftime("%H:%M:%S"), *sys.argv[2:], "predicted %.0f measured %.0f ratio %.3f" % (d["predicted_us"], d["measured_us"], d["ratio"]))' \
                "$out/$pollus-$sync-$ph-$round.json" "$round" "poll_us=$pollus" "$sync" "$ph" | tee -a "$out/waits.txt"
        done
    done
  done
done
