#!/usr/bin/env bash
# Session 38: does a plain memory-read probe follow the cold decode GEMVs
# on this VM? Twenty rounds, ~10 s apart: mem-probe (64 MiB read by one
# thread after a 512 MiB write, median of 5), the cold sweep of
# 1x1536x8960 and 1x8960x1536 aw on cpu:0 (7 runs), the probe again.
#   gcc -O2 -o /tmp/mem-probe mem-probe.c && mem-probe.sh /tmp/mem-probe
set -eu
probe=${1:?probe binary}
root=$(cd "$(dirname "$0")/../../.." && pwd)
for r in $(seq 1 20); do
    p=$("$probe" 64 5 | cut -d' ' -f1)
    g=$("$root/target/release/hetero-agent" --processors cpu:0 sweep --processor cpu:0 \
        --shapes 1x1536x8960,1x8960x1536 --dtype f32 --order aw --reps 7 --cold-cache 2>/dev/null |
        python3 -c 'import json,sys
print(*["%.0f"%json.loads(l)["median_us"] for l in sys.stdin if "\"measurement\"" in l])')
    p2=$("$probe" 64 5 | cut -d' ' -f1)
    echo "$(date +%T) $r probe $p $p2 gemv $g"
    sleep 8
done
