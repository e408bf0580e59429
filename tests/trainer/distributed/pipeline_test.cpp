// Pipeline stages and schedules, without running a model: how layers split into
// stages, and that every schedule runs each microbatch's forward before its backward,
// keeps 1F1B's bound on live microbatches, and can never deadlock when sends do not
// block and receives do (a simulation of all ranks exchanging messages).
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <tuple>

#include "distributed/pipeline.h"

using namespace meshtrain;
using pp::Action;
using pp::Schedule;

TEST(Pipeline, LayersSplitEvenlyOrAsAsked) {
  EXPECT_EQ(pp::layers_per_stage(5, 2, {}), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(pp::layers_per_stage(5, 4, {}), (std::vector<int64_t>{2, 1, 1, 1}));
  EXPECT_EQ(pp::layers_per_stage(6, 2, {}), (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(pp::layers_per_stage(5, 2, {1, 4}), (std::vector<int64_t>{1, 4}));
  auto error = [](int64_t layers, int64_t stages, std::vector<int64_t> split) {
    try {
      pp::layers_per_stage(layers, stages, split);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error(5, 2, {2, 2}), "--pp.split sums to 4 layers; the model has 5");
  EXPECT_EQ(error(5, 2, {5}), "--pp.split has 1 entries for 2 pipeline stages");
  EXPECT_EQ(error(2, 4, {}), "4 pipeline stages for 2 layers: every stage needs at least one layer");
  EXPECT_EQ(error(5, 2, {5, 0}), "--pp.split: every stage needs at least one layer");
}

TEST(Pipeline, InterleavedStagesWrapAroundTheRanks) {
  auto m = pp::stage_map(5, 2, 1, 2, {});  // stages [2, 1, 1, 1] layers; rank 1 runs stages 1 and 3
  EXPECT_EQ(m.first_layer, (std::vector<int64_t>{0, 2, 3, 4, 5}));
  EXPECT_EQ(m.layers_held(), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(pp::stage_map(5, 2, 0, 1, {}).layers_held(), (std::vector<int64_t>{0, 1, 2}));
}

TEST(Pipeline, OneFOneBStartsPpMinusRankMinusOneAhead) {
  auto s = pp::schedule(Schedule::k1F1B, 2, 0, 4, 1);
  std::vector<Action> want{{true, 0, 0},  {true, 1, 0}, {false, 0, 0}, {true, 2, 0},
                           {false, 1, 0}, {true, 3, 0}, {false, 2, 0}, {false, 3, 0}};
  EXPECT_EQ(s, want);
  auto g = pp::schedule(Schedule::kGPipe, 2, 1, 2, 1);
  EXPECT_EQ(g, (std::vector<Action>{{true, 0, 0}, {true, 1, 0}, {false, 0, 0}, {false, 1, 0}}));
}

namespace {

// Runs every rank's schedule against each other: a forward of stage s > 0 waits for the
// activation of stage s - 1, a backward of a non-last stage for the gradient of stage
// s + 1; sends never wait. Returns the ranks' peak numbers of live microbatches, or an
// empty vector on deadlock.
std::vector<int64_t> run_programs(const std::vector<std::vector<Action>>& programs, int64_t chunks) {
  const int64_t pp = static_cast<int64_t>(programs.size()), stages = pp * chunks;
  std::set<std::tuple<bool, int64_t, int64_t>> messages;  // (activation?, into stage, microbatch)
  std::vector<size_t> at(pp, 0);
  std::vector<int64_t> live(pp, 0), peak(pp, 0);
  for (bool progressed = true; progressed;) {
    progressed = false;
    for (int64_t r = 0; r < pp; ++r) {
      if (at[r] == programs[r].size()) continue;
      const Action a = programs[r][at[r]];
      const int64_t s = a.chunk * pp + r;
      if (a.forward) {
        if (s > 0 && !messages.count({true, s, a.microbatch})) continue;
        if (s + 1 < stages) messages.insert({true, s + 1, a.microbatch});
        peak[r] = std::max(peak[r], ++live[r]);
      } else {
        if (s + 1 < stages && !messages.count({false, s, a.microbatch})) continue;
        if (s > 0) messages.insert({false, s - 1, a.microbatch});
        --live[r];
      }
      ++at[r];
      progressed = true;
    }
  }
  for (int64_t r = 0; r < pp; ++r)
    if (at[r] != programs[r].size()) return {};
  return peak;
}

std::vector<int64_t> simulate(Schedule kind, int64_t pp, int64_t n, int64_t chunks) {
  std::vector<std::vector<Action>> programs;
  for (int64_t r = 0; r < pp; ++r) programs.push_back(pp::schedule(kind, pp, r, n, chunks));
  return run_programs(programs, chunks);
}

}  // namespace

TEST(Pipeline, EverySchedulePairsEachForwardWithOneLaterBackward) {
  for (auto kind : {Schedule::kGPipe, Schedule::k1F1B, Schedule::kInterleaved1F1B})
    for (int64_t pp : {2, 3, 4})
      for (int64_t n : {pp, 2 * pp}) {
        const int64_t chunks = kind == Schedule::kInterleaved1F1B ? 2 : 1;
        for (int64_t r = 0; r < pp; ++r) {
          std::map<std::pair<int64_t, int64_t>, int> state;  // 1 after forward, 2 after backward
          for (const Action& a : pp::schedule(kind, pp, r, n, chunks)) {
            auto& st = state[{a.chunk, a.microbatch}];
            EXPECT_EQ(st, a.forward ? 0 : 1) << "pp " << pp << " rank " << r << " microbatch " << a.microbatch;
            st = a.forward ? 1 : 2;
          }
          EXPECT_EQ(state.size(), static_cast<size_t>(n * chunks));
          for (const auto& [key, st] : state) EXPECT_EQ(st, 2);
        }
      }
}

TEST(Pipeline, SchedulesNeverDeadlockAndOneFOneBBoundsLiveMicrobatches) {
  for (int64_t pp : {2, 3, 4})
    for (int64_t n : {pp, 2 * pp, 4 * pp}) {
      auto gpipe = simulate(Schedule::kGPipe, pp, n, 1);
      ASSERT_FALSE(gpipe.empty()) << "gpipe deadlocks at pp " << pp << ", " << n << " microbatches";
      EXPECT_EQ(gpipe[0], n);  // every microbatch alive at once
      auto one = simulate(Schedule::k1F1B, pp, n, 1);
      ASSERT_FALSE(one.empty()) << "1f1b deadlocks at pp " << pp << ", " << n << " microbatches";
      for (int64_t r = 0; r < pp; ++r) EXPECT_LE(one[r], pp - r) << "1f1b rank " << r;
      ASSERT_FALSE(simulate(Schedule::kInterleaved1F1B, pp, n, 2).empty())
          << "interleaved deadlocks at pp " << pp << ", " << n << " microbatches";
    }
  // The simulation sees a deadlock: rank 0 waiting for a gradient before it sent the
  // activation rank 1 waits for.
  EXPECT_TRUE(run_programs({{{false, 0, 0}, {true, 0, 0}}, {{true, 0, 0}, {false, 0, 0}}}, 1).empty());
}
