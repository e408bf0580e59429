// Each tensor-parallel autograd function, run on 2 or 3 ranks (threads of this process
// over Gloo), against plain autograd on the full tensors in float64.
#include <gtest/gtest.h>

#include <numeric>
#include <thread>

#include "distributed/comm.h"
#include "trainer/gloo_ranks.h"
#include "base/compat.h"
#include "distributed/mappings.h"
#include "contract/placement.h"

using namespace meshtrain;
using namespace contract;
using meshtrain_test::randn;
using meshtrain_test::run_ranks;

namespace {

torch::Tensor piece(const torch::Tensor& t, int dim, int64_t parts, int64_t index) {
  auto c = local_chunk(t.sizes().vec(), {{dim, parts, index}});
  return t.narrow(dim, c.offsets[dim], c.sizes[dim]);
}

void expect_close(const torch::Tensor& got, const torch::Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  EXPECT_LT((got - want).abs().max().item<double>(), 1e-10) << what;
}

// An MLP through a column- then a row-parallel layer: the pattern of attention and
// feed-forward. Full: y = (x W^T) V^T, loss = sum(y * r).
struct Mlp {
  torch::Tensor x = randn({2, 6, 4}, 1), w = randn({5, 4}, 2), v = randn({4, 5}, 3), r = randn({2, 6, 4}, 4);
  torch::Tensor dx, dw, dv;
  Mlp() {
    auto xg = x.clone().requires_grad_(true), wg = w.clone().requires_grad_(true), vg = v.clone().requires_grad_(true);
    (torch::linear(torch::linear(xg, wg), vg) * r).sum().backward();
    dx = xg.grad(), dw = wg.grad(), dv = vg.grad();
  }
};

}  // namespace

TEST(TpMappings, CopyToThenReduceFromMatchFullAutograd) {
  Mlp full;
  for (int n : {2, 3}) {  // 5 hidden features: uneven over 2 and 3
    run_ranks(n, [&](int rank, Comm& tp) {
      auto x = full.x.clone().requires_grad_(true);
      auto w = piece(full.w, 0, n, rank).clone().requires_grad_(true);  // column-parallel rows
      auto v = piece(full.v, 1, n, rank).clone().requires_grad_(true);  // row-parallel columns
      auto y = tp::reduce_from_tp(torch::linear(torch::linear(tp::copy_to_tp(x, tp), w), v), tp);
      (y * full.r).sum().backward();
      expect_close(x.grad(), full.dx, "dx");  // copy_to_tp's backward summed the partial grads
      expect_close(w.grad(), piece(full.dw, 0, n, rank), "dW piece");
      expect_close(v.grad(), piece(full.dv, 1, n, rank), "dV piece");
    });
  }
}

TEST(TpMappings, SequenceParallelGatherAndReduceScatterMatchFullAutograd) {
  Mlp full;
  for (int n : {2, 3}) {  // 6 tokens over 2 and 3
    run_ranks(n, [&](int rank, Comm& tp) {
      const auto seq = shard_sizes(6, n);
      auto x = piece(full.x, 1, n, rank).clone().requires_grad_(true);  // this rank's tokens
      auto w = piece(full.w, 0, n, rank).clone().requires_grad_(true);
      auto v = piece(full.v, 1, n, rank).clone().requires_grad_(true);
      auto gathered = tp::gather_from_tp(x, tp, 1, seq);
      auto y = tp::reduce_scatter_to_tp(torch::linear(torch::linear(gathered, w), v), tp, 1, seq);
      expect_close(y.detach(), piece(torch::linear(torch::linear(full.x, full.w), full.v), 1, n, rank), "y piece");
      (y * piece(full.r, 1, n, rank)).sum().backward();
      expect_close(x.grad(), piece(full.dx, 1, n, rank), "dx piece");
      expect_close(w.grad(), piece(full.dw, 0, n, rank), "dW piece");
      expect_close(v.grad(), piece(full.dv, 1, n, rank), "dV piece");
    });
  }
}

TEST(TpMappings, GatherReplicatedKeepsThisRanksGradient) {
  auto x = randn({3, 7}, 5), r = randn({3, 7}, 6);
  run_ranks(2, [&](int rank, Comm& tp) {
    auto mine = piece(x, 1, 2, rank).clone().requires_grad_(true);
    auto all = tp::gather_replicated_from_tp(mine, tp, 1, shard_sizes(7, 2));
    expect_close(all.detach(), x, "gathered");
    (all * r).sum().backward();
    expect_close(mine.grad(), piece(r, 1, 2, rank), "grad piece");
  });
}

TEST(TpMappings, VocabShardedEmbeddingMatchesFullLookup) {
  auto table = randn({7, 3}, 7);  // 7 rows over 2 ranks: 4 + 3
  auto ids = torch::tensor({{0, 6, 3, 4}, {5, 1, 2, 6}}, torch::kInt64);
  auto r = randn({2, 4, 3}, 8);
  auto tg = table.clone().requires_grad_(true);
  (torch::embedding(tg, ids) * r).sum().backward();
  run_ranks(2, [&](int rank, Comm& tp) {
    const int64_t start = local_chunk({7, 3}, {{0, 2, rank}}).offsets[0];
    auto w = piece(table, 0, 2, rank).clone().requires_grad_(true);
    auto out = tp::reduce_from_tp(tp::masked_embedding(ids, w, start), tp);
    expect_close(out.detach(), torch::embedding(table, ids), "lookup");
    (out * r).sum().backward();
    expect_close(w.grad(), piece(tg.grad(), 0, 2, rank), "dW rows");
  });
}

TEST(TpMappings, VocabParallelCrossEntropyMatchesFullCrossEntropy) {
  auto logits = randn({5, 7}, 9) * 3;
  auto targets = torch::tensor({0, 6, 3, 4, 2}, torch::kInt64);
  auto lg = logits.clone().requires_grad_(true);
  auto want = torch::cross_entropy_loss(lg, targets);
  want.backward();
  for (int n : {2, 3}) {
    run_ranks(n, [&](int rank, Comm& tp) {
      const int64_t start = local_chunk({5, 7}, {{1, n, rank}}).offsets[1];
      auto mine = piece(logits, 1, n, rank).clone().requires_grad_(true);
      auto loss = tp::vocab_parallel_cross_entropy(mine, targets, tp, start);
      EXPECT_NEAR(loss.item<double>(), want.item<double>(), 1e-12);
      loss.backward();
      expect_close(mine.grad(), piece(lg.grad(), 1, n, rank), "dlogits piece");
    });
  }
}

TEST(EpMappings, ExchangeTokensSendsRowsToTheirRanksAndGradientsBack) {
  // Rank r sends (r + 1) * (j + 1) rows to rank j, each row tagged (source, index); the
  // backward of sum(received * weight) must give each sent row its receiver's weight.
  const int n = 3;
  run_ranks(n, [&](int rank, Comm& ep) {
    std::vector<int64_t> send_rows, recv_rows;
    for (int j = 0; j < n; ++j) {
      send_rows.push_back((rank + 1) * (j + 1));
      recv_rows.push_back((j + 1) * (rank + 1));
    }
    const int64_t sent = std::accumulate(send_rows.begin(), send_rows.end(), int64_t{0});
    auto x =
        torch::stack(
            {torch::full({sent}, static_cast<double>(rank), torch::kFloat64), torch::arange(sent, torch::kFloat64)}, 1)
            .requires_grad_(true);  // [sent, 2]
    auto got = ep::exchange_tokens(x, ep, send_rows, recv_rows);
    int64_t row = 0;
    for (int i = 0; i < n; ++i) {  // from rank i: its rows for this rank, in order
      int64_t first = 0;
      for (int j = 0; j < rank; ++j) first += (i + 1) * (j + 1);
      for (int64_t k = 0; k < recv_rows[i]; ++k, ++row) {
        EXPECT_EQ(got[row][0].item<double>(), i);
        EXPECT_EQ(got[row][1].item<double>(), first + k);
      }
    }
    (got * (rank + 10)).sum().backward();
    int64_t at = 0;
    for (int j = 0; j < n; ++j)
      for (int64_t k = 0; k < send_rows[j]; ++k, ++at) EXPECT_EQ(x.grad()[at][0].item<double>(), j + 10);
  });
}
