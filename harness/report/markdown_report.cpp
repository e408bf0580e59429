#include "report/markdown_report.h"

#include <algorithm>
#include <map>
#include <vector>

#include "core/outcome.h"  // human_seconds
#include "report/report.h"

using nlohmann::json;

namespace meshtest {

namespace {

constexpr size_t kReasonCap = 300;
constexpr size_t kReproCap = 1000;

std::string str(const json& j, const char* key) {
  if (!j.is_object()) return "";
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

bool met(const json& c) {
  const auto it = c.find("met_expectation");
  return it != c.end() && it->is_boolean() && it->get<bool>();
}

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
std::vector<std::pair<std::string, int>> ordered_counts(const json& cases) {
  std::map<std::string, int> counts;
  for (const auto& c : cases) ++counts[str(c, "status").empty() ? "unknown" : str(c, "status")];
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

std::string case_item(const json& c) {
  std::string out = "- **" + md_text(str(c, "id"), kReasonCap) + "** (" + md_text(str(c, "status"), 64) + "): " +
                    md_text(str(c, "reason"), kReasonCap) + "\n";
  if (!str(c, "repro").empty()) out += "  " + md_code(str(c, "repro"), kReproCap) + "\n";
  return out;
}

}  // namespace

std::string markdown_summary(const json& summary, size_t max_cases) {
  static const json empty = json::array();
  const auto it = summary.is_object() ? summary.find("cases") : summary.end();
  const json& cases = it != summary.end() && it->is_array() ? *it : empty;

  const auto counts = ordered_counts(cases);
  std::string headline;
  for (const auto& [status, n] : counts) headline += (headline.empty() ? "" : ", ") + std::to_string(n) + " " + md_text(status, 64);
  if (headline.empty()) headline = "no cases";
  std::string out = "### meshtest: " + headline + "\n\n" + counts_table(counts) + "\n";

  const auto wall = summary.find("wall_s");
  std::string facts = "wall time " + human_seconds(wall != summary.end() && wall->is_number() ? wall->get<double>() : 0);
  if (!str(summary, "backend").empty()) facts += ", backend " + md_text(str(summary, "backend"), 64);
  out += facts + "\n\n";

  std::vector<const json*> missed;
  for (const auto& c : cases)
    if (!met(c)) missed.push_back(&c);
  if (missed.empty()) return out + "Every case met its expectation.\n";
  out += "**" + std::to_string(missed.size()) + " missed their expectation:**\n\n";
  for (size_t i = 0; i < missed.size() && i < max_cases; ++i) out += case_item(*missed[i]);
  if (missed.size() > max_cases) out += "\nand " + std::to_string(missed.size() - max_cases) + " more\n";
  return out;
}

}  // namespace meshtest
