#!/bin/bash
# Session 24, call 2 (the machine of call 1): decode replays, then the same
# cuda decode plan run pinned to one core at a time (taskset), to see whether
# the per-process spread of decode follows the core.
set -u
b=$(cd "$(dirname "$0")" && pwd)
out=${1:?out}
mkdir -p "$out/pin"
CUDA_COLD=1 CPU_COLD=1 CUDA_BUDGET=100s CPU_BUDGET=60s REPLAY_REPS=7 REPLAY_PROCS=3 REPLAY_CASES="prefill:300 decode:1" SKIP_CUDA_TESTS=1 \
  timeout 330 bash scripts/gpu-host-replay.sh "$out/replay"
w=$(ls -d /tmp/replay.* | tail -n1)
model=datasets/models/qwen2.5-1.5b.json
for round in 1 2; do
for c in 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15; do
  for p in cuda; do
    [ -e "$w/plan-$p.ron" ] || continue
    timeout 40 taskset -c $c "$b/hetero" run "$w/plan-$p.ron" --model $model --phase decode --len 1 --tokens 8 --share-weights --sync poll --repeat 7 --json --out "$out/pin/$p-core$c-$round.json" > /dev/null 2> "$out/pin/$p-core$c-$round.err"
    python3 -c "
import json,sys; r=json.load(open(sys.argv[1])); ops=r.get('per_op') or []
cm=sum((o.get('copy_us') or 0)*o['layers'] for o in ops)
print(sys.argv[2], 'ratio %.3f' % r['ratio'], 'copy', round(cm), 'probe', r['host']['probe_us'], 'submit', r['dispatch']['submit_median_us'])" "$out/pin/$p-core$c-$round.json" "$p core $c round $round"
  done
done
done
(cd "$out" && tar czf pin.tgz pin && rm -rf pin)
echo "done $SECONDS s"
