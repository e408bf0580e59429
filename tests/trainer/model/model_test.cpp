// The model's building blocks against straightforward reference formulas (float64 loops).
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <sstream>

#include "base/compat.h"
#include "contract/model_names.h"
#include "model/model.h"

using namespace meshtrain;

namespace {

torch::Tensor randn(at::IntArrayRef shape, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  return torch::empty(shape, torch::kFloat64).normal_(0, 1, gen);
}

double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

}  // namespace

TEST(RMSNorm, MatchesFormula) {
  auto x = randn({3, 5, 8}, 1).to(torch::kFloat32);
  auto w = randn({8}, 2).to(torch::kFloat32);
  const double eps = 1e-5;
  auto y = rms_norm(x, w, eps);
  auto xd = x.to(torch::kFloat64), wd = w.to(torch::kFloat64), yd = y.to(torch::kFloat64);
  auto xa = xd.accessor<double, 3>();
  auto wa = wd.accessor<double, 1>();
  auto ya = yd.accessor<double, 3>();
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j) {
      double ms = 0;
      for (int k = 0; k < 8; ++k) ms += xa[i][j][k] * xa[i][j][k] / 8;
      for (int k = 0; k < 8; ++k) EXPECT_NEAR(ya[i][j][k], xa[i][j][k] / std::sqrt(ms + eps) * wa[k], 1e-5);
    }
}

TEST(RoPE, MatchesComplexRotationOfAdjacentPairs) {
  const int64_t B = 2, T = 7, H = 3, Dh = 8;
  const double theta = 500000.0;
  auto x = randn({B, T, H, Dh}, 3);
  auto [cos, sin] = rope_tables(Dh, T, theta);
  auto y = apply_rope(x, cos.to(torch::kFloat64), sin.to(torch::kFloat64));
  // torchtitan: view_as_complex(x.reshape(..., -1, 2)) * polar(1, t * theta^(-2i/Dh))
  auto xc = torch::view_as_complex(x.reshape({B, T, H, Dh / 2, 2}).contiguous());
  auto angles = torch::empty({T, Dh / 2}, torch::kFloat64);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < Dh / 2; ++i) angles[t][i] = t * std::pow(theta, -2.0 * i / Dh);
  auto rot = torch::polar(torch::ones_like(angles), angles).view({1, T, 1, Dh / 2});
  auto expected = torch::view_as_real(xc * rot).flatten(-2);
  EXPECT_LT(max_abs_diff(y, expected), 1e-6);
  // Position 0 is not rotated; rotation keeps each pair's length.
  EXPECT_LT(max_abs_diff(y.select(1, 0), x.select(1, 0)), 1e-12);
  EXPECT_LT(max_abs_diff(y.norm(2, -1), x.norm(2, -1)), 1e-6);  // float32 tables
}

TEST(Attention, CausalGroupedQueryMatchesLoops) {
  const int64_t B = 2, T = 5, H = 4, K = 2, Dh = 3;
  auto q = randn({B, T, H, Dh}, 4), k = randn({B, T, K, Dh}, 5), v = randn({B, T, K, Dh}, 6);
  auto y = gqa_attention(q, k, v);
  ASSERT_EQ(y.sizes(), (std::vector<int64_t>{B, T, H, Dh}));
  auto qa = q.accessor<double, 4>(), ka = k.accessor<double, 4>(), va = v.accessor<double, 4>();
  auto ya = y.accessor<double, 4>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kv = h / (H / K);  // consecutive query heads share a kv head
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> w(t + 1);
        double mx = -1e300, z = 0;
        for (int64_t s = 0; s <= t; ++s) {
          double dot = 0;
          for (int64_t d = 0; d < Dh; ++d) dot += qa[b][t][h][d] * ka[b][s][kv][d];
          w[s] = dot / std::sqrt(static_cast<double>(Dh));
          mx = std::max(mx, w[s]);
        }
        for (auto& x : w) z += (x = std::exp(x - mx));
        for (int64_t d = 0; d < Dh; ++d) {
          double out = 0;
          for (int64_t s = 0; s <= t; ++s) out += w[s] / z * va[b][s][kv][d];
          EXPECT_NEAR(ya[b][t][h][d], out, 1e-10) << "b=" << b << " t=" << t << " h=" << h;
        }
      }
    }
}

TEST(SwiGLU, MatchesFormula) {
  const int64_t D = 4, F = 6;
  auto x = randn({3, D}, 7), w1 = randn({F, D}, 8), w2 = randn({D, F}, 9), w3 = randn({F, D}, 10);
  auto y = swiglu(x, w1, w2, w3);
  auto xa = x.accessor<double, 2>(), a1 = w1.accessor<double, 2>(), a2 = w2.accessor<double, 2>(),
       a3 = w3.accessor<double, 2>();
  for (int n = 0; n < 3; ++n)
    for (int o = 0; o < D; ++o) {
      double out = 0;
      for (int f = 0; f < F; ++f) {
        double g = 0, u = 0;
        for (int i = 0; i < D; ++i) g += a1[f][i] * xa[n][i], u += a3[f][i] * xa[n][i];
        out += a2[o][f] * (g / (1 + std::exp(-g))) * u;
      }
      EXPECT_NEAR(y[n][o].item<double>(), out, 1e-10);
    }
}

TEST(ModelArgs, LlamaHiddenDimRule) {
  EXPECT_EQ(model_flavor("tiny").ffn_hidden_dim(), 192);
  EXPECT_EQ(model_flavor("debugmodel").ffn_hidden_dim(), 768);
  EXPECT_EQ(model_flavor("1B").ffn_hidden_dim(), 8192);         // Llama-3.2-1B's intermediate size
  EXPECT_EQ(model_flavor("8B_short").ffn_hidden_dim(), 14336);  // Llama-3-8B's intermediate size
}

TEST(ModelArgs, ConstraintsAreCheckedWithClearErrors) {
  auto a = model_flavor("tiny");
  a.n_kv_heads = 3;
  try {
    validate(a, 64);
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "model 'tiny': n_heads 8 is not divisible by n_kv_heads 3");
  }
  a = model_flavor("tiny");
  a.n_heads = 5;
  EXPECT_THROW(validate(a, 64), std::invalid_argument);
  EXPECT_THROW(validate(model_flavor("tiny"), 0), std::invalid_argument);
  EXPECT_THROW(model_flavor("huge"), std::invalid_argument);
}

TEST(Transformer, TorchtitanParameterNames) {
  Transformer model(model_flavor("tiny"));
  std::vector<std::string> names;
  for (const auto& p : model->named_parameters()) names.push_back(p.key());
  const std::vector<std::string> expected_prefix{"tok_embeddings.weight",           "layers.0.attention.wq.weight",
                                                 "layers.0.attention.wk.weight",    "layers.0.attention.wv.weight",
                                                 "layers.0.attention.wo.weight",    "layers.0.feed_forward.w1.weight",
                                                 "layers.0.feed_forward.w2.weight", "layers.0.feed_forward.w3.weight",
                                                 "layers.0.attention_norm.weight",  "layers.0.ffn_norm.weight"};
  ASSERT_GE(names.size(), expected_prefix.size());
  for (size_t i = 0; i < expected_prefix.size(); ++i) EXPECT_EQ(names[i], expected_prefix[i]);
  EXPECT_EQ(names[names.size() - 2], "norm.weight");
  EXPECT_EQ(names.back(), "output.weight");
  int64_t count = 0;
  for (const auto& p : model->parameters()) count += p.numel();
  EXPECT_EQ(count, model->args.num_parameters());
}

// Every name in every parameter path is one of contract/model_names.h (or a layer id), so the TP
// plan, the buckets and the HF mapping, which find weights by those names, miss none.
TEST(Transformer, EveryParameterPathIsSpelledByTheContractsNames) {
  namespace n = contract::model_names;
  const std::set<std::string> known = {n::kEmbedding,
                                       n::kLayers,
                                       n::kNorm,
                                       n::kOutput,
                                       n::kAttentionNorm,
                                       n::kAttention,
                                       n::kFfnNorm,
                                       n::kFeedForward,
                                       n::kMoe,
                                       n::kWq,
                                       n::kWk,
                                       n::kWv,
                                       n::kWo,
                                       n::kW1,
                                       n::kW2,
                                       n::kW3,
                                       n::kRouter,
                                       n::kExperts,
                                       n::kSharedExperts,
                                       n::kWeight};
  for (const char* flavor : {"tiny", "tiny_moe"}) {
    Transformer model(model_flavor(flavor));
    for (const auto& p : model->named_parameters()) {
      std::stringstream parts(p.key());
      for (std::string name; std::getline(parts, name, '.');)
        EXPECT_TRUE(known.count(name) || name.find_first_not_of("0123456789") == std::string::npos)
            << flavor << ": '" << name << "' in " << p.key() << " is not in contract/model_names.h";
    }
  }
}

TEST(Transformer, InitDependsOnSeedOnlyAndFollowsTorchtitanScales) {
  Transformer a(model_flavor("tiny")), b(model_flavor("tiny")), c(model_flavor("tiny"));
  init_weights(a, 42);
  init_weights(b, 42);
  init_weights(c, 43);
  auto pa = a->named_parameters(), pb = b->named_parameters(), pc = c->named_parameters();
  for (const auto& item : pa) {
    EXPECT_TRUE(torch::equal(item.value(), pb[item.key()])) << item.key();
    if (item.key().find("norm") == std::string::npos)
      EXPECT_FALSE(torch::equal(item.value(), pc[item.key()])) << item.key();
  }
  EXPECT_NEAR(pa["layers.0.attention.wq.weight"].std().item<double>(), 0.02, 0.002);
  EXPECT_NEAR(pa["layers.1.attention.wo.weight"].std().item<double>(), 0.01, 0.001);  // 0.02/sqrt(2*2)
  EXPECT_NEAR(pa["tok_embeddings.weight"].std().item<double>(), 1.0, 0.05);
  const double out_std = 1.0 / 8.0;  // dim^-0.5, truncated at 3 std
  EXPECT_LE(pa["output.weight"].abs().max().item<double>(), 3 * out_std + 1e-6);
  EXPECT_TRUE(torch::equal(pa["norm.weight"], torch::ones({64})));
}

TEST(Transformer, IsCausal) {
  Transformer model(model_flavor("tiny"));
  init_weights(model, 1);
  torch::NoGradGuard no_grad;
  auto tokens = torch::randint(0, 258, {2, 16}, torch::kInt64);
  auto changed = tokens.clone();
  changed.index_put_({torch::indexing::Slice(), 10}, (tokens.select(1, 10) + 1) % 258);
  auto a = model(tokens), b = model(changed);
  ASSERT_EQ(a.sizes(), (std::vector<int64_t>{2, 16, 258}));
  EXPECT_TRUE(torch::allclose(a.slice(1, 0, 10), b.slice(1, 0, 10)));
  EXPECT_FALSE(torch::allclose(a.slice(1, 10), b.slice(1, 10)));
}

TEST(MoE, ParametersBufferAndCount) {
  Transformer model(model_flavor("tiny_moe"));
  const auto params = model->named_parameters();
  EXPECT_TRUE(params.contains("layers.0.feed_forward.w1.weight"));  // the dense first layer
  EXPECT_FALSE(params.contains("layers.1.feed_forward.w1.weight"));
  EXPECT_EQ(params["layers.1.moe.router.weight"].sizes(), (std::vector<int64_t>{8, 64}));
  EXPECT_EQ(params["layers.1.moe.experts.w1.weight"].sizes(), (std::vector<int64_t>{8, 32, 64}));
  EXPECT_EQ(params["layers.1.moe.experts.w2.weight"].sizes(), (std::vector<int64_t>{8, 64, 32}));
  EXPECT_EQ(params["layers.2.moe.shared_experts.w1.weight"].sizes(), (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(model->named_buffers()["layers.1.moe.expert_bias"].sizes(), (std::vector<int64_t>{8}));
  int64_t count = 0;
  for (const auto& p : model->parameters()) count += p.numel();
  EXPECT_EQ(count, model->args.num_parameters());
}

// Forward and backward: the gradients of the input, the router and the experts go through
// the token permutation's gathers (gather_rows) and must equal those of a per-token loop.
TEST(MoE, MatchesPerTokenLoopOverChosenExpertsForwardAndBackward) {
  auto args = model_flavor("tiny_moe");
  Transformer model(args);
  init_weights(model, 3);
  MoE moe = model->block(1)->moe;
  {
    torch::NoGradGuard no_grad;
    moe->expert_bias.copy_(torch::linspace(-0.02, 0.02, 8));  // moves the choice, not the weights
  }
  const auto x = randn({2, 5, 64}, 11).to(torch::kFloat32).requires_grad_();
  const auto g = randn({2, 5, 64}, 12).to(torch::kFloat32);
  const auto y = moe(x);
  y.backward(g);
  const auto router = moe->router->weight, w1 = moe->experts->w1->weight, w2 = moe->experts->w2->weight,
             w3 = moe->experts->w3->weight;
  const auto x_grad = x.grad().clone(), router_grad = router.grad().clone(), w1_grad = w1.grad().clone(),
             w2_grad = w2.grad().clone();
  for (auto* t : {&x, &router, &w1, &w2, &w3}) t->mutable_grad().zero_();
  std::vector<torch::Tensor> want;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = 0; t < 5; ++t) {
      auto xt = x[b][t];
      auto scores = torch::sigmoid(torch::mv(router, xt));
      auto chosen = std::get<1>(torch::topk(scores.detach() + moe->expert_bias, 2));
      auto weights = scores.index_select(0, chosen);
      weights = weights / weights.sum();
      auto out = moe->shared_experts(xt.view({1, 64})).view({64});
      for (int64_t k = 0; k < 2; ++k) {
        const int64_t e = chosen[k].item<int64_t>();
        out = out + weights[k] * swiglu(xt.view({1, 64}), w1[e], w2[e], w3[e]).view({64});
      }
      EXPECT_LT(max_abs_diff(y[b][t], out), 1e-5) << "token " << b << "," << t;
      want.push_back(out);
    }
  torch::stack(want).view({2, 5, 64}).backward(g);
  EXPECT_LT(max_abs_diff(x_grad, x.grad()), 1e-5);
  EXPECT_LT(max_abs_diff(router_grad, router.grad()), 1e-5);
  EXPECT_LT(max_abs_diff(w1_grad, w1.grad()), 1e-5);
  EXPECT_LT(max_abs_diff(w2_grad, w2.grad()), 1e-5);
  EXPECT_GT(router_grad.abs().max().item<double>(), 0);  // the gates' gradient reached the router
}

TEST(MoE, GatherRowsBackwardSumsEachRowsCopies) {
  // Row 0 picked at y rows 1 and 2, row 1 at y rows 0 and 3.
  const auto x = torch::tensor({1.0, 2.0}).view({2, 1}).requires_grad_();
  const auto index = torch::tensor({1, 0, 0, 1}), inverse = torch::tensor({1, 2, 0, 3});
  const auto y = gather_rows(x, index, inverse);
  EXPECT_TRUE(torch::equal(y.view({4}), torch::tensor({2.0, 1.0, 1.0, 2.0})));
  y.backward(torch::tensor({10.0, 20.0, 30.0, 40.0}).view({4, 1}));
  EXPECT_TRUE(torch::equal(x.grad().view({2}), torch::tensor({50.0, 50.0})));
  const auto order = torch::tensor({2, 0, 3, 1});
  EXPECT_TRUE(torch::equal(inverse_permutation(order), torch::tensor({1, 3, 0, 2})));
}

// The grouped-GEMM path (bf16 on a GPU with torch._grouped_mm) against a float32 loop over
// the experts, forward and weight gradients: counts that are not multiples of the 8-row
// alignment, and an expert with no tokens.
TEST(MoE, GroupedGemmsMatchAFloat32LoopOnTheGpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a GPU";
  const auto bf16 = torch::dtype(torch::kBFloat16).device(torch::kCUDA);
  if (!compat::grouped_mm_runs(torch::zeros({1, 64}, bf16), torch::zeros({1, 32, 64}, bf16)))
    GTEST_SKIP() << "no grouped GEMMs here (LibTorch 2.8 or later, sm90)";
  GroupedExperts experts(4, 64, 32);
  for (auto& p : experts->parameters()) {
    torch::NoGradGuard no_grad;
    p.set_data((randn(p.sizes(), 5 + p.numel()) * 0.1).to(bf16));
  }
  const std::vector<int64_t> counts = {5, 0, 13, 30};
  const auto x = randn({48, 64}, 21).to(bf16).requires_grad_();
  const auto g = randn({48, 64}, 22).to(bf16);
  experts(x, torch::tensor(counts, torch::kLong).to(torch::kCUDA)).backward(g);
  // The reference: the same bf16 values, a loop of float32 SwiGLUs.
  std::vector<torch::Tensor> w, grads;
  for (auto* p : {&experts->w1->weight, &experts->w2->weight, &experts->w3->weight})
    w.push_back(p->detach().to(torch::kFloat32).requires_grad_());
  const auto xf = x.detach().to(torch::kFloat32).requires_grad_();
  std::vector<torch::Tensor> rows;
  int64_t at = 0;
  for (int64_t e = 0; e < 4; ++e) {
    rows.push_back(swiglu(xf.narrow(0, at, counts[e]), w[0][e], w[1][e], w[2][e]));
    at += counts[e];
  }
  const auto y_ref = torch::cat(rows);
  y_ref.backward(g.to(torch::kFloat32));
  const auto y = experts(x.detach(), torch::tensor(counts, torch::kLong).to(torch::kCUDA));
  auto rel = [](const torch::Tensor& a, const torch::Tensor& b) {
    return ((a.to(torch::kFloat32) - b).norm() / b.norm()).item<double>();
  };
  EXPECT_LT(rel(y, y_ref.detach()), 2e-2);
  EXPECT_LT(rel(experts->w1->weight.grad(), w[0].grad()), 2e-2);
  EXPECT_LT(rel(experts->w2->weight.grad(), w[1].grad()), 2e-2);
  EXPECT_LT(rel(experts->w3->weight.grad(), w[2].grad()), 2e-2);
  EXPECT_LT(rel(x.grad(), xf.grad()), 2e-2);                                 // through the padding's gathers
  EXPECT_EQ(experts->w1->weight.grad()[1].abs().max().item<float>(), 0.0f);  // the expert with no tokens
}

TEST(MoE, BiasMovesTowardAnEvenLoadAndKeepsItsMean) {
  Transformer model(model_flavor("tiny_moe"));
  MoE moe = model->block(1)->moe;
  moe->tokens_per_expert.fill_(3);
  moe->update_expert_bias(torch::tensor({9., 0., 3., 3., 3., 3., 3., 0.}), 1e-3);
  const auto bias = moe->expert_bias;
  EXPECT_LT(bias[0].item<double>(), 0);  // over-loaded: less likely chosen
  EXPECT_GT(bias[1].item<double>(), 0);  // under-loaded: more likely
  EXPECT_GT(bias[7].item<double>(), 0);
  EXPECT_NEAR(bias.sum().item<double>(), 0, 1e-9);
  EXPECT_EQ(moe->tokens_per_expert.sum().item<double>(), 0);  // counting starts again
}
