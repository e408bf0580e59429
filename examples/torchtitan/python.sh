#!/usr/bin/env bash
# The Python that runs torchtitan, as meshtest's torchtitan adapter picks it ({torchtitan_python}):
# $MESHTEST_TORCHTITAN_PYTHON, else python3. The matrix's requirement probes use it too.
exec "${MESHTEST_TORCHTITAN_PYTHON:-python3}" "$@"
