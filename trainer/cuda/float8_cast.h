// float8 casts as two kernels (CUDA C++, no LibTorch: trainer/model/float8.cpp calls them on the
// current stream). Tensorwise dynamic scaling, as torchao's Float8Linear: the scale maps the
// tensor's absolute maximum to the format's largest value. The unfused form (amax, scale,
// multiply, clamp, cast, and a transposed copy: six passes over float32) is float8.cpp's
// reference; these produce the same bytes in two passes over the input.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace meshtrain::kernels {

enum class Source { kBFloat16, kFloat32 };
enum class Float8 { kE4m3, kE5m2 };

// *amax = max |x[i]| over n elements (NaN if any is NaN). Zeroes *amax first.
void abs_max(const void* x, Source type, int64_t n, float* amax, cudaStream_t stream);

// x [rows, cols] (row-major) to float8 with scale = largest / max(*amax, 1e-12), saturating:
// out [rows, cols] and, when out_t is not null, out_t [cols, rows] (the transpose, row-major),
// and *inverse_scale = 1 / scale (what _scaled_mm multiplies back).
void scale_to_float8(const void* x, Source type, int64_t rows, int64_t cols, const float* amax, Float8 format,
                     uint8_t* out, uint8_t* out_t, float* inverse_scale, cudaStream_t stream);

}  // namespace meshtrain::kernels
