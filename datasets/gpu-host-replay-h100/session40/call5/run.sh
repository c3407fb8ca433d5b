#!/bin/bash
# Session 40, call 5 (fresh machine), binaries of the commit in COMMIT.
# How many layers of distinct weights does it take before cpu:0's decode
# GEMVs run as cold as a whole model's? The runtime with distinct weights
# cycles through every layer's; with L layers that is a rotation over L
# copies (147 MB of ffn weights a layer). Plans for cpu:0 alone (solved
# here from call 2's predictor, so predictions are call 2's host's) for
# Qwen2.5-1.5B cut to L = 1, 2, 4, 8, 16, 28 layers; decode, 8 steps, 7
# passes, blocking, cpu:0 = cores 0-14; L = 28 also with shared weights.
# First and last, cold sweeps of the same GEMVs for this machine's profile.
set -u
out=${1:?out}
mkdir -p "$out/x"
tar xJf .carry/rx/bin.txz -C /tmp
bin=/tmp/bin
L=.carry/rx/layers
sweep() {
    timeout 60 $bin/hetero-agent --cpu-groups "0-14" sweep --processor cpu:0 \
        --shapes 1x1536x8960,1x8960x1536,1x1536x1536,1x1536x256 --order wt_at --dtype f32 --cold-cache --reps 9 \
        > "$out/x/sweep-$1.jsonl" 2>> "$out/x/err.txt"
}
sweep first
for n in 1 2 4 8 16 28 28s; do
    l=${n%s}; share=(); [ "$n" != "$l" ] && share=(--share-weights)
    timeout 100 $bin/hetero run $L/plan-L$l.ron --model $L/qwen-L$l.json --cpu-groups "0-14" --phase decode \
        --len 1 --tokens 8 "${share[@]}" --sync block --repeat 7 --json --out "$out/x/run-L$n.json" \
        > /dev/null 2> "$out/x/run-L$n.err"
    echo "L$n done $SECONDS s"
done
sweep last
python3 - "$out/x" <<'PY'
import glob, json, sys
d = sys.argv[1]
for f in sorted(glob.glob(f"{d}/sweep-*.jsonl")):
    rows = [json.loads(l) for l in open(f)]
    print(f.split("/")[-1], " ".join("%s=%.0f" % (r["case_id"].split("/")[1], r["median_us"]) for r in rows if "case_id" in r))
for n in ["1", "2", "4", "8", "16", "28", "28s"]:
    try:
        r = json.load(open(f"{d}/run-L{n}.json"))
    except Exception as e:
        print("L" + n, "failed", e); continue
    print("L" + n, " ".join("%s %.0f/%.0f" % (o["op"], o["parts"][0]["measured_us"], o["parts"][0]["predicted_us"]) for o in r["per_op"]))
PY
tar czf "$out/call.tgz" -C "$out" x && rm -rf "$out/x"
