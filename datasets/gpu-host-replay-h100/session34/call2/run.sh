#!/bin/bash
# Session 34, call 2 (fresh machine), binaries of 21165a6: the launch-copy
# bound back at 64 KiB; a 16-bit GEMM's write_input waits for its input's
# copy alone (an event after the DMA), the conversion queued ahead of the
# launch. First stage_bench side by side with the old wait
# (HETERO_CUDA_INPUT_WAIT=all): the replay model's layer (Qwen2.5-1.5B) at
# 16 tokens in sequence, polling, ABBAAB; the profile's stage_in shape
# (R x 1024 x 64) alone, ABBA. Then the standard replay (cuda tests first).
set -u
out=${1:?out}
mkdir -p "$out"
sb=.carry/replay/stage_bench
layer=1536x1536,1536x256,1536x256,1536x1536,1536x8960,1536x8960,8960x1536
{
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
for wait in all copy copy all all copy; do
  echo "## layer M=16, input wait: $wait"
  HETERO_CUDA_INPUT_WAIT=$wait $sb --pinned --layers cuda:0 f16 wt_at 16 $layer 28 poll
done
for wait in all copy copy all; do
  echo "## stage_in shape, input wait: $wait"
  HETERO_CUDA_INPUT_WAIT=$wait $sb --pinned cuda:0 f16 wt_at 1024x64 16,24,64,256
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
