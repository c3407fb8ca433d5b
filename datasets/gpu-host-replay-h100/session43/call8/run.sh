#!/bin/bash
# Session 43, call 8 (fresh machine), binaries of the commit in COMMIT.
# Call 6 again with the cpu backend copying vectors rather than
# transposing them (call 7: a 1x8960 input took 24 us). Call 6 was call 5
# again on another machine, binaries with the review changes (the
# fit labels the copies factor from the row note; no change to what is
# measured or solved). Call 3 with the
# bandwidth GEMV in wt_at order (aw streamed 49.5
# GB/s against the plan's GEMVs' ~90 in call 3), and CPU parts timed to
# their runs' own ends. Session 42 call 4's replay with these benchmarks:
# copies in turn past the 300 MiB L3, and cuda:0's bandwidth GEMV copying
# its weights from page-locked host memory, so that the offload plan's
# CPU parts and GPU copies are costed slowed by each other. cpu:0-alone
# and offload plans after two REPLAY_REFINE rounds, decode 1 and prefill
# 16, distinct weights, 2 processes per case and wait.
set -u
out=${1:?out}
mkdir -p "$out/r"
SKIP_CUDA_TESTS=1 CUDA_COLD=1 CPU_ROTATE=1 CUDA_BUDGET=60s CPU_BUDGET=90s PAIR_BUDGET=60s REPLAY_REFINE=2 \
  REPLAY_REPS=7 REPLAY_PROCS=2 CPU_GROUPS="0-14" REPLAY_PLANS="offload cpu" REPLAY_OFFLOAD_BUDGET=1GiB \
  REPLAY_WEIGHTS="distinct" REPLAY_CASES="decode:1 prefill:16" timeout 570 bash scripts/gpu-host-replay.sh "$out/r/replay"
echo "replay done $SECONDS s"
grep -h "bandwidth" "$out/r/replay/fit.txt"
cat "$out/r/replay/summary.md" 2>/dev/null | tail -12
for kn in 1536x2560 8960x512 1536x36352; do
  HETERO_CPU_GROUPS="0-14" .carry/replay/stage_bench --pinned cpu:0 f32 wt_at $kn 1,16
done > "$out/r/stage.txt" 2>&1
cat "$out/r/stage.txt"
tar cf "$out/call.tar" -C "$out" r && rm -rf "$out/r"
