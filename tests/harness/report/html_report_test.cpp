// report.html, rendered from hand-built format-2 summaries: every case and verdict on the
// page, charts with their series, band and marker, hostile text inert, a 20 MB binary log
// bounded. (The Markdown summary has markdown_report_test.cpp.)
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "report/html_report.h"
#include "harness/occurrences.h"
#include "test_paths.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace meshtest;

namespace {

const std::string kHostileId = "cpu/evil\"><img src=x onerror=alert(1)>";
const std::string kHostileReason = "</script><script>alert(1)</script> it's \"quoted\" \x1b[31mred\x1b[0m \xff\xfe bad";

// Is every byte sequence valid UTF-8? (Enough for a test: structure only.)
bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char b = s[i];
    const size_t len = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += len;
  }
  return true;
}

json curve(int first, int last, double start_loss) {
  json rows = json::array();
  for (int s = first; s <= last; ++s) rows.push_back({s, start_loss - 0.1 * (s - first), 1.0 + 0.01 * s});
  return rows;
}

json phase(const std::string& name, const std::string& dir, int nproc, json points) {
  json exits = json::array();
  for (int r = 0; r < nproc; ++r) exits.push_back({{"rank", r}, {"exit_code", 0}, {"signal", 0}});
  return {{"name", name},      {"argv", {"meshtrain", "train"}},
          {"nproc", nproc},    {"dir", dir},
          {"ran", true},       {"attempts", 1},
          {"ok", true},        {"outputs", json::object()},
          {"duration_s", 3.5}, {"timed_out", false},
          {"killed", false},   {"stopped_because", ""},
          {"exits", exits},    {"curve", points}};
}

json base_case(const std::string& suite, const std::string& name, const std::string& mesh) {
  return {{"id", suite + "/" + name},
          {"suite", suite},
          {"name", name},
          {"file", "m.yaml:12:5"},
          {"status", "passed"},
          {"met_expectation", true},
          {"expect", "pass"},
          {"reason", ""},
          {"details", ""},
          {"ngpu", 0},
          {"devices", "cpu"},
          {"model", "tiny"},
          {"seed", "1"},
          {"tags", {"cpu"}},
          {"expected_s", 4.0},
          {"start_s", 0.0},
          {"duration_s", 3.9},
          {"timestamp", "2024-01-01T00:00:00"},
          {"dir", "out/" + name},
          {"repro", "meshtest run m.yaml -k '" + name + "'"},
          {"failing_log", ""},
          {"mesh", mesh},
          {"meshes", mesh},
          {"earlier_attempts", json::array()},
          {"verdict", {{"kind", "passed"}, {"message", "passed"}}},
          {"phases", {phase("train", "out/" + name + "/train", 2, curve(1, 10, 5.0))}},
          {"checks", {{{"kind", "exit"}, {"passed", true}, {"judged", true}, {"message", "every rank exited 0"}}}}};
}

class HtmlReport : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/meshtest-html-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    summary_ = build_summary();
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write_file(const std::string& name, const std::string& bytes) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

  std::string random_binary(size_t n) {
    std::mt19937 gen(42);
    std::string bytes(n, '\0');
    for (size_t i = 0; i + 4 <= n; i += 4) {
      const uint32_t word = gen();
      std::memcpy(&bytes[i], &word, 4);
    }
    return bytes;
  }

  json canary() {
    json c = base_case("cpu", "canary/grad_sum_not_mean", "dp_shard=2");
    c["expect"] = "fail: loss_matches";
    c["reason"] = "canary caught: loss_matches failed as planted";
    c["verdict"] = {{"kind", "canary_caught"},
                    {"message", "loss_matches failed at step 7, as the canary must"},
                    {"check", "loss_matches"},
                    {"step", 7}};
    json subject = json::array(), reference = json::array();
    for (int s = 1; s <= 10; ++s) {
      reference.push_back({s, 5.0 - 0.1 * s});
      subject.push_back({s, 5.0 - 0.1 * s + (s >= 7 ? 0.5 : 0.001)});
    }
    c["checks"].push_back(
        {{"kind", "loss_matches"},
         {"passed", false},
         {"judged", true},
         {"phase", "train"},
         {"step", 7},
         {"value", 4.8},
         {"reference", 4.3},
         {"tolerance", 0.05},
         {"message", "loss differs at step 7"},
         {"series",
          {{{"role", "subject"}, {"label", "phase train"}, {"metric", "loss"}, {"points", subject}},
           {{"role", "reference"}, {"label", "baseline cpu/ddp"}, {"metric", "loss"}, {"points", reference}}}},
         {"band", {{"rtol", 0.01}, {"atol", 0.001}}}});
    return c;
  }

  json crash() {
    json c = base_case("cpu", "crash", "tp=2");
    c["status"] = "failed";
    c["met_expectation"] = false;
    c["reason"] = "exit: rank 1 killed by signal 11 (SIGSEGV)";
    c["verdict"] = {{"kind", "crashed"}, {"message", "rank 1 killed by signal 11"},
                    {"check", "exit"},   {"rank", 1},
                    {"signal", 11},      {"phase", "train"}};
    c["failing_log"] = write_file("rank1.log", random_binary(20 << 20));
    c["phases"][0]["ok"] = false;
    c["phases"][0]["exits"][1] = {{"rank", 1}, {"exit_code", -1}, {"signal", 11}};
    c["phases"][0]["stopped_because"] = "rank 1 died";
    c["earlier_attempts"] = {{{"reason", "exit: rank 0 timed out"},
                              {"details", "hung in all_reduce"},
                              {"failing_log", "/gone/rank0.log"},
                              {"duration_s", 60.0},
                              {"verdict", {{"kind", "timed_out"}, {"message", "timed out"}}}}};
    return c;
  }

  json reshard(const std::string& to, bool resumed) {
    json c = base_case("resharding", "save[dp_shard=4]-load[" + to + "]", "dp_shard=4");
    c["meshes"] = "dp_shard=4 -> " + to;
    c["phases"] = {phase("save", "out/r/save", 4, curve(1, 5, 5.0)),
                   phase("load", "out/r/load", 4, resumed ? curve(6, 10, 4.5) : json::array())};
    c["checks"].push_back({{"kind", "keys_match"},
                           {"passed", true},
                           {"judged", true},
                           {"message", "keys match"},
                           {"details", "missing: (none)\nunexpected: (none)"}});
    return c;
  }

  json hostile() {
    json c = base_case("cpu", "evil", "dp_shard=2");
    c["id"] = kHostileId;
    c["name"] = "evil\"><img src=x onerror=alert(1)>";
    c["status"] = "failed";
    c["met_expectation"] = false;
    c["reason"] = kHostileReason;
    c["repro"] = "echo '</script><script>alert(1)</script>' | tee \"x\"";
    c["tags"] = {"cpu", "\"><img src=x onerror=alert(1)>"};
    c["verdict"] = {{"kind", "check_failed\"><script>alert(1)</script>"}, {"message", kHostileReason}};
    c["checks"][0]["details"] = "</pre><script>alert(1)</script>";
    c["failing_log"] = write_file("evil.log", "line 1\n</script><script>alert(1)</script>\n\x1b[1mbold\x1b[0m\n");
    return c;
  }

  json build_summary() {
    json cases = {base_case("cpu", "ddp_tp", "dp_shard=2,tp=2"), canary(), crash(), reshard("tp=4", true),
                  reshard("dp_replicate=2,dp_shard=2", false),   hostile()};
    json gone = base_case("cpu", "log_gone", "dp_shard=2");
    gone["status"] = "failed";
    gone["met_expectation"] = false;
    gone["verdict"] = {{"kind", "exit_code"}, {"message", "rank 0 exited 1"}};
    gone["failing_log"] = dir_ + "/no/such/rank0.log";
    cases.push_back(gone);
    return {{"format_version", 2},
            {"matrices", {"test_matrix/cpu.yaml"}},
            {"retries", 1},
            {"backend", "gloo"},
            {"devices", 0},
            {"wall_s", 125.0},
            {"interrupted_by_signal", 0},
            {"all_met", false},
            {"hostname", "ci-1"},
            {"counts", {{"passed", 4}, {"failed", 3}}},
            {"cases", cases}};
  }

  // The part of the page for the case with this anchor, up to its closing tag.
  static std::string section(const std::string& page, const std::string& anchor) {
    const size_t start = page.find("id=\"" + anchor + "\"");
    if (start == std::string::npos) return "";
    return page.substr(start, page.find("</details>", start) - start);
  }

  std::string dir_;
  json summary_;
};

TEST_F(HtmlReport, ListsEveryCaseAndVerdict) {
  const std::string page = html_report(summary_view(summary_));
  for (const auto& c : summary_["cases"]) {
    if (c["id"] == kHostileId) continue;
    EXPECT_NE(page.find(c["id"].get<std::string>()), std::string::npos) << c["id"];
    EXPECT_NE(page.find(c["verdict"]["kind"].get<std::string>()), std::string::npos) << c["id"];
  }
  EXPECT_NE(page.find("cpu/evil&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"), std::string::npos);
  EXPECT_NE(page.find("<noscript>"), std::string::npos);
  EXPECT_NE(page.find("<div id=\"js-errors\"></div>"), std::string::npos);
  EXPECT_NE(page.find("2m05s"), std::string::npos);  // wall time
}

TEST_F(HtmlReport, HostileTextStaysText) {
  const std::string page = html_report(summary_view(summary_));
  EXPECT_EQ(page.find("<script>alert"), std::string::npos);
  EXPECT_EQ(page.find("<img"), std::string::npos);
  EXPECT_EQ(page.find("</pre><script"), std::string::npos);
  EXPECT_EQ(occurrences(page, "<script"), 1u);    // ours only
  EXPECT_EQ(occurrences(page, "</script>"), 1u);  // the log's and the reason's are escaped
  EXPECT_NE(page.find("&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  EXPECT_NE(page.find("it&#39;s &quot;quoted&quot;"), std::string::npos);
  EXPECT_EQ(page.find('\x1b'), std::string::npos);
  EXPECT_NE(page.find("bold"), std::string::npos);  // ANSI gone, text kept
  EXPECT_TRUE(valid_utf8(page));
  for (const char ch : page)
    EXPECT_FALSE(static_cast<unsigned char>(ch) < 0x20 && ch != '\n' && ch != '\t' && ch != '\r') << int(ch);
  EXPECT_EQ(page.find("http://"), std::string::npos);
  EXPECT_EQ(page.find("https://"), std::string::npos);
  // An unknown verdict kind does not become a class name.
  EXPECT_EQ(page.find("k-check_failed\""), std::string::npos);
}

TEST_F(HtmlReport, AnchorsAreSafeAndDistinct) {
  json a = base_case("s", "a/b", "tp=2"), b = base_case("s", "a_b", "tp=2");
  const std::string page = html_report(summary_view({{"format_version", 2}, {"cases", {a, b}}}));
  EXPECT_NE(page.find("id=\"case-s_2fa_2fb\""), std::string::npos);
  EXPECT_NE(page.find("id=\"case-s_2fa_5fb\""), std::string::npos);
  const std::string evil = html_report(summary_view(summary_));
  EXPECT_NE(evil.find("id=\"case-cpu_2fevil_22_3e_3cimg_20src_3dx_20onerror_3dalert_281_29_3e\""), std::string::npos);
}

TEST_F(HtmlReport, HugeBinaryLogIsBounded) {
  const std::string page = html_report(summary_view(summary_));
  EXPECT_LT(page.size(), 1u << 20);
  EXPECT_NE(section(page, "case-cpu_2fcrash").find("<pre class=\"log\">"), std::string::npos);
}

TEST_F(HtmlReport, GoneLogIsSaidToBeGone) {
  const std::string page = html_report(summary_view(summary_));
  EXPECT_NE(section(page, "case-cpu_2flog_5fgone").find("The log is gone"), std::string::npos);
}

TEST_F(HtmlReport, CheckChartHasSeriesBandAndMarker) {
  const std::string page = html_report(summary_view(summary_));
  const std::string canary = section(page, "case-cpu_2fcanary_2fgrad_5fsum_5fnot_5fmean");
  ASSERT_FALSE(canary.empty());
  EXPECT_NE(canary.find("data-series=\"subject\""), std::string::npos);
  EXPECT_NE(canary.find("data-series=\"reference\""), std::string::npos);
  EXPECT_NE(canary.find("class=\"band\""), std::string::npos);
  EXPECT_NE(canary.find("class=\"marker\" data-step=\"7\""), std::string::npos);
  EXPECT_NE(canary.find("<circle"), std::string::npos);
  EXPECT_EQ(occurrences(page, "class=\"marker\""), 1u);  // no per-point elements elsewhere
}

TEST_F(HtmlReport, ResumedPhasesShareOneStepAxis) {
  const std::string page = html_report(summary_view(summary_));
  const std::string r = section(page, "case-resharding_2fsave_5bdp_5fshard_3d4_5d-load_5btp_3d4_5d");
  ASSERT_FALSE(r.empty());
  EXPECT_NE(r.find("data-series=\"phase-0\""), std::string::npos);
  EXPECT_NE(r.find("data-series=\"phase-1\""), std::string::npos);
  EXPECT_NE(r.find("step 1<"), std::string::npos);
  EXPECT_NE(r.find("step 10<"), std::string::npos);
}

TEST_F(HtmlReport, ReshardTableAndLegend) {
  const std::string page = html_report(summary_view(summary_));
  EXPECT_NE(page.find("saved layout × loaded layout"), std::string::npos);
  EXPECT_NE(page.find("<th>dp_replicate=2,dp_shard=2</th>"), std::string::npos);
  EXPECT_NE(page.find("<th>tp=4</th>"), std::string::npos);
  EXPECT_NE(page.find("class=\"sw k-canary_caught\""), std::string::npos);
  EXPECT_NE(page.find("class=\"sw k-crashed\""), std::string::npos);
}

TEST_F(HtmlReport, ReshardTableReadsPhaseMeshes) {
  json c = base_case("resharding", "chain", "dp_shard=4");
  c.erase("meshes");
  c["phase_meshes"] = {"dp_shard=4", "dp_shard=2,tp=2", "tp=4"};
  const std::string page = html_report(summary_view({{"format_version", 2}, {"cases", {c}}}));
  EXPECT_EQ(occurrences(page, "title=\"resharding/chain"), 3u);  // the grid's chip, and one per step of the chain
  EXPECT_NE(page.find("<th>dp_shard=2,tp=2</th><th>tp=4</th>"), std::string::npos);
  EXPECT_NE(page.find("<dd>dp_shard=4 -&gt; dp_shard=2,tp=2 -&gt; tp=4</dd>"), std::string::npos);
}

TEST_F(HtmlReport, StyleAndScriptAreTheFilesBytes) {
  auto read = [](const std::string& name) {
    std::ifstream in(std::string(test_paths::kSourceDir) + "/harness/report/" + name, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  const std::string css = read("html_report.css"), js = read("html_report.js");
  ASSERT_FALSE(css.empty());
  ASSERT_FALSE(js.empty());
  const std::string page = html_report(summary_view(summary_));
  EXPECT_NE(page.find("<style>\n" + css + "</style>"), std::string::npos);
  EXPECT_NE(page.find("<script>\n" + js + "</script>"), std::string::npos);
}

TEST_F(HtmlReport, WritesAtomicallyWithRelativeLogLinks) {
  json summary = summary_;
  summary["cases"][0]["phases"][0]["dir"] = dir_ + "/report/cpu/ddp_tp/train";
  summary["cases"][1]["phases"][0]["dir"] = "/elsewhere/train";
  const std::string path = dir_ + "/report/report.html";
  write_html_report(summary_view(summary), path);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  std::ifstream in(path, std::ios::binary);
  const std::string page((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(page.find("href=\"cpu/ddp_tp/train/rank1.log\""), std::string::npos);
  EXPECT_NE(page.find("href=\"file:///elsewhere/train/rank0.log\""), std::string::npos);
}

TEST_F(HtmlReport, MalformedSummaryStillRenders) {
  const json odd = {{"format_version", 3},
                    {"wall_s", "soon"},
                    {"cases",
                     {{{"id", 5}, {"status", {1, 2}}, {"phases", "none"}, {"checks", {{{"series", 7}}}}},
                      "not a case",
                      {{"id", "ok"}, {"verdict", "passed"}, {"tags", {1, "t"}}}}}};
  std::string page;
  ASSERT_NO_THROW(page = html_report(summary_view(odd)));
  EXPECT_NE(page.find("format_version 3"), std::string::npos);
}

TEST_F(HtmlReport, ThirtyTwoCasesStaySmall) {
  json cases = json::array();
  for (int i = 0; i < 32; ++i) cases.push_back(i % 2 ? canary() : base_case("cpu", "c" + std::to_string(i), "tp=2"));
  for (int i = 0; i < 32; ++i) cases[i]["id"] = "cpu/c" + std::to_string(i);
  const std::string page = html_report(summary_view({{"format_version", 2}, {"cases", cases}}));
  EXPECT_LT(page.size(), 2u << 20);
}

}  // namespace

// With --history (docs/history.md): a drifted case is marked and says why, every case with a
// history gets its strip, and the header names the commits.
TEST_F(HtmlReport, DriftAndHistoryStripsAreShown) {
  json summary = summary_;
  summary["history"] = {{"from_commit", "aaaaaaaaaaaa1111"}, {"to_commit", "bbbbbbbbbbbb2222"}};
  json& c = summary["cases"][0];
  c["drift"] = {
      {"message", "drifted: loss of phase train at step 4: 5.97 outside 5.96 \xc2\xb1 6e-06 (8 green runs, c4..c11)"}};
  c["history"] =
      json::array({{{"commit", "aaaaaaaaaaaa1111"}, {"status", "passed"}, {"final_loss", 5.5}, {"duration_s", 3.0}},
                   {{"commit", "cccccccccccc3333"}, {"status", "failed"}, {"final_loss", nullptr}, {"duration_s", 1.0}},
                   {{"commit", "bbbbbbbbbbbb2222"}, {"status", "passed"}, {"final_loss", 5.25}, {"duration_s", 4.0}}});
  const std::string page = html_report(summary_view(summary));
  EXPECT_NE(page.find("commits aaaaaaaaaaaa..bbbbbbbbbbbb (each case's strip below)"), std::string::npos);
  EXPECT_NE(page.find("<span class=\"drift\">drifted</span>"), std::string::npos);
  EXPECT_NE(page.find("drifted: loss of phase train at step 4"), std::string::npos);
  EXPECT_NE(page.find("<span class=\"hist k-failed\" title=\"cccccccccccc: failed, final loss -, 1.0 s\">"),
            std::string::npos)
      << page.substr(page.find("class=\"history\""), 600);
  EXPECT_NE(page.find("3 runs, commits aaaaaaaaaaaa..bbbbbbbbbbbb; final loss 5.5 &rarr; 5.25"), std::string::npos);
}

// What a triager reads first: where the verdict was decided (check, phase, rank, signal) and, per
// phase, why it stopped: the stop reason, the ranks that exited badly (a signal, a code), a launch
// error, and a phase that never ran.
TEST_F(HtmlReport, TheVerdictsPlaceAndEachPhasesStopAreSaid) {
  json c = crash();
  c["verdict"]["value"] = 4.25;
  c["phases"][0]["exits"][0] = {{"rank", 0}, {"exit_code", 3}, {"signal", 0}};
  json never = phase("load", "out/crash/load", 2, json::array());
  never["ran"] = false;
  never["ok"] = false;
  json refused = phase("resume", "out/crash/resume", 2, json::array());
  refused["ok"] = false;
  refused["launch_error"] = "cannot start meshtrain: not found";
  c["phases"].push_back(never);
  c["phases"].push_back(refused);
  json no_check = base_case("cpu", "no_check", "dp_shard=2");  // a verdict the run loop gave, not a check
  no_check["status"] = "failed";
  no_check["verdict"] = {{"kind", "exit_code"}, {"message", "rank 0 exited 1"}, {"rank", 0}, {"exit_code", 1}};
  summary_["cases"] = {c, no_check};
  const std::string page = html_report(summary_view(summary_));
  EXPECT_NE(page.find("<dt>where</dt><dd>rank 0, exit_code 1</dd>"), std::string::npos)
      << section(page, "cpu-no_check");
  EXPECT_NE(page.find("<dt>where</dt><dd>check exit, phase train, rank 1, signal 11, value 4.25</dd>"),
            std::string::npos)
      << section(page, "cpu-crash");
  EXPECT_NE(page.find("rank 1 died<br>rank 0 exit 3, rank 1 signal 11</td>"), std::string::npos) << page.size();
  EXPECT_NE(page.find("<td>load</td><td>2</td><td>did not run</td>"), std::string::npos);
  const size_t resume = page.find("<td>resume</td>");
  EXPECT_NE(resume, std::string::npos);
  EXPECT_NE(page.substr(resume, 200).find("<td>cannot start meshtrain: not found</td>"), std::string::npos)
      << page.substr(resume, 200);
}

// A chart's line breaks where a value is missing (a NaN written as null) instead of joining
// across it; the band is drawn around the reference alone, however many other series the check
// recorded; a series without a metric is charted as loss; a reference with no value draws no band.
TEST_F(HtmlReport, ChartLinesBreakAtGapsAndTheBandFollowsOnlyTheReference) {
  json c = base_case("cpu", "charts", "dp_shard=2");
  c["phases"][0]["curve"] = {{1, 5.0, 1.0}, {2, nullptr, 1.0}, {3, 4.8, 1.0}};
  json points = {{1, 5.0}, {2, 4.9}, {3, 4.8}};
  c["checks"].push_back({{"kind", "loss_matches"},
                         {"passed", true},
                         {"judged", true},
                         {"message", "within the band"},
                         {"series",
                          {{{"role", "subject"}, {"label", "phase train"}, {"metric", ""}, {"points", points}},
                           {{"role", "reference"}, {"label", "golden"}, {"metric", ""}, {"points", points}},
                           {{"role", "reference-max"}, {"label", "golden (max)"}, {"metric", ""}, {"points", points}}}},
                         {"band", {{"rtol", 0.01}, {"atol", 0.0}}}});
  c["checks"].push_back({{"kind", "resume_matches"},
                         {"passed", true},
                         {"judged", true},
                         {"message", "no reference values"},
                         {"series",
                          {{{"role", "subject"}, {"label", "phase train"}, {"metric", "grad_norm"}, {"points", points}},
                           {{"role", "reference"},
                            {"label", "baseline"},
                            {"metric", "grad_norm"},
                            {"points", {{1, nullptr}, {2, nullptr}}}}}},
                         {"band", {{"rtol", 0.01}, {"atol", 0.0}}}});
  summary_["cases"] = {c};
  const std::string page = html_report(summary_view(summary_));
  const size_t line = page.find("data-series=\"phase-0\" d=\"");
  ASSERT_NE(line, std::string::npos);
  const std::string d = page.substr(line + 25, page.find('"', line + 25) - line - 25);
  EXPECT_EQ(std::count(d.begin(), d.end(), 'M'), 2) << "the line joined across step 2's missing loss: " << d;
  EXPECT_EQ(std::count(d.begin(), d.end(), 'L'), 0) << d;
  EXPECT_NE(page.find("loss_matches: loss, subject vs reference"), std::string::npos);
  EXPECT_EQ(occurrences(page, "class=\"band\""), 1u) << "a band around a series other than the reference";
}

// The value axis spans the band around the reference (within the curves' own span), so the band
// is drawn, not clamped flat against the plot's top or bottom edge.
TEST_F(HtmlReport, TheValueAxisSpansTheBand) {
  json c = base_case("cpu", "band", "dp_shard=2");
  const json points = {{1, 2.0}, {2, 1.5}, {3, 1.0}}, below = {{1, 1.9}, {2, 1.4}, {3, 0.95}};
  c["checks"].push_back({{"kind", "loss_matches"},
                         {"passed", true},
                         {"judged", true},
                         {"message", "within the band"},
                         {"series",
                          {{{"role", "subject"}, {"label", "phase train"}, {"metric", "loss"}, {"points", below}},
                           {{"role", "reference"}, {"label", "baseline"}, {"metric", "loss"}, {"points", points}}}},
                         {"band", {{"rtol", 0.1}, {"atol", 0.0}}}});
  summary_["cases"] = {c};
  const std::string page = html_report(summary_view(summary_));
  const std::string start = "class=\"band\" data-series=\"band\" d=\"";
  const size_t band = page.find(start);
  ASSERT_NE(band, std::string::npos);
  const size_t from = band + start.size();
  std::string d = page.substr(from, page.find('"', from) - from);
  for (char& ch : d)
    if (std::isalpha(static_cast<unsigned char>(ch))) ch = ' ';
  std::istringstream numbers(d);
  double x = 0, y = 0, top = 1e9, bottom = -1e9;
  while (numbers >> x >> y) top = std::min(top, y), bottom = std::max(bottom, y);
  EXPECT_GT(top, 10.0) << "the band's upper edge is clamped to the plot's top: " << d;
  EXPECT_LT(bottom, 174.0) << "the band's lower edge is clamped to the plot's bottom: " << d;
}
