#!/bin/bash
# Session 43, call 1 (fresh machine), binaries of the commit in COMMIT.
# Does cpu:0's decode GEMV slow down beside cuda:0's GEMV whose weights
# are copied from page-locked host memory every run (offload's CG rows),
# at the offload plan's own decode shapes? `stage_bench --beside`, rounds
# of A alone / B alone / both, 28 layers of distinct weights. Then the
# agent's pair microbenchmark three times, as the profile runs it.
set -u
out=${1:?out}
mkdir -p "$out/r"
r=$out/r
tar xJf .carry/bx/b.txz -C .carry/bx
b=.carry/bx
export HETERO_CPU_GROUPS="0-14"
{ nproc; lscpu; nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv; free -g; } > "$r/machine.txt" 2>&1
sb=$b/examples/stage_bench
for w in copied resident; do
  $sb --beside cpu:0 f32 1x1536x4096 cuda:0 f16 1x1536x4864 28 $w
  $sb --beside cpu:0 f32 1x8960x256 cuda:0 f16 1x8960x1280 28 $w
done > "$r/beside-ffn.txt" 2>&1
echo "ffn done $SECONDS s"
$sb --beside cpu:0 f32 1x1536x36608 cuda:0 f16 1x1536x39552 2 copied > "$r/beside-lmhead.txt" 2>&1
$sb --beside cpu:0 f32 1x1536x4096 cuda:0 f16 1x1536x4864 28 copied >> "$r/beside-ffn.txt" 2>&1
echo "lm_head done $SECONDS s"
for i in 1 2 3; do
  $b/hetero-agent --cpu-groups 0-14 --processors cpu:0,cuda:0 microbench --bench bandwidth_alone,bandwidth_concurrent --reps 9 > "$r/pair-$i.jsonl" 2>&1
done
echo "pairs done $SECONDS s"
cat "$r"/beside-*.txt
tar cf "$out/call.tar" -C "$out" r
