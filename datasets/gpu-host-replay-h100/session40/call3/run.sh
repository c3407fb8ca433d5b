#!/bin/bash
# Session 40, call 3 (fresh machine), binaries of the commit in COMMIT.
# Is the profile's cold cache cold? In call 2, cpu:0 ran 1x1536x8960 at
# 306-312 µs with one layer's weights for all layers, 613-620 µs with each
# layer's own, and its cold profile had said 347 µs.
# 1. cpu:0 = cores 0-14, cold sweeps of the offload plan's CPU GEMVs (f32
#    wt_at) with the eviction buffer at its default size (512 MiB here),
#    1.5 GiB and 3 GiB (HETERO_EVICT_MIB), two rounds alternated.
# 2. On the same machine, call 2's offload plan (`plan-call2.ron`, carried)
#    replayed at decode 1 with shared and with distinct weights, blocking,
#    two processes each.
set -u
out=${1:?out}
mkdir -p "$out/x"
bin=.carry/replay
{ lscpu; cat /sys/kernel/mm/transparent_hugepage/enabled; } > "$out/x/lscpu.txt" 2>&1
for round in 1 2; do
    for mib in 0 1536 3072; do
        HETERO_EVICT_MIB=$mib timeout 90 $bin/hetero-agent --cpu-groups "0-14" sweep --processor cpu:0 \
            --shapes 1x1536x8960,1x8960x1024,1x1536x1536 --order wt_at --dtype f32 --cold-cache --reps 9 \
            > "$out/x/evict-$mib-$round.jsonl" 2>> "$out/x/evict.err"
    done
done
echo "sweeps done $SECONDS s"
model=datasets/models/qwen2.5-1.5b.json
for round in 1 2; do
    for w in shared distinct; do
        share=(); [ $w = shared ] && share=(--share-weights)
        timeout 120 $bin/hetero run .carry/rx/plan-call2.ron --model $model --cpu-groups "0-14" --phase decode \
            --len 1 --tokens 8 "${share[@]}" --sync block --repeat 7 --json \
            --out "$out/x/run-$w-$round.json" > /dev/null 2> "$out/x/run-$w-$round.err"
    done
done
echo "runs done $SECONDS s"
python3 - "$out/x" <<'PY'
import glob, json, statistics, sys
d = sys.argv[1]
for f in sorted(glob.glob(f"{d}/evict-*.jsonl")):
    rows = [json.loads(l) for l in open(f)]
    print(f.split("/")[-1], " ".join("%s=%.0f" % (r["case_id"].split("/")[1], r["median_us"]) for r in rows if "case_id" in r))
for f in sorted(glob.glob(f"{d}/run-*.json")):
    r = json.load(open(f))
    ops = {o["op"]: o for o in r["per_op"]}
    print(f.split("/")[-1], "total %.0f/%.0f" % (r["measured_us"], r["predicted_us"]),
          " ".join("%s %.0f/%.0f" % (p["gemms"][0], p["measured_us"], p["predicted_us"])
                   for o in ops.values() for p in o["parts"] if p["processor"] == "cpu:0"))
PY
tar czf "$out/call.tgz" -C "$out" x && rm -rf "$out/x"
