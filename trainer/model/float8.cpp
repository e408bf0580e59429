#include "model/float8.h"

#include <stdexcept>

#include "base/compat.h"
#include "base/faults.h"
#include "base/options.h"
#include "contract/model_names.h"

#ifdef MESHTEST_CUDA
#include <c10/cuda/CUDAStream.h>

#include "cuda/float8_cast.h"
#endif

namespace meshtrain::float8 {

namespace {

constexpr double kE4m3Max = 448.0, kE5m2Max = 57344.0;

// Dynamic scaling in ATen ops: the tensor's amax maps to the format's largest value.
// Returns the float32 `scale` and the scaled, clamped float32 tensor.
std::pair<torch::Tensor, torch::Tensor> scaled(const torch::Tensor& t, bool e4m3) {
  const double max = e4m3 ? kE4m3Max : kE5m2Max;
  const auto [lo, hi] = torch::aminmax(t.detach());
  auto scale = max / torch::maximum(lo.abs(), hi.abs()).to(torch::kFloat32).clamp_min(1e-12);
  return {scale, (t.detach().to(torch::kFloat32) * scale).clamp_(-max, max)};
}

#ifdef MESHTEST_CUDA
// The same bytes from two kernels (trainer/cuda/float8_cast.cu): one reads |t|'s maximum,
// one scales, casts and writes the tensor and its transpose.
Float8Tensor cast_fused(const torch::Tensor& t, bool e4m3, bool transposed) {
  const auto src = t.detach().contiguous();
  const auto source = src.scalar_type() == torch::kBFloat16 ? kernels::Source::kBFloat16 : kernels::Source::kFloat32;
  const int64_t rows = src.size(0), cols = src.size(1);
  const auto stream = c10::cuda::getCurrentCUDAStream(src.device().index()).stream();
  const auto f8 = src.options().dtype(e4m3 ? at::kFloat8_e4m3fn : at::kFloat8_e5m2);
  const auto f32 = src.options().dtype(torch::kFloat32);
  Float8Tensor out{torch::empty({rows, cols}, f8), transposed ? torch::empty({cols, rows}, f8) : torch::Tensor(),
                   torch::empty({}, f32)};
  auto amax = torch::empty({}, f32);
  kernels::abs_max(src.data_ptr(), source, src.numel(), amax.data_ptr<float>(), stream);
  kernels::scale_to_float8(
      src.data_ptr(), source, rows, cols, amax.data_ptr<float>(),
      e4m3 ? kernels::Float8::kE4m3 : kernels::Float8::kE5m2, static_cast<uint8_t*>(out.data.data_ptr()),
      transposed ? static_cast<uint8_t*>(out.data_t.data_ptr()) : nullptr, out.inverse_scale.data_ptr<float>(), stream);
  return out;
}
#endif

// t [R, C] in float8 for `mode`: scaled_mm's float8 bytes, or emulation's float32 round trip
// (whose transpose is a view: matmul takes any strides).
Float8Tensor quantize(const torch::Tensor& t, bool e4m3, Mode mode, bool transposed) {
  Float8Tensor q;
  if (mode == Mode::kEmulate) {
    auto [scale, s] = scaled(t, e4m3);
    q = {round_trip(s, torch::ones({}, scale.options()), e4m3), torch::Tensor(), scale.reciprocal()};
    if (transposed) q.data_t = q.data.t();
  } else {
    q = cast(t, e4m3, transposed);
  }
  if (injected(Fault::kFloat8ScaleNotInverted)) q.inverse_scale = q.inverse_scale.reciprocal();
  return q;
}

// wq, wk and wv read the same normed input, as w1 and w3 do: its cast is made once. The
// entry holds the input (detached), so its memory cannot pass to another tensor while the
// entry matches on storage, offset, shape and version.
struct InputCast {
  torch::Tensor input;
  int64_t version = 0;
  Mode mode = Mode::kOff;
  Float8Tensor cast;
};
thread_local InputCast last_input;

Float8Tensor quantize_input(const torch::Tensor& x2d, Mode mode) {
  const auto& held = last_input.input;
  if (held.defined() && held.storage().unsafeGetStorageImpl() == x2d.storage().unsafeGetStorageImpl() &&
      held.storage_offset() == x2d.storage_offset() && held.sizes() == x2d.sizes() && held.strides() == x2d.strides() &&
      held.scalar_type() == x2d.scalar_type() && last_input.version == x2d._version() && last_input.mode == mode)
    return last_input.cast;
  last_input = {x2d.detach(), x2d._version(), mode, quantize(x2d, true, mode, /*transposed=*/true)};
  return last_input.cast;
}

// a [M, K] (row-major) times b [K, N] (column-major for scaled_mm), each with its inverse scale.
torch::Tensor gemm(const torch::Tensor& a, const torch::Tensor& a_inverse, const torch::Tensor& b,
                   const torch::Tensor& b_inverse, torch::ScalarType out, Mode mode, bool fast_accum) {
  if (mode == Mode::kEmulate) return ((a * a_inverse).matmul(b * b_inverse)).to(out);
  return compat::scaled_mm(a, b, a_inverse, b_inverse, out, fast_accum);
}

struct Float8Matmul : torch::autograd::Function<Float8Matmul> {
  // x2d [M, K], w [N, K] -> [M, N]. Each operand is cast once, with the transpose backward
  // needs written in the same pass; backward keeps only the transposes.
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x2d, const torch::Tensor& w,
                               int64_t mode_id) {
    const auto mode = static_cast<Mode>(mode_id);
    const Float8Tensor x8 = quantize_input(x2d, mode), w8 = quantize(w, true, mode, /*transposed=*/true);
    ctx->saved_data["mode"] = mode_id;
    ctx->save_for_backward({x8.data_t, x8.inverse_scale, w8.data_t, w8.inverse_scale});  // [K, M], [K, N]
    ctx->saved_data["dtype"] = static_cast<int64_t>(x2d.scalar_type());
    ctx->saved_data["w_dtype"] = static_cast<int64_t>(w.scalar_type());
    // y [M, N] = x [M, K] W^T [K, N]
    return gemm(x8.data, x8.inverse_scale, w8.data.t(), w8.inverse_scale, x2d.scalar_type(), mode, /*fast_accum=*/true);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto mode = static_cast<Mode>(ctx->saved_data["mode"].toInt());
    const auto dtype = static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt());
    const auto w_dtype = static_cast<torch::ScalarType>(ctx->saved_data["w_dtype"].toInt());
    const auto saved = ctx->get_saved_variables();
    const auto &x_t = saved[0], &x_inverse = saved[1], &w_t = saved[2], &w_inverse = saved[3];
    const Float8Tensor g8 = quantize(grads[0], /*e4m3=*/false, mode, /*transposed=*/true);
    // dx [M, K] = g [M, N] W [N, K];  dW [N, K] = g^T [N, M] x [M, K]
    auto dx = gemm(g8.data, g8.inverse_scale, w_t.t(), w_inverse, dtype, mode, false);
    auto dw = gemm(g8.data_t, g8.inverse_scale, x_t.t(), x_inverse, w_dtype, mode, false);
    return {dx, dw, torch::Tensor()};
  }
};

}  // namespace

Float8Tensor cast_reference(const torch::Tensor& t, bool e4m3, bool transposed) {
  auto [scale, s] = scaled(t, e4m3);
  Float8Tensor q{compat::to_float8(s, e4m3), torch::Tensor(), scale.reciprocal()};
  if (transposed) q.data_t = q.data.t().contiguous();
  return q;
}

Float8Tensor cast(const torch::Tensor& t, bool e4m3, bool transposed) {
#ifdef MESHTEST_CUDA
  if (t.is_cuda() && (t.scalar_type() == torch::kBFloat16 || t.scalar_type() == torch::kFloat32))
    return cast_fused(t, e4m3, transposed);
#endif
  return cast_reference(t, e4m3, transposed);
}

Mode parse_mode(const std::string& s) {
  if (s == "off") return Mode::kOff;
  if (s == "scaled_mm") return Mode::kScaledMm;
  if (s == "emulate") return Mode::kEmulate;
  throw std::invalid_argument("unknown --float8 '" + s + "' (known: off, scaled_mm, emulate)");
}

void add_options(CLI::App& cmd, Float8Config& c) {
  add_parsed_option(cmd, "--float8", c.mode, parse_mode, "off",
                    "The transformer blocks' linear layers in float8 with dynamic per-tensor scales: off | scaled_mm "
                    "(CUDA build: float8 GEMMs) | emulate (float8 rounding in float32, any build)");
}

torch::Tensor round_trip(const torch::Tensor& x, const torch::Tensor& scale, bool e4m3) {
  // e4m3fn: 3 mantissa bits, normals from 2^-6; e5m2: 2 mantissa bits, normals from 2^-14.
  // Below the smallest normal the grid keeps that binade's spacing (subnormals).
  const int64_t mantissa_bits = e4m3 ? 3 : 2, min_exponent = e4m3 ? -6 : -14;
  const double max = e4m3 ? kE4m3Max : kE5m2Max;
  auto v = (x.to(torch::kFloat32) * scale).clamp(-max, max);
  auto exponent = std::get<1>(torch::frexp(v)).to(torch::kFloat32) - 1;  // floor(log2 |v|) for v != 0
  auto step =
      torch::pow(2.0, exponent.clamp_min(static_cast<double>(min_exponent)) - static_cast<double>(mantissa_bits));
  return (torch::round(v / step) * step).clamp(-max, max) / scale;  // round half to even, as the cast does
}

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, Mode mode, const std::string& name) {
  const auto x2d = x.reshape({-1, x.size(-1)});
  const int64_t M = x2d.size(0), K = x2d.size(1), N = w.size(0);
  if (mode == Mode::kScaledMm && (M % 16 != 0 || K % 16 != 0 || N % 16 != 0))
    throw std::invalid_argument("--float8 scaled_mm: " + name + " multiplies [" + std::to_string(M) + " tokens, " +
                                std::to_string(K) + "] by [" + std::to_string(K) + ", " + std::to_string(N) +
                                "], and every one of these dimensions must be a multiple of 16 (tokens per rank "
                                "= local batch x seq_len / cp); --float8 emulate has no such rule");
  auto y = Float8Matmul::apply(x2d, w, static_cast<int64_t>(mode));
  auto shape = x.sizes().vec();
  shape.back() = w.size(0);
  return y.view(shape);
}

void convert(Transformer& model, Mode mode) {
  if (mode == Mode::kOff) return;
  if (mode == Mode::kScaledMm && !compat::kHasFloat8)
    throw std::invalid_argument(
        "--float8 scaled_mm needs the CUDA build (LibTorch 2.x); --float8 emulate runs anywhere");
  for (int64_t id : model->layer_ids()) {
    auto block = model->block(id);
    for (const auto& item : block->named_modules()) {
      auto* linear_module = dynamic_cast<LinearImpl*>(item.value().get());
      // The MoE router stays in high precision (as torchao and torchtitan leave it): its
      // logits decide each token's experts, and its E outputs need not be a multiple of 16.
      namespace names = contract::model_names;
      if (linear_module == nullptr || item.key() == names::path({names::kMoe, names::kRouter})) continue;
      linear_module->product = [mode, name = names::path({names::layer(id), item.key()})](
                                   const torch::Tensor& x, const torch::Tensor& w) { return linear(x, w, mode, name); };
    }
  }
}

}  // namespace meshtrain::float8
