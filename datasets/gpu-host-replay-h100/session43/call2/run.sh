#!/bin/bash
# Session 43, call 2 (fresh machine), binaries of the commit in COMMIT.
# 1. `stage_bench --beside` with every layer's weights gone through the
#    caches before it comes back (call 1 ran a layer alone, then at once
#    beside, so its beside runs found their weights in the 300 MiB L3).
# 2. Session 42 call 4's offload and cpu:0 plans, replayed as they are at
#    decode 1 (8 steps, block), distinct weights against --share-weights,
#    --cpu-poll-us 0 and --host-cores rest, 2 rounds.
set -u
out=${1:?out}
mkdir -p "$out/r"
r=$out/r
here=datasets/gpu-host-replay-h100/session43/call2
tar xJf .carry/bx/b.txz -C .carry/bx
b=.carry/bx
export HETERO_CPU_GROUPS="0-14"
sb=$b/examples/stage_bench
{
  $sb --beside cpu:0 f32 1x1536x4096 cuda:0 f16 1x1536x4864 28 copied a-first
  $sb --beside cpu:0 f32 1x1536x4096 cuda:0 f16 1x1536x4864 28 copied b-first
  $sb --beside cpu:0 f32 1x1536x4096 cuda:0 f16 1x1536x4864 28 resident a-first
  $sb --beside cpu:0 f32 1x8960x256 cuda:0 f16 1x8960x1280 28 copied a-first
  $sb --beside cpu:0 f32 1x1536x36608 cuda:0 f16 1x1536x39552 3 copied a-first
} > "$r/beside.txt" 2>&1
echo "beside done $SECONDS s"
unset HETERO_CPU_GROUPS
for p in offload cpu; do xz -dkf "$here/plan-$p-s42c4.ron.xz"; done
run() { # name plan args...
  local name=$1 plan=$2; shift 2
  timeout 150 "$b/hetero" run "$here/plan-$plan-s42c4.ron" --model datasets/models/qwen2.5-1.5b.json \
    --cpu-groups 0-14 --phase decode --len 1 --tokens 8 --sync block --repeat 5 --json "$@" \
    --out "$r/$name.json" > /dev/null 2> "$r/$name.err"
  echo "$name rc=$? $SECONDS s"
}
for round in 1 2; do
  run "offload-$round" offload
  run "offload-shared-$round" offload --share-weights
  run "offload-poll0-$round" offload --cpu-poll-us 0
  run "offload-hostrest-$round" offload --host-cores rest
  run "cpu-$round" cpu
done
python3 - "$r" <<'PY'
import glob, json, sys
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    r = json.load(open(f))
    ops = []
    for o in r["per_op"]:
        for p in o["parts"]:
            if p["processor"].startswith("cpu"):
                ops.append(f"{o['op']} {p['measured_us']:.0f}/{p['predicted_us']:.0f}")
    print(f"{f.split('/')[-1]}: total {r['measured_us']:.0f}/{r['predicted_us']:.0f} = {r['measured_us']/r['predicted_us']:.3f}; host {r['host']['speed']:.3f}; cpu parts " + ", ".join(ops))
PY
cat "$r/beside.txt"
tar cf "$out/call.tar" -C "$out" r
