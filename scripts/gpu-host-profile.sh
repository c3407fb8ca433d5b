#!/usr/bin/env bash
# The GPU host's dataset in one command: probe, microbenchmarks,
# then a sweep of every real processor (cuda, OpenCL on NVIDIA, cpu, OpenCL
# on PoCL) over the GEMM shapes of the bundled models, at decode lengths
# M = 1..8 and prefill lengths up to 4096.
#
#   scripts/gpu-host-profile.sh [--bin DIR] [--out DIR] [--budget SECONDS]
#
#   --bin DIR       folder with release builds of hetero-agent and hetero
#                   (default: target/release)
#   --out DIR       the dataset goes to DIR/gpu-host-<gpu>/ (default: datasets)
#   --budget S      wall-clock budget of the whole run, seconds (default 550)
#   --models DIR    model configs (default: datasets/models of this repo)
#   --quick         a smoke test: 6 cases a processor, short microbenchmarks
#
# Every phase runs under `timeout`; the agent writes each row as soon as it
# is measured, so a phase cut short keeps its rows, and the cases of each
# sweep are ordered most important first (scripts/gpu-host-spec.py). What
# the run did is in device.json (`phases`: seconds, exit code, rows).
#
# Needs on the host: bash, coreutils (timeout), python3 (standard library
# only), the NVIDIA driver; OpenCL through an ICD loader. NVIDIA's OpenCL is
# registered for this run only, through an OCL_ICD_VENDORS folder.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
bin="$repo/target/release"
out="$repo/datasets"
budget=550
quick=0
models="$repo/datasets/models"
while [ $# -gt 0 ]; do
    case "$1" in
        --bin) bin=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --budget) budget=$2; shift 2 ;;
        --quick) quick=1; shift ;;
        --models) models=$2; shift 2 ;;
        -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
        *) echo "gpu-host-profile: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
agent="$bin/hetero-agent"
hetero="$bin/hetero"
for f in "$agent" "$hetero"; do
    [ -x "$f" ] || { echo "gpu-host-profile: $f is missing (build with cargo build --release)" >&2; exit 2; }
done
ls "$models"/*.json >/dev/null 2>&1 || { echo "gpu-host-profile: no model configs in $models" >&2; exit 2; }
command -v python3 >/dev/null || { echo "gpu-host-profile: python3 is needed" >&2; exit 2; }

start=$(date +%s)
deadline=$((start + budget))
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log() { echo "[$(( $(date +%s) - start ))s] $*" >&2; }

# NVIDIA's OpenCL next to whatever is registered already (PoCL).
icd="$work/icd"
mkdir -p "$icd"
cp /etc/OpenCL/vendors/*.icd "$icd/" 2>/dev/null || true
if ! grep -qs nvidia "$icd"/*.icd; then
    echo libnvidia-opencl.so.1 > "$icd/nvidia.icd"
fi
export OCL_ICD_VENDORS="$icd"
cache="$work/cache"
mkdir -p "$cache"

# The dataset folder, named after the GPU.
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
gpu=$(python3 -c 'import re,sys; m=re.search(r"\b([A-Z]+[0-9]{2,}[A-Za-z]*)\b", sys.argv[1].replace("NVIDIA","")); print(m.group(1).lower() if m else "unknown")' "${gpu_name:-none}")
dest="$out/gpu-host-$gpu"
mkdir -p "$dest"
phases="$work/phases.jsonl"
: > "$phases"
log "dataset: $dest (GPU: ${gpu_name:-none})"

# run_phase NAME CAP OUTFILE CMD...: CMD under a timeout of CAP seconds (less
# if the budget is shorter), stdout appended to OUTFILE.
run_phase() {
    local name=$1 cap=$2 outfile=$3; shift 3
    local now left t rc t0 rows
    now=$(date +%s)
    left=$((deadline - now))
    t=$(( cap < left ? cap : left ))
    if [ "$t" -lt 5 ]; then
        log "$name: skipped, budget spent"
        echo "{\"phase\":\"$name\",\"skipped\":true}" >> "$phases"
        return 0
    fi
    log "$name: up to ${t}s"
    t0=$(date +%s)
    timeout --kill-after=10 "$t" "$@" >> "$outfile" 2>> "$work/stderr.txt"
    rc=$?
    rows=$(wc -l < "$outfile" 2>/dev/null || echo 0)
    log "$name: exit $rc after $(( $(date +%s) - t0 ))s; $outfile has $rows lines"
    echo "{\"phase\":\"$name\",\"cap_s\":$t,\"seconds\":$(( $(date +%s) - t0 )),\"exit\":$rc,\"timed_out\":$([ $rc -eq 124 ] && echo true || echo false),\"command\":\"$(basename "$1") ${*:2}\"}" >> "$phases"
    return 0
}

# 1. Host facts, handshake, probe.
{
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv,noheader
    lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Socket|L3)'
    ldd --version | head -1
    uname -r
} > "$work/host.txt" 2>&1
"$agent" version --json > "$work/hello.json"
"$agent" --cache-dir "$cache" probe --json > "$work/probe.json" 2>> "$work/stderr.txt" \
    || { echo "gpu-host-profile: probe failed" >&2; cat "$work/stderr.txt" >&2; exit 1; }
"$agent" --cache-dir "$cache" probe >&2

# 2. Operators of the bundled models, and the specs.
mkdir -p "$work/ops"
for m in "$models"/*.json; do
    "$hetero" model show --json "$m" > "$work/ops/$(basename "$m")"
done
limit=()
[ "$quick" = 1 ] && limit=(--limit 6)
python3 "$here/gpu-host-spec.py" --probe "$work/probe.json" --ops-dir "$work/ops" --out "$work/specs" "${limit[@]}" \
    || { echo "gpu-host-profile: writing the specs failed" >&2; exit 1; }

# Processor ids by role, from the probe.
ids() { python3 - "$work/probe.json" "$1" <<'PY'
import json, sys
probe = json.load(open(sys.argv[1]))
role = sys.argv[2]
for p in probe["processors"]:
    if p.get("simulated"):
        continue
    r = {"cuda": "cuda", "cpu": "cpu"}.get(p["api"])
    if p["api"] == "opencl":
        r = "opencl-gpu" if p["kind"] == "gpu" else "opencl-cpu"
    if r == role:
        print(p["id"])
PY
}
slug() { echo "$1" | sed 's/[^A-Za-z0-9]\+/-/g; s/^-//; s/-$//'; }
mb="$dest/microbench.jsonl"
: > "$mb"

# 3. Microbenchmarks, one processor at a time, the GPU first: copies of
# 4 KiB..256 MiB (20 timed each), then launch and sync latency (100 each).
copy_reps=20; lat_reps=100; max_copy=268435456
[ "$quick" = 1 ] && { copy_reps=5; lat_reps=20; max_copy=16777216; }
for role in cuda opencl-gpu cpu opencl-cpu; do
    for id in $(ids $role); do
        run_phase "microbench copies $id" 30 "$mb" "$agent" --cache-dir "$cache" --processors "$id" \
            microbench --bench copy_h2d,copy_d2h --reps $copy_reps --warmups 1 \
            --max-copy-bytes $max_copy --timeout-ms 30000
        # PoCL's launches take tens of ms each: fewer repetitions there.
        reps=$lat_reps
        [ "$role" = opencl-cpu ] && reps=$(( lat_reps < 30 ? lat_reps : 30 ))
        run_phase "microbench latency $id" 25 "$mb" "$agent" --cache-dir "$cache" --processors "$id" \
            microbench --bench submit_empty,submit_busy,sync_block,sync_poll --reps $reps \
            --warmups 1 --timeout-ms 30000
    done
done
real_ids=$(for r in cuda opencl-gpu cpu opencl-cpu; do ids $r; done | paste -sd, -)
run_phase "microbench bandwidth" 45 "$mb" "$agent" --cache-dir "$cache" --processors "$real_ids" \
    microbench --bench bandwidth_alone,bandwidth_concurrent --reps $([ "$quick" = 1 ] && echo 3 || echo 10) \
    --warmups 1 --timeout-ms 20000

# 4. The cpu backend against the gemm crate alone, 4096³ f32.
for id in $(ids cpu); do
    run_phase "bench-gemm $id" 60 "$dest/bench-gemm.jsonl" "$agent" --processors "$id" \
        bench-gemm --size $([ "$quick" = 1 ] && echo 1024 || echo 4096) --reps 7 --processor "$id"
done

# 5. Sweeps, the GPU first (each processor's own budget, cut at the deadline).
sweep() {  # role cap
    local role=$1 cap=$2 id s
    for id in $(ids "$role"); do
        s=$(slug "$id")
        [ -f "$work/specs/spec-$s.json" ] || continue
        run_phase "sweep $id" "$cap" "$dest/sweep-$s.jsonl" "$agent" --cache-dir "$cache" \
            --processors "$id" sweep --spec "$work/specs/spec-$s.json"
    done
}
sweep cuda 170
sweep opencl-gpu 100
sweep cpu 100
sweep opencl-cpu 90

# 6. device.json: what was measured, where, how.
python3 - "$work" "$dest" "$budget" "$start" <<'PY'
import json, pathlib, sys, time
work, dest, budget, start = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
files = {}
for f in sorted(dest.glob("*.jsonl")):
    kinds = {}
    for line in f.read_text().splitlines():
        try:
            t = json.loads(line).get("type", "other")
        except ValueError:
            t = "unparsable"
        kinds[t] = kinds.get(t, 0) + 1
    files[f.name] = kinds
doc = {
    "schema_version": 1,
    "what": "GPU host dataset: scripts/gpu-host-profile.sh",
    "started_unix": start,
    "seconds": int(time.time()) - start,
    "budget_s": budget,
    "host": (work / "host.txt").read_text().splitlines(),
    "agent": json.loads((work / "hello.json").read_text()),
    "probe": json.loads((work / "probe.json").read_text()),
    "plan": json.loads((work / "specs" / "plan.json").read_text()),
    "phases": [json.loads(l) for l in (work / "phases.jsonl").read_text().splitlines() if l.strip()],
    "files": files,
    "stderr_tail": (work / "stderr.txt").read_text().splitlines()[-40:],
}
(dest / "device.json").write_text(json.dumps(doc, indent=1) + "\n")
PY
log "done in $(( $(date +%s) - start ))s: $dest"
ls -la "$dest" >&2
