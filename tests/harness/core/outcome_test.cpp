// launch_window: when a phase ran, as the window its metrics are read from; failing_log: the
// log a failed case points at.
#include <gtest/gtest.h>

#include <csignal>

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

// A launch that ended the moment it started (a clock's resolution) still has its window.
TEST(LaunchWindow, AZeroLengthLaunchHasTheSlackAsItsWindow) {
  const auto w = launch_window({ran(1000, 1000)}, 0);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->from, 1000 - kLaunchWindowSlackS);
  EXPECT_EQ(w->to, 1000 + kLaunchWindowSlackS);
}

// A phase that did not run this time is no neighbour, whatever times it holds (an earlier
// attempt's, say).
TEST(LaunchWindow, APhaseThatDidNotRunNeverClipsItsNeighbours) {
  PhaseOutcome stale = ran(1005, 1006);
  stale.ran = false;
  const auto w = launch_window({ran(1000, 1010), stale}, 0);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->to, 1010 + kLaunchWindowSlackS);
}

// failing_log: the log a person reads first for a failed case.
PhaseOutcome phase_in(const std::string& dir, bool ok) {
  PhaseOutcome p = ran(1000, 1010);
  p.dir = dir;
  if (!ok) p.result.first_failure.rank = 2;
  return p;
}

TEST(FailingLog, TheFirstFailedPhasesFirstFailingRank) {
  CaseOutcome o;
  o.phases = {phase_in("/c/train", true), phase_in("/c/load", false), phase_in("/c/after", false)};
  EXPECT_EQ(o.failing_log(), "/c/load/rank2.log");
  o.phases[1].result.first_failure.rank = 0;
  EXPECT_EQ(o.failing_log(), "/c/load/rank0.log");
}

// A timeout has no failed rank: the first rank still running when time ran out (the one
// SIGTERM or SIGKILL ended) is the one to read; the ranks that had exited are not.
TEST(FailingLog, ATimeoutPointsAtTheFirstRankTheStopEnded) {
  for (int stop : {SIGTERM, SIGKILL}) {
    CaseOutcome o;
    o.phases = {phase_in("/c/train", true)};
    LaunchResult& r = o.phases[0].result;
    r.timed_out = true;
    r.exits.resize(4);
    for (int i = 0; i < 4; ++i) r.exits[i].rank = i;
    r.exits[0].exit_code = 0;     // done before the timeout
    r.exits[1].signal = SIGSEGV;  // not a stop's signal
    r.exits[2].signal = stop;
    r.exits[3].signal = stop;
    EXPECT_EQ(o.failing_log(), "/c/train/rank2.log") << "stopped by signal " << stop;
  }
}

// With no failed phase (a check failed), the last phase that ran, rank 0.
TEST(FailingLog, WithoutAFailedPhaseTheLastThatRan) {
  CaseOutcome o;
  PhaseOutcome never;
  never.dir = "/c/never";
  o.phases = {phase_in("/c/train", true), phase_in("/c/load", true), never};
  EXPECT_EQ(o.failing_log(), "/c/load/rank0.log");
  o.phases = {never};
  EXPECT_EQ(o.failing_log(), "");
}

// Durations in the reports: seconds under a minute, minutes and seconds from a minute on.
TEST(HumanSeconds, SecondsUnderAMinuteThenMinutesAndSeconds) {
  EXPECT_EQ(human_seconds(0.04), "0.0 s");
  EXPECT_EQ(human_seconds(59.9), "59.9 s");
  EXPECT_EQ(human_seconds(60), "1m00s");
  EXPECT_EQ(human_seconds(3725), "62m05s");
}

}  // namespace
}  // namespace meshtest
