#!/bin/bash
# Session 30, call 1 (fresh machine): binaries of the CUDA-graph launch
# commit. The standard replay (cuda tests first), then graph against direct
# launches side by side: the same cuda plan, HETERO_CUDA_GRAPH=1 and =0 in
# alternating processes, 5 rounds, decode 1 and prefill 16, block and poll.
set -u
out=${1:?out}
mkdir -p "$out"
bin=.carry/replay
model=datasets/models/qwen2.5-1.5b.json
CUDA_COLD=1 CPU_COLD=1 CUDA_BUDGET=100s CPU_BUDGET=60s REPLAY_REPS=7 REPLAY_PROCS=3 \
  REPLAY_CASES="prefill:16 prefill:300 decode:1" timeout 340 bash scripts/gpu-host-replay.sh "$out/r"
echo "replay done $SECONDS s"
work=$(ls -dt /tmp/replay.* | head -1)
sbs=$out/sbs
mkdir -p "$sbs"
for round in 1 2 3 4 5; do
  for c in decode:1 prefill:16; do
    phase=${c%%:*}; len=${c#*:}
    extra=(); [ "$phase" = decode ] && extra=(--tokens 8)
    for g in 1 0; do
      for sync in block poll; do
        [ $SECONDS -gt 575 ] && break 4
        HETERO_CUDA_GRAPH=$g timeout 60 "$bin/hetero" run "$work/plan-cuda.ron" --model "$model" \
          --phase "$phase" --len "$len" "${extra[@]}" --share-weights --sync "$sync" --repeat 7 \
          --json --out "$sbs/g$g-$phase-$len-$sync-$round.json" > /dev/null 2> "$sbs/g$g-$phase-$len-$sync-$round.err" \
          || echo "failed g$g $c $sync $round: $(tail -2 "$sbs/g$g-$phase-$len-$sync-$round.err")"
      done
    done
  done
done
python3 - "$sbs" <<'PY'
import glob, json, os, statistics, sys
rows = {}
for p in glob.glob(sys.argv[1] + "/*.json"):
    g, phase, length, sync, rnd = os.path.basename(p)[:-5].split("-")
    r = json.load(open(p))
    rows.setdefault((phase, length, sync, g), []).append((r["measured_us"], r["ratio"], r["dispatch"]["submit_median_us"]))
for k in sorted(rows):
    v = rows[k]
    print(*k, len(v), "measured median %.0f" % statistics.median(x[0] for x in v),
          "ratio median %.3f range %.3f-%.3f" % (statistics.median(x[1] for x in v), min(x[1] for x in v), max(x[1] for x in v)),
          "submit median %.1f" % statistics.median(x[2] for x in v))
PY
tar -czf "$out/sbs.tgz" -C "$out" sbs && rm -rf "$sbs"
echo "done $SECONDS s"
