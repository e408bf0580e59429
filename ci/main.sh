#!/usr/bin/env bash
# The main job: installs what is missing, builds meshtest and meshtrain, and runs the
# CPU matrix built into meshtest (test_matrix/cpu.yaml: SimpleFSDP's flavors, the
# resharding chain, the seed's three outcomes and a canary per check) on Gloo.
# Reports land in build/cpu/main-job/ (junit.xml, summary.json, per-case folders).
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup-deps.sh
bash ci/build.sh meshtest meshtrain
exec build/cpu/meshtest run --out build/cpu/main-job "$@"
