#!/bin/bash
# Session 44, call 1 (fresh machine), binaries of the commit in COMMIT.
# 1. `stage_bench --follow`: cuda:0's four attention GEMMs (f16, resident,
#    28 layers of their own weights) after nothing, after cpu:0's part of
#    an FFN step, after cuda:0's copied part of it, or after both beside
#    each other: submit, device and wall medians. Unpinned, with the
#    workers not polling, and with the main thread on core 15.
# 2. Session 43 call 8's offload plan replayed as it is at decode 1
#    (8 steps, block), distinct against shared weights, 2 rounds.
set -u
out=${1:?out}
mkdir -p "$out/r"
r=$out/r
here=datasets/gpu-host-replay-h100/session44/call1
tar xJf .carry/bx/b.txz -C .carry/bx
b=.carry/bx
sb=$b/stage_bench
export HETERO_CPU_GROUPS="0-14"
{
  echo "## unpinned"; $sb --follow cpu:0 cuda:0 f16 28
  echo "## HETERO_CPU_POLL_US=0"; HETERO_CPU_POLL_US=0 $sb --follow cpu:0 cuda:0 f16 28
  echo "## taskset -c 15"; taskset -c 15 $sb --follow cpu:0 cuda:0 f16 28
  echo "## unpinned, again"; $sb --follow cpu:0 cuda:0 f16 28
} > "$r/follow.txt" 2>&1
echo "follow done $SECONDS s"
unset HETERO_CPU_GROUPS
xz -dkf "$here/plan-offload-s43c8.ron.xz"
run() { # name args...
  local name=$1; shift
  timeout 150 "$b/hetero" run "$here/plan-offload-s43c8.ron" --model datasets/models/qwen2.5-1.5b.json \
    --cpu-groups 0-14 --phase decode --len 1 --tokens 8 --sync block --repeat 5 --json "$@" \
    --out "$r/$name.json" > /dev/null 2> "$r/$name.err"
  echo "$name rc=$? $SECONDS s"
}
for round in 1 2; do
  run "offload-$round"
  run "offload-shared-$round" --share-weights
done
cat "$r/follow.txt"
tar cf "$out/call.tar" -C "$out" r
