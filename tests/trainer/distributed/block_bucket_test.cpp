// FSDP's per-block buckets (trainer/distributed/block_bucket.h) on two ranks, threads of this process
// over Gloo: reshard-after-forward gathers again for backward instead of running the
// block again, and the reduce-scattered gradients land in .grad by the end of backward.
#include <gtest/gtest.h>

#include <thread>

#include "distributed/block_bucket.h"
#include "distributed/comm.h"
#include "model/model.h"
#include "distributed/parallelize.h"

using namespace meshtrain;

namespace {

struct RankResult {
  int64_t block_runs = 0;                      // entries into any block's body, forward and backward
  std::map<std::string, torch::Tensor> grads;  // after one backward
  std::map<std::string, torch::Tensor> twice;  // after a second backward of the same batch
};

// One step's forward and backward of `tiny` under dp_shard=2 with `reshard`, on each rank.
std::vector<RankResult> run_fsdp2(ReshardAfterForward reshard, ActivationCheckpoint ac) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<RankResult> results(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      try {
        MeshGroups g;
        g.shape.dp_shard = 2;
        g.coord = coord_of(r, g.shape);
        const auto timeout = std::chrono::milliseconds(30000);
        g.dp_shard = make_group(store, "dp_shard", {0, 1}, r, Backend::kGloo, timeout);
        g.world = g.dp_shard_cp = g.dp_cp = g.dp_shard;
        g.dp_replicate = make_group(store, "dp_replicate", {r}, r, Backend::kGloo, timeout);
        g.cp = make_group(store, "cp", {r}, r, Backend::kGloo, timeout);
        g.pp = g.pp_activations = g.pp_activations_wrap = g.pp_gradients = g.pp_gradients_wrap =
            make_group(store, "pp", {r}, r, Backend::kGloo, timeout);
        g.tp = make_group(store, "tp", {r}, r, Backend::kGloo, timeout);
        Transformer model(model_flavor("tiny"));
        init_weights(model, 7);
        ParallelConfig config;
        config.dp.reshard_after_forward = reshard;
        config.ac.mode = ac;
        auto pm = parallelize(model, g, config, /*seq_len=*/8);
        RankResult& out = results[r];
        for (int64_t id : pm->model->layer_ids()) {
          auto block = pm->model->block(id);
          block->hooks.input = [inner = block->hooks.input, &out](const torch::Tensor& x) {
            ++out.block_runs;
            return inner(x);
          };
        }
        auto gen = at::detail::createCPUGenerator(100 + r);
        auto tokens = torch::randint(0, pm->model->args.vocab_size, {2, 9}, gen);
        auto inputs = tokens.narrow(1, 0, 8), targets = tokens.narrow(1, 1, 8);
        pm->loss(pm->model(inputs), targets).backward();
        for (const auto& p : pm->model->named_parameters()) out.grads[p.key()] = p.value().grad().clone();
        pm->loss(pm->model(inputs), targets).backward();
        for (const auto& p : pm->model->named_parameters()) out.twice[p.key()] = p.value().grad().clone();
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  return results;
}

}  // namespace

TEST(BlockBucket, ReshardGathersAgainForBackwardInsteadOfRunningTheBlockAgain) {
  const int64_t blocks = model_flavor("tiny").n_layers;
  const auto always = run_fsdp2(ReshardAfterForward::kAlways, ActivationCheckpoint::kNone);
  const auto never = run_fsdp2(ReshardAfterForward::kNever, ActivationCheckpoint::kNone);
  const auto checkpointed = run_fsdp2(ReshardAfterForward::kAlways, ActivationCheckpoint::kFull);
  for (int r = 0; r < 2; ++r) {
    // Two steps: each block's body once per forward; activation checkpointing twice.
    EXPECT_EQ(always[r].block_runs, 2 * blocks) << "rank " << r;
    EXPECT_EQ(never[r].block_runs, 2 * blocks) << "rank " << r;
    EXPECT_EQ(checkpointed[r].block_runs, 2 * 2 * blocks) << "rank " << r;
    // The regathered weights are the ones forward used: the same gradients, bit for bit.
    for (const auto& [name, grad] : never[r].grads) {
      EXPECT_TRUE(torch::equal(always[r].grads.at(name), grad)) << name << " on rank " << r;
      EXPECT_TRUE(torch::allclose(checkpointed[r].grads.at(name), grad, 1e-6, 1e-7)) << name << " on rank " << r;
    }
  }
}

TEST(BlockBucket, GradientsLandInGradAndAccumulate) {
  const auto result = run_fsdp2(ReshardAfterForward::kDefault, ActivationCheckpoint::kNone);
  for (int r = 0; r < 2; ++r)
    for (const auto& [name, grad] : result[r].grads) {
      ASSERT_TRUE(grad.defined()) << name << " has no gradient on rank " << r;
      EXPECT_GT(grad.abs().sum().item<double>(), 0.0) << name << " on rank " << r;
      EXPECT_TRUE(torch::allclose(result[r].twice.at(name), 2 * grad, 1e-5, 1e-7)) << name << " on rank " << r;
    }
  // The two ranks hold different pieces of the same mean gradient.
  EXPECT_FALSE(torch::equal(result[0].grads.at("layers.0.attention.wq.weight"),
                            result[1].grads.at("layers.0.attention.wq.weight")));
}

// The property reshard-after-forward stands on: autograd's saved reference to a weight
// shares its storage, so releasing the storage frees what autograd saved, and memory
// refilled (through an alias) before backward is what backward reads.
TEST(BlockBucket, BackwardReadsTheStorageRefilledAfterRelease) {
  auto x = torch::randn({3, 4}, torch::kFloat64).requires_grad_(true);
  auto w = torch::randn({5, 4}, torch::kFloat64);
  const auto original = w.clone();
  w.requires_grad_(true);
  auto y = torch::linear(x, w);  // saves w for x's gradient
  release_storage(w);
  EXPECT_EQ(w.storage().nbytes(), 0u);
  reallocate_storage(w);
  EXPECT_EQ(w.storage().nbytes(), static_cast<size_t>(w.numel()) * w.element_size());
  torch::from_blob(w.storage().data_ptr().get(), w.sizes(), w.options()).copy_(2 * original);
  y.sum().backward();
  EXPECT_TRUE(torch::allclose(x.grad(), torch::ones({3, 5}, torch::kFloat64).mm(2 * original)));
}
