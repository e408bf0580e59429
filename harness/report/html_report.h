// report.html, rendered from summary.json (format_version 2, read through summary_view.h):
// one self-contained page a person opens at 2 a.m. — a grid of every case by suite and layout, coloured by verdict,
// then per case its verdict, loss curves (inline SVG drawn here), checks, the failing
// rank's last log lines and a repro command. No network: inline CSS and JS only, and
// every case and verdict readable with JavaScript off (JS only filters and copies).
#pragma once

#include <string>

#include "report/summary_view.h"

namespace meshtest {

// Writes the page to `path` atomically (path.tmp, then rename). Links to rank logs are
// relative to path's folder when the logs lie under it, else file:// URLs.
void write_html_report(const RunView& run, const std::string& path);

// The same page as a string, as if written into the current directory.
std::string html_report(const RunView& run);

}  // namespace meshtest
