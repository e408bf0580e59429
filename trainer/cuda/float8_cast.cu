#include "float8_cast.h"

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

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
__device__ __forceinline__ float max_nan(float a, float b) { return (b > a || b != b) ? b : a; }

// Eight consecutive elements as floats, in one 16-byte load (bf16) or two (float32).
__device__ __forceinline__ void load8(const __nv_bfloat16* p, float (&v)[8]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const auto* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    v[2 * i] = f.x, v[2 * i + 1] = f.y;
  }
}
__device__ __forceinline__ void load8(const float* p, float (&v)[8]) {
  const float4 a = *reinterpret_cast<const float4*>(p), b = *reinterpret_cast<const float4*>(p + 4);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

template <typename T>
__global__ void abs_max_kernel(const T* x, int64_t n, bool aligned, float* amax) {
  float m = 0.0f;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t vectors = aligned ? n / 8 : 0;  // the bulk, 8 at a time
  for (int64_t i = first; i < vectors; i += stride) {
    float v[8];
    load8(x + 8 * i, v);
    for (int k = 0; k < 8; ++k) m = max_nan(m, fabsf(v[k]));
  }
  for (int64_t i = 8 * vectors + first; i < n; i += stride) m = max_nan(m, fabsf(to_float(x[i])));
  for (int offset = 16; offset > 0; offset /= 2) {
    m = max_nan(m, __shfl_xor_sync(0xffffffffu, m, offset));
  }
  __shared__ float warp_max[kAmaxThreads / 32];
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kAmaxThreads / 32; ++w) m = max_nan(m, warp_max[w]);
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

// The same, 64 x 64 tiles, for rows and cols that are multiples of 8: each of 256 threads
// reads 8 consecutive elements in one load and writes their 8 bytes in one store, and the
// transpose goes out 8 bytes (8 rows of one column) per store.
constexpr int kWide = 64;
template <typename T>
__global__ void scale_kernel_wide(const T* x, int64_t rows, int64_t cols, const float* amax, float largest,
                                  Float8 format, uint8_t* out, uint8_t* out_t, float* inverse_scale) {
  __shared__ uint8_t tile[kWide][kWide + 8];
  const float scale = largest / fmaxf(*amax, 1e-12f);
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *inverse_scale = 1.0f / scale;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kWide, col0 = static_cast<int64_t>(blockIdx.x) * kWide;
  const int chunk = threadIdx.x % 8, first_row = threadIdx.x / 8;  // 8 chunks of 8 columns, 32 rows a pass
  for (int r = first_row; r < kWide; r += 32) {
    const int64_t row = row0 + r, col = col0 + 8 * chunk;
    if (row >= rows || col >= cols) continue;
    float v[8];
    load8(x + row * cols + col, v);
    uint8_t q[8];
    for (int k = 0; k < 8; ++k) q[k] = to_float8(v[k] * scale, format);
    *reinterpret_cast<uint2*>(out + row * cols + col) = *reinterpret_cast<const uint2*>(q);
    *reinterpret_cast<uint2*>(&tile[r][8 * chunk]) = *reinterpret_cast<const uint2*>(q);
  }
  if (out_t == nullptr) return;
  __syncthreads();
  // out_t [cols, rows]: column c of the tile, rows 8 * part .. 8 * part + 7, as one store.
  for (int item = threadIdx.x; item < kWide * 8; item += blockDim.x) {
    const int c = item / 8, part = item % 8;
    const int64_t col = col0 + c, row = row0 + 8 * part;
    if (row >= rows || col >= cols) continue;
    uint8_t q[8];
    for (int k = 0; k < 8; ++k) q[k] = tile[8 * part + k][c];
    *reinterpret_cast<uint2*>(out_t + col * rows + row) = *reinterpret_cast<const uint2*>(q);
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
  const bool aligned = reinterpret_cast<uintptr_t>(x) % 16 == 0;
  if (type == Source::kBFloat16)
    abs_max_kernel<<<blocks, kAmaxThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(x), n, aligned, amax);
  else
    abs_max_kernel<<<blocks, kAmaxThreads, 0, stream>>>(static_cast<const float*>(x), n, aligned, amax);
  check(cudaGetLastError(), "float8 amax kernel");
}

void scale_to_float8(const void* x, Source type, int64_t rows, int64_t cols, const float* amax, Float8 format,
                     uint8_t* out, uint8_t* out_t, float* inverse_scale, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  const float largest = format == Float8::kE4m3 ? 448.0f : 57344.0f;
  if (rows % 8 == 0 && cols % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0) {
    if ((rows + kWide - 1) / kWide > 65535) throw std::invalid_argument("float8 cast: more than 2^22 rows");
    const dim3 grid(static_cast<unsigned>((cols + kWide - 1) / kWide),
                    static_cast<unsigned>((rows + kWide - 1) / kWide));
    if (type == Source::kBFloat16)
      scale_kernel_wide<<<grid, 256, 0, stream>>>(static_cast<const __nv_bfloat16*>(x), rows, cols, amax, largest,
                                                  format, out, out_t, inverse_scale);
    else
      scale_kernel_wide<<<grid, 256, 0, stream>>>(static_cast<const float*>(x), rows, cols, amax, largest, format, out,
                                                  out_t, inverse_scale);
    check(cudaGetLastError(), "float8 cast kernel");
    return;
  }
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
