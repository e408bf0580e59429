// The scheduler on synthetic workloads: never oversubscribes, orders longest
// first, backfills without delaying the head, skips what cannot fit, shards evenly.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "core/schedule.h"

using namespace meshtest;

namespace {
std::vector<Task> random_tasks(unsigned seed, int count, int max_gpus) {
  std::mt19937 rng(seed);
  std::vector<Task> tasks;
  const int widths[] = {1, 2, 4, 8};
  for (int i = 0; i < count; ++i) {
    int k = widths[rng() % 4];
    while (k > max_gpus) k /= 2;
    tasks.push_back({k, 1.0 + static_cast<double>(rng() % 1000) / 10.0, "t" + std::to_string(i)});
  }
  return tasks;
}
}  // namespace

TEST(DevicePool, HandsOutContiguousBlocksAndNeverMoreThanFree) {
  DevicePool pool(8);
  const auto a = pool.acquire(2);
  const auto b = pool.acquire(4);
  EXPECT_EQ(a, (std::vector<int>{0, 1}));
  EXPECT_EQ(b, (std::vector<int>{2, 3, 4, 5}));
  pool.release(a);
  EXPECT_EQ(pool.acquire(3), (std::vector<int>{0, 1, 6}));  // no block of 3: lowest free ids
  EXPECT_EQ(pool.free(), 1);
  EXPECT_THROW(pool.acquire(2), std::logic_error);
  EXPECT_THROW(pool.release({0, 0}), std::logic_error);
}

TEST(Scheduler, NeverOversubscribesAndRunsEveryTaskOnce) {
  for (unsigned seed = 0; seed < 20; ++seed) {
    const auto tasks = random_tasks(seed, 60, 8);
    const auto sim = simulate(tasks, 8);
    // Replay the schedule: at every start, the devices in use are distinct and <= 8.
    for (size_t i = 0; i < tasks.size(); ++i) {
      ASSERT_GE(sim.start[i], 0) << "task " << i << " never started";
      ASSERT_EQ(sim.devices[i].size(), static_cast<size_t>(tasks[i].ngpu));
      std::set<int> in_use;
      for (size_t j = 0; j < tasks.size(); ++j) {
        const bool overlaps = sim.start[j] <= sim.start[i] && sim.start[i] < sim.start[j] + tasks[j].expected_s;
        if (!overlaps) continue;
        for (int d : sim.devices[j]) {
          EXPECT_TRUE(in_use.insert(d).second) << "device " << d << " given twice (seed " << seed << ")";
          EXPECT_LT(d, 8);
        }
      }
    }
    EXPECT_LE(sim.peak_devices, 8);
    EXPECT_GE(sim.makespan + 1e-9, makespan_lower_bound(tasks, 8));
  }
}

TEST(Scheduler, BaselinesRunFirstSoTheirDependentsAreJudgedWithoutWaiting) {
  Task base{1, 1, "base"};
  base.baseline = true;
  const auto sim = simulate({{1, 5, "long"}, base, {1, 3, "mid"}}, 1);
  EXPECT_EQ(sim.start, (std::vector<double>{1, 0, 6}));
}

TEST(Scheduler, LongestFirstOnOneDevice) {
  const auto sim = simulate({{1, 1, "a"}, {1, 3, "b"}, {1, 2, "c"}}, 1);
  EXPECT_EQ(sim.start, (std::vector<double>{5, 0, 3}));
}

TEST(Scheduler, BackfillsOnlyWhatDoesNotDelayTheHead) {
  Scheduler s({{2, 100, "running"}, {4, 50, "head"}, {1, 5, "short"}, {1, 20, "long"}}, 4);
  // With 2 of 4 devices free, "running" starts; nothing else fits beside it.
  ASSERT_EQ(s.pick(0, 2, {}), std::vector<int>{0});
  // At t=95 the head (all 4 devices) is reserved for t=100, when "running" ends.
  // "short" ends by then and backfills; "long" would hold a device the head needs.
  EXPECT_EQ(s.pick(95, 2, {{0, 100}}), std::vector<int>{2});
  EXPECT_EQ(s.pick(100, 4, {}), std::vector<int>{1});  // the head starts on time
}

TEST(Scheduler, OversizedTasksAreNeverStarted) {
  Scheduler s({{8, 1, "big"}, {2, 1, "small"}}, 4);
  EXPECT_EQ(s.oversized(), std::vector<int>{0});
  EXPECT_EQ(s.pick(0, 4, {}), std::vector<int>{1});
  EXPECT_TRUE(s.queue_empty());
  const auto sim = simulate({{8, 1, "big"}, {2, 1, "small"}}, 4);
  EXPECT_EQ(sim.start[0], -1);
}

TEST(Scheduler, MaxParallelLimitsCasesInFlight) {
  const auto sim = simulate({{1, 1, "a"}, {1, 1, "b"}, {1, 1, "c"}}, 8, 1);
  EXPECT_DOUBLE_EQ(sim.makespan, 3);
}

TEST(Shards, CoverEveryTaskOnceKeepGroupsTogetherAndBalance) {
  const auto tasks = random_tasks(7, 40, 8);
  std::vector<int> group(tasks.size());
  for (size_t i = 0; i < tasks.size(); ++i) group[i] = static_cast<int>(i);
  group[5] = group[6] = group[7] = 5;  // a case and two that use it as a baseline
  const auto shard = assign_shards(tasks, group, 3);
  EXPECT_EQ(shard, assign_shards(tasks, group, 3));  // every runner computes the same split
  EXPECT_EQ(shard[5], shard[6]);
  EXPECT_EQ(shard[5], shard[7]);
  std::vector<double> load(3, 0);
  double largest = 0;
  for (size_t i = 0; i < tasks.size(); ++i) {
    ASSERT_GE(shard[i], 0);
    ASSERT_LT(shard[i], 3);
    load[shard[i]] += tasks[i].ngpu * tasks[i].expected_s;
    largest = std::max(largest, tasks[i].ngpu * tasks[i].expected_s);
  }
  const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
  EXPECT_LE(*hi - *lo, 3 * largest);  // group 5-7 counts as one item of up to three tasks
}
