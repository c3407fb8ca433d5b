#!/usr/bin/env bash
# Predictor accuracy on THIS machine: profile the cpu backend,
# PoCL (OpenCL on the CPU) and npu-sim (simulated) with
# `hetero profile --device local`, one processor at a time and at most
# --max-cases GEMM cases each; merge the parts; fit; write REPORT.md with
# the held-out accuracy per processor and the noise of the rows.
#
#   scripts/profile-here.sh [--out DIR] [--budget DUR] [--sim-budget DUR]
#                           [--max-cases N] [--max-cv X] [--bin DIR] [--quick]
#
#   --out DIR         where everything goes (default: datasets/here-<host>)
#   --budget DUR      time budget of each real processor's profile (default 45m)
#   --sim-budget DUR  time budget of npu-sim (default 15m)
#   --max-cases N     GEMM cases per processor at most (default 2000)
#   --timeout-ms MS   per-case timeout (default 300000: a 4096-token FFN GEMM
#                     takes tens of seconds on a small CPU)
#   --reps N          timed runs per case (default 11: the cpu backend here
#                     scatters by a cv of about 12 % per run even on an idle
#                     machine, and the median of N runs scatters by about
#                     1.25·cv/√N)
#   --warmups N       untimed runs per case (default 1)
#   --max-cv X        leave rows with cv above X out of the fit, counted in the
#                     report (default: keep all)
#   --processors L    comma list of roles to profile: cpu,pocl,sim (default all)
#   --bin DIR         folder with release builds of hetero and hetero-agent
#                     (default target/release; build with
#                     cargo build --release -p hetero -p hetero-agent)
#   --quick           a smoke test: 40 s and 40 cases a processor, no refinement
#
# Run it on a quiet machine: timings of a loaded machine are noisy, and the
# report shows the load (uptime) before and after each processor's run.
# An --out folder that already holds parts is resumed (hetero profile
# --resume), so a run cut short can be continued with the same command.
#
# Needs: bash, coreutils, python3 (standard library only).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
bin="$repo/target/release"
out=""
budget=45m
sim_budget=15m
max_cases=2000
max_cv=""
timeout_ms=300000
reps=11
warmups=1
roles="cpu,pocl,sim"
quick=0
while [ $# -gt 0 ]; do
    case "$1" in
        --out) out=$2; shift 2 ;;
        --budget) budget=$2; shift 2 ;;
        --sim-budget) sim_budget=$2; shift 2 ;;
        --max-cases) max_cases=$2; shift 2 ;;
        --max-cv) max_cv=$2; shift 2 ;;
        --timeout-ms) timeout_ms=$2; shift 2 ;;
        --reps) reps=$2; shift 2 ;;
        --warmups) warmups=$2; shift 2 ;;
        --processors) roles=$2; shift 2 ;;
        --bin) bin=$2; shift 2 ;;
        --quick) quick=1; shift ;;
        -h|--help) sed -n '2,34p' "$0"; exit 0 ;;
        *) echo "profile-here: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
hetero="$bin/hetero"
agent="$bin/hetero-agent"
for f in "$hetero" "$agent"; do
    [ -x "$f" ] || { echo "profile-here: $f is missing (cargo build --release -p hetero -p hetero-agent, or --bin DIR)" >&2; exit 2; }
done
command -v python3 >/dev/null || { echo "profile-here: python3 is needed" >&2; exit 2; }
[ -n "$out" ] || out="$repo/datasets/here-$(hostname -s | tr -c 'A-Za-z0-9\n' -)"
mkdir -p "$out/parts"
models=$(ls "$repo"/datasets/models/*.json | paste -sd, -)
if [ "$quick" = 1 ]; then
    budget=40s; sim_budget=40s; max_cases=40; reps=3; warmups=1
    extra=(--no-refine)
else
    extra=()
fi
log() { echo "[profile-here $(date -u +%H:%M:%S)] $*" >&2; }
load1=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo 0)
if python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) > 0.5 else 1)" "$load1"; then
    log "warning: load average is $load1; the cpu and PoCL timings will be noisy (see REPORT.md, cv)"
fi

# The machine, and what ran besides us.
{
    echo "--- run started $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "host: $(hostname)"
    echo "kernel: $(uname -sr)"
    echo "cpus: $(nproc)"
    lscpu 2>/dev/null | grep -E '^(Model name|Thread|Core|Socket|L3)' || true
    echo "agent: $("$agent" version --json)"
    echo "command: $0 --out $out --budget $budget --sim-budget $sim_budget --max-cases $max_cases --reps $reps --warmups $warmups${max_cv:+ --max-cv $max_cv}$([ "$quick" = 1 ] && echo " --quick")"
} >> "$out/host.txt"

# Processor ids by role, from the agent's probe.
"$agent" probe --json > "$out/probe.json"
ids() { python3 - "$out/probe.json" "$1" <<'PY'
import json, sys
role = sys.argv[2]
for p in json.load(open(sys.argv[1]))["processors"]:
    r = None
    if p.get("simulated"):
        r = "sim"
    elif p["api"] == "cpu":
        r = "cpu"
    elif p["api"] == "opencl" and p["kind"] == "cpu":
        r = "pocl"
    if r == role:
        print(p["id"])
PY
}

for role in ${roles//,/ }; do
    b=$budget
    [ "$role" = sim ] && b=$sim_budget
    found=$(ids "$role")
    [ -n "$found" ] || { log "$role: no such processor here (see $out/probe.json)"; continue; }
    for id in $found; do
        part="$out/parts/$(echo "$id" | tr -c 'A-Za-z0-9\n' -)"
        resume=()
        [ -e "$part/device.json" ] && resume=(--resume)
        echo "load before $id: $(uptime)" >> "$out/host.txt"
        log "$id: hetero profile, budget $b, at most $max_cases cases"
        "$hetero" profile --device local --agent "$agent" --processors "$id" \
            --models "$models" --budget "$b" --max-cases "$max_cases" \
            --timeout-ms "$timeout_ms" --reps "$reps" --warmups "$warmups" "${extra[@]}" "${resume[@]}" --out "$part" | tee "$part.log"
        echo "load after $id: $(uptime)" >> "$out/host.txt"
    done
done

parts=("$out"/parts/*/)
[ -e "${parts[0]}" ] || { echo "profile-here: nothing was profiled" >&2; exit 1; }
rm -rf "$out/all"
if [ ${#parts[@]} -eq 1 ]; then
    cp -r "${parts[0]}" "$out/all"
else
    "$hetero" dataset merge --out "$out/all" "${parts[@]}"
fi
cv=()
[ -n "$max_cv" ] && cv=(--max-cv "$max_cv")
"$hetero" fit "$out/all" --out "$out/predictor.ron" --report "$out/fit-report.json" "${cv[@]}" \
    | tee "$out/fit.txt"

# REPORT.md: the fit report as a table, with each processor's rows and noise.
python3 - "$out" <<'PY'
import json, pathlib, statistics, sys
out = pathlib.Path(sys.argv[1])
rep = json.load(open(out / "fit-report.json"))
host = (out / "host.txt").read_text()
rows = {}
for j in sorted(out.glob("parts/*/journal.jsonl")):
    for line in j.read_text().splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if r.get("type") == "measurement":
            rows.setdefault(r["processor"], []).append(r)
def q(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))] if v else float("nan")
lines = ["# Predictor accuracy on this machine", "", "```", host.strip(), "```", "",
         "Held-out (5-fold) accuracy of the model `hetero fit` chose per processor.", "",
         "| processor | timing | dtype | model | samples | left out (cv) | within ±10 % | within ±20 % | MAPE % | rows ok / all | cv median | cv p90 |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|"]
for e in rep["entries"]:
    rs = rows.get(e["processor"], [])
    ok = [r for r in rs if r.get("status") == "ok" and r.get("verified")]
    cvs = [r["cv"] for r in ok if r.get("cv") is not None]
    lines.append("| {} | {} | {} | {} | {} | {} | {:.1f} % | {:.1f} % | {:.2f} | {} / {} | {:.3f} | {:.3f} |".format(
        e["processor"], e["timing"], e["dtype"], e["model"], e["samples"], e.get("excluded_noisy", 0),
        100 * e["within_10pct"], 100 * e["within_20pct"], e["mape"], len(ok), len(rs),
        statistics.median(cvs) if cvs else float("nan"), q(cvs, 0.9)))
lines += ["", "Worst held-out predictions:", ""]
for e in rep["entries"]:
    for w in e["worst"][:3]:
        lines.append("- {} {}: {} {} measured {:.1f} µs, predicted {:.1f} µs ({:+.1f} %)".format(
            e["processor"], e["dtype"], w["shape"], w["order"], w["measured_us"], w["predicted_us"], w["error_pct"]))
if rep.get("max_cv") is not None:
    lines += ["", "Rows with cv above {} were left out of the fit and the score.".format(rep["max_cv"])]
if rep.get("skipped"):
    lines += ["", "Too few rows to fit: " + ", ".join(rep["skipped"])]
(out / "REPORT.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
PY
log "done: $out/REPORT.md"
