#!/bin/bash
# Session 40, call 4 (fresh machine). Side by side on cpu:0 = cores 0-14,
# cold: a build of 124e1f3 (`agent-gemv`: only a GEMV split by output
# columns; 2..8 rows through the gemm crate's own threads) against this
# commit's (`agent-band`: up to 8 rows split by output columns), f32, both
# orders, three rounds alternated.
set -u
out=${1:?out}
mkdir -p "$out/x"
for a in gemv band; do xz -dc .carry/rx/agent-$a.xz > /tmp/agent-$a && chmod +x /tmp/agent-$a; done
shapes=1x1536x8960,2x1536x8960,4x1536x8960,8x1536x8960,4x8960x1536,8x1536x1536,16x1536x8960
for round in 1 2 3; do
    for a in gemv band; do
        for o in aw wt_at; do
            timeout 60 /tmp/agent-$a --cpu-groups "0-14" sweep --processor cpu:0 --shapes "$shapes" \
                --order $o --dtype f32 --cold-cache --reps 9 > "$out/x/$a-$o-$round.jsonl" 2>> "$out/x/err.txt"
        done
    done
done
python3 - "$out/x" <<'PY'
import glob, json, sys
for f in sorted(glob.glob(f"{sys.argv[1]}/*.jsonl")):
    rows = [json.loads(l) for l in open(f)]
    print(f.split("/")[-1], " ".join("%s=%.0f" % (r["case_id"].split("/")[1], r["median_us"]) for r in rows if "case_id" in r))
PY
tar czf "$out/call.tgz" -C "$out" x && rm -rf "$out/x"
