#!/usr/bin/env bash
# Validates every GitHub Actions workflow (.github/workflows/*.yml, *.yaml) against the workflow
# schema, and the repository's own action (action.yml at the root) against the action schema, with
# action-validator (npm @action-validator/cli, installed into .deps/npm by ci/setup-deps.sh; a file
# named action.yml or action.yaml is read as an action, any other as a workflow).
# Exits 1 if any file has an error, 0 if all are valid.
# If the validator is not installed, prints a notice and exits 0 (skipped).
# Usage: ci/validate-workflows.sh [FILE.yml...]   (no argument: every workflow and action.yml)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
validator="$root/.deps/npm/node_modules/.bin/action-validator"

if [ ! -x "$validator" ]; then
  echo "validate-workflows: NOTICE: $validator is not installed (run ci/setup-deps.sh); skipped"
  exit 0
fi

files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  shopt -s nullglob
  files=("$root"/.github/workflows/*.yml "$root"/.github/workflows/*.yaml)
  shopt -u nullglob
  if [ ${#files[@]} -eq 0 ]; then
    echo "validate-workflows: no workflow files in $root/.github/workflows" >&2
    exit 1
  fi
  if [ ! -f "$root/action.yml" ]; then
    echo "validate-workflows: no $root/action.yml (the meshtest action)" >&2
    exit 1
  fi
  files+=("$root/action.yml")
fi

failed=0
for f in "${files[@]}"; do
  # action-validator prints the errors as JSON on stderr and exits 1; FORCE_COLOR=0 keeps chalk quiet.
  if FORCE_COLOR=0 "$validator" "$f"; then
    echo "validate-workflows: ok     $f"
  else
    echo "validate-workflows: FAILED $f" >&2
    failed=1
  fi
done
exit "$failed"
