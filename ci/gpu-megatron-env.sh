# shellcheck shell=bash
# Sourced on the (offline) GPU machine to run the real Megatron-LM: its source is carried in
# .deps/megatron-lm (NVIDIA/Megatron-LM d98e8a6, `git archive` of megatron/ and the entry points;
# .deps/megatron-lm/MANIFEST.txt; tools/megatron/carry.sh makes it). The GPU image has torch,
# numpy, packaging, einops and tensorboard, which is all Megatron-Core needs with
# --transformer-impl local; what it lacks is the dataset index builder Megatron compiles at
# start-up (`make` with pybind11 and python3-config): built here with torch's pybind11 headers,
# and a python3-config shim on PATH so Megatron's Makefile finds it up to date.
MEGATRON_REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export MESHTEST_MEGATRON_LM=$MEGATRON_REPO_ROOT/.deps/megatron-lm
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
megatron_helpers() {
  local datasets=$MESHTEST_MEGATRON_LM/megatron/core/datasets shim=${TMPDIR:-/tmp}/meshtest-megatron-bin
  local suffix includes
  suffix=$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))') || return 1
  mkdir -p "$shim"
  printf '#!/bin/sh\n[ "$1" = --extension-suffix ] && echo %s\n' "$suffix" > "$shim/python3-config"
  chmod +x "$shim/python3-config"
  export PATH=$shim:$PATH
  [ -f "$datasets/helpers_cpp$suffix" ] && return 0
  includes=$(python3 -c 'import sysconfig, torch.utils.cpp_extension as e
print(" ".join("-I" + p for p in [sysconfig.get_paths()["include"]] + e.include_paths()))') || return 1
  # shellcheck disable=SC2086
  g++ -O3 -Wall -shared -std=c++17 -fPIC $includes "$datasets/helpers.cpp" -o "$datasets/helpers_cpp$suffix"
}
