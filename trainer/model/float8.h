// float8 training of the transformer blocks' linear layers (torchtitan's float8 converter,
// torchao's Float8Linear with tensorwise dynamic scaling): in every y = x W^T, x and W are
// cast to float8 e4m3 and, in backward, the output gradient to e5m2, each with one scale
// from its absolute maximum at that moment; the three GEMMs (output, input gradient,
// weight gradient) run in float8 and produce the activations' dtype. The output layer stays
// in high precision, as torchtitan leaves it.
//
// Emulation (torchtitan's --float8.emulate) rounds to the float8 grids in float32 and
// multiplies in the activations' dtype: the same quantisation, so it runs on CPU and on
// LibTorch 1.13, where float8 dtypes do not exist.
#pragma once

#include <torch/torch.h>

#include "model/model.h"

namespace CLI {
class App;
}

namespace meshtrain::float8 {

enum class Mode { kOff, kScaledMm, kEmulate };
// "off" | "scaled_mm" (CUDA, LibTorch 2.x) | "emulate"; throws for others.
Mode parse_mode(const std::string& s);

// --float8: the blocks' linears in float8 (`mode`), or not.
struct Float8Config {
  Mode mode = Mode::kOff;
};
void add_options(CLI::App& cmd, Float8Config& config);

// x [..., K] times W [N, K]^T in float8. For scaled_mm the tokens M, K and N must be
// multiples of 16: otherwise std::invalid_argument names `name` and the dimensions.
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, Mode mode,
                     const std::string& name = "a linear layer");

// A float8 cast of t [R, C] (tensorwise dynamic scaling): data [R, C] in e4m3 or e5m2, its
// transpose data_t [C, R] (row-major, when asked for), and the float32 scalar that multiplies
// them back to t's scale.
struct Float8Tensor {
  torch::Tensor data, data_t, inverse_scale;
};
// On CUDA (bf16 or float32 input) two fused kernels (trainer/cuda/float8_cast.cu); elsewhere
// cast_reference. LibTorch 2.x only (1.13 has no float8 dtypes).
Float8Tensor cast(const torch::Tensor& t, bool e4m3, bool transposed);
// The same bytes from ATen ops, one pass each: amax, scale, multiply, clamp, cast, transpose.
Float8Tensor cast_reference(const torch::Tensor& t, bool e4m3, bool transposed);

// x rounded to float8 e4m3 (e4m3 = true) or e5m2 after scaling by `scale`, then unscaled:
// what a float8 cast and its dequantisation leave, computed in float32.
torch::Tensor round_trip(const torch::Tensor& x, const torch::Tensor& scale, bool e4m3);

// Every Linear of every transformer block computes through `linear` (not the output layer).
// scaled_mm needs every GEMM dimension, tokens per rank included, to be a multiple of 16.
void convert(Transformer& model, Mode mode);

}  // namespace meshtrain::float8
