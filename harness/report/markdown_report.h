// A short Markdown report for GitHub's $GITHUB_STEP_SUMMARY (and anywhere Markdown
// renders), rendered from summary.json (format_version 2, read through summary_view.h).
#pragma once

#include <cstddef>
#include <string>

#include "report/summary_view.h"

namespace meshtest {

// "### meshtest: 28 passed, 2 failed", a table of counts, then each case that missed its
// expectation with its one-line reason and repro; at most `max_cases` listed, then
// "and N more". Data is escaped so it cannot break the table or inject HTML.
std::string markdown_summary(const RunView& run, size_t max_cases = 50);

}  // namespace meshtest
