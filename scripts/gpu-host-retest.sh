#!/usr/bin/env bash
# Test-retest on the GPU host (issue 7): profile cuda:0 several times in one
# call, so that `hetero fit A --test B` and `hetero dataset compare A B` can
# say how far two runs of the same cases agree, and how close a predictor
# fitted on one run comes to another.
#
#   scripts/gpu-host-replay.sh --prepare      # here: build, fill .carry/replay/
#   scripts/gpu-host-retest.sh OUT_DIR        # there: the profiles, one archive
#
# RETEST_RUNS (default "7:100s 7:100s 21:100s 21:100s") lists the profiles,
# each REPS:BUDGET[:FLAGS] (`hetero profile --reps REPS --budget BUDGET`,
# plus FLAGS with commas for spaces, e.g. 7:100s:--queries=300:1 for a
# held-out set), run one after another for
# datasets/models/qwen2.5-1.5b.json; CUDA_COLD set adds
# --cold-cache to every one, RETEST_FLAGS (e.g. --ordinary-timer) adds its
# words to every one. OUT_DIR gets retest.tgz (the dataset folders
# run1, run2, ..., and their logs) and log.txt.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
cd "$repo"
out=${1:?usage: scripts/gpu-host-retest.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
bin=${REPLAY_BIN:-$repo/.carry/replay}
model=datasets/models/qwen2.5-1.5b.json
work=$(mktemp -d /tmp/retest.XXXXXX)
log() { echo "[$SECONDS s] $*" | tee -a "$out/log.txt" >&2; }

{ uptime; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1
  nproc; cat "$bin/COMMIT" 2>/dev/null; } > "$work/machine.txt"
cat "$work/machine.txt" >&2
i=0
for run in ${RETEST_RUNS:-7:100s 7:100s 21:100s 21:100s}; do
    i=$((i + 1))
    reps=${run%%:*}
    rest=${run#*:}
    budget=${rest%%:*}
    flags=
    [[ $rest == *:* ]] && flags=${rest#*:} && flags=${flags//,/ }
    log "run$i: cuda:0, --reps $reps, --budget $budget${CUDA_COLD:+, --cold-cache} ${RETEST_FLAGS:-} $flags"
    # shellcheck disable=SC2086 # the flags are words
    "$bin/hetero" profile --device local --agent "$bin/hetero-agent" --processors cuda:0 \
        --models "$model" --budget "$budget" --reps "$reps" --out "$work/run$i" \
        ${CUDA_COLD:+--cold-cache} ${RETEST_FLAGS:-} $flags > "$work/run$i.log" 2>&1 \
        || log "run$i failed: $(tail -3 "$work/run$i.log")"
    "$bin/hetero" dataset show "$work/run$i" 2>&1 | tail -n 3 | tee -a "$out/log.txt" >&2
done
tar -C "$work" -czf "$out/retest.tgz" . && log "wrote retest.tgz"
