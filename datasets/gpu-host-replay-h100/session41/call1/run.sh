#!/bin/bash
# Session 41, call 1 (fresh machine), binaries of the commit in COMMIT.
# Cold weights by rotation (`--rotate-weights`): each case runs copies of
# its weights in turn, as many as fill the eviction size, the input written
# again before each run, instead of evicting the host's caches. Part 1:
# cold sweeps of cpu:0's decode GEMVs with the default eviction (w512),
# rotation through 512 MiB (rot512) and 2 GiB (rot2048) of copies,
# two rounds alternated, between runtime references (session 40 call 5's
# plans, L = 1 and 28 distinct, decode, blocking, cores 0-14). Part 2:
# session 40 call 7's offload replay with cpu:0 profiled under rotation
# (default size) instead of a 2 GiB eviction.
set -u
out=${1:?out}
mkdir -p "$out/x"
bin=.carry/replay
L=datasets/gpu-host-replay-h100/session40/call5/layers
runtime() {
    timeout 100 $bin/hetero run $L/plan-L$1.ron --model $L/qwen-L$1.json --cpu-groups "0-14" --phase decode \
        --len 1 --tokens 8 --sync block --repeat 7 --json --out "$out/x/run-L$1-$2.json" > /dev/null 2> "$out/x/run-L$1-$2.err"
}
runtime 1 a
for round in 1 2; do
    for mode in w512 rot512 rot2048; do
        flag=--cold-cache; mib=512
        case $mode in rot*) flag=--rotate-weights; mib=${mode#rot};; esac
        for order in wt_at aw; do
            HETERO_EVICT_MIB=$mib timeout 90 $bin/hetero-agent --cpu-groups "0-14" sweep --processor cpu:0 \
                --shapes 1x1536x8960,1x8960x1536,1x1536x1536,1x1536x256,16x1536x8960 --order $order --dtype f32 $flag --reps 9 \
                > "$out/x/sweep-$mode-$order-$round.jsonl" 2>> "$out/x/err.txt"
        done
    done
    echo "round $round $SECONDS s"
done
runtime 28 b
runtime 1 c
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
  REPLAY_WEIGHTS="distinct" REPLAY_CASES="decode:1 prefill:16" timeout 420 bash scripts/gpu-host-replay.sh "$out/r"
echo "replay done $SECONDS s"
mv "$out/x" "$out/r/x"
tar cf "$out/call.tar" -C "$out" r && rm -rf "$out/r"
