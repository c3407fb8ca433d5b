#!/bin/bash
# Session 24, call 3: is the per-process spread of decode (the host's CUDA
# path runs at one speed per process) tied to the address layout (ASLR
# off: setarch -R) or to huge pages (GLIBC_TUNABLES=glibc.malloc.hugetlb=1)?
# The cuda decode plan of call 2, 8 processes per variant, interleaved.
set -u
b=$(cd "$(dirname "$0")" && pwd)
out=${1:?out}
mkdir -p "$out/var"
model=datasets/models/qwen2.5-1.5b.json
{ cat /sys/kernel/mm/transparent_hugepage/enabled /sys/kernel/mm/transparent_hugepage/defrag; uname -r; cat /proc/sys/kernel/randomize_va_space; } > "$out/thp.txt" 2>&1
cat "$out/thp.txt"
plan="$b/plan-cuda.ron"
run() { # variant round
  local v=$1 r=$2 pre=()
  case $v in
    norand) pre=(setarch x86_64 -R) ;;
    hugetlb) export GLIBC_TUNABLES=glibc.malloc.hugetlb=1 ;;
  esac
  timeout 40 "${pre[@]}" "$b/hetero" run "$plan" --model $model --phase decode --len 1 --tokens 8 --share-weights --sync poll --repeat 7 --json --out "$out/var/$v-$r.json" > /dev/null 2> "$out/var/$v-$r.err"
  local rc=$?
  unset GLIBC_TUNABLES
  [ $rc = 0 ] || { echo "$v $r rc $rc: $(tail -2 "$out/var/$v-$r.err")"; return; }
  python3 -c "
import json,sys; r=json.load(open(sys.argv[1]))
print(sys.argv[2], 'ratio %.3f' % r['ratio'], 'measured %.0f' % r['measured_us'], 'submit %.1f' % r['dispatch']['submit_median_us'], 'probe %.1f' % r['host']['probe_us'])" "$out/var/$v-$r.json" "$v $r"
}
for r in 1 2 3 4 5 6 7 8; do
  for v in plain norand hugetlb; do run $v $r; done
done
(cd "$out" && tar czf var.tgz var && rm -rf var)
echo "done $SECONDS s"
