#!/usr/bin/env bash
# README's quick start is what CI runs: the commands of the first ```sh block under
# "## Quick start" (comments dropped) must be exactly the `bash ci/...` lines of .ci/run, in
# order, and there must be two of them. CTest: readme_quickstart.
set -euo pipefail
cd "$(dirname "$0")/../.."
readme=$(awk '/^## Quick start/{q=1} q&&/^```sh/{b=1;next} b&&/^```/{exit} b' README.md |
         sed 's/#.*//; s/[[:space:]]*$//' | grep -v '^$' || true)
ci=$(grep -E '^bash ci/' .ci/run | sed 's/#.*//; s/|| *status=1//; s/[[:space:]]*$//' || true)
echo "README quick start:"; echo "$readme" | sed 's/^/  /'
echo ".ci/run:"; echo "$ci" | sed 's/^/  /'
if [ "$(echo "$readme" | grep -c .)" -ne 2 ]; then
  echo "readme_quickstart: README's quick start must have exactly two commands"; exit 1
fi
if [ "$readme" != "$ci" ]; then
  echo "readme_quickstart: README's quick start and .ci/run disagree"; exit 1
fi
echo "readme_quickstart: .ci/run runs README's two commands as written"
