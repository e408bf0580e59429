#!/usr/bin/env bash
# The main job (README's first command): installs what is missing, builds meshtest and
# meshtrain, and runs the CPU matrix built into meshtest (test_matrix/cpu.yaml: SimpleFSDP's
# flavors, the resharding chain, the seed's three outcomes and a canary per check) on Gloo.
# Works from any directory. Arguments go to `meshtest run` (e.g. -k canary).
# Reports land in build/cpu/main-job/ (report.html, junit.xml, summary.json, per-case folders).
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/stage.sh
stage setup bash ci/setup-deps.sh
stage build bash ci/build.sh meshtest meshtrain
source ci/openblas.sh
stage main_job bash ci/main-job.sh "$@"
