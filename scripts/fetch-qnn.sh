#!/usr/bin/env bash
# Fetches the QNN HTP library (x86-64 emulator build) for the qnn backend.
#
#   scripts/fetch-qnn.sh [CACHE_DIR]      # default: ~/.cache/hetero/qnn
#
# Downloads the PyPI wheel onnxruntime-qnn==2.7.0 (about 99 MB, manylinux
# x86_64) with pip, and extracts the four files the library needs into one
# folder outside the repository:
#   libQnnHtp.so  (from onnxruntime_qnn/)
#   libc++-*.so.1.0, libc++abi-*.so.1.0, libunwind-*.so.1.0
#                 (from onnxruntime_qnn.libs/)
# libQnnHtp.so's RPATH is $ORIGIN:$ORIGIN/../onnxruntime_qnn.libs, so keeping
# the companions beside it is enough. Idempotent: when the folder already has
# libQnnHtp.so and the three companions it downloads nothing.
# Prints the folder on stdout (last line), so CI can do:
#   export HETERO_QNN_LIB_DIR="$(scripts/fetch-qnn.sh | tail -n1)"
# Nothing it fetches is, or may be, committed to the repository.
set -euo pipefail

VERSION="2.7.0"
dir="${1:-${HOME}/.cache/hetero/qnn}"

have_all() {
    [ -f "$dir/libQnnHtp.so" ] &&
        compgen -G "$dir/libc++-*.so.1.0" >/dev/null &&
        compgen -G "$dir/libc++abi-*.so.1.0" >/dev/null &&
        compgen -G "$dir/libunwind-*.so.1.0" >/dev/null
}

if have_all; then
    echo "fetch-qnn: already present in $dir" >&2
    echo "$dir"
    exit 0
fi

case "$(uname -m)" in
    x86_64) ;;
    *) echo "fetch-qnn: the onnxruntime-qnn wheel is x86-64 only (this is $(uname -m));" \
            "on a phone use the libraries of your QAIRT SDK (docs/phone.md)" >&2
       exit 1 ;;
esac

mkdir -p "$dir"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "fetch-qnn: downloading onnxruntime-qnn==$VERSION with pip" >&2
python3 -m pip download --quiet --no-deps --only-binary=:all: \
    --dest "$tmp" "onnxruntime-qnn==$VERSION" >&2
wheel="$(ls "$tmp"/onnxruntime_qnn-*.whl | head -n1)"

# A wheel is a zip; python's zipfile avoids needing `unzip`.
python3 - "$wheel" "$tmp/x" <<'PY'
import fnmatch, sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
want = ["onnxruntime_qnn/libQnnHtp.so",
        "onnxruntime_qnn.libs/libc++-*.so.1.0",
        "onnxruntime_qnn.libs/libc++abi-*.so.1.0",
        "onnxruntime_qnn.libs/libunwind-*.so.1.0"]
with zipfile.ZipFile(wheel) as z:
    names = z.namelist()
    for pat in want:
        hits = [n for n in names if fnmatch.fnmatch(n, pat)]
        if not hits:
            sys.exit(f"fetch-qnn: {pat} is not in {wheel}")
        for n in hits:
            z.extract(n, out)
PY

# Move into place, library last, so an interrupted run is not taken as done.
for f in "$tmp"/x/onnxruntime_qnn.libs/*; do
    mv -f "$f" "$dir/"
done
mv -f "$tmp/x/onnxruntime_qnn/libQnnHtp.so" "$dir/libQnnHtp.so.tmp"
mv -f "$dir/libQnnHtp.so.tmp" "$dir/libQnnHtp.so"

have_all || { echo "fetch-qnn: files missing after extraction in $dir" >&2; exit 1; }
echo "fetch-qnn: extracted into $dir" >&2
echo "$dir"
