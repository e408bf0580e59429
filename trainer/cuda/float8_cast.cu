#include "float8_cast.h"

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace meshtrain::kernels {

namespace {

__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(float v) { return v; }

constexpr int kAmaxThreads = 256;

// |x|'s maximum: a grid-stride loop, a warp and block reduction, one atomic per block. For
// non-negative floats the bit patterns order like the values (NaN's above +inf), so an
// integer atomicMax on the bits keeps the maximum and lets a NaN win.
template <typename T>
__global__ void abs_max_kernel(const T* x, int64_t n, float* amax) {
  float m = 0.0f;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = fabsf(to_float(x[i]));
    m = (v > m || v != v) ? v : m;
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, m, offset);
    m = (other > m || other != other) ? other : m;
  }
  __shared__ float warp_max[kAmaxThreads / 32];
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kAmaxThreads / 32; ++w) m = (warp_max[w] > m || warp_max[w] != warp_max[w]) ? warp_max[w] : m;
    atomicMax(reinterpret_cast<int*>(amax), __float_as_int(m));
  }
}

constexpr int kTile = 32, kRowsPerPass = 8;

__device__ __forceinline__ uint8_t to_float8(float v, Float8 format) {
  // Round to nearest even, saturating to the largest finite value (NaN stays NaN): the
  // clamp-then-cast of the reference.
  return format == Float8::kE4m3 ? __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3)
                                 : __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E5M2);
}

// One 32 x 32 tile per block of 32 x 8 threads: read coalesced, write the tile row-major and,
// through shared memory, its transpose.
template <typename T>
__global__ void scale_kernel(const T* x, int64_t rows, int64_t cols, const float* amax, float largest, Float8 format,
                             uint8_t* out, uint8_t* out_t, float* inverse_scale) {
  __shared__ uint8_t tile[kTile][kTile + 4];
  const float scale = largest / fmaxf(*amax, 1e-12f);
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0) *inverse_scale = 1.0f / scale;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kTile, col0 = static_cast<int64_t>(blockIdx.x) * kTile;
  for (int r = threadIdx.y; r < kTile; r += kRowsPerPass) {
    const int64_t row = row0 + r, col = col0 + threadIdx.x;
    if (row < rows && col < cols) {
      const uint8_t q = to_float8(to_float(x[row * cols + col]) * scale, format);
      out[row * cols + col] = q;
      tile[r][threadIdx.x] = q;
    }
  }
  if (out_t == nullptr) return;
  __syncthreads();
  for (int c = threadIdx.y; c < kTile; c += kRowsPerPass) {
    const int64_t col = col0 + c, row = row0 + threadIdx.x;
    if (row < rows && col < cols) out_t[col * rows + row] = tile[threadIdx.x][c];
  }
}

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

}  // namespace

void abs_max(const void* x, Source type, int64_t n, float* amax, cudaStream_t stream) {
  check(cudaMemsetAsync(amax, 0, sizeof(float), stream), "float8 amax");
  if (n == 0) return;
  const int64_t blocks = std::min<int64_t>((n + kAmaxThreads - 1) / kAmaxThreads, 132 * 8);
  if (type == Source::kBFloat16)
    abs_max_kernel<<<blocks, kAmaxThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(x), n, amax);
  else
    abs_max_kernel<<<blocks, kAmaxThreads, 0, stream>>>(static_cast<const float*>(x), n, amax);
  check(cudaGetLastError(), "float8 amax kernel");
}

void scale_to_float8(const void* x, Source type, int64_t rows, int64_t cols, const float* amax, Float8 format,
                     uint8_t* out, uint8_t* out_t, float* inverse_scale, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  const float largest = format == Float8::kE4m3 ? 448.0f : 57344.0f;
  if ((rows + kTile - 1) / kTile > 65535) throw std::invalid_argument("float8 cast: more than 2^21 rows");
  const dim3 grid(static_cast<unsigned>((cols + kTile - 1) / kTile), static_cast<unsigned>((rows + kTile - 1) / kTile));
  const dim3 block(kTile, kRowsPerPass);
  if (type == Source::kBFloat16)
    scale_kernel<<<grid, block, 0, stream>>>(static_cast<const __nv_bfloat16*>(x), rows, cols, amax, largest, format,
                                             out, out_t, inverse_scale);
  else
    scale_kernel<<<grid, block, 0, stream>>>(static_cast<const float*>(x), rows, cols, amax, largest, format, out,
                                             out_t, inverse_scale);
  check(cudaGetLastError(), "float8 cast kernel");
}

}  // namespace meshtrain::kernels
