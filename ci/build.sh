#!/usr/bin/env bash
# Configures and builds the CPU preset (Debian 12 LibTorch + Gloo) with two jobs.
# Usage: ci/build.sh [TARGET...]   (no target: everything, tests included)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f build/cpu/build.ninja ]; then
  cmake --preset cpu
fi
if [ $# -eq 0 ]; then
  cmake --build --preset cpu
else
  cmake --build --preset cpu --target "$@"
fi
