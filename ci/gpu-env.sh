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
