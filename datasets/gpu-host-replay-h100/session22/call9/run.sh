#!/bin/bash
# Session 22, call 9: does a fresh process read the host slower than a
# long one? 8 one-shape sweeps (fresh processes, 0.5 s apart), one long
# sweep of 60 shapes, 8 fresh again; every row carries host_probe_us.
set -u
b=$(cd "$(dirname "$0")" && pwd)
out=${1:?out}
mkdir -p "$out"
fresh() { for i in $(seq "$1" "$2"); do
  "$b/hetero-agent" sweep --processor cuda:0 --shapes 1x1536x1536 --dtype f16 --order wt_at --reps 7 > "$out/fresh-$i.jsonl" 2>/dev/null
  sleep 0.5; done; }
fresh 1 8
shapes=$(for m in 1 2 4 8 16 32 64 128 256 512; do for kn in 1536x1536 1536x256 1536x8960 8960x1536 2048x2048 4096x4096; do printf "%sx%s," $m $kn; done; done)
"$b/hetero-agent" sweep --processor cuda:0 --shapes "${shapes%,}" --dtype f16 --order wt_at --reps 7 > "$out/long.jsonl" 2>/dev/null
fresh 9 16
python3 - "$out" <<'PY'
import json, glob, statistics as st, sys
def probes(f):
    return [json.loads(l)["conditions"]["host_probe_us"] for l in open(f) if '"measurement"' in l]
fr = [p for f in sorted(glob.glob(sys.argv[1] + "/fresh-*.jsonl")) for p in probes(f)]
lo = probes(sys.argv[1] + "/long.jsonl")
print("fresh processes:", len(fr), "median", st.median(fr), "range", min(fr), max(fr))
print("long sweep:", len(lo), "median", st.median(lo), "first 5", lo[:5], "last 5", lo[-5:])
PY
