// The main job's reports, judged: README's first command (ci/main.sh) leaves the built-in CPU
// matrix's run in build/cpu/main-job; CTest's `main_job` fixture (ci/main-job.sh --if-stale)
// runs it only when that run is missing or older than the binaries. These tests read its
// summary.json and report.html: every case met its expectation, the seed's three outcomes,
// every canary caught by its own check with a margin, and the page as a browser draws it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "harness/shell.h"
#include "test_paths.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const std::string kMainJob = std::string(test_paths::kBinaryDir) + "/main-job";
const std::string kSchemas = std::string(MESHTEST_SOURCE_DIR) + "/../shared/reference/schemas";

class MainJob : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::ifstream in(kMainJob + "/summary.json");
    if (in) summary_ = json::parse(in, nullptr, false);
    for (const auto& c : summary_["cases"]) by_id_[c["id"]] = c;
  }
  void SetUp() override {
    ASSERT_TRUE(summary_.is_object()) << kMainJob << "/summary.json is missing or unreadable: run ci/main.sh";
  }
  static json summary_;
  static std::map<std::string, json> by_id_;
};
json MainJob::summary_;
std::map<std::string, json> MainJob::by_id_;

TEST_F(MainJob, EveryCaseMetItsExpectation) {
  EXPECT_GE(by_id_.size(), 90u);
  for (const auto& [id, c] : by_id_) EXPECT_TRUE(c.value("met_expectation", false)) << id << ": " << c["reason"];
}

TEST_F(MainJob, TheSeedsThreeOutcomes) {
  EXPECT_EQ(by_id_["cpu/ddp+tp"]["status"], "passed");
  EXPECT_EQ(by_id_["cpu/save[dp_shard=4]-load[dp_shard=2,tp=2]"]["status"], "passed");
  const json& seed = by_id_["cpu/save[dp_shard=4]-load[tp=4]"];
  EXPECT_EQ(seed["status"], "xfailed");
  const std::string reason = seed["reason"];
  EXPECT_NE(reason.find("keys_match: state-dict keys of phase load differ from phase save: missing 63 ("),
            std::string::npos)
      << reason;
  EXPECT_NE(reason.find("parametrizations.weight.original"), std::string::npos) << reason;
  EXPECT_NE(reason.find("unexpected 63 (model.layers.0.attention.wk.weight"), std::string::npos) << reason;
  EXPECT_EQ(by_id_["cpu/save[dp_shard=4]-load[tp=4]-key_map"]["status"], "passed");
}

// Every canary was caught by the check it names, and the number checks with >= 3x margin:
// caught by a hair means a slightly smaller bug would pass.
TEST_F(MainJob, EveryCanaryCaughtByItsCheckWithAMargin) {
  int canaries = 0, with_margin = 0;
  for (const auto& [id, c] : by_id_) {
    if (id.find("/canary/") == std::string::npos) continue;
    ++canaries;
    EXPECT_EQ(c["status"], "passed") << id << ": " << c["reason"];
    const std::string check = c["expect"].get<std::string>().substr(6);  // "fail: <check>"
    const std::string caught = c["reason"];
    EXPECT_TRUE(caught.rfind("canary caught by " + check + ":", 0) == 0 ||
                caught.rfind("canary caught by " + check + " (", 0) == 0)
        << id << ": " << caught;
    if (c["verdict"].contains("margin")) {
      ++with_margin;
      const json& margin = c["verdict"]["margin"];
      if (margin.is_number()) EXPECT_GE(margin.get<double>(), 3.0) << id << " was caught narrowly: " << c["reason"];
    }
  }
  EXPECT_GE(canaries, 15);
  EXPECT_GE(with_margin, 10);
}

TEST_F(MainJob, JunitIsValidAgainstTheJenkinsSchema) {
  const std::string xml = kMainJob + "/junit.xml";
  if (sh("xmllint --version").rc != 0) GTEST_SKIP() << "xmllint not installed (libxml2-utils)";
  const Output wellformed = sh("xmllint --noout " + xml);
  EXPECT_EQ(wellformed.rc, 0) << wellformed.text.substr(0, 2000);
  if (!fs::exists(kSchemas + "/jenkins-junit.xsd")) GTEST_SKIP() << kSchemas << " not found";
  const Output v = sh("xmllint --noout --schema " + kSchemas + "/jenkins-junit.xsd " + xml);
  EXPECT_EQ(v.rc, 0) << v.text.substr(0, 2000);
}

// report.html of this real run, as a person opens it: headless Chromium with scripts on and
// off; the page, its DOM dumps and a screenshot are kept for CI's artifacts.
TEST_F(MainJob, ReportHtmlAsABrowserDrawsIt) {
  const std::string page = kMainJob + "/report.html";
  ASSERT_TRUE(fs::exists(page));
  EXPECT_LT(fs::file_size(page), 2u << 20);
  const std::string kept = std::string(test_paths::kBinaryDir) + "/report-browser";
  fs::remove_all(kept);
  fs::create_directories(kept);
  fs::copy_file(page, kept + "/report.html", fs::copy_options::overwrite_existing);
  const Output browser = sh("bash " + std::string(MESHTEST_SOURCE_DIR) + "/tests/report/browser_check.sh '" + page +
                            "' '" + kMainJob + "/summary.json' '" + kept + "'");
  if (browser.rc == 77) GTEST_SKIP() << browser.text;  // chromium is not installed
  EXPECT_EQ(browser.rc, 0) << browser.text;
  EXPECT_TRUE(fs::exists(kept + "/report.png")) << browser.text;
  // A failing canary's chart: both series, and the marker at the step its check named.
  const json& canary = by_id_["cpu/canary/grad_sum_not_mean"];
  ASSERT_TRUE(canary["verdict"].contains("step")) << canary["verdict"];
  const std::string chart =
      "chart: cpu/canary/grad_sum_not_mean loss_matches: subject and reference drawn, marker at step " +
      std::to_string(canary["verdict"]["step"].get<long long>());
  EXPECT_NE(browser.text.find(chart), std::string::npos) << chart << "\n" << browser.text;
}

}  // namespace
