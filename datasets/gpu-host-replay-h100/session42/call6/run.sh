#!/bin/bash
# Session 42, call 6 (fresh machine), binaries of the commit in COMMIT:
# call 1's offload plan (its lm_head GPU part is a chain: 75776 resident
# columns, then 40832 copied), replayed as it is, with no profile, to see
# the polled chain's fix where call 1 found it: decode 1, 8 steps, both
# waits alternated, 3 rounds, distinct weights, cpu:0 = cores 0-14.
set -u
out=${1:?out}
mkdir -p "$out/r"
here=datasets/gpu-host-replay-h100/session42/call6
xz -dkf "$here/plan-offload-call1.ron.xz"
bin=.carry/replay
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/r/machine.txt" 2>&1
for round in 1 2 3; do
  for sync in block poll; do
    timeout 120 "$bin/hetero" run "$here/plan-offload-call1.ron" --model datasets/models/qwen2.5-1.5b.json \
      --cpu-groups 0-14 --phase decode --len 1 --tokens 8 --sync $sync --repeat 7 --json \
      --out "$out/r/offload-decode-$sync-$round.json" > /dev/null 2> "$out/r/offload-decode-$sync-$round.err"
    echo "round $round $sync rc=$? $SECONDS s"
  done
done
python3 - "$out/r" <<'PY'
import glob, json, sys
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    r = json.load(open(f))
    lm = [o for o in r["per_op"] if o["op"] == "lm_head"][0]
    parts = " ".join(f"{p['processor']} {'+'.join(p['gemms'])} {p['measured_us']:.0f}/{p['predicted_us']:.0f}" for p in lm["parts"])
    print(f"{f.split('/')[-1]}: total {r['measured_us']:.0f}/{r['predicted_us']:.0f} = {r['measured_us']/r['predicted_us']:.3f}; lm_head {lm['measured_us']:.0f}/{lm['predicted_us']:.0f} [{parts}]")
PY
tar cf "$out/call.tar" -C "$out" r && rm -rf "$out/r"
