// float8 linears: the emulated rounding lands on the float8 grids (and, where LibTorch has
// float8 dtypes, equals a real cast), and the float8 product's gradients match autograd's
// high-precision ones to float8 accuracy.
#include <gtest/gtest.h>

#include "base/compat.h"
#include "model/float8.h"

using namespace meshtrain;

TEST(Float8, RoundTripLandsOnTheE4m3AndE5m2Grids) {
  const auto one = torch::ones({});
  auto values = torch::tensor({1.0625f, 1.1875f, 3.3f, 447.0f, 500.0f, -0.3f, 0.001f, 0.0f});
  // e4m3: 3 mantissa bits (step 0.125 in [1, 2)), max 448, subnormal step 2^-9; ties to even.
  auto e4m3 = float8::round_trip(values, one, true);
  EXPECT_TRUE(torch::equal(e4m3, torch::tensor({1.0f, 1.25f, 3.25f, 448.0f, 448.0f, -0.3125f, 0.001953125f, 0.0f})))
      << e4m3;
  // e5m2: 2 mantissa bits (step 0.25 in [1, 2)).
  auto e5m2 = float8::round_trip(torch::tensor({1.125f, 1.375f, 3.3f, 60000.0f}), one, false);
  EXPECT_TRUE(torch::equal(e5m2, torch::tensor({1.0f, 1.5f, 3.5f, 57344.0f}))) << e5m2;
  if (compat::kHasFloat8) {  // the emulation is the cast itself
    torch::manual_seed(0);
    auto x = torch::randn({4096}) * 30;
    for (bool fmt : {true, false}) {
      auto real = compat::to_float8(x.clamp(-448, 448), fmt).to(torch::kFloat32);
      EXPECT_TRUE(torch::equal(float8::round_trip(x, one, fmt), real)) << (fmt ? "e4m3" : "e5m2");
    }
  }
}

TEST(Float8, EmulatedProductAndGradientsAreWithinFloat8RoundingOfFloat32) {
  torch::manual_seed(1);
  auto x = torch::randn({2, 16, 32}, torch::requires_grad());
  auto w = torch::randn({48, 32}, torch::requires_grad());
  auto g = torch::randn({2, 16, 48});
  auto y = float8::linear(x, w, float8::Mode::kEmulate);
  ASSERT_EQ(y.sizes(), (std::vector<int64_t>{2, 16, 48}));
  y.backward(g);
  auto x_ref = x.detach().clone().requires_grad_(), w_ref = w.detach().clone().requires_grad_();
  auto y_ref = torch::linear(x_ref, w_ref);
  y_ref.backward(g);
  // e4m3 keeps ~2^-4 relative per element; sums of 32 or more products average it down.
  auto rel = [](const torch::Tensor& a, const torch::Tensor& b) { return ((a - b).norm() / b.norm()).item<double>(); };
  EXPECT_LT(rel(y, y_ref), 0.05);
  EXPECT_GT(rel(y, y_ref), 0.0);  // it did round
  EXPECT_LT(rel(x.grad(), x_ref.grad()), 0.1);
  EXPECT_LT(rel(w.grad(), w_ref.grad()), 0.1);
}

// The fused cast kernels (trainer/cuda/float8_cast.cu) against the ATen reference, byte for
// byte: bf16 and float32 inputs, both formats, shapes that are not multiples of the 32 x 32
// tile, values past the format's range after scaling and values that fall to subnormals.
TEST(Float8, FusedCastEqualsTheReferenceByteForByte) {
  if (!compat::kHasFloat8 || !torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA build and a GPU";
  torch::manual_seed(2);
  for (auto dtype : {torch::kBFloat16, torch::kFloat32})
    for (bool e4m3 : {true, false})
      for (auto shape : {std::vector<int64_t>{48, 80}, std::vector<int64_t>{1000, 37}, std::vector<int64_t>{256, 2048},
                         std::vector<int64_t>{200, 72}}) {
        auto t = (torch::randn(shape) * torch::logspace(-6, 3, shape[1])).to(torch::kCUDA, dtype);
        t[0][0] = -7e3;  // the amax, negative
        const auto fused = float8::cast(t, e4m3, /*transposed=*/true);
        const auto reference = float8::cast_reference(t, e4m3, true);
        const auto bytes = [](const torch::Tensor& f8) { return f8.view(torch::kUInt8).cpu(); };
        const std::string what = std::string(e4m3 ? "e4m3" : "e5m2") + " from " + c10::toString(dtype) + " " +
                                 std::to_string(shape[0]) + "x" + std::to_string(shape[1]);
        EXPECT_TRUE(torch::equal(bytes(fused.data), bytes(reference.data))) << what;
        EXPECT_TRUE(torch::equal(bytes(fused.data_t), bytes(reference.data_t))) << what;
        EXPECT_TRUE(torch::equal(fused.inverse_scale.cpu(), reference.inverse_scale.cpu())) << what;
      }
}

TEST(Float8, ScaledMmNamesTheLayerWhoseDimensionsAreNotMultiplesOf16) {
  auto x = torch::randn({2, 5, 32});  // 10 tokens
  auto w = torch::randn({48, 32});
  try {
    float8::linear(x, w, float8::Mode::kScaledMm, "layers.0.attention.wq");
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("layers.0.attention.wq multiplies [10 tokens, 32] by [32, 48]"),
              std::string::npos)
        << e.what();
  }
}

// wq, wk and wv share one cast of their input; a changed input is cast again.
TEST(Float8, InputCastIsSharedUntilTheInputChanges) {
  torch::manual_seed(3);
  auto x = torch::randn({16, 32});
  auto w = torch::randn({16, 32});
  const auto first = float8::linear(x, w, float8::Mode::kEmulate);
  EXPECT_TRUE(torch::equal(float8::linear(x, w, float8::Mode::kEmulate), first));
  x.mul_(2);  // a power of two: the float8 grid scales with it, so the product exactly doubles
  EXPECT_TRUE(torch::equal(float8::linear(x, w, float8::Mode::kEmulate), first * 2));
}
