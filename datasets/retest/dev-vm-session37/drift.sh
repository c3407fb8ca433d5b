#!/bin/bash
# every ~10 s: one cold and one warm sweep of two cpu:0 shapes; prints time, mode, shape, median, cv
end=$((SECONDS + ${1:-540}))
while [ $SECONDS -lt $end ]; do
  for mode in cold warm; do
    flag=; [ $mode = cold ] && flag=--cold-cache
    target/release/hetero-agent --processors cpu:0 sweep --processor cpu:0 --shapes 64x1536x8960,1x1536x1536 --dtype f32 --order wt_at --reps 5 $flag 2>/dev/null |
      python3 -c 'import json,sys,time
for l in sys.stdin:
    d=json.loads(l)
    if d.get("type")=="measurement": print(time.strftime("%H:%M:%S"), sys.argv[1], "%dx%dx%d"%(d["m"],d["k"],d["n"]), "%.0f"%d["median_us"], "%.3f"%d["cv"], flush=True)' $mode
  done
  sleep 8
done
