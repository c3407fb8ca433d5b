#!/bin/bash
# Session 20: (1) ten decode replays of call 7 b's plan, with the host speed
# probe in each report; (2) a whole replay (profile, fit, solve, replays)
# whose profile rows and reports both carry the probe.
set -u
b=$(cd "$(dirname "$0")" && pwd)
out=${1:?out}
mkdir -p "$out/old"
for i in 1 2 3 4 5 6 7 8 9 10; do
  "$b/hetero" run "$b/plan-cuda.ron" --model datasets/models/qwen2.5-1.5b.json --phase decode --len 1 \
     --tokens 8 --share-weights --sync poll --repeat 7 --json --out "$out/old/run-$i.json" > /dev/null 2> "$out/old/run-$i.err"
done
python3 - "$out/old" <<'PY' > "$out/old-summary.txt"
import json,glob,os,sys,statistics as st
for f in sorted(glob.glob(sys.argv[1]+'/*.json'), key=lambda p: int(p.split('-')[-1][:-5])):
    r=json.load(open(f)); po=r['per_op']
    print('%-10s ratio %.3f submit %.1f copy %.1f dispatch %.3f probe %.2f' % (os.path.basename(f)[:-5], r['measured_us']/r['predicted_us'],
        st.median(o['submit_us'] for o in po[:6]), st.median(o['copy_us'] for o in po[:6]), r['dispatch']['median_us'], r['host']['probe_us']))
PY
cat "$out/old-summary.txt"
export CUDA_COLD=1 CPU_COLD=1 CUDA_BUDGET=100s CPU_BUDGET=60s REPLAY_REPS=7 SKIP_CUDA_TESTS=1
bash scripts/gpu-host-replay.sh "$out/replay"
w=$(ls -td /tmp/replay.* | head -1)
python3 - "$w/reports" <<'PY' > "$out/new-summary.txt"
import json,glob,os,sys,statistics as st
for f in sorted(glob.glob(sys.argv[1]+'/*-*-*-*.json')):
    r=json.load(open(f)); po=r['per_op']; h=r['host']
    print('%-28s ratio %.3f submit %.1f copy %.1f dispatch %.3f probe %.2f profiled %s speed %s' % (os.path.basename(f)[:-5], r['measured_us']/r['predicted_us'],
        st.median(o['submit_us'] for o in po[:6]), st.median(o['copy_us'] for o in po[:6]), r['dispatch']['median_us'], h['probe_us'], h['profiled_probe_us'], h['speed']))
PY
cat "$out/new-summary.txt"
cp -r "$w/logs" "$out/replay/" 2>/dev/null
cp "$w/predictor.ron" "$w/plan-cuda.ron" "$w/plan-mixed.ron" "$out/replay/" 2>/dev/null
cd "$out" && tar czf all.tgz old replay && rm -rf old replay
