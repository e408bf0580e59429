// Reports rendered from summary.json (read through summary_view.h), so `meshtest report
// DIR` can redo them: JUnit XML that Jenkins' junit-4 XSD accepts, one Surefire 3.0 file
// per suite (with flakyFailure / rerunFailure for --retries), and the terminal summary.
#pragma once

#include <cstdio>
#include <string>

#include "report/summary_view.h"

namespace meshtest {

// Every report shows the last this many lines of a failed case's log.
constexpr int kLogTailLines = 50;

// junit.xml: testsuites > one testsuite per matrix suite > one testcase per case. Both XML
// writers throw std::runtime_error for a case without a verdict (summary format 1) and
// std::invalid_argument for an unknown verdict kind: a case's element is never guessed.
void write_junit(const RunView& run, const std::string& path);
// <dir>/TEST-<suite>.xml in Maven Surefire 3.0's format.
void write_surefire(const RunView& run, const std::string& dir);
// The table, then per failed case its reason, log and a command that reruns it.
void print_report(const RunView& run, FILE* out);

// Text safe for any XML 1.0 consumer: ANSI escape sequences removed, invalid UTF-8
// replaced by U+FFFD, other characters XML forbids (NUL, ESC, ...) written as \xNN,
// and at most `cap` bytes kept (head and tail, with the count of bytes dropped).
std::string xml_safe(const std::string& text, size_t cap);

}  // namespace meshtest
