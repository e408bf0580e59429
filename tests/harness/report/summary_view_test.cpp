// The typed reader every report reads summary.json through: what summary_json writes
// comes back field for field, and a hostile summary (wrong types, missing fields, not
// even an object) reads into defaults without throwing.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include <nlohmann/json.hpp>

#include "contract/mesh.h"
#include "report/summary.h"
#include "report/summary_view.h"

using namespace meshtest;
using nlohmann::json;

namespace {

// A finished two-phase case: saved under dp_shard=4, loaded by 4 ranks without a mesh.
struct WrittenRun {
  Case spec;
  RunResult result;
  RunOptions options;

  WrittenRun() {
    spec.id = "resharding/save-load";
    spec.suite = "resharding";
    spec.name = "save-load";
    spec.seed = "7";
    spec.ngpu = 4;
    spec.tags = {"cpu", "reshard"};
    Phase save{"save", 4, parse_layout("dp_shard=4")};
    Phase load{"load", 4, std::nullopt};
    spec.phases = {save, load};

    CaseOutcome o;
    o.spec = &spec;
    o.verdict = {VerdictKind::kCheckFailed, "loss differs at step 7"};
    o.verdict.check = "resume_matches";
    o.verdict.step = 7;
    o.verdict.value = 4.25;
    o.devices = {0, 1, 2, 3};
    o.duration_s = 12.5;
    for (const char* name : {"save", "load"}) {
      PhaseOutcome p;
      p.name = name;
      p.nproc = 4;
      p.ran = true;
      p.attempts = 1;
      p.curve = {{1, 5.0, 1.0}, {2, NAN, 0.5}};
      o.phases.push_back(p);
    }
    CheckResult k;
    k.kind = "resume_matches";
    k.finding = o.verdict;
    k.series = {{"subject", "phase load", "loss", {{6, 4.5}, {7, 4.25}}}};
    k.band = std::make_pair(0.01, 0.001);
    o.checks = {k};
    o.earlier_attempts = {{{VerdictKind::kTimedOut, "timed out"}, "hung", "/x/rank0.log", 60}};
    result.cases.push_back(o);
    result.wall_s = 20;
    options.backend = "gloo";
    options.devices = 4;
    options.matrices = {"/m/a.yaml"};
  }
};

}  // namespace

TEST(SummaryView, ReadsBackWhatSummaryJsonWrote) {
  const WrittenRun w;
  const json written = summary_json(w.result, w.options);
  EXPECT_EQ(written["cases"][0]["phase_meshes"], json({"dp_shard=4", "4 ranks"}));
  EXPECT_EQ(written["cases"][0]["meshes"], "dp_shard=4 -> 4 ranks");  // kept for older readers

  const RunView run = summary_view(json::parse(written.dump()));
  EXPECT_EQ(run.format_version, kSummaryFormatVersion);
  EXPECT_EQ(run.backend, "gloo");
  EXPECT_EQ(run.devices, 4);
  EXPECT_EQ(run.matrices, std::vector<std::string>{"/m/a.yaml"});
  EXPECT_FALSE(run.all_met);
  ASSERT_EQ(run.cases.size(), 1u);
  const CaseView& c = run.cases[0];
  EXPECT_EQ(c.id, "resharding/save-load");
  EXPECT_EQ(c.status, "failed");
  EXPECT_FALSE(c.met_expectation);
  EXPECT_EQ(c.mesh, "dp_shard=4");
  EXPECT_EQ(c.meshes, (std::vector<std::string>{"dp_shard=4", "4 ranks"}));
  EXPECT_EQ(mesh_chain(c), "dp_shard=4 -> 4 ranks");
  EXPECT_EQ(c.tags, (std::vector<std::string>{"cpu", "reshard"}));
  EXPECT_EQ(c.devices, (std::vector<long long>{0, 1, 2, 3}));
  EXPECT_EQ(c.ngpu, 4);
  EXPECT_EQ(c.seed, "7");
  EXPECT_DOUBLE_EQ(c.duration_s, 12.5);

  EXPECT_TRUE(c.verdict.present);
  EXPECT_EQ(c.verdict.kind, "check_failed");
  EXPECT_EQ(c.verdict.check, "resume_matches");
  EXPECT_EQ(c.verdict.step, 7);
  EXPECT_EQ(c.verdict.value, 4.25);
  EXPECT_FALSE(c.verdict.rank);  // not written for -1

  ASSERT_EQ(c.phases.size(), 2u);
  EXPECT_EQ(c.phases[1].name, "load");
  EXPECT_EQ(c.phases[1].nproc, 4);
  EXPECT_TRUE(c.phases[1].ran);
  ASSERT_EQ(c.phases[0].loss.size(), 2u);
  EXPECT_EQ(c.phases[0].loss[0].value, 5.0);
  EXPECT_FALSE(c.phases[0].loss[1].value);  // NaN was written as null: a gap
  EXPECT_EQ(c.phases[0].grad_norm[1].value, 0.5);

  ASSERT_EQ(c.checks.size(), 1u);
  EXPECT_EQ(c.checks[0].step, 7);
  ASSERT_TRUE(c.checks[0].band);
  EXPECT_DOUBLE_EQ(c.checks[0].band->rtol, 0.01);
  ASSERT_EQ(c.checks[0].series.size(), 1u);
  EXPECT_EQ(c.checks[0].series[0].points.size(), 2u);

  ASSERT_EQ(c.earlier_attempts.size(), 1u);
  EXPECT_EQ(c.earlier_attempts[0].verdict.kind, "timed_out");
  EXPECT_EQ(c.earlier_attempts[0].failing_log, "/x/rank0.log");
}

TEST(SummaryView, ASummaryFromBeforePhaseMeshesSplitsTheOldString) {
  const RunView run = summary_view({{"cases",
                                     {{{"meshes", "dp_shard=4 -> tp=2,dp_shard=2 -> tp=4"}},
                                      {{"meshes", ""}},
                                      {{"meshes", "old -> ignored"}, {"phase_meshes", {"a", "b"}}}}}});
  ASSERT_EQ(run.cases.size(), 3u);
  EXPECT_EQ(run.cases[0].meshes, (std::vector<std::string>{"dp_shard=4", "tp=2,dp_shard=2", "tp=4"}));
  EXPECT_TRUE(run.cases[1].meshes.empty());
  EXPECT_EQ(run.cases[2].meshes, (std::vector<std::string>{"a", "b"}));
}

TEST(SummaryView, AnythingThatIsNotASummaryReadsAsAnEmptyRun) {
  for (const json& odd : {json(nullptr), json(3), json("summary"), json::array({1, 2}), json::object()}) {
    RunView run;
    ASSERT_NO_THROW(run = summary_view(odd)) << odd.dump();
    EXPECT_TRUE(run.cases.empty());
    EXPECT_EQ(run.format_version, 0);
    EXPECT_FALSE(run.all_met);
  }
}

TEST(SummaryView, MistypedFieldsBecomeDefaults) {
  const json hostile = {{"format_version", "2"},
                        {"backend", 5},
                        {"devices", 1e300},
                        {"retries", -2.5},
                        {"matrices", "a.yaml"},
                        {"wall_s", "soon"},
                        {"interrupted_by_signal", {1}},
                        {"all_met", "yes"},
                        {"cases",
                         {"not a case",
                          nullptr,
                          {{"id", 5},
                           {"status", {1, 2}},
                           {"met_expectation", 1},
                           {"ngpu", "4"},
                           {"devices", {0, "1", 2.0, 2.5}},
                           {"tags", {1, "t", nullptr}},
                           {"verdict", "passed"},
                           {"phases", "none"},
                           {"checks", {{{"series", 7}, {"judged", "no"}, {"band", {1, 2}}, {"step", 3.5}}, 42}},
                           {"earlier_attempts", {{{"verdict", {{"kind", 7}, {"rank", "1"}, {"step", 4.0}}}}}}}}}};
  RunView run;
  ASSERT_NO_THROW(run = summary_view(hostile));
  EXPECT_EQ(run.format_version, 0);
  EXPECT_EQ(run.backend, "");
  EXPECT_EQ(run.devices, 0);  // 1e300 is no int
  EXPECT_EQ(run.retries, 0);  // -2.5 is no integer
  EXPECT_TRUE(run.matrices.empty());
  EXPECT_EQ(run.wall_s, 0);
  EXPECT_EQ(run.interrupted_by_signal, 0);
  EXPECT_FALSE(run.all_met);
  ASSERT_EQ(run.cases.size(), 3u);  // every element of "cases" is a case, whatever it holds
  EXPECT_EQ(run.cases[0].id, "");
  EXPECT_FALSE(run.cases[1].verdict.present);

  const CaseView& c = run.cases[2];
  EXPECT_EQ(c.id, "");
  EXPECT_EQ(c.status, "");
  EXPECT_TRUE(c.met_expectation);  // an older writer's 1
  EXPECT_EQ(c.ngpu, 0);
  EXPECT_EQ(c.devices, (std::vector<long long>{0, 2}));
  EXPECT_EQ(c.tags, std::vector<std::string>{"t"});
  EXPECT_FALSE(c.verdict.present);
  EXPECT_TRUE(c.phases.empty());
  ASSERT_EQ(c.checks.size(), 2u);
  EXPECT_TRUE(c.checks[0].series.empty());
  EXPECT_TRUE(c.checks[0].judged);  // mistyped: the default, as when absent (summaries before not_judged)
  EXPECT_TRUE(c.checks[1].judged);
  EXPECT_FALSE(c.checks[0].band);
  EXPECT_FALSE(c.checks[0].step);
  ASSERT_EQ(c.earlier_attempts.size(), 1u);
  EXPECT_TRUE(c.earlier_attempts[0].verdict.present);
  EXPECT_EQ(c.earlier_attempts[0].verdict.kind, "");
  EXPECT_FALSE(c.earlier_attempts[0].verdict.rank);
  EXPECT_EQ(c.earlier_attempts[0].verdict.step, 4);  // a whole float is an integer
}

TEST(SummaryView, CurveRowsWithoutAStepOrAColumnAreLeftOut) {
  const json phase = {{"curve",
                       {{1, 5.0, 0.5},
                        {"2", 4.0, 0.4},
                        {3, 3.0},
                        "row",
                        {4, nullptr, 0.3},
                        {5, "x", std::numeric_limits<double>::infinity()}}}};
  const RunView run = summary_view({{"cases", {{{"phases", {phase}}}}}});
  const PhaseView& p = run.cases[0].phases[0];
  ASSERT_EQ(p.loss.size(), 4u);  // steps 1, 3, 4, 5
  EXPECT_EQ(p.loss[1].step, 3);
  EXPECT_FALSE(p.loss[2].value);
  EXPECT_FALSE(p.loss[3].value);
  ASSERT_EQ(p.grad_norm.size(), 3u);  // step 3 has no grad_norm column
  EXPECT_EQ(p.grad_norm[1].value, 0.3);
  EXPECT_EQ(p.nproc, 1);  // absent: one rank
}

// A phase that could not be started keeps its launch error through summary.json (the page and
// the terminal say it from there); a phase that started has none.
TEST(SummaryView, ALaunchErrorComesBackAndOnlyWhereThereWasOne) {
  WrittenRun w;
  w.result.cases[0].phases[1].launch_error = "cannot start meshtrain: not found";
  const json written = summary_json(w.result, w.options);
  EXPECT_FALSE(written["cases"][0]["phases"][0].contains("launch_error"));
  const RunView run = summary_view(json::parse(written.dump()));
  EXPECT_EQ(run.cases[0].phases[0].launch_error, "");
  EXPECT_EQ(run.cases[0].phases[1].launch_error, "cannot start meshtrain: not found");
}

// write_summary to a bare file name writes it in the working directory.
TEST(SummaryView, ASummaryWrittenToABareFileNameLandsInTheWorkingDirectory) {
  char tmpl[] = "/tmp/meshtest-summary-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  const std::filesystem::path before = std::filesystem::current_path();
  std::filesystem::current_path(dir);
  write_summary(json{{"format_version", kSummaryFormatVersion}}, "summary.json");
  std::filesystem::current_path(before);
  EXPECT_TRUE(std::filesystem::exists(dir + "/summary.json"));
  std::filesystem::remove_all(dir);
}
