#!/bin/bash
# Session 33, call 1: where do the staged-copy microbenchmarks and the
# runtime's copies part? stage_bench (device-agent/examples) with A and C in
# page-locked memory (--pinned, as the runtime's pool and the agent's
# stage_in/stage_out) and on the heap; the microbenchmark's shapes
# (R x 1024 x 64) against the replay model's (Qwen2.5-1.5B at 16 tokens);
# the operators in sequence as the runtime runs them; and the agent's own
# stage_in/stage_out rows.
set -u
out=${1:?out}
mkdir -p "$out"
b=.carry/replay
sb=$b/stage_bench
{
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
echo "## A. single GEMM, microbenchmark shape, pinned"
$sb --pinned cuda:0 f16 wt_at 1024x64 16,24,32,64,256,512
echo "## B. the same, heap"
$sb cuda:0 f16 wt_at 1024x64 16,24,32,64,256
echo "## C. single GEMM, the model's shapes, pinned"
$sb --pinned cuda:0 f16 wt_at 1536x1536 16,24,32,64
$sb --pinned cuda:0 f16 wt_at 1536x256 16
$sb --pinned cuda:0 f16 wt_at 1536x8960 16
$sb --pinned cuda:0 f16 wt_at 8960x1536 16
echo "## C2. output as large as input (1024x1024), pinned"
$sb --pinned cuda:0 f16 wt_at 1024x1024 24,32,64
for how in poll execute; do
echo "## D. the layer in sequence, 28 layers, pinned, $how"
$sb --pinned --layers cuda:0 f16 wt_at 16 1536x1536,1536x256,1536x256,1536x1536,1536x8960,1536x8960,8960x1536 28 $how
done
echo "## E. the layer in sequence, heap, poll"
$sb --layers cuda:0 f16 wt_at 16 1536x1536,1536x256,1536x256,1536x1536,1536x8960,1536x8960,8960x1536 28 poll
echo "## A again (order effects)"
$sb --pinned cuda:0 f16 wt_at 1024x64 24,32,64,256
} > "$out/stage.md" 2>&1
echo "## F. agent microbench stage_in/stage_out (sizes 4 KiB x4 up to 1 MiB)"
for i in 1 2; do
$b/hetero-agent microbench --processors cuda:0 --bench stage_in,stage_out --max-copy-bytes 1048576 > "$out/micro$i.jsonl" 2>"$out/micro$i.err"
done
cat "$out/stage.md"
python3 - "$out" <<'PY'
import json,sys,glob
for f in sorted(glob.glob(sys.argv[1]+'/micro*.jsonl')):
    for l in open(f):
        r=json.loads(l)
        if r.get('bench'):
            print(f.split('/')[-1], r['bench'], r.get('bytes'), (r.get('stats') or {}).get('median_us'), r.get('note','')[:90])
PY
