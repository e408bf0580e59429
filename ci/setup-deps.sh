#!/usr/bin/env bash
# Installs every Debian 12 package that meshtest's CPU build and tests need, or with `harness`
# only what the harness-only build and its .deb need (the `harness` preset, docs/install.md).
# Idempotent: installs only what is missing, runs `apt-get update` at most once.
# Usage: ci/setup-deps.sh [harness]
set -euo pipefail

# meshtest alone: compiler, CMake, its libraries; dpkg-dev makes the .deb's Depends (dpkg-shlibdeps).
harness_packages=(
  build-essential cmake ninja-build pkg-config git ccache dpkg-dev
  libyaml-cpp-dev nlohmann-json3-dev libboost-dev libboost-filesystem-dev libsqlite3-dev
  libcli11-dev libpugixml-dev
)
packages=(
  "${harness_packages[@]}"
  lintian  # checks the .deb (tests/install/harness_install_test.sh)
  libtorch-dev libgloo-dev libopenblas0-openmp
  libgtest-dev libgmock-dev
  libxml2-utils python3 python3-junitparser
  python3-torch clang-14 libfuzzer-14-dev
  clang-format-14  # the house style, checked by CTest `format` (tools/format.sh)
  pybind11-dev  # meshtest_sim, built on first use against python3-torch (sim/, docs/simulation.md)
  chromium fonts-dejavu-core  # report.html opened headless (tests/report/browser_check.sh)
  slurmctld slurmd slurm-client  # --launcher slurm against a local cluster (ci/slurm-local.sh)
)
case ${1:-} in
  harness) packages=("${harness_packages[@]}") ;;
  "") ;;
  *) echo "usage: ci/setup-deps.sh [harness]" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

[ "${1:-}" = harness ] || command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)

# junit2json (npm) parses meshtest's JUnit in the tests, as GitHub's JUnit actions do.
install_junit2json() {
  local dir
  dir="$(cd "$(dirname "$0")/.." && pwd)/.deps/npm"
  if [ ! -x "$dir/node_modules/.bin/junit2json" ]; then
    echo "setup-deps: npm install junit2json@4.0.0 into .deps/npm"
    npm install --silent --no-audit --no-fund --prefix "$dir" junit2json@4.0.0 >/dev/null ||
      echo "setup-deps: NOTICE: npm install failed (registry unreachable?); the tests skip their junit2json step"
  fi
  # action-validator checks .github/workflows/*.yml and action.yml (ci/validate-workflows.sh, CTest workflows_validate).
  if [ ! -x "$dir/node_modules/.bin/action-validator" ]; then
    echo "setup-deps: npm install @action-validator/cli@0.6.0 into .deps/npm"
    npm install --silent --no-audit --no-fund --prefix "$dir" \
      @action-validator/cli@0.6.0 @action-validator/core@0.6.0 >/dev/null ||
      echo "setup-deps: NOTICE: npm install failed (registry unreachable?); workflows_validate skips"
  fi
}

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup-deps: all ${#packages[@]} packages present"
  [ "${1:-}" = harness ] || install_junit2json
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "setup-deps: missing packages (${missing[*]}); run as root" >&2
  exit 1
fi

echo "setup-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
[ "${1:-}" = harness ] || install_junit2json
echo "setup-deps: done"
