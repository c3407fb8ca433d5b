#!/bin/bash
# Session 33, call 2: does write_input's cost follow the host buffer or the
# GEMM (its device buffers)? stage_bench --alloc: COUNT GEMMs of one shape
# against COUNT input buffers, each allocated on its own, median write_input
# of every pair.
set -u
out=${1:?out}
mkdir -p "$out"
sb=.carry/replay/stage_bench
{
nvidia-smi --query-gpu=name,driver_version --format=csv
for s in 24x1024x64 16x1536x1536 24x1024x1024 64x1024x64 16x8960x1536; do
  echo "## $s pinned"
  $sb --pinned --alloc cuda:0 f16 wt_at $s 6
done
echo "## 16x1536x1536 heap"
$sb --alloc cuda:0 f16 wt_at 16x1536x1536 4
echo "## 16x1536x1536 pinned, again"
$sb --pinned --alloc cuda:0 f16 wt_at 16x1536x1536 6
} > "$out/alloc.md" 2>&1
cat "$out/alloc.md"
