#!/bin/bash
# Session 34, call 1 (fresh machine), binaries of a636061: inputs and
# outputs up to 128 KiB cross inside the launch (was 64 KiB). First
# stage_bench on the replay model's layer (Qwen2.5-1.5B) in sequence,
# polling, with the bound at 64, 128, 256 and 512 KiB
# (HETERO_CUDA_LAUNCH_COPY_MAX), at 16 tokens (ABCDDCBA) and 32 tokens;
# then the standard replay (cuda tests first) at the new default, 128 KiB.
set -u
out=${1:?out}
mkdir -p "$out"
sb=.carry/replay/stage_bench
layer=1536x1536,1536x256,1536x256,1536x1536,1536x8960,1536x8960,8960x1536
{
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
for max in 65536 131072 262144 524288 524288 262144 131072 65536; do
  echo "## M=16, bound $max"
  HETERO_CUDA_LAUNCH_COPY_MAX=$max $sb --pinned --layers cuda:0 f16 wt_at 16 $layer 28 poll
done
for max in 65536 262144 524288; do
  echo "## M=32, bound $max"
  HETERO_CUDA_LAUNCH_COPY_MAX=$max $sb --pinned --layers cuda:0 f16 wt_at 32 $layer 28 poll
done
} > "$out/stage.md" 2>&1
echo "stage done $SECONDS s"
CUDA_COLD=1 CPU_COLD=1 CUDA_BUDGET=100s CPU_BUDGET=60s REPLAY_REPS=7 REPLAY_PROCS=5 \
  REPLAY_CASES="prefill:16 prefill:300 decode:1" timeout $((585 - SECONDS)) bash scripts/gpu-host-replay.sh "$out/r"
echo "replay done $SECONDS s"
work=$(ls -dt /tmp/replay.* | head -1)
grep -n "op_overhead\|max_bytes" "$work/predictor.ron" | head -20
grep -n "stage_in: Some\|stage_out: Some" -A3 "$work/predictor.ron" | head -24
cat "$out/stage.md"
