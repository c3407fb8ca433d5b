#!/usr/bin/env bash
# Fails when the tracked tree talks about how it was built rather than about
# the product: work sessions, numbered calls, the build machine, the lending
# tool. Describe a machine as a user would ("a 16-core Xeon host with one H100").
set -euo pipefail
cd "$(dirname "$0")/.."
pattern='\bsession[s]? [0-9]|\bcall [0-9]|this VM|lent machine|device tool'
if git grep -nIiE "$pattern" -- ':!.ci/check-words.sh'; then
  echo "process words found in the tracked tree (see above)" >&2
  exit 1
fi
echo "no process words in the tracked tree"
