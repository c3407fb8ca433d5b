#!/bin/bash
# Session 34, call 5 (fresh machine), binaries of the commit in COMMIT (the
# path of call 2: write_input waits for a 16-bit GEMM's copy alone, stage_in
# times write_input alone). The standard replay (cuda tests first), 5
# processes per case and wait; then the cuda plan at prefill 16, polling,
# with the copy-only wait and the old wait (HETERO_CUDA_INPUT_WAIT=all) in
# alternating processes, 6 each, 7 passes per process.
set -u
out=${1:?out}
mkdir -p "$out"
CUDA_COLD=1 CPU_COLD=1 CUDA_BUDGET=100s CPU_BUDGET=60s REPLAY_REPS=7 REPLAY_PROCS=5 \
  REPLAY_CASES="prefill:16 prefill:300 decode:1" timeout 480 bash scripts/gpu-host-replay.sh "$out/r"
echo "replay done $SECONDS s"
work=$(ls -dt /tmp/replay.* | head -1)
grep -n "op_overhead\|max_bytes" "$work/predictor.ron" | head -20
grep -n "stage_in: Some\|stage_out: Some" -A3 "$work/predictor.ron" | head -24
mkdir -p "$work/sbs"
for i in 1 2 3 4 5 6; do
  for wait in copy all; do
    HETERO_CUDA_INPUT_WAIT=$wait timeout 60 .carry/replay/hetero run "$work/plan-cuda.ron" \
      --model datasets/models/qwen2.5-1.5b.json --phase prefill --len 16 --share-weights \
      --sync poll --repeat 7 --json --out "$work/sbs/$wait-$i.json" > /dev/null 2> "$work/sbs/$wait-$i.err"
  done
done
python3 - "$work/sbs" <<'PY' | tee "$out/sbs.md"
import glob, json, statistics, sys
d = sys.argv[1]
print("| round | copy-only wait, measured µs | old wait (all), measured µs | all / copy |")
print("|---|---|---|---|")
rs = []
for i in range(1, 7):
    try:
        c = json.load(open(f"{d}/copy-{i}.json"))["measured_us"]
        a = json.load(open(f"{d}/all-{i}.json"))["measured_us"]
    except Exception as e:
        print(f"| {i} | {e} | | |"); continue
    rs.append(a / c)
    print(f"| {i} | {c:.0f} | {a:.0f} | {a / c:.3f} |")
if rs:
    print(f"\nmedian all / copy: {statistics.median(rs):.3f} over {len(rs)} rounds")
PY
echo "all done $SECONDS s"
