#!/bin/bash
# Session 38: `hetero demo` on the GPU host as a new user runs it (defaults:
# every processor whose times are real, 150 s cold profile, prefill 64,
# decode 8 tokens), binaries in COMMIT (ae4ef33), on the machine call 2
# left warm; then the demo's plan again with --sync block, two passes of
# each phase, so both waits are seen.
set -u
out=${1:?out}
mkdir -p "$out"
bin=.carry/replay
export PATH="$PWD/$bin:$PATH"
model=hetero-demo/qwen2.5-1.5b.json
cd /tmp && timeout 420 hetero demo 2>&1 | tee "$out/demo.txt"
echo "demo rc ${PIPESTATUS[0]} after $SECONDS s"
for round in 1 2; do
    for ph in prefill decode; do
        if [ $ph = decode ]; then len=(--len 1 --tokens 8); else len=(--len 64); fi
        timeout 60 hetero run hetero-demo/plan.ron --model "$model" --predictor hetero-demo/predictor.ron \
            --phase $ph "${len[@]}" --repeat 3 --share-weights --sync block \
            --out "hetero-demo/block-$ph-$round.json" > /dev/null 2>> "$out/block-errors.txt"
        python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(*sys.argv[2:], "block predicted %.0f measured %.0f ratio %.3f" % (d["predicted_us"], d["measured_us"], d["ratio"]))' \
            "hetero-demo/block-$ph-$round.json" "$round" "$ph" | tee -a "$out/block.txt"
    done
done
tar czf "$out/demo.tgz" -C /tmp hetero-demo
