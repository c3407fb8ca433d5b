#!/bin/bash
# Session 37: `hetero demo` on the GPU host as a new user runs it (defaults:
# every processor whose times are real, 150 s cold profile, prefill 64,
# decode 8 tokens), binaries in COMMIT (the final code: the pool eviction and the OpenCL eviction kernel).
set -u
out=${1:?out}
mkdir -p "$out"
bin=.carry/replay
export PATH="$PWD/$bin:$PATH"
cd /tmp && timeout 540 hetero demo 2>&1 | tee "$out/demo.txt"
echo "demo rc ${PIPESTATUS[0]} after $SECONDS s"
tar czf "$out/demo.tgz" -C /tmp hetero-demo
