// A finished run, read back from its --out folder: its summary.json, the reports made from it
// again, and a case's phase as `meshtest diff` and `meshtest golden export` look at it.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

namespace meshtest {

// DIR/summary.json, refused with why when it is missing or of another format version.
nlohmann::json read_summary(const std::string& dir);

// `meshtest merge`: several runs (a matrix's CI shards) as one summary: every case once (an id
// in two runs is refused), counts summed, the longest wall time, and all_met only when every
// run's was and every case met its expectation. Throws std::runtime_error with why.
nlohmann::json merged_summary(const std::vector<std::string>& dirs);

// junit.xml, surefire/TEST-<suite>.xml, report.html and the terminal table, all from
// DIR/summary.json. Returns 1 when asked to exit by expectations and a case missed its own.
int render_reports(const std::string& dir, bool exit_by_expectations);

// `meshtest report DIR --html FILE`: only the HTML report, to FILE; 1 when a case missed its
// expectation.
int write_html_only(const std::string& dir, const std::string& html);
// `meshtest report DIR --markdown`: only the Markdown summary, on stdout (for
// $GITHUB_STEP_SUMMARY); 0 once printed.
int print_markdown_summary(const std::string& dir);

// `meshtest diff`: the loss curves of cases A and B side by side, then the state-dict keys one
// has and the other lacks; 1 when they differ.
int diff_cases(const std::string& dir, const std::string& a, const std::string& b);

// `meshtest golden export`: torchtitan's "<step> <loss>" golden format from a finished case's
// phase (default: its last), or its grad norms.
int export_golden(const std::string& dir, const std::string& id, const std::string& phase, const std::string& metric);

// A finished case's phase (default: its last) as `golden export --format megatron` and `golden
// regen` read it: its name and every metric it reported (judge/checks.h read_phase_curves).
struct FinishedCurves {
  std::string phase;
  std::map<std::string, std::map<long long, double>> metrics;  // "loss" -> step -> value
};
FinishedCurves finished_curves(const std::string& dir, const std::string& id, const std::string& phase);

}  // namespace meshtest
