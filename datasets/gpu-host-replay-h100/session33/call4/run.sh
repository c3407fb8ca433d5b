#!/bin/bash
# Session 33, call 4: is a slow 96 KiB write_input a property of the
# (GEMM, host buffer) pair (placement) or of the moment (state)? stage_bench
# --alloc measures every pair twice; the stage_bench of this call was built
# with a temporary print of each GEMM's device buffers (HETERO_DEBUG_PTRS,
# not committed). f32 GEMMs copy straight into the GEMM's input (no
# conversion kernel). The SM clock is sampled throughout.
set -u
out=${1:?out}
mkdir -p "$out"
sb=.carry/replay/stage_bench
export HETERO_DEBUG_PTRS=1
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,utilization.gpu --format=csv -lms 200 > "$out/clocks.csv" 2>&1 &
smi=$!
{
for s in 24x1024x1024 16x1536x1536 24x1024x64; do
  date +%T.%N; echo "## $s f16 pinned"
  $sb --pinned --alloc cuda:0 f16 wt_at $s 6 2>&1
done
for s in 24x1024x1024 16x1536x1536; do
  date +%T.%N; echo "## $s f32 pinned"
  $sb --pinned --alloc cuda:0 f32 wt_at $s 6 2>&1
done
date +%T.%N
} > "$out/alloc.md" 2>&1
kill $smi
cat "$out/alloc.md"
