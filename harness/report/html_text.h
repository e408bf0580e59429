// The one way data reaches the HTML report: every string from a summary is sanitized and
// escaped here (esc), every case id becomes an anchor here, every file path an href here, and
// numbers are printed in the page's three forms.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>

namespace meshtest {

constexpr size_t kLineCap = 2000;  // ids, reasons, labels: one line

// Sanitized (valid UTF-8, ANSI and control characters gone, at most `cap` bytes) and then
// escaped, so the result is safe both as text and inside a double- or single-quoted attribute.
std::string esc(const std::string& raw, size_t cap = kLineCap);
// An element id for a case that is safe in an attribute, a URL fragment and a CSS selector,
// and distinct for distinct case ids.
std::string anchor_of(const std::string& case_id);
// A file path as an href: relative to `base` when the file lies under it, else a file:// URL.
std::string file_href(const std::string& path, const std::filesystem::path& base);

std::string float_text(double v);    // a measured number: 6 significant digits
std::string fixed1(double v);        // an SVG coordinate: one decimal
std::string short_number(double v);  // an axis label: 4 significant digits

}  // namespace meshtest
