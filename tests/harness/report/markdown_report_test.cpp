// The Markdown summary for $GITHUB_STEP_SUMMARY: counts in reading order, only the cases
// that missed their expectation, every piece of data escaped so it renders as itself, and
// the list capped.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "report/markdown_report.h"
#include "harness/occurrences.h"

using namespace meshtest;
using nlohmann::json;

namespace {

json passed(const std::string& id) {
  return {{"id", id},
          {"status", "passed"},
          {"met_expectation", true},
          {"reason", ""},
          {"repro", "meshtest run --id " + id}};
}

json failed(const std::string& id, const std::string& reason) {
  return {{"id", id},
          {"status", "failed"},
          {"met_expectation", false},
          {"reason", reason},
          {"repro", "meshtest run m.yaml --id '" + id + "'"}};
}

std::string markdown(const json& summary, size_t max_cases = 50) {
  return markdown_summary(summary_view(summary), max_cases);
}

}  // namespace

TEST(MarkdownReport, ListsMissedCasesEscaped) {
  const json summary = {{"backend", "gloo"},
                        {"wall_s", 125.0},
                        {"cases",
                         {passed("cpu/ddp_tp"), passed("cpu/a"), failed("cpu/crash", "a | b `c` <img src=x>"),
                          failed("cpu/evil", "\x1b[31mred\x1b[0m\nsecond line"), failed("cpu/x", "")}}};
  const std::string md = markdown(summary);
  EXPECT_EQ(md.rfind("### meshtest: 2 passed, 3 failed\n", 0), 0u) << md;
  EXPECT_NE(md.find("| passed | 2 |"), std::string::npos);
  EXPECT_NE(md.find("wall time 2m05s, backend gloo"), std::string::npos) << md;
  EXPECT_NE(md.find("**3 missed their expectation:**"), std::string::npos);
  EXPECT_NE(md.find("a \\| b \\`c\\` \\<img src=x\\>"), std::string::npos) << md;
  EXPECT_EQ(md.find("ddp\\_tp"), std::string::npos);  // it met its expectation: not listed
  for (size_t at = md.find("<img"); at != std::string::npos; at = md.find("<img", at + 1))
    EXPECT_EQ(md[at - 1], '\\');  // an escaped '<' is no tag
  EXPECT_EQ(md.find('\x1b'), std::string::npos);
  EXPECT_NE(md.find("red second line"), std::string::npos);                                   // one list item, one line
  EXPECT_NE(md.find("  ` meshtest run m.yaml --id 'cpu/crash' `"), std::string::npos) << md;  // a code span
}

TEST(MarkdownReport, ACodeSpanHoldsBackticks) {
  json c = failed("s/tick", "r");
  c["repro"] = "echo `x` ``y``";
  const std::string md = markdown({{"cases", {c}}});
  EXPECT_NE(md.find("``` echo `x` ``y`` ```"), std::string::npos) << md;
}

TEST(MarkdownReport, CountsInReadingOrderThenOthersAlphabetically) {
  json odd = passed("s/odd");
  odd["status"] = "weird";
  json none = passed("s/none");
  none.erase("status");
  json skipped = passed("s/skip");
  skipped["status"] = "skipped";
  const std::string md = markdown({{"cases", {odd, skipped, none, failed("s/f", "r"), passed("s/p")}}});
  EXPECT_EQ(md.rfind("### meshtest: 1 passed, 1 failed, 1 skipped, 1 unknown, 1 weird\n", 0), 0u) << md;
}

TEST(MarkdownReport, CapsTheList) {
  json cases = json::array();
  for (int i = 0; i < 60; ++i) cases.push_back(failed("s/c" + std::to_string(i), "r"));
  const std::string md = markdown({{"cases", cases}}, 50);
  EXPECT_EQ(occurrences(md, "\n- **"), 50u);
  EXPECT_NE(md.find("and 10 more"), std::string::npos);
  EXPECT_NE(markdown({{"cases", {passed("s/ok")}}}).find("Every case met"), std::string::npos);
}

TEST(MarkdownReport, AnySummaryRenders) {
  for (const json& odd : {json(nullptr), json::array(), json{{"cases", "none"}},
                          json{{"cases", {1, "x", nullptr}}, {"wall_s", "soon"}, {"backend", {1}}}}) {
    std::string md;
    ASSERT_NO_THROW(md = markdown(odd)) << odd.dump();
    EXPECT_EQ(md.rfind("### meshtest: ", 0), 0u) << md;
  }
  EXPECT_NE(markdown(json::object()).find("### meshtest: no cases"), std::string::npos);
}

TEST(MarkdownReport, ListsDriftedCasesThatPassed) {
  json drifted = passed("cpu/fsdp2");
  drifted["drift"] = {{"message", "drifted: loss of phase train at step 4: 5.97 outside 5.96"}};
  const std::string md = markdown({{"cases", {passed("cpu/a"), drifted}}});
  EXPECT_NE(md.find("**Drift** (passed, but left the band of its recent green runs):"), std::string::npos) << md;
  EXPECT_NE(md.find("- **cpu/fsdp2**: drifted: loss of phase train at step 4"), std::string::npos) << md;
  EXPECT_NE(md.find("Every case met its expectation."), std::string::npos);
}
