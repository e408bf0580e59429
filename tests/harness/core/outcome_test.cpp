// launch_window: when a phase ran, as the window its metrics are read from.
#include <gtest/gtest.h>

#include "core/outcome.h"

namespace meshtest {
namespace {

PhaseOutcome ran(double started_at, double ended_at) {
  PhaseOutcome p;
  p.ran = true;
  p.result.started_at = started_at;
  p.result.ended_at = ended_at;
  return p;
}

TEST(LaunchWindow, ItsLaunchWidenedByTheSlack) {
  const auto w = launch_window({ran(1000, 1010)}, 0);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->from, 1000 - kLaunchWindowSlackS);
  EXPECT_EQ(w->to, 1010 + kLaunchWindowSlackS);
}

// Phases that follow each other at once (torchtitan's train, then its resume): the slack never
// reaches into the next or the previous phase, so neither gets the other's last or first events.
TEST(LaunchWindow, TheSlackStopsAtThePhasesBeforeAndAfter) {
  const std::vector<PhaseOutcome> phases = {ran(1000, 1010.25), ran(1010.5, 1020), ran(1020.001, 1030)};
  const auto train = launch_window(phases, 0), load = launch_window(phases, 1), last = launch_window(phases, 2);
  ASSERT_TRUE(train && load && last);
  EXPECT_EQ(train->from, 1000 - kLaunchWindowSlackS);
  EXPECT_EQ(train->to, 1010.5);
  EXPECT_EQ(load->from, 1010.25);
  EXPECT_EQ(load->to, 1020.001);
  EXPECT_EQ(last->from, 1020);
  EXPECT_EQ(last->to, 1030 + kLaunchWindowSlackS);
  EXPECT_FALSE(train->holds(1010.6));
  EXPECT_FALSE(load->holds(1010.2));
}

TEST(LaunchWindow, NoneWithoutRecordedTimes) {
  PhaseOutcome never;  // an earlier phase failed
  std::vector<PhaseOutcome> phases = {ran(1000, 1010), never, ran(0, 0)};
  EXPECT_FALSE(launch_window(phases, 1));
  EXPECT_FALSE(launch_window(phases, 2));  // a launcher that records no times (a test's fake)
  EXPECT_FALSE(launch_window(phases, 3));
  // Neither clips the phase that has times.
  EXPECT_EQ(launch_window(phases, 0)->to, 1010 + kLaunchWindowSlackS);
}

}  // namespace
}  // namespace meshtest
