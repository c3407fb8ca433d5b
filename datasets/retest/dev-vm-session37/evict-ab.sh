#!/bin/bash
# A/B: cold sweeps with the eviction writing (dirty lines) vs reading (clean lines),
# against the runtime's per-operator times (vmdemo3 plan, cpu:0 alone, blocked), in rounds.
cd /work/main
A=target/release/hetero-agent; H=target/release/hetero
P=/tmp/vmdemo3
shapes=1x1536x1536,1x1536x256,1x1536x8960,1x8960x1536,64x1536x1536,64x1536x8960,64x8960x1536
sw() { $A --processors cpu:0 sweep --processor cpu:0 --shapes $shapes --dtype f32 --order wt_at --reps 7 --cold-cache 2>/dev/null |
  python3 -c 'import json,sys,time
for l in sys.stdin:
    d=json.loads(l)
    if d.get("type")=="measurement": print(time.strftime("%H:%M:%S"), sys.argv[1], "%dx%dx%d"%(d["m"],d["k"],d["n"]), "%.0f"%d["median_us"], "%.3f"%d["cv"], flush=True)' $1; }
rt() { $H run $P/plan.ron --model $P/qwen2.5-1.5b.json --predictor $P/predictor.ron --sync block --share-weights "$@" --out /tmp/s37/rt.json >/dev/null 2>&1
  python3 -c 'import json,sys,time
d=json.load(open("/tmp/s37/rt.json"))
for o in d["per_op"]:
    for p in o["parts"]:
        print(time.strftime("%H:%M:%S"), "runtime", p["gemms"][0], "%.0f"%p["measured_us"], d["phase"], flush=True)'; }
for r in 1 2 3 4; do
  sw write
  HETERO_EVICT_READ=1 sw read
  rt --phase decode --len 1 --tokens 4 --repeat 2
  rt --phase prefill --len 64 --repeat 2
done
