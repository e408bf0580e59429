#!/bin/sh
# Runs its arguments with the first python that has torch: $MESHTEST_PYTHON if set, else python3,
# else /usr/bin/python3 (Debian's python3-torch lives there when a pyenv shadows it). The probe
# finds torch without importing it: every rank of a case starts here, and an import to choose
# would cost each rank a second import of torch (1.6 CPU-seconds on Debian's).
for py in ${MESHTEST_PYTHON:+"$MESHTEST_PYTHON"} python3 /usr/bin/python3; do
  if command -v "$py" >/dev/null 2>&1 &&
     "$py" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("torch") is None)' >/dev/null 2>&1; then
    exec "$py" "$@"
  fi
done
echo "python.sh: no python that can import torch (tried \$MESHTEST_PYTHON, python3, /usr/bin/python3)" >&2
exit 3
