#!/usr/bin/env bash
# The evaluation on the GPU host (issue 11), in one bounded run:
#
#   1. regret: for operators x lengths of a bundled model, every candidate
#      the solver costed is run through the runtime; the plan's decision
#      against the fastest measured one;
#   2. splits against the perfect-overlap bound Ta*Tb/(Ta+Tb) (same runs);
#   3. handoff latency, polling against blocking, per processor (the
#      agent's microbenchmarks and an operator through the runtime);
#   4. offload-mode decode under a GPU memory budget (ScheInfer) against
#      the GPU streaming every weight and the CPU alone;
#   5. predictor accuracy on held-out rows of datasets/gpu-host-h200
#      (k-fold, from `hetero fit --report`; made by --prepare, no GPU needed).
#
#   scripts/gpu-host-eval.sh --prepare     # here: build, fit, fill .carry/
#   scripts/gpu-host-eval.sh OUT_DIR       # there: measure, write OUT_DIR
#
# OUT_DIR ends up with a few files: summary.md, raw.tar.gz (every row, the
# plans, the reports, the log) and charts (*.svg). Every step runs under
# `timeout`, its seconds are printed and recorded (steps.jsonl); the whole
# run stays under EVAL_BUDGET seconds.
#
# Environment (defaults are for the GPU host):
#   EVAL_BIN            binaries: hetero-agent, gpu_eval (default .carry/bin,
#                       else target/release and target/release/examples)
#   EVAL_PREDICTOR      predictor file (default .carry/predictor.ron)
#   EVAL_BUDGET         seconds for the whole run (default 480)
#   EVAL_STEPS          steps to run (default regret,handoff,offload)
#   EVAL_PROCESSORS     regret processors (default cpu:0,cuda:0,opencl:1:0)
#   EVAL_HANDOFF_PROCESSORS  (default cuda:0,opencl:1:0,cpu:0,opencl:0:0)
#   EVAL_OFFLOAD_PROCESSORS  (default cpu:0,cuda:0)
#   EVAL_MODEL          model config (default datasets/models/llama-3.1-8b.json)
#   EVAL_OFFLOAD_MODEL  (default: EVAL_MODEL)   EVAL_OFFLOAD_BUDGET (default 4GiB)
#   EVAL_CELLS, EVAL_OPS, EVAL_REPS   regret cells, operators, timed runs
#   EVAL_DTYPES         solver dtypes, space-separated (default
#                       "cuda:0=f16 opencl:1:0=f32 cpu:0=f32 opencl:0:0=f32")
#   EVAL_OFFLOAD_DTYPES (default "cuda:0=f16 cpu:0=f16")
#   EVAL_CPU_GROUPS, EVAL_OFFLOAD_CPU_GROUPS, EVAL_OFFLOAD_REMAP  (testing
#                       on a machine without a GPU: EVAL_OFFLOAD_REMAP=cuda:0=cpu:1)
#   EVAL_QUICK=1        tiny sizes (a smoke test on any machine)
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
cd "$repo"
carry="$repo/.carry"

if [ "${1:-}" = "--prepare" ]; then
    # Build here (x86-64 Linux, glibc <= the host's), fit the predictor from
    # the committed dataset, and put what the host needs in .carry/.
    set -e
    cargo build --release -p hetero-agent
    cargo build --release -p hetero-runtime --example gpu_eval
    cargo build -p hetero
    mkdir -p "$carry/bin"
    cp target/release/hetero-agent target/release/examples/gpu_eval "$carry/bin/"
    strip "$carry/bin/hetero-agent" "$carry/bin/gpu_eval" 2>/dev/null || true
    target/debug/hetero fit datasets/gpu-host-h200 --out "$carry/predictor.ron" \
        --report "$carry/fit-report.json" > "$carry/fit.txt"
    cat "$carry/fit.txt"
    git rev-parse HEAD > "$carry/COMMIT" 2>/dev/null || true
    git status --short > "$carry/STATUS" 2>/dev/null || true
    du -sh "$carry"
    echo "carry .carry/ and run: scripts/gpu-host-eval.sh \"\$OUT\""
    exit 0
fi

out=${1:?usage: scripts/gpu-host-eval.sh OUT_DIR (or --prepare)}
mkdir -p "$out"
out=$(cd "$out" && pwd)
raw="$out/raw"
mkdir -p "$raw"
start=$(date +%s)
budget=${EVAL_BUDGET:-480}
deadline=$((start + budget))
quick=${EVAL_QUICK:-0}
log() { echo "[$(( $(date +%s) - start ))s] $*" | tee -a "$raw/run-log.txt" >&2; }

if [ -n "${EVAL_BIN:-}" ]; then
    agent="$EVAL_BIN/hetero-agent"; ev="$EVAL_BIN/gpu_eval"
elif [ -x "$carry/bin/gpu_eval" ]; then
    agent="$carry/bin/hetero-agent"; ev="$carry/bin/gpu_eval"
else
    agent="$repo/target/release/hetero-agent"; ev="$repo/target/release/examples/gpu_eval"
fi
predictor=${EVAL_PREDICTOR:-$carry/predictor.ron}
for f in "$agent" "$ev"; do
    [ -x "$f" ] || { echo "gpu-host-eval: $f is missing (run scripts/gpu-host-eval.sh --prepare)" >&2; exit 2; }
done
[ -f "$predictor" ] || { echo "gpu-host-eval: no predictor at $predictor (run --prepare)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "gpu-host-eval: python3 is needed" >&2; exit 2; }

model=${EVAL_MODEL:-datasets/models/llama-3.1-8b.json}
offload_model=${EVAL_OFFLOAD_MODEL:-$model}
procs=${EVAL_PROCESSORS:-cpu:0,cuda:0,opencl:1:0}
handoff_procs=${EVAL_HANDOFF_PROCESSORS:-cuda:0,opencl:1:0,cpu:0,opencl:0:0}
offload_procs=${EVAL_OFFLOAD_PROCESSORS:-cpu:0,cuda:0}
offload_budget=${EVAL_OFFLOAD_BUDGET:-4GiB}
steps=${EVAL_STEPS:-regret,handoff,offload}
dtypes=()
for d in ${EVAL_DTYPES:-cuda:0=f16 opencl:1:0=f32 cpu:0=f32 opencl:0:0=f32}; do dtypes+=(--dtype "$d"); done
offload_dtypes=()
for d in ${EVAL_OFFLOAD_DTYPES:-cuda:0=f16 cpu:0=f16}; do offload_dtypes+=(--dtype "$d"); done
if [ "$quick" = 1 ]; then
    cells=${EVAL_CELLS:-decode:1,prefill:1,prefill:17}
    ops=${EVAL_OPS:-attn_k,ffn_down}
    reps=${EVAL_REPS:-5}
    handoff_cells=decode:1,prefill:17; handoff_passes=5
    tokens=1; orepeat=1
else
    cells=${EVAL_CELLS:-decode:1,prefill:1,prefill:17,prefill:128,prefill:300,prefill:1000,prefill:4096}
    ops=${EVAL_OPS:-attn_q,ffn_up,ffn_down,lm_head}
    reps=${EVAL_REPS:-5}
    handoff_cells=decode:1,prefill:128; handoff_passes=15
    tokens=2; orepeat=2
fi
cache="$raw/agent-cache"
mkdir -p "$cache"

# NVIDIA's OpenCL next to whatever is registered already (PoCL), as the
# dataset run registered it (scripts/gpu-host-profile.sh).
icd=$(mktemp -d)
trap 'rm -rf "$icd"' EXIT
cp /etc/OpenCL/vendors/*.icd "$icd/" 2>/dev/null || true
if ! grep -qs nvidia "$icd"/*.icd; then
    echo libnvidia-opencl.so.1 > "$icd/nvidia.icd"
fi
export OCL_ICD_VENDORS="$icd"

: > "$raw/steps.jsonl"
# step NAME CAP CMD...: CMD under a timeout of CAP seconds (less when the
# budget is shorter, keeping RESERVE seconds for the report), stdout to
# raw/NAME.out, stderr to the log.
reserve=15
step() {
    local name=$1 cap=$2; shift 2
    local left t rc t0
    left=$((deadline - reserve - $(date +%s)))
    t=$(( cap < left ? cap : left ))
    if [ "$t" -lt 5 ]; then
        log "$name: skipped, budget spent"
        echo "{\"step\":\"$name\",\"skipped\":true}" >> "$raw/steps.jsonl"
        return 0
    fi
    log "$name: up to ${t}s: $*"
    t0=$(date +%s)
    timeout --kill-after=10 "$t" "$@" > "$raw/$name.out" 2> >(tee -a "$raw/run-log.txt" >&2)
    rc=$?
    log "$name: exit $rc after $(( $(date +%s) - t0 ))s"
    echo "{\"step\":\"$name\",\"cap_s\":$t,\"seconds\":$(( $(date +%s) - t0 )),\"exit\":$rc,\"timed_out\":$([ $rc -eq 124 ] && echo true || echo false)}" >> "$raw/steps.jsonl"
    return 0
}
# A deadline for a tool inside a step of CAP seconds: MARGIN earlier, at least 5.
dl() { local d=$(( $1 - $2 )); echo $(( d < 5 ? 5 : d )); }
has() { case ",$steps," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
# Seconds of the budget for a step: a share of what is left, at most CAP.
share() { local left=$((deadline - reserve - $(date +%s))); local s=$(( left * $1 / 100 )); echo $(( s < $2 ? s : $2 )); }

# 0. The machine, and its processors as the agent sees them.
{
    date -u +%FT%TZ
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv,noheader 2>&1 | head -2
    lscpu 2>/dev/null | grep -E '^(Model name|CPU\(s\)|Thread|Socket|L3)'
    uname -r; uptime
    echo "commit: $(git rev-parse HEAD 2>/dev/null || cat "$carry/COMMIT" 2>/dev/null || echo unknown)"
    echo "agent: $agent"; echo "predictor: $predictor"
} > "$raw/host.txt" 2>&1
cat "$raw/host.txt" >&2
step probe 30 "$agent" --cache-dir "$cache" ${EVAL_CPU_GROUPS:+--cpu-groups "$EVAL_CPU_GROUPS"} probe --json
cp "$raw/probe.out" "$raw/probe.json" 2>/dev/null
# Ids of the dataset's processors on this machine: where the same processor
# (by name) has another id here, remap it.
remap=()
if [ -s "$raw/probe.json" ]; then
    for r in $(python3 - "$raw/probe.json" datasets/gpu-host-h200/device.json <<'PY'
import json, sys
here = {p["id"]: p["name"] for p in json.load(open(sys.argv[1]))["processors"]}
there = {p["id"]: p["name"] for p in json.load(open(sys.argv[2]))["probe"]["processors"]}
for pid, name in there.items():
    if here.get(pid) == name:
        continue
    same = [h for h, n in here.items() if n == name]
    if len(same) == 1:
        print(f"{pid}={same[0]}")
    print(f"note: {pid} ({name}) is {'absent' if pid not in here else here[pid]} here", file=sys.stderr)
PY
    ); do remap+=(--remap "$r"); log "remap $r (same processor name, another id here)"; done
fi
# Keep the processors that are here (a list names the predictor's ids).
present() {
    [ -s "$raw/probe.json" ] || { echo "$1"; return; }
    python3 - "$raw/probe.json" "$1" "${remap[*]:-}" 2>>"$raw/run-log.txt" <<'PY'
import json, sys
here = {p["id"] for p in json.load(open(sys.argv[1]))["processors"]}
remap = dict(r.split("=", 1) for r in sys.argv[3].split() if "=" in r)
keep = [p for p in sys.argv[2].split(",") if p and remap.get(p, p) in here]
gone = [p for p in sys.argv[2].split(",") if p and p not in keep]
if gone:
    print(f"not here, left out: {', '.join(gone)}", file=sys.stderr)
print(",".join(keep))
PY
}
procs=$(present "$procs")
handoff_procs=$(present "$handoff_procs")
[ -n "${EVAL_OFFLOAD_REMAP:-}" ] || offload_procs=$(present "$offload_procs")
log "processors: regret $procs; handoff $handoff_procs; offload $offload_procs"
common=(--predictor "$predictor" --cache-dir "$cache" "${dtypes[@]}" "${remap[@]}")
cp "$carry/fit-report.json" "$carry/fit.txt" "$raw/" 2>/dev/null

# 1-2. Regret and splits.
if has regret; then
    cap=$(share 50 220)
    step regret "$cap" "$ev" regret "${common[@]}" --model "$model" --processors "$procs" \
        --cells "$cells" --ops "$ops" --reps "$reps" --deadline-s $(dl $cap 25) \
        ${EVAL_CPU_GROUPS:+--cpu-groups "$EVAL_CPU_GROUPS"} --out "$raw/regret"
fi

# 3a. Handoff: the agent's microbenchmarks, per processor.
if has handoff; then
    IFS=, read -ra hp <<< "$handoff_procs"
    for p in "${hp[@]}"; do
        reps_m=100; [ "$quick" = 1 ] && reps_m=20
        case "$p" in opencl:0:*) reps_m=30 ;; esac
        step "microbench-${p//:/-}" 25 "$agent" --cache-dir "$cache" \
            ${EVAL_CPU_GROUPS:+--cpu-groups "$EVAL_CPU_GROUPS"} --processors "$p" \
            microbench --bench submit_empty,sync_block,sync_poll --reps $reps_m --warmups 3 --timeout-ms 20000
    done
fi

# 4. Offload-mode decode.
if has offload; then
    cap=$(share 75 200)
    oremap=()
    for r in ${EVAL_OFFLOAD_REMAP:-}; do oremap+=(--remap "$r"); done
    step offload "$cap" "$ev" offload --predictor "$predictor" --cache-dir "$cache" \
        "${offload_dtypes[@]}" "${remap[@]}" "${oremap[@]}" --model "$offload_model" \
        --processors "$offload_procs" --budget "$offload_budget" --tokens $tokens --repeat $orepeat \
        --variants plan,stream,cpu,gpu --deadline-s $(dl $cap 60) \
        ${EVAL_OFFLOAD_CPU_GROUPS:+--cpu-groups "$EVAL_OFFLOAD_CPU_GROUPS"} --out "$raw/offload"
fi

# 3b. Handoff: an operator through the runtime, polling against blocking.
if has handoff; then
    cap=$(share 95 90)
    step handoff "$cap" "$ev" handoff "${common[@]}" --model "$model" --processors "$handoff_procs" \
        --cells "$handoff_cells" --op attn_k --passes "$handoff_passes" --deadline-s $(dl $cap 20) \
        ${EVAL_CPU_GROUPS:+--cpu-groups "$EVAL_CPU_GROUPS"} --out "$raw/handoff"
fi

# 5. The report, and the files to take home.
log "report"
rm -rf "$cache"
python3 "$here/gpu-host-eval-report.py" "$raw" "$out" >&2 || log "the report failed (raw data kept)"
log "done in $(( $(date +%s) - start ))s"
cp "$raw/run-log.txt" "$out/run-log.txt"
tar -C "$out" -czf "$out/raw.tar.gz" raw && rm -rf "$raw"
ls -la "$out" >&2
