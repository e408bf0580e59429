#!/usr/bin/env bash
# Installs what is missing, builds everything, and runs every test through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup-deps.sh
bash ci/build.sh
ctest --preset cpu -j 2 "$@"
# The harness and meshtrain under ASan + UBSan: no sanitizer report allowed (ci/sanitize.sh).
bash ci/sanitize.sh
# Every parser of outside data under libFuzzer for a minute each (ci/fuzz.sh).
bash ci/fuzz.sh 60
