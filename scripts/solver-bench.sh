#!/usr/bin/env bash
# Side-by-side solver benchmark: two `hetero` binaries solve the
# same cases alternately, so both see the same machine load; medians.
#
#   scripts/solver-bench.sh BASE_BIN NEW_BIN PREDICTOR [RUNS] [OUTDIR]
#
# BASE_BIN and NEW_BIN are release builds of `hetero` (say, of `main` and of
# a branch); PREDICTOR is a predictor file (`hetero fit` on
# datasets/gpu-host-h200, see docs/benchmarks.md). Every run writes its plan;
# the two binaries' plans must be byte-identical (the script fails if not):
# NEW_FLAGS=--exhaustive makes a build that solves lengths in blocks cost
# every length, as builds before it did. PROCESSORS=a,b,c narrows both.
# Prints one line per run and a summary table (median, min, max of the
# solve time the command reports and of the whole command's wall time), with
# `uptime` before and after.
set -euo pipefail

if [[ $# -lt 3 ]]; then
    sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
base=$1
new=$2
pred=$3
runs=${4:-5}
out=${5:-$(mktemp -d /tmp/solver-bench.XXXXXX)}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"

for f in "$base" "$new" "$pred"; do
    [[ -e $f ]] || { echo "no such file: $f" >&2; exit 2; }
done

# name | model | flags
cases=(
    "llama-3.1-8b|$root/datasets/models/llama-3.1-8b.json|--lengths 1..4096 --decode-lengths 1..4"
    "llama-70b-class|$root/tests/fixtures/configs/llama-70b-class.json|--lengths 1..8192 --decode-lengths 1"
    "llama-70b-class-32k|$root/tests/fixtures/configs/llama-70b-class.json|--lengths 1..32768 --decode-lengths 1..8"
)
common=()
[[ -n ${PROCESSORS:-} ]] && common=(--processors "$PROCESSORS")
read -r -a new_flags <<<"${NEW_FLAGS:-}"

echo "uptime before: $(uptime)"
echo "base: $base"
echo "new:  $new"
echo "predictor: $pred ($(sha256sum "$pred" | cut -c1-16))"
results=$out/results.tsv
: >"$results"
for c in "${cases[@]}"; do
    IFS='|' read -r name model flags <<<"$c"
    for i in $(seq "$runs"); do
        for which in base new; do
            bin=$base
            extra=("${common[@]}")
            if [[ $which == new ]]; then
                bin=$new
                extra+=("${new_flags[@]}")
            fi
            plan=$out/$name-$which.ron
            # shellcheck disable=SC2086
            /usr/bin/time -f '%e %U' -o "$out/time" \
                "$bin" solve --predictor "$pred" --model "$model" --out "$plan" $flags "${extra[@]}" \
                >"$out/log"
            solve_s=$(sed -n 's/.*solved in \([0-9.]*\) s.*/\1/p' "$out/log")
            read -r wall user <"$out/time"
            printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$which" "$i" "$solve_s" "$wall" "$user" |
                tee -a "$results"
        done
    done
    if cmp -s "$out/$name-base.ron" "$out/$name-new.ron"; then
        echo "$name: plans identical ($(wc -c <"$out/$name-new.ron") bytes)"
    else
        echo "$name: PLANS DIFFER ($out/$name-base.ron vs $out/$name-new.ron)" >&2
        exit 1
    fi
done
echo "uptime after: $(uptime)"

python3 - "$results" <<'EOF'
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]).read().splitlines()]
by = {}
for name, which, _, solve, wall, user in rows:
    by.setdefault((name, which), []).append((float(solve), float(wall), float(user)))
print("| model | binary | runs | solve median (min–max) | wall median | user CPU median |")
print("|---|---|---|---|---|---|")
for (name, which), v in by.items():
    s = [x[0] for x in v]
    print(f"| {name} | {which} | {len(v)} | {statistics.median(s):.3f} s ({min(s):.3f}–{max(s):.3f}) "
          f"| {statistics.median(x[1] for x in v):.2f} s | {statistics.median(x[2] for x in v):.2f} s |")
for name in dict.fromkeys(n for n, _ in by):
    b = statistics.median(x[0] for x in by[(name, "base")])
    n = statistics.median(x[0] for x in by[(name, "new")])
    print(f"{name}: solve {b / n:.1f}x faster")
EOF
