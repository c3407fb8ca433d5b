#!/bin/bash
# Session 41, call 2 (fresh machine), binaries of the commit in COMMIT.
# The rotation's default size is now four times the last-level cache, at
# most 2 GiB, and a case whose copies would be too many or too large (small
# weights, long prefills) evicts instead. Part 1: the host's caches, then
# cold sweeps of cpu:0's decode GEMVs (wt_at) with the default eviction
# (w512), the default rotation (rotdef) and 2 GiB (rot2048), between runtime
# references (session 40 call 5's plans, L = 1 and 28 distinct). Part 2:
# call 1's offload replay with cpu:0 profiled under the default rotation.
set -u
out=${1:?out}
mkdir -p "$out/x"
bin=.carry/replay
{ lscpu | grep -iE "model name|cache|socket|numa"; for i in 0 1 2 3; do
  echo "index$i: $(cat /sys/devices/system/cpu/cpu0/cache/index$i/level 2>/dev/null) $(cat /sys/devices/system/cpu/cpu0/cache/index$i/size 2>/dev/null)"; done; } > "$out/x/caches.txt" 2>&1
cat "$out/x/caches.txt"
L=datasets/gpu-host-replay-h100/session40/call5/layers
runtime() {
    timeout 100 $bin/hetero run $L/plan-L$1.ron --model $L/qwen-L$1.json --cpu-groups "0-14" --phase decode \
        --len 1 --tokens 8 --sync block --repeat 7 --json --out "$out/x/run-L$1-$2.json" > /dev/null 2> "$out/x/run-L$1-$2.err"
}
runtime 28 a
for round in 1 2; do
    for mode in w512 rotdef rot2048; do
        case $mode in
            w512) env=(HETERO_EVICT_MIB=512); flag=--cold-cache;;
            rotdef) env=(); flag=--rotate-weights;;
            rot2048) env=(HETERO_EVICT_MIB=2048); flag=--rotate-weights;;
        esac
        env "${env[@]}" timeout 90 $bin/hetero-agent --cpu-groups "0-14" sweep --processor cpu:0 \
            --shapes 1x1536x8960,1x8960x1536,1x1536x1536,1x1536x256,1x1536x2304,1x8960x512,1x1536x37120 --order wt_at --dtype f32 $flag --reps 9 \
            > "$out/x/sweep-$mode-wt_at-$round.jsonl" 2>> "$out/x/err.txt"
    done
    echo "round $round $SECONDS s"
done
runtime 28 b
python3 - "$out/x" <<'PY' | tee "$out/x/summary.txt"
import glob, json, sys
d = sys.argv[1]
for f in sorted(glob.glob(f"{d}/sweep-*.jsonl")):
    rows = [json.loads(l) for l in open(f)]
    print(f.split("/")[-1], " ".join("%s=%.0f" % (r["case_id"].split("/")[1], r["median_us"]) for r in rows if r.get("median_us")))
for f in sorted(glob.glob(f"{d}/run-*.json")):
    r = json.load(open(f))
    print(f.split("/")[-1], " ".join("%s %s %.0f/%.0f" % (o["op"], o["parts"][0]["gemms"][0], o["parts"][0]["measured_us"], o["parts"][0]["predicted_us"]) for o in r["per_op"]))
PY
echo "sweeps done $SECONDS s"
SKIP_CUDA_TESTS=1 CUDA_COLD=1 CPU_ROTATE=1 CUDA_BUDGET=100s CPU_BUDGET=90s PAIR_BUDGET=60s \
  REPLAY_REPS=7 REPLAY_PROCS=2 CPU_GROUPS="0-14" REPLAY_PLANS="offload" REPLAY_OFFLOAD_BUDGET=1GiB \
  REPLAY_WEIGHTS="distinct" REPLAY_CASES="decode:1 prefill:16" timeout 400 bash scripts/gpu-host-replay.sh "$out/r"
echo "replay done $SECONDS s"
mv "$out/x" "$out/r/x"
tar cf "$out/call.tar" -C "$out" r && rm -rf "$out/r"
