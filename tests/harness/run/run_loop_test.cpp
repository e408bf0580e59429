// Every transition of the run loop's state machine (run_loop.h), including a stop
// signal in every state. Phases are scripted processes, so each test decides exactly
// when a phase ends and how; the real processes are exercised by run_test.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "core/matrix.h"
#include "core/plan.h"
#include "run/run_loop.h"

namespace fs = std::filesystem;
using namespace meshtest;

namespace {

// A phase the test ends by hand.
struct Script {
  bool done = false;
  bool lost_port = false;
  std::string stop_reason;  // set by the loop's stop()
  RankGroup::Result result;
  std::string launch_error;  // found after the start, as a batch system's refusal is
  int launches = 0;
};

class ScriptedProcess : public PhaseProcess {
 public:
  explicit ScriptedProcess(std::shared_ptr<Script> s) : s_(std::move(s)) {}
  bool poll() override { return s_->done; }
  void stop(const std::string& reason) override { s_->stop_reason = reason; }
  const RankGroup::Result& result() const override { return s_->result; }
  bool lost_port_race() const override { return s_->lost_port; }
  std::vector<pid_t> pids() const override { return {}; }
  std::string launch_error() const override { return s_->launch_error; }

 private:
  std::shared_ptr<Script> s_;
};

class RunLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/meshtest-loop-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    opt_.out_dir = dir_ + "/out";
    opt_.devices = 4;
  }
  void TearDown() override { fs::remove_all(dir_); }

  void load(const std::string& cases) {
    suite_ = load_suite_text("suite: s\ndefaults: {command: [fake], ngpu: 2}\ncases:\n" + cases, dir_ + "/m.yaml");
    std::vector<const Case*> selected;
    for (const auto& c : suite_.cases) selected.push_back(&c);
    Launcher launcher{[this](const LaunchSpec& spec) -> std::unique_ptr<PhaseProcess> {
                        std::string id, phase;
                        for (const auto& [k, v] : spec.env) {
                          if (k == "MESHTEST_CASE_ID") id = v;
                          if (k == "MESHTEST_PHASE") phase = v;
                        }
                        if (unstartable_ == id + ":" + phase) throw LaunchError("cannot start fake: not found");
                        started_cases_.insert(id);
                        auto& s = scripts_[id + ":" + phase];
                        if (!s) s = std::make_shared<Script>();
                        s->done = false;
                        s->stop_reason.clear();
                        ++s->launches;
                        return std::make_unique<ScriptedProcess>(s);
                      },
                      [](const std::set<pid_t>&) {}};
    if (room_ >= 0) {
      launcher.has_room = [this] { return static_cast<int>(started_cases_.size() - ended_cases_.size()) < room_; };
      launcher.case_ended = [this](const std::string& id) { ended_cases_.push_back(id); };
    }
    loop_ = std::make_unique<RunLoop>(plan_run(selected, opt_, {}), opt_, std::move(launcher));
  }
  size_t index(const std::string& name) const {
    for (size_t i = 0; i < loop_->size(); ++i)
      if (loop_->outcome(i).spec->name == name) return i;
    throw std::logic_error("no case " + name);
  }
  CaseState state(const std::string& name) const { return loop_->state(index(name)); }
  const CaseOutcome& outcome(const std::string& name) const { return loop_->outcome(index(name)); }
  Script& script(const std::string& name, const std::string& phase = "train") {
    return *scripts_.at("s/" + name + ":" + phase);
  }
  bool launched(const std::string& name, const std::string& phase = "train") const {
    return scripts_.count("s/" + name + ":" + phase) > 0;
  }
  // Ends a phase: every rank exits 0, or rank `failing` with `code` (or a signal).
  void end(const std::string& name, const std::string& phase = "train", int failing = -1, int code = 1,
           int signal = 0) {
    Script& s = script(name, phase);
    s.result = RankGroup::Result{};
    s.result.exits = {{0, 0, 0}, {1, 0, 0}};
    if (failing >= 0) {
      s.result.exits[failing] = {failing, signal ? 0 : code, signal};
      s.result.first_failure = s.result.exits[failing];
      s.result.stopped_because = "rank " + std::to_string(failing) + " failed";
    }
    s.done = true;
  }
  // Ends a phase the loop asked to stop: its ranks died of SIGTERM.
  void end_stopped(const std::string& name, const std::string& phase = "train") {
    Script& s = script(name, phase);
    ASSERT_FALSE(s.stop_reason.empty()) << name << " was not asked to stop";
    s.result = RankGroup::Result{};
    s.result.exits = {{0, 0, SIGTERM}, {1, 0, SIGTERM}};
    s.result.stopped_because = s.stop_reason;
    s.done = true;
  }
  bool turn(int signal = 0) { return loop_->turn(now_ += 1.0, signal); }

  std::string dir_;
  RunOptions opt_;
  Suite suite_;
  std::unique_ptr<RunLoop> loop_;
  std::map<std::string, std::shared_ptr<Script>> scripts_;
  std::string unstartable_;
  int room_ = -1;  // >= 0: a batch launcher that holds this many cases at once
  std::set<std::string> started_cases_;
  std::vector<std::string> ended_cases_;
  double now_ = 0;
};

}  // namespace

// ---- without a stop ----------------------------------------------------------------

TEST_F(RunLoopTest, PendingToRunningToFinal) {
  load("  - name: a\n");
  EXPECT_EQ(state("a"), CaseState::kPending);
  EXPECT_TRUE(turn());
  EXPECT_EQ(state("a"), CaseState::kRunning);
  EXPECT_TRUE(turn());
  EXPECT_EQ(state("a"), CaseState::kRunning) << "still running until its ranks are reaped";
  end("a");
  EXPECT_FALSE(turn()) << "every case is final";
  EXPECT_EQ(state("a"), CaseState::kFinal);
  EXPECT_EQ(outcome("a").verdict.kind, VerdictKind::kPassed);
  EXPECT_DOUBLE_EQ(outcome("a").duration_s, 2.0);
}

TEST_F(RunLoopTest, RunningToRunningForTheNextPhaseAndFinalAtTheFirstFailure) {
  load("  - name: a\n    phases:\n      - {name: save}\n      - {name: load}\n      - {name: check}\n");
  turn();
  end("a", "save");
  turn();
  EXPECT_EQ(state("a"), CaseState::kRunning);
  ASSERT_TRUE(launched("a", "load"));
  end("a", "load", 1, 0, SIGSEGV);
  EXPECT_FALSE(turn());
  EXPECT_FALSE(launched("a", "check")) << "a phase after a failure must not run";
  const Verdict& v = outcome("a").verdict;
  EXPECT_EQ(v.kind, VerdictKind::kCrashed);
  EXPECT_EQ(v.phase, "load");
  EXPECT_EQ(v.rank, 1);
  EXPECT_EQ(v.signal, SIGSEGV);
}

TEST_F(RunLoopTest, ALaunchErrorGoesStraightToFinal) {
  load("  - name: a\n");
  unstartable_ = "s/a:train";
  EXPECT_FALSE(turn());
  EXPECT_EQ(outcome("a").verdict.kind, VerdictKind::kLaunchError);
  EXPECT_EQ(outcome("a").reason(), "exit: phase train: cannot start fake: not found");
}

TEST_F(RunLoopTest, ABatchLauncherWithoutRoomHoldsCasesBackAndHearsWhenEachEnds) {
  room_ = 1;
  load("  - name: a\n  - name: b\n    phases:\n      - {name: save}\n      - {name: load}\n");
  turn();
  EXPECT_EQ(scripts_.size(), 1u) << "the pool fits both; the launcher has room for one";
  const std::string first = launched("a") ? "a" : "b";
  const std::string first_phase = first == "a" ? "train" : "save";
  end(first, first_phase);
  turn();
  if (first == "b") {
    EXPECT_TRUE(ended_cases_.empty()) << "b holds its allocation between its phases";
    end("b", "load");
    turn();
  }
  EXPECT_EQ(ended_cases_, std::vector<std::string>{"s/" + first});
  const std::string second = first == "a" ? "b" : "a";
  turn();
  ASSERT_TRUE(launched(second, second == "a" ? "train" : "save")) << "started once the first gave its room back";
}

TEST_F(RunLoopTest, ALaunchErrorFoundAfterTheStartIsALaunchError) {
  load("  - name: a\n");
  turn();
  script("a").launch_error = "Slurm refused the allocation: Invalid partition name specified";
  script("a").done = true;
  EXPECT_FALSE(turn());
  EXPECT_EQ(outcome("a").verdict.kind, VerdictKind::kLaunchError);
  EXPECT_EQ(outcome("a").reason(), "exit: phase train: Slurm refused the allocation: Invalid partition name specified");
}

TEST_F(RunLoopTest, ALostPortRaceStartsTheSamePhaseAgain) {
  load("  - name: a\n");
  turn();
  end("a", "train", 0, 1);
  script("a").lost_port = true;
  turn();
  EXPECT_EQ(state("a"), CaseState::kRunning);
  EXPECT_EQ(script("a").launches, 2);
  script("a").lost_port = false;
  end("a");
  EXPECT_FALSE(turn());
  EXPECT_EQ(outcome("a").verdict.kind, VerdictKind::kPassed);
  EXPECT_EQ(outcome("a").phases[0].attempts, 2);
}

TEST_F(RunLoopTest, SkippedCasesGoFromPendingToFinalWithoutDevices) {
  load("  - name: a\n    expect: {skip: no pipeline parallel}\n  - name: wide\n    ngpu: 8\n");
  EXPECT_FALSE(turn());
  EXPECT_EQ(outcome("a").verdict.kind, VerdictKind::kSkipped);
  EXPECT_EQ(outcome("wide").reason(), "needs 8 CPU slots; --ngpu is 4");
  EXPECT_TRUE(scripts_.empty());
}

TEST_F(RunLoopTest, ACaseAwaitsItsBaselineThenIsJudged) {
  load("  - name: a\n  - name: b\n    checks: [{loss_matches: {baseline: a}}]\n");
  turn();
  end("b");
  turn();
  EXPECT_EQ(state("b"), CaseState::kAwaiting);
  EXPECT_EQ(state("a"), CaseState::kRunning);
  end("a");
  EXPECT_FALSE(turn());
  EXPECT_EQ(state("b"), CaseState::kFinal);
  // Judged against the finished baseline: its metrics are missing, and the check says so.
  EXPECT_EQ(outcome("b").verdict.kind, VerdictKind::kNotJudged);
  EXPECT_NE(outcome("b").reason().find("metrics.jsonl"), std::string::npos) << outcome("b").reason();
}

TEST_F(RunLoopTest, AMissedExpectationIsRetriedFromPending) {
  opt_.retries = 1;
  load("  - name: a\n");
  turn();
  end("a", "train", 1, 3);
  turn();
  EXPECT_EQ(state("a"), CaseState::kPending) << "requeued";
  ASSERT_EQ(outcome("a").earlier_attempts.size(), 1u);
  turn();
  EXPECT_EQ(state("a"), CaseState::kRunning);
  EXPECT_EQ(script("a").launches, 2);
  EXPECT_EQ(outcome("a").earlier_attempts[0].verdict.kind, VerdictKind::kExitCode);
  EXPECT_TRUE(fs::exists(outcome("a").dir + ".attempt1"));
  end("a");
  EXPECT_FALSE(turn());
  EXPECT_EQ(outcome("a").verdict.kind, VerdictKind::kPassed);
}

// ---- a stop signal in every state ------------------------------------------------------

TEST_F(RunLoopTest, StopWhilePendingCancelsWithoutRunning) {
  opt_.devices = 2;
  load("  - name: a\n  - name: b\n");
  turn();
  const std::string waiting = state("a") == CaseState::kPending ? "a" : "b";
  const std::string running = waiting == "a" ? "b" : "a";
  ASSERT_EQ(state(waiting), CaseState::kPending);
  turn(SIGINT);
  EXPECT_EQ(state(waiting), CaseState::kFinal);
  EXPECT_EQ(outcome(waiting).verdict.kind, VerdictKind::kCancelled);
  EXPECT_EQ(outcome(waiting).reason(), "not run: meshtest received signal 2");
  EXPECT_FALSE(launched(waiting));
  EXPECT_EQ(state(running), CaseState::kRunning);
}

TEST_F(RunLoopTest, StopWhileRunningStopsTheRanksThenCancels) {
  load("  - name: a\n    phases:\n      - {name: save}\n      - {name: load}\n");
  turn();
  EXPECT_TRUE(turn(SIGTERM));
  EXPECT_EQ(script("a", "save").stop_reason, "meshtest received signal 15");
  EXPECT_EQ(state("a"), CaseState::kRunning) << "final only once its ranks are reaped";
  end_stopped("a", "save");
  EXPECT_FALSE(turn());
  EXPECT_FALSE(launched("a", "load")) << "no new phase after a stop";
  EXPECT_EQ(outcome("a").verdict.kind, VerdictKind::kCancelled);
  EXPECT_EQ(outcome("a").reason(), "meshtest received signal 15");
}

TEST_F(RunLoopTest, StopWhileAwaitingCancelsAsNotJudged) {
  load("  - name: a\n  - name: b\n    checks: [{loss_matches: {baseline: a}}]\n");
  turn();
  end("b");
  turn();
  ASSERT_EQ(state("b"), CaseState::kAwaiting);
  turn(SIGINT);
  EXPECT_EQ(state("b"), CaseState::kFinal);
  EXPECT_EQ(outcome("b").verdict.kind, VerdictKind::kCancelled);
  EXPECT_EQ(outcome("b").reason(), "not judged: its baseline did not run before meshtest received signal 2");
  EXPECT_FALSE(outcome("b").checks.empty()) << "what could be checked is still shown";
  end_stopped("a");
  EXPECT_FALSE(turn());
  EXPECT_EQ(outcome("a").verdict.kind, VerdictKind::kCancelled);
}

TEST_F(RunLoopTest, StopWhileACaseAndItsBaselineBothRunCancelsBothWhicheverEndsFirst) {
  load("  - name: a\n  - name: b\n    checks: [{loss_matches: {baseline: a}}]\n");
  turn();
  turn(SIGINT);
  end_stopped("b");
  turn();
  EXPECT_EQ(state("b"), CaseState::kFinal) << "it must not wait for a baseline after a stop";
  EXPECT_EQ(outcome("b").verdict.kind, VerdictKind::kCancelled);
  end_stopped("a");
  EXPECT_FALSE(turn());
}

TEST_F(RunLoopTest, StopWhileRetryingCancelsAndKeepsTheEarlierAttempt) {
  opt_.retries = 2;
  opt_.devices = 2;
  load("  - name: a\n  - name: b\n");
  turn();
  ASSERT_EQ(state("a"), CaseState::kRunning) << "equal cases start in id order";
  ASSERT_EQ(state("b"), CaseState::kPending);
  end("a", "train", 0, 1);
  turn();  // a's phase ends after this turn's picks: it waits in pending for its retry
  ASSERT_EQ(state("a"), CaseState::kPending);
  ASSERT_EQ(outcome("a").earlier_attempts.size(), 1u);
  EXPECT_FALSE(turn(SIGINT));
  EXPECT_EQ(outcome("a").verdict.kind, VerdictKind::kCancelled);
  EXPECT_EQ(outcome("a").earlier_attempts.size(), 1u);
  EXPECT_EQ(script("a").launches, 1);
}

TEST_F(RunLoopTest, StopWhenFinalKeepsTheVerdict) {
  load("  - name: a\n  - name: b\n");
  turn();
  end("a");
  turn();
  ASSERT_EQ(state("a"), CaseState::kFinal);
  turn(SIGINT);
  EXPECT_EQ(outcome("a").verdict.kind, VerdictKind::kPassed);
  end_stopped("b");
  EXPECT_FALSE(turn());
  EXPECT_EQ(outcome("b").verdict.kind, VerdictKind::kCancelled);
}
