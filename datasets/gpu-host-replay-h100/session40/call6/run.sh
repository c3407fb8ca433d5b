#!/bin/bash
# Session 40, call 6 (fresh machine), binaries of the commit in COMMIT.
# Call 5 found that cpu:0's decode GEMVs run equally cold in the runtime
# with 1 to 28 layers of distinct weights (lm_head's 933 MB streams through
# between two reads), and that the cold sweep ran them 1.2x slower than
# that. Does an eviction that reads (HETERO_EVICT_READ=1: clean lines, no
# write-backs) of 512 MiB to 2 GiB reproduce the runtime? Cold sweeps with
# each eviction, two rounds alternated, between runtime references (call
# 5's plans, L = 1 and 28 distinct, decode, blocking, cores 0-14).
set -u
out=${1:?out}
mkdir -p "$out/x"
tar xJf .carry/rx/bin.txz -C /tmp
bin=/tmp/bin
L=datasets/gpu-host-replay-h100/session40/call5/layers
runtime() {
    timeout 100 $bin/hetero run $L/plan-L$1.ron --model $L/qwen-L$1.json --cpu-groups "0-14" --phase decode \
        --len 1 --tokens 8 --sync block --repeat 7 --json --out "$out/x/run-L$1-$2.json" > /dev/null 2> "$out/x/run-L$1-$2.err"
}
runtime 1 a
for round in 1 2; do
    for ev in w512 r512 r1024 r2048 w2048; do
        mode=${ev:0:1}; mib=${ev:1}; read=0; [ "$mode" = r ] && read=1
        HETERO_EVICT_READ=$read HETERO_EVICT_MIB=$mib timeout 90 $bin/hetero-agent --cpu-groups "0-14" sweep --processor cpu:0 \
            --shapes 1x1536x8960,1x8960x1536,1x1536x1536,1x1536x256 --order wt_at --dtype f32 --cold-cache --reps 9 \
            > "$out/x/sweep-$ev-$round.jsonl" 2>> "$out/x/err.txt"
    done
    echo "round $round $SECONDS s"
done
runtime 28 b
runtime 1 c
python3 - "$out/x" <<'PY'
import glob, json, sys
d = sys.argv[1]
for f in sorted(glob.glob(f"{d}/sweep-*.jsonl")):
    rows = [json.loads(l) for l in open(f)]
    print(f.split("/")[-1], " ".join("%s=%.0f" % (r["case_id"].split("/")[1], r["median_us"]) for r in rows if "case_id" in r))
for f in sorted(glob.glob(f"{d}/run-*.json")):
    r = json.load(open(f))
    print(f.split("/")[-1], " ".join("%s %s %.0f/%.0f" % (o["op"], o["parts"][0]["gemms"][0], o["parts"][0]["measured_us"], o["parts"][0]["predicted_us"]) for o in r["per_op"]))
PY
tar czf "$out/call.tgz" -C "$out" x && rm -rf "$out/x"
