#include "float8.h"

#include <stdexcept>

#include "compat.h"
#include "faults.h"

namespace meshtrain::float8 {

namespace {

constexpr double kE4m3Max = 448.0, kE5m2Max = 57344.0;

// A tensor's float8 form: its data (float8, or its float32 round trip under emulation)
// and the float32 scalar that multiplies it back to the original's scale.
struct Scaled {
  torch::Tensor data;
  torch::Tensor inverse_scale;
};

Scaled quantize(const torch::Tensor& t, bool e4m3, Mode mode) {
  const double max = e4m3 ? kE4m3Max : kE5m2Max;
  // Dynamic scaling: the tensor's amax maps to the format's largest value (one read of t).
  const auto [lo, hi] = torch::aminmax(t.detach());
  auto scale = max / torch::maximum(lo.abs(), hi.abs()).to(torch::kFloat32).clamp_min(1e-12);
  auto scaled = (t.detach().to(torch::kFloat32) * scale).clamp_(-max, max);
  auto inverse = injected(Fault::kFloat8ScaleNotInverted) ? scale : scale.reciprocal();
  if (mode == Mode::kEmulate) return {round_trip(scaled, torch::ones({}, scale.options()), e4m3), inverse};
  return {compat::to_float8(scaled, e4m3), inverse};
}

// a [M, K] (row-major) times b [K, N] (column-major for scaled_mm).
torch::Tensor gemm(const Scaled& a, const Scaled& b, torch::ScalarType out, Mode mode, bool fast_accum) {
  if (mode == Mode::kEmulate)
    return ((a.data * a.inverse_scale).matmul(b.data * b.inverse_scale)).to(out);
  return compat::scaled_mm(a.data, b.data, a.inverse_scale, b.inverse_scale, out, fast_accum);
}

// A column-major view of t [R, C] (what scaled_mm wants as its second operand).
torch::Tensor column_major(const torch::Tensor& t) { return t.t().contiguous().t(); }

struct Float8Matmul : torch::autograd::Function<Float8Matmul> {
  // x2d [M, K], w [N, K] -> [M, N]
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x2d,
                               const torch::Tensor& w, int64_t mode_id) {
    const auto mode = static_cast<Mode>(mode_id);
    const Scaled x8 = quantize(x2d, true, mode), w8 = quantize(w, true, mode);
    ctx->saved_data["mode"] = mode_id;
    ctx->save_for_backward({x8.data, x8.inverse_scale, w8.data, w8.inverse_scale});
    ctx->saved_data["dtype"] = static_cast<int64_t>(x2d.scalar_type());
    ctx->saved_data["w_dtype"] = static_cast<int64_t>(w.scalar_type());
    return gemm(x8, {w8.data.t(), w8.inverse_scale}, x2d.scalar_type(), mode, /*fast_accum=*/true);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto mode = static_cast<Mode>(ctx->saved_data["mode"].toInt());
    const auto dtype = static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt());
    const auto w_dtype = static_cast<torch::ScalarType>(ctx->saved_data["w_dtype"].toInt());
    const auto saved = ctx->get_saved_variables();
    const Scaled x8{saved[0], saved[1]}, w8{saved[2], saved[3]};
    const Scaled g8 = quantize(grads[0].contiguous(), /*e4m3=*/false, mode);
    const bool emulated = mode == Mode::kEmulate;
    // dx [M, K] = g [M, N] W [N, K];  dW [N, K] = g^T [N, M] x [M, K]
    auto dx = gemm(g8, {emulated ? w8.data : column_major(w8.data), w8.inverse_scale}, dtype, mode, false);
    auto dw = gemm({emulated ? g8.data.t() : g8.data.t().contiguous(), g8.inverse_scale},
                   {emulated ? x8.data : column_major(x8.data), x8.inverse_scale}, w_dtype, mode, false);
    return {dx, dw, torch::Tensor()};
  }
};

}  // namespace

Mode parse_mode(const std::string& s) {
  if (s == "off") return Mode::kOff;
  if (s == "scaled_mm") return Mode::kScaledMm;
  if (s == "emulate") return Mode::kEmulate;
  throw std::invalid_argument("unknown --float8 '" + s + "' (known: off, scaled_mm, emulate)");
}

torch::Tensor round_trip(const torch::Tensor& x, const torch::Tensor& scale, bool e4m3) {
  // e4m3fn: 3 mantissa bits, normals from 2^-6; e5m2: 2 mantissa bits, normals from 2^-14.
  // Below the smallest normal the grid keeps that binade's spacing (subnormals).
  const int64_t mantissa_bits = e4m3 ? 3 : 2, min_exponent = e4m3 ? -6 : -14;
  const double max = e4m3 ? kE4m3Max : kE5m2Max;
  auto v = (x.to(torch::kFloat32) * scale).clamp(-max, max);
  auto exponent = std::get<1>(torch::frexp(v)).to(torch::kFloat32) - 1;  // floor(log2 |v|) for v != 0
  auto step = torch::pow(2.0, exponent.clamp_min(static_cast<double>(min_exponent)) - static_cast<double>(mantissa_bits));
  return (torch::round(v / step) * step).clamp(-max, max) / scale;  // round half to even, as the cast does
}

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, Mode mode) {
  const auto x2d = x.reshape({-1, x.size(-1)});
  auto y = Float8Matmul::apply(x2d, w, static_cast<int64_t>(mode));
  auto shape = x.sizes().vec();
  shape.back() = w.size(0);
  return y.view(shape);
}

void convert(Transformer& model, Mode mode) {
  if (mode == Mode::kOff) return;
  if (mode == Mode::kScaledMm && !compat::kHasFloat8)
    throw std::invalid_argument("--float8 scaled_mm needs the CUDA build (LibTorch 2.x); --float8 emulate runs anywhere");
  for (int64_t id : model->layer_ids()) {
    auto block = model->block(id);
    for (const auto& item : block->named_modules()) {
      auto* linear_module = dynamic_cast<LinearImpl*>(item.value().get());
      // The MoE router stays in high precision (as torchao and torchtitan leave it): its
      // logits decide each token's experts, and its E outputs need not be a multiple of 16.
      if (linear_module == nullptr || item.key() == "moe.router") continue;
      linear_module->product = [mode](const torch::Tensor& x, const torch::Tensor& w) { return linear(x, w, mode); };
    }
  }
}

}  // namespace meshtrain::float8
