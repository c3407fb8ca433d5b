#!/usr/bin/env bash
# Fails when the tracked tree describes its own making instead of the
# product. Machines are described as a user would ("a 16-core Xeon host with
# one H100"). Each word is written with a bracket so that this file does not
# match itself.
set -euo pipefail
cd "$(dirname "$0")/.."
pattern='\bsessio[n]s? [0-9]|\bcal[l] [0-9]|this V[M]|lent machin[e]|device too[l]'
if git grep -nIiE "$pattern"; then
  echo "words about how the tree was made (see above)" >&2
  exit 1
fi
echo "the tracked tree describes the product only"
