#include "report/markdown_report.h"

#include <algorithm>
#include <map>
#include <vector>

#include "core/outcome.h"  // human_seconds
#include "report/report.h"

namespace meshtest {

namespace {

constexpr size_t kReasonCap = 300;
constexpr size_t kMarkdownReproCap = 1000;

// Valid UTF-8 without control characters, on one line: a newline would end a list item.
std::string one_line(const std::string& raw, size_t cap) {
  std::string out = xml_safe(raw, cap);
  std::replace(out.begin(), out.end(), '\n', ' ');
  std::replace(out.begin(), out.end(), '\r', ' ');
  std::replace(out.begin(), out.end(), '\t', ' ');
  return out;
}

// Text that renders as itself: every character Markdown or GitHub's HTML could act on is
// backslash-escaped ('|' would split a table cell, '<' open a tag, '`' a code span).
std::string md_text(const std::string& raw, size_t cap) {
  std::string out;
  for (const char ch : one_line(raw, cap)) {
    if (std::string("\\`*_{}[]()<>#!|~&$").find(ch) != std::string::npos) out += '\\';
    out += ch;
  }
  return out;
}

// A code span that holds any text: fenced by one more backtick than the longest run inside,
// padded with spaces so a leading or trailing backtick stays content.
std::string md_code(const std::string& raw, size_t cap) {
  const std::string text = one_line(raw, cap);
  size_t longest = 0, run = 0;
  for (const char ch : text) {
    run = ch == '`' ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  const std::string fence(longest + 1, '`');
  return fence + " " + text + " " + fence;
}

// Statuses in the order people read them; any others after, alphabetically.
std::vector<std::pair<std::string, int>> ordered_counts(const std::vector<CaseView>& cases) {
  std::map<std::string, int> counts;
  for (const auto& c : cases) ++counts[c.status.empty() ? "unknown" : c.status];
  std::vector<std::pair<std::string, int>> out;
  for (const char* s : {"passed", "failed", "xfailed", "skipped", "cancelled"}) {
    const auto it = counts.find(s);
    if (it != counts.end()) out.push_back(*it), counts.erase(it);
  }
  out.insert(out.end(), counts.begin(), counts.end());
  return out;
}

std::string counts_table(const std::vector<std::pair<std::string, int>>& counts) {
  std::string out = "| status | cases |\n|---|---:|\n";
  for (const auto& [status, n] : counts) out += "| " + md_text(status, 64) + " | " + std::to_string(n) + " |\n";
  return out;
}

std::string case_item(const CaseView& c) {
  std::string out = "- **" + md_text(c.id, kReasonCap) + "** (" + md_text(c.status, 64) +
                    "): " + md_text(c.reason, kReasonCap) + "\n";
  if (!c.repro.empty()) out += "  " + md_code(c.repro, kMarkdownReproCap) + "\n";
  return out;
}

}  // namespace

std::string markdown_summary(const RunView& run, size_t max_cases) {
  const auto counts = ordered_counts(run.cases);
  std::string headline;
  for (const auto& [status, n] : counts)
    headline += (headline.empty() ? "" : ", ") + std::to_string(n) + " " + md_text(status, 64);
  if (headline.empty()) headline = "no cases";
  std::string out = "### meshtest: " + headline + "\n\n" + counts_table(counts) + "\n";

  std::string facts = "wall time " + human_seconds(run.wall_s);
  if (!run.backend.empty()) facts += ", backend " + md_text(run.backend, 64);
  out += facts + "\n\n";

  std::string drift;
  for (const auto& c : run.cases)
    if (!c.drift.empty()) drift += "- **" + md_text(c.id, kReasonCap) + "**: " + md_text(c.drift, kReasonCap) + "\n";
  if (!drift.empty()) out += "**Drift** (passed, but left the band of its recent green runs):\n\n" + drift + "\n";

  std::vector<const CaseView*> missed;
  for (const auto& c : run.cases)
    if (!c.met_expectation) missed.push_back(&c);
  if (missed.empty()) return out + "Every case met its expectation.\n";
  out += "**" + std::to_string(missed.size()) + " missed their expectation:**\n\n";
  for (size_t i = 0; i < missed.size() && i < max_cases; ++i) out += case_item(*missed[i]);
  if (missed.size() > max_cases) out += "\nand " + std::to_string(missed.size() - max_cases) + " more\n";
  return out;
}

}  // namespace meshtest
