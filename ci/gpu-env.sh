# Sourced by the ci/gpu-*.sh scripts: the environment and build of the CUDA preset on a
# GPU machine with the PyTorch 2.x wheel (its LibTorch and NCCL).
# NVLink multicast stays off on shared hosts (see docs/building.md).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TORCH_CMAKE_PREFIX=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
NCCL_ROOT=$(python3 -c 'import glob,os,site; h=[p for d in site.getsitepackages() for p in glob.glob(os.path.join(d,"nvidia","**","include","nccl.h"),recursive=True)]; print(os.path.dirname(os.path.dirname(h[0])) if h else "")')
export TORCH_CMAKE_PREFIX NCCL_ROOT

# gpu_build [TARGET...]: configure once, then build the targets (all when none given).
gpu_build() {
  [ -f build/cuda/build.ninja ] || cmake --preset cuda >/dev/null
  local targets=()
  for t in "$@"; do targets+=(--target "$t"); done
  cmake --build --preset cuda -j "$(nproc)" "${targets[@]}" | grep -E "error|FAILED" || true
  for t in "$@"; do [ ! -e "build/cuda/$t" ] || [ -x "build/cuda/$t" ]; done
}

# shared_gpu N: the first visible GPU listed N times, for CUDA_VISIBLE_DEVICES, so that meshtest
# (--ngpu N) runs N cases on it at once, each case's ranks seeing that one GPU. For examples whose
# models take megabytes and whose time goes to Python start-up, as the Megatron and HF ones.
shared_gpu() {
  local gpu=${CUDA_VISIBLE_DEVICES:-0} list i
  gpu=${gpu%%,*} list=${gpu%%,*}
  for ((i = 1; i < $1; i++)); do list+=",$gpu"; done
  echo "$list"
}

# archive_run RUN_DIR TGZ: every rank log, summary and report of a run in one archive (the device
# tool drops folders as deep as a case's phase), and the first Python traceback of a failed case.
archive_run() {
  (cd "$1" && find . \( -name 'rank*.log' -o -name summary.json -o -name summary.md -o -name junit.xml \) \
    -print0 | tar czf "$2" --null -T -) 2>/dev/null
  local log
  log=$(grep -l -m1 Traceback "$1"/*/*/*/rank*.log 2>/dev/null | head -n 1)
  [ -n "$log" ] && { echo "--- first traceback: $log"; grep -m1 -A40 Traceback "$log" | grep -v '^\[rank[0-9]*\]:  ' | head -n 40; }
  return 0
}
