// A short Markdown report for GitHub's $GITHUB_STEP_SUMMARY (and anywhere Markdown
// renders), rendered from summary.json (format_version 2).
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>

namespace meshtest {

// "### meshtest: 28 passed, 2 failed", a table of counts, then each case that missed its
// expectation with its one-line reason and repro; at most `max_cases` listed, then
// "and N more". Data is escaped so it cannot break the table or inject HTML.
std::string markdown_summary(const nlohmann::json& summary, size_t max_cases = 50);

}  // namespace meshtest
