// Context parallel pieces on 2 and 3 ranks (threads of this process over Gloo): the
// load-balanced chunks, the ring exchange, and attention in both rotate modes against
// plain causal attention on the whole sequence, forward and backward, in float64.
#include <gtest/gtest.h>

#include <thread>

#include "distributed/comm.h"
#include "trainer/gloo_ranks.h"
#include "distributed/context_parallel.h"
#include "distributed/mappings.h"
#include "model/model.h"

using namespace meshtrain;
using meshtrain_test::randn;
using meshtrain_test::run_ranks;

namespace {

double max_diff(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

}  // namespace

TEST(ContextParallel, EachRankHoldsChunkIAndItsMirror) {
  EXPECT_TRUE(cp::positions(8, 2, 0).equal(torch::tensor({0, 1, 6, 7}, torch::kLong)));
  EXPECT_TRUE(cp::positions(8, 2, 1).equal(torch::tensor({2, 3, 4, 5}, torch::kLong)));
  EXPECT_TRUE(cp::positions(6, 1, 0).equal(torch::arange(6, torch::kLong)));
  // Every position exactly once over the ranks.
  std::vector<torch::Tensor> all;
  for (int64_t i = 0; i < 3; ++i) all.push_back(cp::positions(12, 3, i));
  EXPECT_TRUE(std::get<0>(torch::sort(torch::cat(all))).equal(torch::arange(12, torch::kLong)));
  try {
    cp::positions(10, 3, 0);
    ADD_FAILURE() << "seq_len 10 over cp=3 was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("divisible by 6"), std::string::npos) << e.what();
  }
  auto x = torch::arange(16, torch::kLong).view({2, 8});
  EXPECT_TRUE(cp::shard_sequence(x, 2, 1).equal(torch::tensor({{2, 3, 4, 5}, {10, 11, 12, 13}}, torch::kLong)));
}

TEST(ContextParallel, PassToNextSendsForwardAndGradientsBack) {
  run_ranks(3, [](int r, Comm& c) {
    auto x = torch::full({2, 2}, static_cast<double>(r), torch::kFloat64).requires_grad_(true);
    auto y = cp::pass_to_next(x, c);
    EXPECT_EQ(y[0][0].item<double>(), (r + 2) % 3);  // from the previous rank
    (y * static_cast<double>(10 + r)).sum().backward();
    // x went to rank r+1, which weighs it by 10 + (r+1).
    EXPECT_EQ(x.grad()[0][0].item<double>(), 10 + (r + 1) % 3);
  });
}

// Full causal GQA attention over T = 12 tokens against each rank's cp::attention on its
// chunks: outputs and the gradients of q, k and v at every position.
class ContextParallelAttention : public ::testing::TestWithParam<std::tuple<int, cp::Rotate>> {};

TEST_P(ContextParallelAttention, EqualsFullCausalAttention) {
  const auto [n, rotate] = GetParam();
  const int64_t B = 2, T = 12, H = 4, K = 2, Dh = 3;
  auto q = randn({B, T, H, Dh}, 1), k = randn({B, T, K, Dh}, 2), v = randn({B, T, K, Dh}, 3);
  auto w = randn({B, T, H, Dh}, 4);  // loss = sum(out * w)
  auto qf = q.clone().requires_grad_(true), kf = k.clone().requires_grad_(true), vf = v.clone().requires_grad_(true);
  auto full = gqa_attention(qf, kf, vf);
  (full * w).sum().backward();
  run_ranks(n, [&, n = n, rotate = rotate](int r, Comm& c) {
    auto local = [&](const torch::Tensor& t) { return cp::shard_sequence(t, n, r); };
    auto ql = local(q).requires_grad_(true), kl = local(k).requires_grad_(true), vl = local(v).requires_grad_(true);
    auto out = cp::attention(ql, kl, vl, c, rotate);
    (out * local(w)).sum().backward();
    EXPECT_LT(max_diff(out, local(full.detach())), 1e-12) << "output, rank " << r;
    EXPECT_LT(max_diff(ql.grad(), local(qf.grad())), 1e-12) << "dq, rank " << r;
    EXPECT_LT(max_diff(kl.grad(), local(kf.grad())), 1e-12) << "dk, rank " << r;
    EXPECT_LT(max_diff(vl.grad(), local(vf.grad())), 1e-12) << "dv, rank " << r;
  });
}

INSTANTIATE_TEST_SUITE_P(RanksAndModes, ContextParallelAttention,
                         ::testing::Combine(::testing::Values(2, 3),
                                            ::testing::Values(cp::Rotate::kAllGather, cp::Rotate::kAllToAll)),
                         [](const auto& info) {
                           return "cp" + std::to_string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) == cp::Rotate::kAllGather ? "_allgather" : "_alltoall");
                         });
