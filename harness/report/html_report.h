// report.html, rendered from summary.json (format_version 2): one self-contained page a
// person opens at 2 a.m. — a grid of every case by suite and layout, coloured by verdict,
// then per case its verdict, loss curves (inline SVG drawn here), checks, the failing
// rank's last log lines and a repro command. No network: inline CSS and JS only, and
// every case and verdict readable with JavaScript off (JS only filters and copies).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace meshtest {

// Writes the page to `path` atomically (path.tmp, then rename). Links to rank logs are
// relative to path's folder when the logs lie under it, else file:// URLs.
void write_html_report(const nlohmann::json& summary, const std::string& path);

// The same page as a string, as if written into the current directory.
std::string html_report(const nlohmann::json& summary);

}  // namespace meshtest
