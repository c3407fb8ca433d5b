#!/bin/bash
# Session 37: the OpenCL eviction kernel on NVIDIA's OpenCL (opencl:1:0, the
# H100). Binaries in COMMIT (5f3a7e6); agent-old is 84316d4's agent, whose
# --cold-cache evicted only the host's caches on an OpenCL device. First the
# agent's OpenCL integration tests (release build, every device), then
# three rounds of sweeps of opencl:1:0 (f32, aw, 7 runs): warm, cold with
# the old agent, cold with the new. Weights of 9.4-55 MB: the H100's L2
# (50 MB) holds them warm.
set -u
out=${1:?out}
mkdir -p "$out"
tar xJf .carry/ox/extra.txz -C /tmp
new=/tmp/extra/agent-new
old=/tmp/extra/agent-old
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/machine.txt"
HETERO_REQUIRE_OPENCL=1 timeout 240 /tmp/extra/opencl-tests --test-threads 1 > "$out/opencl-tests.txt" 2>&1
echo "opencl tests rc $?"; grep -E "^test result|FAILED|panicked" "$out/opencl-tests.txt"
for r in 1 2 3; do
    for v in warm old new; do
        case $v in warm) a=$new; f=;; old) a=$old; f=--cold-cache;; new) a=$new; f=--cold-cache;; esac
        timeout 60 $a --processors opencl:1:0 sweep --processor opencl:1:0 \
            --shapes 1x1536x1536,16x1536x1536,16x1536x8960,256x1536x1536 --dtype f32 --order aw --reps 7 $f 2>>"$out/sweep.err" |
            python3 -c 'import json,sys
for l in sys.stdin:
    d=json.loads(l)
    if d.get("type")=="measurement": print(sys.argv[1], sys.argv[2], "%dx%dx%d"%(d["m"],d["k"],d["n"]), d["status"], "%.1f"%d.get("median_us",0), "%.3f"%d.get("cv",0), flush=True)' $r $v | tee -a "$out/sweeps.txt"
    done
done
