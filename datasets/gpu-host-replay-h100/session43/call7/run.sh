#!/bin/bash
# Session 43, call 7 (fresh machine), binaries of the commit in COMMIT.
# The activations' copies of offload decode ran about twice their line in
# calls 4-6. `stage_bench --pinned` times write_input, execute and
# read_output alone at the plan's own step shapes (M = 1 and 16), with the
# runtime's page-locked buffers, against the profile's staged-copy lines.
set -u
out=${1:?out}
mkdir -p "$out/r"
b=.carry/replay
export HETERO_CPU_GROUPS="0-14"
{
  for kn in 1536x1536 1536x3072 8960x1024 1536x58752; do
    $b/stage_bench --pinned cuda:0 f16 wt_at $kn 1,16
  done
  for kn in 1536x2560 8960x512 1536x36352; do
    $b/stage_bench --pinned cpu:0 f32 wt_at $kn 1,16
  done
} > "$out/r/stage.txt" 2>&1
cat "$out/r/stage.txt"
tar cf "$out/call.tar" -C "$out" r
