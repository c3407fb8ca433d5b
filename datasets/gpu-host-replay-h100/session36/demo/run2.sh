#!/bin/bash
# Session 36: `hetero demo` on the GPU host again, binaries of the commit in
# COMMIT (the demo's three timed passes, after the font fallback).
set -u
out=${1:?out}
mkdir -p "$out"
export PATH="$PWD/.carry/replay:$PATH"
cd /tmp && timeout 400 hetero demo 2>&1 | tee "$out/demo.txt"
echo "demo rc ${PIPESTATUS[0]} after $SECONDS s"
tar czf "$out/demo.tgz" -C /tmp hetero-demo
