#!/bin/bash
# Decode replays of one plan, unpinned and pinned, to see where the
# per-process spread of the host's submit cost comes from.
set -u
b=$(dirname "$0")
out=${1:?out}
mkdir -p "$out/r"
{
nproc; lscpu | grep -E "Model name|Socket|NUMA|Thread|Core|MHz"
nvidia-smi topo -m 2>&1 | head -20
bus=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | head -1 | tr 'A-F' 'a-f')
bdf=${bus: -12}
echo "bdf=$bdf"; for f in numa_node local_cpulist; do echo "$f: $(cat /sys/bus/pci/devices/$bdf/$f 2>&1)"; done
ls /sys/devices/system/node/ 2>/dev/null
cat /proc/cpuinfo | grep MHz | head -16
} > "$out/topo.txt" 2>&1
run() { # label, prefix...
  local label=$1; shift
  "$@" "$b/hetero" run "$b/plan-cuda.ron" --model datasets/models/qwen2.5-1.5b.json --phase decode --len 1 \
     --tokens 8 --share-weights --sync poll --repeat 7 --json --out "$out/r/$label.json" > /dev/null 2> "$out/r/$label.err"
}
for i in 1 2 3 4 5; do
  run free-$i env
  run core0-$i taskset -c 0
  run core7-$i taskset -c 7
  run core15-$i taskset -c 15
done
python3 - "$out/r" <<'PY' > "$out/summary.txt"
import json,glob,os,sys,statistics as st
for f in sorted(glob.glob(sys.argv[1]+'/*.json')):
    r=json.load(open(f)); po=r['per_op']
    sub=st.median(o['submit_us'] for o in po[:6]); cp=st.median(o['copy_us'] for o in po[:6])
    print('%-10s ratio %.3f meas %.0f pred %.0f submit %.1f copy %.1f' % (os.path.basename(f)[:-5], r['measured_us']/r['predicted_us'], r['measured_us'], r['predicted_us'], sub, cp))
PY
cat "$out/summary.txt"
cd "$out" && tar czf r.tgz r && rm -rf r
