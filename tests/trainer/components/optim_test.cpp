// AdamW against torch::optim::AdamW, the schedule's values, and clipping.
#include <gtest/gtest.h>

#include "base/compat.h"
#include "components/optim.h"

using namespace meshtrain;

TEST(AdamW, MatchesTorchAdamW) {
  torch::manual_seed(0);
  auto ours = torch::randn({5, 3}).requires_grad_(true);
  auto ref = ours.detach().clone().requires_grad_(true);
  AdamWConfig cfg;
  AdamW opt({{"w", ours}}, cfg);
  torch::optim::AdamW torch_opt(
      std::vector<torch::Tensor>{ref},
      torch::optim::AdamWOptions(cfg.lr).betas({cfg.beta1, cfg.beta2}).eps(cfg.eps).weight_decay(cfg.weight_decay));
  for (int step = 0; step < 10; ++step) {
    auto grad = torch::randn({5, 3});
    ours.mutable_grad() = grad.clone();
    ref.mutable_grad() = grad.clone();
    opt.step(cfg.lr);
    torch_opt.step();
    ASSERT_TRUE(torch::allclose(ours, ref, 1e-6, 1e-7)) << "step " << step;
  }
  EXPECT_EQ(opt.steps_taken(), 10);
  EXPECT_EQ(opt.state_bytes(), 2 * 15 * 4);
  EXPECT_TRUE(opt.state().at("w").exp_avg.abs().sum().item<double>() > 0);
}

// The fused CUDA kernel (one launch for all parameters) against the per-parameter loop
// on the same values, including a resume: the step count set by set_steps_taken.
TEST(AdamW, FusedCudaKernelMatchesTheLoop) {
  if (!torch::cuda::is_available() || !compat::kHasFusedAdamW) GTEST_SKIP() << "needs CUDA and LibTorch 2.x";
  torch::manual_seed(0);
  std::vector<std::pair<std::string, torch::Tensor>> on_gpu, on_cpu;
  for (auto name : {"a", "b"}) {
    auto w = torch::randn({37, 5});
    on_cpu.emplace_back(name, w.clone().requires_grad_(true));
    on_gpu.emplace_back(name, w.to(torch::kCUDA).requires_grad_(true));
  }
  AdamWConfig cfg;
  AdamW fused(on_gpu, cfg), loop(on_cpu, cfg);
  fused.set_steps_taken(3), loop.set_steps_taken(3);
  for (int step = 0; step < 10; ++step) {
    for (size_t i = 0; i < on_cpu.size(); ++i) {
      auto grad = torch::randn({37, 5});
      on_cpu[i].second.mutable_grad() = grad.clone();
      on_gpu[i].second.mutable_grad() = grad.to(torch::kCUDA);
    }
    fused.step(cfg.lr * (step + 1));
    loop.step(cfg.lr * (step + 1));
    for (size_t i = 0; i < on_cpu.size(); ++i) {
      ASSERT_TRUE(torch::allclose(on_gpu[i].second.cpu(), on_cpu[i].second, 1e-5, 1e-7)) << "step " << step;
      ASSERT_TRUE(torch::allclose(fused.state().at(on_cpu[i].first).exp_avg_sq.cpu(),
                                  loop.state().at(on_cpu[i].first).exp_avg_sq, 1e-5, 1e-12));
    }
  }
}

TEST(LrSchedule, LinearWarmupThenLinearDecay) {
  const double lr = 8e-4;
  EXPECT_DOUBLE_EQ(lr_at(1, 10, 2, lr), lr / 3);
  EXPECT_DOUBLE_EQ(lr_at(2, 10, 2, lr), 2 * lr / 3);
  EXPECT_DOUBLE_EQ(lr_at(3, 10, 2, lr), lr);
  for (int s = 4; s <= 10; ++s) EXPECT_LT(lr_at(s, 10, 2, lr), lr_at(s - 1, 10, 2, lr));
  EXPECT_GT(lr_at(10, 10, 2, lr), 0.0);
  EXPECT_DOUBLE_EQ(lr_at(10, 10, 2, lr, 0.1), lr * (0.1 + 0.9 * (1.0 / 8)));
}

TEST(GradClip, RescalesToTheLimitAndLeavesSmallNormsAlone) {
  auto a = torch::zeros({2}).requires_grad_(true), b = torch::zeros({1}).requires_grad_(true);
  a.mutable_grad() = torch::tensor({3.0f, 0.0f});
  b.mutable_grad() = torch::tensor({4.0f});  // global norm 5
  auto norm = [&] { return std::sqrt(a.grad().pow(2).sum().item<double>() + b.grad().pow(2).sum().item<double>()); };
  clip_grads({a, b}, 5.0, 1.0);
  EXPECT_NEAR(norm(), 1.0, 1e-6);
  EXPECT_NEAR(a.grad()[0].item<double>(), 0.6, 1e-6);
  clip_grads({a, b}, 1.0, 2.0);  // below the limit: untouched
  EXPECT_NEAR(norm(), 1.0, 1e-6);
}
