#!/bin/bash
cd /work/main
A=target/release/hetero-agent
shapes=64x1536x1536,1x1536x1536,64x1536x8960
sw() { $A --processors cpu:0 sweep --processor cpu:0 --shapes $shapes --dtype f32 --order wt_at --reps 7 $2 2>/dev/null |
  python3 -c 'import json,sys,time
for l in sys.stdin:
    d=json.loads(l)
    if d.get("type")=="measurement": print(time.strftime("%H:%M:%S"), sys.argv[1], "%dx%dx%d"%(d["m"],d["k"],d["n"]), "%.0f"%d["median_us"], "%.3f"%d["cv"], flush=True)' $1; }
for r in 1 2 3; do
  sw warm
  sw cold --cold-cache
  HETERO_EVICT_SLEEP_MS=80 sw sleep80 --cold-cache
  HETERO_EVICT_MB=64 sw evict64 --cold-cache
  HETERO_EVICT_MB=16 sw evict16 --cold-cache
done
