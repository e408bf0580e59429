// Ranks as threads of one test process: body(rank, group) on `n` threads, each a rank of
// one group over an in-memory store (Gloo unless `backend` says shm). Fails the test with each rank's error. Also the
// seeded float64 tensors the multi-rank tests compare against plain autograd with.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "distributed/comm.h"

namespace meshtrain_test {

inline void run_ranks(int n, const std::function<void(int, meshtrain::Comm&)>& body,
                      meshtrain::Backend backend = meshtrain::Backend::kGloo) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<int64_t> ranks;
  for (int r = 0; r < n; ++r) ranks.push_back(r);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(n);
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        auto comm = meshtrain::make_group(store, "group", ranks, r, backend, std::chrono::seconds(30));
        body(r, *comm);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) ASSERT_EQ(errors[r], "") << "rank " << r;
}

// A float64 tensor of standard normals that depends only on `seed` (every rank draws the same).
inline torch::Tensor randn(at::IntArrayRef shape, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  return torch::empty(shape, torch::kFloat64).normal_(0, 1, gen);
}

}  // namespace meshtrain_test
