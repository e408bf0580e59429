// comm.h's promises on real Gloo groups and on the shared-memory backend of a simulated
// world (shm_comm.h): 2 to 4 ranks as threads of this process, each collective's result
// checked on every rank, uneven and empty pieces included.
#include <gtest/gtest.h>

#include <cstdlib>
#include <future>
#include <thread>

#include "distributed/comm.h"
#include "trainer/gloo_ranks.h"

using namespace meshtrain;
using meshtrain_test::run_ranks;

namespace {

// Rank r's rows of a tensor whose row i holds the value i in each of 2 columns.
torch::Tensor rows(int64_t first, int64_t count) {
  return torch::arange(first, first + count, torch::kFloat32).unsqueeze(1).repeat({1, 2});
}

class CommOn : public ::testing::TestWithParam<Backend> {
 protected:
  void run_ranks_on(int n, const std::function<void(int, Comm&)>& body) { run_ranks(n, body, GetParam()); }
};

}  // namespace

INSTANTIATE_TEST_SUITE_P(Backends, CommOn, ::testing::Values(Backend::kGloo, Backend::kShm),
                         [](const ::testing::TestParamInfo<Backend>& info) {
                           return info.param == Backend::kGloo ? std::string("gloo") : std::string("shm");
                         });

TEST(Comm, ParseBackend) {
  EXPECT_EQ(parse_backend("gloo"), Backend::kGloo);
  EXPECT_EQ(parse_backend("nccl"), Backend::kNccl);
  EXPECT_EQ(parse_backend("shm"), Backend::kShm);
  EXPECT_THROW(parse_backend("mpi"), std::invalid_argument);
}

// The launcher's variables; LOCAL_WORLD_SIZE falls back to WORLD_SIZE (one host).
TEST(Comm, LaunchEnvReadsTheLaunchersVariables) {
  setenv("RANK", "3", 1);
  setenv("WORLD_SIZE", "8", 1);
  unsetenv("LOCAL_WORLD_SIZE");
  EXPECT_EQ(LaunchEnv::from_environment().local_world_size, 8);
  setenv("LOCAL_WORLD_SIZE", "4", 1);
  const auto env = LaunchEnv::from_environment();
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.local_world_size, 4);
  setenv("LOCAL_WORLD_SIZE", "0", 1);
  EXPECT_THROW(LaunchEnv::from_environment(), std::invalid_argument);
  for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"}) unsetenv(name);
}

TEST_P(CommOn, AllReduceSumMeanMax) {
  run_ranks_on(3, [](int rank, Comm& g) {
    EXPECT_EQ(g.size(), 3);
    EXPECT_EQ(g.rank(), rank);
    auto sum = torch::full({4}, static_cast<float>(rank + 1));
    g.all_reduce_sum(sum);
    EXPECT_TRUE(sum.equal(torch::full({4}, 6.0f))) << sum;
    auto mean = torch::full({2}, static_cast<float>(rank));
    g.all_reduce_mean(mean);
    EXPECT_TRUE(mean.equal(torch::full({2}, 1.0f))) << mean;
    auto max = torch::tensor({static_cast<float>(rank), static_cast<float>(-rank)});
    g.all_reduce_max(max);
    EXPECT_TRUE(max.equal(torch::tensor({2.0f, 0.0f}))) << max;
  });
}

TEST_P(CommOn, AllGatherDim0ConcatenatesUnevenAndEmptyPieces) {
  const std::vector<int64_t> sizes{3, 0, 2, 1};  // torch.chunk never gives this; the collective must not care
  run_ranks_on(4, [&](int rank, Comm& g) {
    int64_t first = 0;
    for (int r = 0; r < rank; ++r) first += sizes[r];
    const auto full = g.all_gather_dim0(rows(first, sizes[rank]), sizes);
    EXPECT_TRUE(full.equal(rows(0, 6))) << "rank " << rank << ": " << full;
  });
}

TEST_P(CommOn, ReduceScatterSumDim0GivesEachRankItsRowsOfTheSum) {
  const std::vector<int64_t> sizes{2, 2, 1};
  run_ranks_on(3, [&](int rank, Comm& g) {
    const auto mine = g.reduce_scatter_sum_dim0(rows(0, 5) * (rank + 1), sizes);  // sum over ranks: 6x
    const int64_t first = rank * 2;
    EXPECT_TRUE(mine.equal(rows(first, sizes[rank]) * 6)) << "rank " << rank << ": " << mine;
  });
}

TEST_P(CommOn, AllToAllDim0SendsEachRankItsRowsInRankOrder) {
  // Rank r sends (r + 1) rows to every rank j, each row holding 10 * r + j.
  run_ranks_on(3, [](int rank, Comm& g) {
    std::vector<torch::Tensor> parts;
    for (int j = 0; j < 3; ++j) parts.push_back(torch::full({rank + 1, 2}, static_cast<float>(10 * rank + j)));
    const auto got = g.all_to_all_dim0(torch::cat(parts), {rank + 1, rank + 1, rank + 1}, {1, 2, 3});
    std::vector<torch::Tensor> want;
    for (int i = 0; i < 3; ++i) want.push_back(torch::full({i + 1, 2}, static_cast<float>(10 * i + rank)));
    EXPECT_TRUE(got.equal(torch::cat(want))) << "rank " << rank << ": " << got;
  });
}

TEST_P(CommOn, StartedCollectivesReturnTheirResultWhenCalled) {
  run_ranks_on(2, [](int rank, Comm& g) {
    auto gather = g.start_all_gather(torch::full({3}, static_cast<float>(rank)));
    auto reduce = g.start_reduce_scatter_sum(torch::arange(4, torch::kFloat32));
    auto all = g.start_all_reduce_sum(torch::full({2}, 1.0f));
    EXPECT_TRUE(gather().equal(torch::tensor({0.0f, 0.0f, 0.0f, 1.0f, 1.0f, 1.0f})));
    EXPECT_TRUE(reduce().equal(torch::arange(2 * rank, 2 * rank + 2, torch::kFloat32) * 2));
    EXPECT_TRUE(all().equal(torch::full({2}, 2.0f)));
  });
}

TEST_P(CommOn, SendRecvAroundARingDoesNotDeadlock) {
  run_ranks_on(3, [](int rank, Comm& g) {
    const int next = (rank + 1) % 3, previous = (rank + 2) % 3;
    const auto got = g.send_recv(torch::full({2}, static_cast<float>(rank)), next, previous);
    EXPECT_TRUE(got.equal(torch::full({2}, static_cast<float>(previous))));
  });
}

TEST_P(CommOn, PipelineMessagesOfOneTagArriveInOrder) {
  run_ranks_on(2, [](int rank, Comm& g) {
    if (rank == 0) {
      std::vector<InFlight> sent;
      for (int i = 0; i < 3; ++i) sent.push_back(g.start_send(torch::full({2}, static_cast<float>(i)), 1, /*tag=*/7));
      sent.push_back(g.start_send(torch::full({1}, 42.0f), 1, /*tag=*/8));
      for (auto& s : sent) s();
    } else {
      auto other = torch::empty({1});
      g.recv(other, 0, 8);  // another tag is not held up by tag 7's queue
      EXPECT_EQ(other.item<float>(), 42.0f);
      for (int i = 0; i < 3; ++i) {
        auto t = torch::empty({2});
        g.recv(t, 0, 7);
        EXPECT_TRUE(t.equal(torch::full({2}, static_cast<float>(i)))) << "message " << i;
      }
    }
    g.barrier();
  });
}

TEST_P(CommOn, OneRankGroupIsTheIdentityAndCountsNothing) {
  run_ranks_on(1, [](int, Comm& g) {
    comm_volume() = CommVolume{};
    auto t = torch::tensor({1.0f, 2.0f});
    g.all_reduce_sum(t);
    EXPECT_TRUE(t.equal(torch::tensor({1.0f, 2.0f})));
    EXPECT_TRUE(g.all_gather_dim0(t, {2}).equal(t));
    EXPECT_TRUE(g.start_all_gather(t)().equal(t));
    EXPECT_EQ(comm_volume().all_reduce_calls, 0);
    EXPECT_EQ(comm_volume().all_gather_calls, 0);
  });
}

// Tensors larger than a rank's slot (4 MiB) go through in rounds; every element arrives.
TEST(ShmComm, TensorsLargerThanASlotGoThroughInRounds) {
  const int64_t n = 3 * 1024 * 1024 + 7;  // 12 MiB of float32, not a multiple of a round
  run_ranks(
      3,
      [&](int rank, Comm& g) {
        auto t = torch::arange(n, torch::kFloat32) * (rank + 1);
        g.all_reduce_sum(t);
        EXPECT_TRUE(t.equal(torch::arange(n, torch::kFloat32) * 6)) << "rank " << rank;
        auto gathered = g.start_all_gather(torch::full({n}, static_cast<float>(rank)))();
        for (int r = 0; r < 3; ++r)
          EXPECT_TRUE(gathered.narrow(0, r * n, n).equal(torch::full({n}, static_cast<float>(r)))) << "piece " << r;
        auto mine = g.start_reduce_scatter_sum(torch::ones({3 * n}))();
        EXPECT_TRUE(mine.equal(torch::full({n}, 3.0f))) << "rank " << rank;
      },
      Backend::kShm);
}

// 16-bit tensors are summed in float32 and rounded once: 256 + 3 x 0.5 = 257.5 rounds to
// 258 in bfloat16 (spacing 2 there), where adding 0.5 three times in bfloat16 stays at 256.
TEST(ShmComm, Bfloat16SumsInFloat32AndRoundsOnce) {
  run_ranks(
      4,
      [](int rank, Comm& g) {
        auto t = torch::full({8}, rank == 0 ? 256.0f : 0.5f).to(torch::kBFloat16);
        g.all_reduce_sum(t);
        EXPECT_EQ(t.scalar_type(), torch::kBFloat16);
        EXPECT_TRUE(t.to(torch::kFloat32).equal(torch::full({8}, 258.0f))) << t;
      },
      Backend::kShm);
}

// A peer that never arrives fails the collective after the timeout, naming the group; one
// that leaves the group (its process died, or it closed the group) fails it at once (the
// message only the liveness check writes; the timeout would say "never arrived").
TEST(ShmComm, MissingPeerFailsTheCollectiveInsteadOfHanging) {
  for (const bool leaves : {false, true}) {
    auto store = c10::make_intrusive<c10d::HashStore>();
    std::string error;
    std::promise<void> done;
    std::thread late([&, waiting = done.get_future()] {
      auto g = make_group(store, "lonely", {0, 1}, 1, Backend::kShm, std::chrono::milliseconds(leaves ? 60000 : 500));
      if (!leaves) waiting.wait();  // in the group, never in a collective
    });
    try {
      auto g = make_group(store, "lonely", {0, 1}, 0, Backend::kShm, std::chrono::milliseconds(leaves ? 60000 : 500));
      auto t = torch::ones({4});
      g->all_reduce_sum(t);
    } catch (const std::exception& e) {
      error = e.what();
    }
    done.set_value();
    late.join();
    EXPECT_NE(error.find("group lonely"), std::string::npos) << error;
    EXPECT_NE(error.find(leaves ? "global rank 1 left the group" : "never arrived"), std::string::npos) << error;
  }
}
