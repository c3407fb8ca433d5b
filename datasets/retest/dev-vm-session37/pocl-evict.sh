#!/bin/bash
# PoCL (opencl:0:0): warm, cold with the host eviction by fresh threads
# (binaries of 84316d4, .carry/replay), cold with the eviction kernel (this build).
cd /work/main
sw() { $1 --processors opencl:0:0 sweep --processor opencl:0:0 --shapes $2 --dtype f32 --order $3 --reps 5 $4 2>/dev/null | python3 -c 'import json,sys
for l in sys.stdin:
    d=json.loads(l)
    if d.get("type")=="measurement": print(sys.argv[1], sys.argv[2], d["order"], "%dx%dx%d"%(d["m"],d["k"],d["n"]), "%.0f"%d["median_us"], "%.0f"%d.get("host_median_us",0), "%.3f"%d["cv"], flush=True)' $5 $6; }
for r in 1 2 3; do
  for v in warm old new; do
    case $v in warm) A=target/release/hetero-agent; f=;; old) A=.carry/replay/hetero-agent; f=--cold-cache;; new) A=target/release/hetero-agent; f=--cold-cache;; esac
    sw $A 1x1536x1536,1x1536x8960 aw "$f" $r $v
    sw $A 64x1536x1536 wt_at "$f" $r $v
  done
done
