// JUnit and Surefire take their element and type from a case's typed verdict, never
// from its message: rewording a message changes no dashboard.
#include <gtest/gtest.h>

#include <pugixml.hpp>

#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>

#include "report/finished_run.h"
#include "report/report.h"
#include "report/summary.h"
#include "core/verdict.h"

namespace fs = std::filesystem;
using namespace meshtest;
using nlohmann::json;

namespace {

const std::vector<VerdictKind> kAllKinds = {
    VerdictKind::kPassed,          VerdictKind::kCanaryCaught,  VerdictKind::kXfailed,
    VerdictKind::kSkipped,         VerdictKind::kCheckFailed,   VerdictKind::kNotJudged,
    VerdictKind::kCrashed,         VerdictKind::kExitCode,      VerdictKind::kTimedOut,
    VerdictKind::kLaunchError,     VerdictKind::kXpassed,       VerdictKind::kXfailedDifferently,
    VerdictKind::kCanaryNotCaught, VerdictKind::kCanaryCrashed, VerdictKind::kCancelled,
};

// One case per verdict kind, each with `message` as its text.
json summary_with(const std::string& message) {
  json s = {{"format_version", 2}, {"backend", "gloo"}, {"devices", 8}, {"wall_s", 1.0}, {"cases", json::array()}};
  for (VerdictKind kind : kAllKinds) {
    Verdict v{kind, message};
    v.check = "loss_matches";
    const json verdict = verdict_to_json(v);
    s["cases"].push_back({{"id", std::string("s/") + verdict_kind_name(kind)},
                          {"suite", "s"},
                          {"status", status_name(v.status())},
                          {"reason", message},
                          {"verdict", verdict},
                          {"earlier_attempts", json::array()},
                          {"repro", "meshtest run m.yaml --id x"}});
  }
  return s;
}

// testcase name -> "element type" ("failure loss_matches", "skipped", "" for a pass).
std::map<std::string, std::string> junit_types(const json& summary, const std::string& dir) {
  write_junit(summary_view(summary), dir + "/junit.xml");
  pugi::xml_document doc;
  EXPECT_TRUE(doc.load_file((dir + "/junit.xml").c_str()));
  std::map<std::string, std::string> out;
  for (auto tc : doc.select_nodes("//testcase")) {
    std::string what;
    for (const char* element : {"failure", "error", "skipped"})
      if (auto e = tc.node().child(element)) what = std::string(element) + " " + e.attribute("type").value();
    out[tc.node().attribute("name").value()] = what;
  }
  return out;
}

class Report : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/meshtest-report-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

}  // namespace

TEST_F(Report, JunitElementsAndTypesComeFromTheVerdictKind) {
  const auto types = junit_types(summary_with("loss_matches: step 3 differs"), dir_);
  const std::map<std::string, std::string> want = {
      {"s/passed", ""},
      {"s/canary_caught", ""},
      {"s/xfailed", "skipped "},
      {"s/skipped", "skipped "},
      {"s/check_failed", "failure loss_matches"},
      {"s/not_judged", "failure loss_matches"},
      {"s/crashed", "error Crash"},
      {"s/exit_code", "error NonZeroExit"},
      {"s/timed_out", "error Timeout"},
      {"s/launch_error", "error LaunchError"},
      {"s/xpassed", "failure UnexpectedPass"},
      {"s/xfailed_differently", "failure XfailFailedDifferently"},
      {"s/canary_not_caught", "failure CanaryNotCaught"},
      {"s/canary_crashed", "failure CanaryCrashed"},
      {"s/cancelled", "error Cancelled"},
  };
  EXPECT_EQ(types, want);
}

TEST_F(Report, RewordingEveryMessageChangesNoType) {
  // Messages that the text-parsing reports used to read as other types.
  const auto before = junit_types(summary_with("loss_matches: step 3 differs"), dir_);
  for (const std::string message : {"exit: timed out after a signal", "XPASS", "canary not caught: cannot start",
                                    "xfail (x) failed differently", "", "no colon here"}) {
    EXPECT_EQ(junit_types(summary_with(message), dir_), before) << message;
  }
}

TEST_F(Report, VerdictsRoundTripThroughJsonAndUnknownKindsAreRefused) {
  for (VerdictKind kind : kAllKinds) {
    Verdict v{kind, "m"};
    v.check = "exit";
    v.phase = "train";
    v.rank = 3;
    v.signal = 9;
    v.step = 7;
    v.value = 1.5;
    v.reference = 1.25;
    v.tolerance = 1e-5;
    const json j = verdict_to_json(v);
    const Verdict back = verdict_from_json(j);
    EXPECT_EQ(verdict_to_json(back), j);
    EXPECT_EQ(back.status(), v.status());
  }
  EXPECT_THROW(verdict_from_json(json{{"kind", "exploded"}}), std::invalid_argument);
  json no_verdict = summary_with("m");
  no_verdict["cases"][0].erase("verdict");
  EXPECT_THROW(write_junit(summary_view(no_verdict), dir_ + "/junit.xml"), std::runtime_error);
}

// What summary.json says at the edges: rank 0 is a rank (the one blamed most often), an infinite
// margin is "inf" (JSON has no infinity; nlohmann would write null, read back as no margin), and a
// verdict without a check or phase has no such key rather than an empty one.
TEST_F(Report, AVerdictsRankZeroInfiniteMarginAndAbsentCheckSurviveJson) {
  Verdict v{VerdictKind::kCheckFailed, "m"};
  v.rank = 0;
  v.margin = INFINITY;
  const json j = verdict_to_json(v);
  ASSERT_TRUE(j.contains("rank")) << j.dump();
  EXPECT_EQ(j["rank"], 0);
  EXPECT_EQ(j["margin"], "inf");
  EXPECT_FALSE(j.contains("check")) << j.dump();
  EXPECT_FALSE(j.contains("phase")) << j.dump();
  Verdict named = v;
  named.check = "loss_matches";
  named.phase = "load";
  EXPECT_EQ(verdict_to_json(named).value("check", ""), "loss_matches");
  EXPECT_EQ(verdict_to_json(named).value("phase", ""), "load");
  named.exit_code = 3;  // a rank's exit code likewise
  EXPECT_EQ(verdict_to_json(named).value("exit_code", 0), 3);
  EXPECT_FALSE(j.contains("exit_code")) << j.dump();
  named.signal = SIGSEGV;  // a crash's signal is written; no signal, no key
  EXPECT_EQ(verdict_to_json(named).value("signal", 0), SIGSEGV);
  EXPECT_FALSE(j.contains("signal")) << j.dump();
  // A shard's summary.json edited by hand (meshtest merge reads it): a number field that is not
  // a number, or a fractional step, is no value rather than an error or a truncated step.
  json edited = j;
  edited["value"] = "1.5";
  edited["step"] = 2.5;
  const Verdict read = verdict_from_json(edited);
  EXPECT_FALSE(read.value.has_value());
  EXPECT_FALSE(read.step.has_value());
  const Verdict back = verdict_from_json(json::parse(j.dump()));
  EXPECT_EQ(back.rank, 0);
  ASSERT_TRUE(back.margin.has_value());
  EXPECT_TRUE(std::isinf(*back.margin));
}

// `meshtest merge` of CI shards: a shard with a case that missed its expectation makes the merged
// run red (all_met false, exit 1), even when that shard's own all_met says otherwise; two green
// shards merge green.
TEST_F(Report, MergingAShardWithAFailedCaseIsRedAndExitsNonZero) {
  auto shard = [&](const std::string& name, const std::string& id, bool met) {
    Verdict v{met ? VerdictKind::kPassed : VerdictKind::kCheckFailed, met ? "" : "loss differs"};
    json s = {{"format_version", kSummaryFormatVersion},
              {"backend", "gloo"},
              {"devices", 2},
              {"wall_s", 1.0},
              {"matrices", {"m.yaml"}},
              {"all_met", met},
              {"cases", json::array()}};
    s["cases"].push_back({{"id", id},
                          {"suite", "s"},
                          {"status", status_name(v.status())},
                          {"reason", v.message},
                          {"verdict", verdict_to_json(v)},
                          {"met_expectation", met},
                          {"earlier_attempts", json::array()},
                          {"repro", "meshtest run m.yaml --id " + id}});
    write_summary(s, dir_ + "/" + name + "/summary.json");
    return dir_ + "/" + name;
  };
  const std::string green1 = shard("green1", "s/a", true), green2 = shard("green2", "s/b", true);
  const std::string red = shard("red", "s/c", false);
  json merged = merged_summary({green1, red});
  EXPECT_FALSE(merged.at("all_met").get<bool>());
  EXPECT_EQ(merged.at("cases").size(), 2u);
  EXPECT_EQ(merged.at("counts").at("failed"), 1);
  write_summary(merged, dir_ + "/merged/summary.json");
  EXPECT_EQ(render_reports(dir_ + "/merged", true), 1);
  // A red case in a shard whose all_met was edited to true is still red.
  json edited = read_summary(red);
  edited["all_met"] = true;
  write_summary(edited, red + "/summary.json");
  EXPECT_FALSE(merged_summary({green1, red}).at("all_met").get<bool>());
  // A shard that says it did not meet its expectations (stopped by a signal, say) keeps the merge
  // red even when every case it lists met its own.
  json stopped = read_summary(green2);
  stopped["all_met"] = false;
  stopped["interrupted_by_signal"] = 15;
  write_summary(stopped, dir_ + "/stopped/summary.json");
  const json with_stopped = merged_summary({green1, dir_ + "/stopped"});
  EXPECT_FALSE(with_stopped.at("all_met").get<bool>());
  EXPECT_EQ(with_stopped.at("interrupted_by_signal"), 15);
  json ok = merged_summary({green1, green2});
  EXPECT_TRUE(ok.at("all_met").get<bool>());
  write_summary(ok, dir_ + "/merged-green/summary.json");
  EXPECT_EQ(render_reports(dir_ + "/merged-green", true), 0);
  EXPECT_THROW(merged_summary({green1, green1}), std::runtime_error);
}

// The suite's attributes a dashboard files a run by: its hostname (junit-4 requires one, so an
// unknown host is "localhost") and its timestamp, the earliest of its cases' (a case that never
// started has none). A failure's body names the phases that ran and failed, and no other.
TEST_F(Report, TheSuiteCarriesHostAndEarliestStartAndAFailureNamesItsFailedPhases) {
  json s = summary_with("loss_matches: step 3 differs");
  s["cases"][0]["timestamp"] = "2026-12-07T10:00:05";
  s["cases"][1]["timestamp"] = "";
  s["cases"][2]["timestamp"] = "2026-12-07T10:00:01";
  json& failed = s["cases"][4];  // check_failed
  ASSERT_EQ(failed["id"], "s/check_failed");
  failed["phases"] = {{{"name", "save"}, {"ran", true}, {"ok", true}, {"stopped_because", "done"}},
                      {{"name", "load"}, {"ran", true}, {"ok", false}, {"stopped_because", "rank 1 exited 3"}},
                      {{"name", "again"}, {"ran", false}, {"ok", false}, {"stopped_because", "not run"}}};
  auto suite = [&](const json& summary) {
    write_junit(summary_view(summary), dir_ + "/junit.xml");
    auto doc = std::make_shared<pugi::xml_document>();
    EXPECT_TRUE(doc->load_file((dir_ + "/junit.xml").c_str()));
    return std::make_pair(doc, doc->select_node("//testsuite").node());
  };
  auto [doc, node] = suite(s);
  EXPECT_STREQ(node.attribute("hostname").value(), "localhost");
  EXPECT_STREQ(node.attribute("timestamp").value(), "2026-12-07T10:00:01");
  const std::string body = doc->select_node("//testcase[@name='s/check_failed']/failure").node().text().get();
  EXPECT_NE(body.find("phase load: rank 1 exited 3\n"), std::string::npos) << body;
  EXPECT_EQ(body.find("phase save"), std::string::npos) << body;
  EXPECT_EQ(body.find("phase again"), std::string::npos) << body;
  s["hostname"] = "gpu-runner-7";
  auto [doc2, node2] = suite(s);
  EXPECT_STREQ(node2.attribute("hostname").value(), "gpu-runner-7");
}

// What JUnit text may hold: a text of exactly the cap is kept whole; an OSC sequence (a
// terminal title, a hyperlink) is dropped to its end, BEL or ESC backslash; a surrogate's bytes,
// up to U+DFFF, are invalid UTF-8 (each byte a U+FFFD); characters XML forbids are escaped.
TEST(XmlSafe, TheCapTerminalSequencesSurrogatesAndForbiddenCharacters) {
  const std::string sixteen(16, 'x');
  EXPECT_EQ(xml_safe(sixteen, 16), sixteen);
  EXPECT_NE(xml_safe(sixteen + "y", 16).find("...[truncated 1 bytes]..."), std::string::npos);
  EXPECT_EQ(xml_safe("a\x1b]0;title\x07"
                     "b",
                     100),
            "ab");
  EXPECT_EQ(xml_safe("a\x1b]8;;https://x\x1b\\b", 100), "ab");
  const std::string replacement = "\xEF\xBF\xBD";
  EXPECT_EQ(xml_safe("\xED\xBF\xBF", 100), replacement + replacement + replacement);
  EXPECT_EQ(xml_safe("\xED\xA0\x80", 100), replacement + replacement + replacement);
  EXPECT_EQ(xml_safe("\xEE\x80\x80", 100), "\xEE\x80\x80");  // U+E000, just past them: kept
  EXPECT_EQ(xml_safe(std::string("a\x01") + "\xEF\xBF\xBE", 100), "a\\x01\\ufffe");
}

// meshtest diff: 1 when the two cases' loss curves differ in a value or in a step one of them
// lacks, 0 when they are the same; a phase's metrics window without its end is no window.
TEST_F(Report, DiffIsRedOnADifferentOrMissingStepAndGreenOnTheSame) {
  auto curve = [](std::vector<double> losses) {
    std::string s;
    for (size_t i = 0; i < losses.size(); ++i)
      s += "{\"step\":" + std::to_string(i + 1) + ",\"loss\":" + std::to_string(losses[i]) + ",\"grad_norm\":1.0}\n";
    return s;
  };
  auto run = [&](const std::string& a_losses, const std::string& b_losses) {
    json s = {{"format_version", kSummaryFormatVersion}, {"cases", json::array()}};
    for (const auto& [name, losses] : {std::pair{"a", a_losses}, std::pair{"b", b_losses}}) {
      const std::string phase_dir = dir_ + "/" + name + "/train";
      fs::create_directories(phase_dir);
      std::ofstream(phase_dir + "/metrics.jsonl") << losses;
      s["cases"].push_back({{"id", std::string("s/") + name},
                            {"phases",
                             {{{"name", "train"},
                               {"dir", phase_dir},
                               {"outputs", json::object()},
                               {"metrics_window", {{"from", 1.0}}}}}}});
    }
    write_summary(s, dir_ + "/summary.json");
    return diff_cases(dir_, "s/a", "s/b");
  };
  EXPECT_EQ(run(curve({6, 5, 4}), curve({6, 5, 4})), 0);
  EXPECT_EQ(run(curve({6, 5, 4}), curve({6, 5, 4.5})), 1);
  EXPECT_EQ(run(curve({6, 5, 4}), curve({6, 5})), 1);
}

// Surefire takes its elements from the verdict kind as JUnit does, and keeps each earlier failed
// attempt: a pass after a failed attempt is flaky (flakyFailure), a failure after another
// attempt failed the same way has its rerun (rerunFailure).
TEST_F(Report, SurefireElementsComeFromTheVerdictKindAndKeepEarlierAttempts) {
  json s = summary_with("loss_matches: step 3 differs");
  const json failed_attempt = {{"verdict", verdict_to_json(Verdict{VerdictKind::kCheckFailed, "step 2 differs"})},
                               {"reason", "step 2 differs"},
                               {"details", "d"},
                               {"failing_log", ""},
                               {"duration_s", 1.0}};
  s["cases"][0]["earlier_attempts"] = {failed_attempt};  // s/passed, on its second attempt
  s["cases"][4]["earlier_attempts"] = {failed_attempt};  // s/check_failed, twice
  write_surefire(summary_view(s), dir_);
  std::map<std::string, std::string> got;
  for (const auto& file : fs::directory_iterator(dir_)) {
    pugi::xml_document doc;
    ASSERT_TRUE(doc.load_file(file.path().c_str())) << file.path();
    for (auto tc : doc.select_nodes("//testcase")) {
      std::string what;
      for (auto e : tc.node().children())
        if (std::string(e.name()) != "system-out")
          what += (what.empty() ? "" : " ") + std::string(e.name()) + ":" + e.attribute("type").value();
      got[tc.node().attribute("name").value()] = what;
    }
  }
  EXPECT_EQ(got["s/passed"], "flakyFailure:Failure");
  EXPECT_EQ(got["s/check_failed"], "failure:Failure rerunFailure:Failure");  // typed by the first attempt
  EXPECT_EQ(got["s/crashed"], "error:Crash");
  EXPECT_EQ(got["s/xfailed"], "skipped:");
  EXPECT_EQ(got["s/canary_caught"], "");
  // system-out says the mesh only where the case has one (these have none).
  pugi::xml_document doc;
  ASSERT_TRUE(doc.load_file((fs::directory_iterator(dir_)->path()).c_str()));
  const std::string out = doc.select_node("//testcase[@name='s/passed']/system-out").node().text().get();
  EXPECT_NE(out.find("meshtest: s/passed\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("mesh:"), std::string::npos) << out;
}
