#!/usr/bin/env bash
# The main job: installs what is missing, builds meshtrain, and trains the tiny
# Llama on one CPU rank, printing its loss table. Outputs land in build/cpu/main-job/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup-deps.sh
bash ci/build.sh meshtrain
exec build/cpu/meshtrain train --model tiny --steps 100 --seed 42 \
  --dump-folder build/cpu/main-job --threads "$(nproc)" "$@"
