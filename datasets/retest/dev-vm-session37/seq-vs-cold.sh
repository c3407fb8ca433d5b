#!/bin/bash
# decode shapes (aw): the cold sweep (pool eviction) against the same GEMMs run
# in a layer's order (stage_bench --layers, blocking), in turn, 6 rounds.
cd /work/main
for r in 1 2 3 4 5 6; do
  target/release/hetero-agent --processors cpu:0 sweep --processor cpu:0 --shapes 1x1536x1536,1x1536x256,1x1536x8960,1x8960x1536 --dtype f32 --order aw --reps 7 --cold-cache 2>/dev/null | python3 -c 'import json,sys
for l in sys.stdin:
    d=json.loads(l)
    if d.get("type")=="measurement": print(sys.argv[1], "cold", "%dx%dx%d"%(d["m"],d["k"],d["n"]), "%.0f"%d["median_us"])' $r
  target/release/examples/stage_bench --layers cpu:0 f32 aw 1 1536x1536,1536x256,1536x256,1536x1536,1536x8960,1536x8960,8960x1536 4 block | awk -v r=$r -F'|' 'NR>2 {gsub(/ /,"",$2); gsub(/×/,"x",$2); print r, "seq", $2, $7+0}'
done
