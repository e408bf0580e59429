// The run history (harness/history/): recording summaries, a case's runs, flaky and slow cases,
// drift against the band of green runs, merging histories, and what a damaged or concurrently
// written database does. Summaries are written here as meshtest writes them (summary.json's
// fields), so no run is needed.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include <sqlite3.h>

#include "history/drift.h"
#include "history/history.h"
#include "history/record.h"
#include "history/run_history.h"
#include "core/matrix.h"
#include "judge/judge.h"

namespace fs = std::filesystem;
using namespace meshtest;
using nlohmann::json;

namespace {

class HistoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("meshtest-history-test-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    db_ = (dir_ / "history.db").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A summary of one run: each case passed (or as `status`) with a 5-step loss curve
  // 6, 5, 4, 3, 2 scaled by `scale`.
  static json summary(const std::vector<std::string>& ids, double scale = 1.0, const std::string& status = "passed",
                      int retries = 0, double duration = 10) {
    json s = {{"format_version", 4}, {"hostname", "h"}, {"launcher", "local"}, {"cases", json::array()}};
    for (const auto& id : ids) {
      json curve = json::array();
      for (int step = 1; step <= 5; ++step) curve.push_back({step, (7.0 - step) * scale, 1.0});
      json attempts = json::array();
      for (int i = 0; i < retries; ++i) attempts.push_back({{"reason", "flaked"}, {"duration_s", 1.0}});
      s["cases"].push_back(
          {{"id", id},
           {"status", status},
           {"met_expectation", status == "passed"},
           {"duration_s", duration},
           {"earlier_attempts", attempts},
           {"phases", json::array({{{"name", "train"}, {"ran", true}, {"duration_s", duration}, {"curve", curve}}})},
           {"checks", json::array({{{"kind", "loss_matches"}, {"passed", status == "passed"}, {"margin", 0.25}}})}});
    }
    return s;
  }
  static RunIdentity at(const std::string& run, const std::string& commit, double time) {
    RunIdentity id;
    id.run_id = run, id.commit = commit, id.time = time, id.host = "h", id.launcher = "local";
    return id;
  }

  fs::path dir_;
  std::string db_;
};

}  // namespace

TEST_F(HistoryTest, ARunIsRecordedOnceWithItsVerdictsLossesAndMargins) {
  History h(db_);
  EXPECT_TRUE(h.record(summary({"s/a", "s/b"}, 1.0, "passed", 1, 12.5), at("r1", "c1", 100)));
  EXPECT_FALSE(h.record(summary({"s/a", "s/b"}), at("r1", "c1", 100)));  // the same run again: nothing added
  EXPECT_EQ(h.run_count(), 1);
  EXPECT_EQ(h.case_ids(), (std::vector<std::string>{"s/a", "s/b"}));
  const auto runs = h.case_runs("s/a", 10, true);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].commit, "c1");
  EXPECT_EQ(runs[0].status, "passed");
  EXPECT_EQ(runs[0].attempts, 2);
  EXPECT_DOUBLE_EQ(runs[0].duration_s, 12.5);
  EXPECT_DOUBLE_EQ(runs[0].final_loss.value_or(0), 2.0);
  EXPECT_DOUBLE_EQ(runs[0].margin.value_or(0), 0.25);
  ASSERT_EQ(runs[0].curves.count("train/loss"), 1u);
  EXPECT_EQ(runs[0].curves.at("train/loss").size(), 5u);
  EXPECT_DOUBLE_EQ(runs[0].curves.at("train/loss")[0].second, 6.0);
}

TEST_F(HistoryTest, FlakyCasesAreThoseThatChangedVerdictWithinACommitOrPassedOnARetry) {
  History h(db_);
  for (int i = 0; i < 8; ++i) {
    json s = summary({"s/steady"});
    const bool fails = i % 4 == 3;  // one run in four fails, on a commit where it also passed
    json flaky = summary({"s/flaky"}, 1.0, fails ? "failed" : "passed")["cases"][0];
    s["cases"].push_back(flaky);
    h.record(s, at("r" + std::to_string(i), "c" + std::to_string(i / 2), 100 + i));
  }
  h.record(summary({"s/retried"}, 1.0, "passed", 1), at("x1", "c9", 200));
  h.record(summary({"s/retried"}), at("x2", "c10", 201));
  const auto flaky = h.flaky(20);
  ASSERT_EQ(flaky.size(), 2u);
  EXPECT_EQ(flaky[0].case_id, "s/retried");
  EXPECT_DOUBLE_EQ(flaky[0].rate, 0.5);
  EXPECT_EQ(flaky[1].case_id, "s/flaky");
  EXPECT_EQ(flaky[1].failed, 2);
  EXPECT_DOUBLE_EQ(flaky[1].rate, 0.25);
  EXPECT_EQ(flaky[1].since_commit, "c1");  // the first commit that both passed and failed
}

TEST_F(HistoryTest, ACleanHistoryHasNoFlakyAndNoDriftingCase) {
  History h(db_);
  for (int i = 0; i < 12; ++i) h.record(summary({"s/a"}), at("r" + std::to_string(i), "c" + std::to_string(i), i));
  EXPECT_TRUE(h.flaky(20).empty());
  EXPECT_TRUE(drifted_cases(h).empty());
}

TEST_F(HistoryTest, DriftNamesTheFirstCommitWhoseLossesLeftTheBandOfGreenRuns) {
  History h(db_);
  // Ten commits the same but one early outlier; then a shift growing by 5e-6 per commit, far
  // inside a loss_matches rtol of 1e-4. s/b stays put.
  for (int i = 0; i < 20; ++i) {
    double scale = 1.0;
    if (i == 1) scale = 1.0 + 3e-5;  // among every later run's references: the median ignores it
    if (i >= 10) scale = 1.0 + 5e-6 * (i - 9);
    json s = summary({"s/a"}, scale);
    s["cases"].push_back(summary({"s/b"})["cases"][0]);
    h.record(s, at("r" + std::to_string(i), "c" + std::to_string(i), i));
  }
  const DriftRule rule{12, 3, 4, 1e-6};
  const auto drift = drifted_cases(h, rule);
  ASSERT_EQ(drift.size(), 1u);
  EXPECT_EQ(drift[0].case_id, "s/a");
  EXPECT_EQ(drift[0].first.commit, "c10");
  // The band follows the case: once most of its last green runs hold the moved numbers, they
  // are its band, and the newest run is inside it again (docs/history.md).
  EXPECT_FALSE(drift[0].still);
  EXPECT_EQ(drift[0].finding.curve, "train/loss");
  EXPECT_EQ(drift[0].finding.step, 1);
  EXPECT_NE(drift[0].finding.describe().find(
                "loss of phase train at step 1: 6.00003 outside 6 \xc2\xb1 6.00e-06 (10 green runs"),
            std::string::npos)
      << drift[0].finding.describe();
}

TEST_F(HistoryTest, RecordingAPassingRunThatDriftedReturnsTheFindingForItsCase) {
  History h(db_);
  auto record_run = [&](const json& s, const RunIdentity& id) {
    h.record(s, id);
    return recorded_drift(h, s, id.run_id);
  };
  for (int i = 0; i < 5; ++i) record_run(summary({"s/a"}), at("r" + std::to_string(i), "c" + std::to_string(i), i));
  EXPECT_TRUE(record_run(summary({"s/a"}), at("same", "c9", 9)).empty());
  const auto drift = record_run(summary({"s/a"}, 1.001), at("moved", "c10", 10));
  ASSERT_EQ(drift.count("s/a"), 1u);
  json s = summary({"s/a"});
  add_drift_notes(s, drift);
  EXPECT_EQ(s["cases"][0]["drift"]["step"], 1);
  EXPECT_NE(s["cases"][0]["drift"]["message"].get<std::string>().find("drifted: loss of phase train"),
            std::string::npos);
}

TEST_F(HistoryTest, ADamagedDatabaseIsAWarningAndTheRunGoesOn) {
  std::ofstream(db_) << "this is not a database, it is a truncated file" << std::string(5000, 'x');
  EXPECT_THROW(History h(db_), HistoryError);
  char* text = nullptr;
  size_t size = 0;
  std::FILE* log = ::open_memstream(&text, &size);
  RunHistory history(db_, "c", log);
  json s = summary({"s/a"});
  history.record(s, dir_.string(), "test");
  const auto drift = history.drift_of_recorded(s);
  std::fclose(log);
  EXPECT_TRUE(drift.empty());
  EXPECT_NE(std::string(text).find("meshtest: warning: run not recorded in the history: history " + db_),
            std::string::npos)
      << text;
  std::free(text);
}

TEST_F(HistoryTest, ADatabaseOfANewerSchemaIsRefusedNotRewritten) {
  { History h(db_); }
  { History h(db_); }  // reopening a current one is fine
  const std::string cmd = "sqlite3 '" + db_ + "' 'PRAGMA user_version=99' 2>/dev/null";
  if (std::system(cmd.c_str()) != 0) GTEST_SKIP() << "no sqlite3 command";
  try {
    History h(db_);
    ADD_FAILURE() << "opened a schema 99 database";
  } catch (const HistoryError& e) {
    EXPECT_NE(std::string(e.what()).find("schema version 99 was written by a newer meshtest"), std::string::npos)
        << e.what();
  }
}

TEST_F(HistoryTest, MergingHistoriesCountsEachRunOnce) {
  const std::string other = (dir_ / "other.db").string();
  {
    History a(db_);
    a.record(summary({"s/a"}), at("r1", "c1", 1));
    a.record(summary({"s/a"}), at("r2", "c2", 2));
  }
  {
    History b(other);
    b.record(summary({"s/a"}), at("r2", "c2", 2));
    b.record(summary({"s/a"}), at("r3", "c3", 3));
  }
  History a(db_);
  EXPECT_EQ(a.merge_from(other), 1);
  EXPECT_EQ(a.merge_from(other), 0);
  EXPECT_EQ(a.run_count(), 3);
  EXPECT_EQ(a.case_runs("s/a", 10).size(), 3u);
}

TEST_F(HistoryTest, TwoWritersAtOnceLoseNothing) {
  auto writer = [&](const std::string& name) {
    History h(db_);
    for (int i = 0; i < 25; ++i) h.record(summary({"s/a", "s/b"}), at(name + std::to_string(i), "c", i));
  };
  { History create(db_); }
  std::thread one(writer, "one-"), two(writer, "two-");
  one.join();
  two.join();
  History h(db_);
  EXPECT_EQ(h.run_count(), 50);
  EXPECT_EQ(h.case_runs("s/b", 100).size(), 50u);
}

TEST_F(HistoryTest, MedianDurationsAreWhatTheSchedulerPacksBy) {
  History h(db_);
  const double seconds[] = {10, 12, 100, 11, 13};  // one slow outlier
  for (int i = 0; i < 5; ++i)
    h.record(summary({"s/a"}, 1.0, "passed", 0, seconds[i]), at("r" + std::to_string(i), "c", i));
  EXPECT_DOUBLE_EQ(h.median_durations(5).at("s/a"), 12.0);
  ASSERT_EQ(h.slowest(5, 1).size(), 1u);
  EXPECT_DOUBLE_EQ(h.slowest(5, 1)[0].last_s, 13.0);
}

// The drift notes: `meshtest run` reads the history before it records the run, and notes each
// case that passed yet left its band, except one that declares a drift check (that check's
// verdict is its word on drift). With no history, or one that cannot be read, nothing drifts.
TEST_F(HistoryTest, DriftNotesReadTheHistoryAndLeaveOutCasesThatDeclareDrift) {
  for (int i = 0; i < 5; ++i)
    History(db_).record(summary({"s/a", "s/b"}), at("r" + std::to_string(i), "c" + std::to_string(i), i));
  const Suite suite = load_suite_text(
      "suite: s\ncases:\n  - {name: a, command: [t]}\n"
      "  - {name: b, command: [t], checks: [drift]}\n",
      "m.yaml");
  std::vector<CaseOutcome> cases(2);
  for (size_t i = 0; i < 2; ++i) {
    cases[i].spec = &suite.cases[i];
    cases[i].checks.push_back({"exit", true});
    cases[i].phases.push_back({});
    cases[i].phases[0].name = "train";
    for (int step = 1; step <= 5; ++step) cases[i].phases[0].curve.push_back({step, (7.0 - step) * 1.001, 1.0});
    judge(cases[i]);
    ASSERT_EQ(cases[i].status(), Status::kPassed);
  }
  const auto drift = RunHistory(db_, "c10").drift(cases);
  ASSERT_EQ(drift.size(), 1u);
  EXPECT_EQ(drift.at("s/a").curve, "train/loss");
  EXPECT_EQ(History(db_).run_count(), 5);  // read, not recorded
  EXPECT_TRUE(RunHistory("", "c10").drift(cases).empty());
  std::ofstream((dir_ / "bad.db").string()) << std::string(5000, 'x');
  EXPECT_TRUE(RunHistory((dir_ / "bad.db").string(), "c10", nullptr).drift(cases).empty());
}

// A case failed by its drift check alone is recorded as it passed (docs/history.md: drift is
// a verdict about the history, not fed back into it, so the band can follow numbers that moved
// on purpose); one that failed another check as well is recorded failed.
TEST_F(HistoryTest, ACaseFailedByDriftAloneIsRecordedAsItPassed) {
  json s = summary({"s/a", "s/b"}, 1.001);
  for (auto& c : s["cases"]) {
    c["status"] = "failed", c["met_expectation"] = false;
    c["checks"].push_back({{"kind", "drift"}, {"passed", false}});
  }
  s["cases"][1]["checks"][0]["passed"] = false;  // s/b failed loss_matches too
  History(db_).record(s, at("moved", "c10", 10));
  EXPECT_EQ(History(db_).case_runs("s/a", 1)[0].status, "passed");
  EXPECT_TRUE(History(db_).case_runs("s/a", 1)[0].met);
  EXPECT_EQ(History(db_).case_runs("s/b", 1)[0].status, "failed");
  EXPECT_FALSE(History(db_).case_runs("s/b", 1)[0].met);
}

// `drift: fail`, the case key of meshtest before drift became a check, is refused where it is
// written with what to write instead.
TEST_F(HistoryTest, TheOldDriftKeyIsRefusedWithTheCheckToUseInstead) {
  try {
    load_suite_text("suite: s\ncases:\n  - {name: a, command: [t], drift: fail}\n", "m.yaml");
    ADD_FAILURE() << "drift: fail loaded";
  } catch (const MatrixError& e) {
    EXPECT_NE(std::string(e.what()).find("m.yaml:3:36: drift is a check now"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("checks: [drift]"), std::string::npos) << e.what();
  }
}

// A reader does not take the write lock (issue 47: `meshtest history` failed after 35 s with
// "database is locked" while a run was recording): with another connection in the middle of a
// write transaction, opening the history and reading it succeeds and sees the committed runs.
TEST_F(HistoryTest, ReadersDoNotWaitForAWriter) {
  History(db_).record(summary({"s/a"}), at("r1", "c1", 1));
  sqlite3* writer = nullptr;
  ASSERT_EQ(sqlite3_open(db_.c_str(), &writer), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(writer, "BEGIN IMMEDIATE; DELETE FROM runs;", nullptr, nullptr, nullptr), SQLITE_OK);
  std::string error;
  int runs = -1;
  try {
    runs = History(db_).run_count();
  } catch (const HistoryError& e) {
    error = e.what();
  }
  sqlite3_exec(writer, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(writer);
  EXPECT_EQ(error, "");
  EXPECT_EQ(runs, 1) << "the reader must see the last committed state, not the writer's";
}

// A drift that was fixed is back in the band it left, not "still drifting" against the band
// its drifted runs made (issue 47); a shift that stays is neither.
TEST_F(HistoryTest, AFixedDriftIsBackInTheBandItLeft) {
  History h(db_);
  for (int i = 0; i < 19; ++i) {
    const double scale = i >= 10 && i < 18 ? 1.0 + 5e-5 : 1.0;  // c10..c17 moved, c18 fixed
    h.record(summary({"s/a"}, scale), at("r" + std::to_string(i), "c" + std::to_string(i), i));
  }
  const DriftRule rule{12, 3, 4, 1e-6};
  auto drift = drifted_cases(h, rule);
  ASSERT_EQ(drift.size(), 1u);
  EXPECT_EQ(drift[0].first.commit, "c10");
  EXPECT_TRUE(drift[0].back_in_band);
  EXPECT_FALSE(drift[0].still) << "a fixed drift reported as still drifting";
  // Through its last 4 runs only (`--last 4`), c10 is out of sight: the 3 moved runs before c18
  // are the band, and c18 left it.
  drift = drifted_cases(h, rule, 4);
  ASSERT_EQ(drift.size(), 1u);
  EXPECT_EQ(drift[0].first.commit, "c18");
}
