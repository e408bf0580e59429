// The HTML report's style sheet and script, the bytes of html_report.css and
// html_report.js, compiled in (CMake generates their .cpp from html_assets.cpp.in) so
// report.html stays one self-contained file. Fixed text: no data ever goes into them.
#pragma once

namespace meshtest {

extern const char* const kHtmlReportCss;
// Filtering, Copy buttons and opening a case linked to. Errors land in #js-errors, so a
// headless DOM dump shows them; every lookup tolerates a missing element.
extern const char* const kHtmlReportJs;

}  // namespace meshtest
