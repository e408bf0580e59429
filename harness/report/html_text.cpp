#include "report/html_text.h"

#include <cctype>
#include <cstdio>

#include "report/report.h"  // xml_safe

namespace fs = std::filesystem;

namespace meshtest {

// A measured number (value, reference, tolerance) as the page shows it: 6 significant digits.
std::string float_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

// Sanitized (valid UTF-8, ANSI and control characters gone, at most `cap` bytes) and then
// escaped, so the result is safe both as text and inside a double- or single-quoted attribute.
std::string esc(const std::string& raw, size_t cap) {
  const std::string clean = xml_safe(raw, cap);
  std::string out;
  out.reserve(clean.size() + 16);
  for (const char ch : clean) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += ch;
    }
  }
  return out;
}

// An element id for a case that is safe in an attribute, a URL fragment and a CSS selector,
// and distinct for distinct case ids: letters, digits and '-' kept, every other byte as _hh.
std::string anchor_of(const std::string& case_id) {
  static const char* hex = "0123456789abcdef";
  std::string out = "case-";
  for (const unsigned char b : case_id.substr(0, 1024)) {
    if (std::isalnum(b) || b == '-') {
      out += static_cast<char>(b);
    } else {
      out += '_';
      out += hex[b >> 4];
      out += hex[b & 15];
    }
  }
  return out;
}

// A file path as an href: relative to the report's folder when the file lies under it (so the
// folder can move or be served as a CI artifact), else a file:// URL. Percent-encoding every
// byte outside [A-Za-z0-9-._~/] also keeps a ':' from ever forming a URL scheme.
std::string file_href(const std::string& path, const fs::path& base) {
  std::error_code ec;
  const fs::path abs = fs::absolute(path, ec).lexically_normal();
  const fs::path rel = abs.lexically_relative(base);
  const bool under = !rel.empty() && *rel.begin() != "..";
  const std::string raw = under ? rel.generic_string() : abs.generic_string();
  std::string out = under ? "" : "file://";
  static const char* hex = "0123456789ABCDEF";
  for (const unsigned char b : raw) {
    if (std::isalnum(b) || b == '-' || b == '.' || b == '_' || b == '~' || b == '/') {
      out += static_cast<char>(b);
    } else {
      out += '%';
      out += hex[b >> 4];
      out += hex[b & 15];
    }
  }
  return out;
}

std::string fixed1(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", v);
  return buf;
}

std::string short_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.4g", v);
  return buf;
}

}  // namespace meshtest
