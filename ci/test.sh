#!/usr/bin/env bash
# Installs what is missing, builds everything, and runs every test through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup-deps.sh
bash ci/build.sh
# The Slurm tests stop their cluster after each test; this stops it even if a test process died.
trap 'bash ci/slurm-local.sh stop "/tmp/meshtest-slurm-test-${MESHTEST_SLURM_PORT:-6817}" >/dev/null 2>&1 || true' EXIT
ctest --preset cpu -j 2 "$@"
# The harness and meshtrain under ASan + UBSan: no sanitizer report allowed (ci/sanitize.sh).
bash ci/sanitize.sh
# Every parser of outside data under libFuzzer for a minute each (ci/fuzz.sh).
bash ci/fuzz.sh 60
