#include "report/html_report.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <vector>

#include "core/outcome.h"  // human_seconds
#include "report/report.h"  // xml_safe

namespace fs = std::filesystem;
using nlohmann::json;

namespace meshtest {

namespace {

// Caps keep a hostile or huge summary (or a 20 MB binary log) from bloating the page.
constexpr size_t kLineCap = 2000;             // ids, reasons, labels: one line
constexpr size_t kTextCap = 16 * 1024;        // messages and check details
constexpr size_t kReproCap = 4096;
constexpr size_t kLogReadBytes = 64 * 1024;   // read from the end of a log, at most
constexpr size_t kLogShownCap = 32 * 1024;    // shown of those, at most
constexpr int kLogLines = 50;
constexpr int kMaxRankLinks = 256;            // per phase
constexpr size_t kMaxAttentionLinks = 200;

// ---- reading the summary leniently: a report must render whatever the summary holds ----

const json& field(const json& j, const char* key) {
  static const json null_json;
  if (!j.is_object()) return null_json;
  const auto it = j.find(key);
  return it == j.end() ? null_json : *it;
}

std::string str(const json& j, const char* key) {
  const json& v = field(j, key);
  return v.is_string() ? v.get<std::string>() : "";
}

double num(const json& j, const char* key, double fallback = 0) {
  const json& v = field(j, key);
  return v.is_number() ? v.get<double>() : fallback;
}

bool flag(const json& j, const char* key) {
  const json& v = field(j, key);
  if (v.is_boolean()) return v.get<bool>();
  return v.is_number() && v.get<double>() != 0;
}

const json& list(const json& j, const char* key) {
  static const json empty = json::array();
  const json& v = field(j, key);
  return v.is_array() ? v : empty;
}

// Any scalar as text: "4", "0.25", "true"; an array as "a, b".
std::string scalar_text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer() || v.is_number_unsigned() || v.is_boolean()) return v.dump();
  if (v.is_number_float()) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.6g", v.get<double>());
    return buf;
  }
  std::string out;
  if (v.is_array())
    for (const auto& e : v) out += (out.empty() ? "" : ", ") + scalar_text(e);
  return out;
}

// ---- the one way data reaches the page ----

// Sanitized (valid UTF-8, ANSI and control characters gone, at most `cap` bytes) and then
// escaped, so the result is safe both as text and inside a double- or single-quoted attribute.
std::string esc(const std::string& raw, size_t cap = kLineCap) {
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

// The last `lines` lines of a regular file, reading at most `max_bytes` from its end, so a
// 20 MB log costs 64 KiB. nullopt when the file is gone (or is not a regular file: a FIFO
// would block the report forever).
std::optional<std::string> tail_lines(const std::string& path, size_t max_bytes, int lines) {
  std::error_code ec;
  if (path.empty() || !fs::is_regular_file(path, ec)) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0) return std::nullopt;
  const std::streamoff start = size > static_cast<std::streamoff>(max_bytes) ? size - max_bytes : 0;
  in.seekg(start);
  std::string buf(static_cast<size_t>(size - start), '\0');
  in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
  buf.resize(static_cast<size_t>(in.gcount()));
  size_t end = buf.size();
  if (end > 0 && buf[end - 1] == '\n') --end;  // a final newline does not start a line
  int seen = 0;
  for (size_t i = end; i-- > 0;)
    if (buf[i] == '\n' && ++seen == lines) return buf.substr(i + 1);
  return buf;
}

// ---- verdict colours: from status and verdict.kind, never from message text ----

const std::vector<std::string> kStatuses = {"passed", "failed", "xfailed", "skipped", "cancelled"};

// verdict.kind → what it means, in legend order.
const std::vector<std::pair<std::string, std::string>> kKinds = {
    {"passed", "passed"},
    {"canary_caught", "canary caught (a planted bug failed its check, as it must)"},
    {"xfailed", "failed as expected (xfail)"},
    {"skipped", "skipped"},
    {"cancelled", "cancelled"},
    {"check_failed", "a check failed"},
    {"xpassed", "passed but expected to fail"},
    {"xfailed_differently", "failed, but not as the xfail said"},
    {"canary_not_caught", "canary not caught"},
    {"not_judged", "not judged (a check could not run)"},
    {"crashed", "crashed"},
    {"exit_code", "non-zero exit"},
    {"timed_out", "timed out"},
    {"launch_error", "could not launch"},
    {"canary_crashed", "canary crashed before its check"},
};

bool known_status(const std::string& s) { return std::count(kStatuses.begin(), kStatuses.end(), s) > 0; }

bool known_kind(const std::string& k) {
  return std::any_of(kKinds.begin(), kKinds.end(), [&](const auto& e) { return e.first == k; });
}

// A status safe to use as a token (data-status, filters): the status if known, else "other".
std::string status_token(const json& c) {
  const std::string s = str(c, "status");
  return known_status(s) ? s : "other";
}

std::string verdict_kind(const json& c) { return str(field(c, "verdict"), "kind"); }

// The CSS class that colours a case: its verdict kind if known, else its status.
std::string colour_class(const json& c) {
  const std::string kind = verdict_kind(c);
  if (known_kind(kind)) return "k-" + kind;
  return "k-" + status_token(c);
}

// ---- charts: inline SVG polylines, one decimal per coordinate, no per-point elements ----

struct Point {
  double step = 0;
  std::optional<double> value;  // nullopt: not a finite number (a gap in the line)
};

struct Series {
  std::string role;   // data-series: "subject", "reference", "phase-0", ...
  std::string css;    // colour class
  std::string label;  // raw text, escaped when drawn
  std::vector<Point> points;
};

struct Chart {
  std::string title;  // raw text
  std::vector<Series> series;
  std::optional<std::pair<double, double>> band;  // (rtol, atol) around the "reference" series
  std::optional<json> marker_step;                // the first step outside the band
};

// [[step, value], ...] or a curve's [[step, loss, grad_norm], ...] with value at `column`.
std::vector<Point> points_of(const json& rows, size_t column) {
  std::vector<Point> out;
  for (const auto& row : rows) {
    if (!row.is_array() || row.size() <= column || !row[0].is_number()) continue;
    Point p{row[0].get<double>(), std::nullopt};
    if (row[column].is_number() && std::isfinite(row[column].get<double>())) p.value = row[column].get<double>();
    out.push_back(p);
  }
  std::stable_sort(out.begin(), out.end(), [](const Point& a, const Point& b) { return a.step < b.step; });
  return out;
}

double band_width(double reference, const std::pair<double, double>& band) {
  return band.second + band.first * std::fabs(reference);
}

// Maps steps and values onto the plot area of a kWidth x kHeight SVG.
class Scale {
 public:
  static constexpr double kWidth = 640, kHeight = 200, kLeft = 64, kRight = 12, kTop = 10, kBottom = 26;

  Scale(double x0, double x1, double y0, double y1) : x0_(x0), x1_(x1), y0_(y0), y1_(y1) {}
  double x(double step) const {
    const double w = kWidth - kLeft - kRight;
    return x1_ > x0_ ? kLeft + (step - x0_) / (x1_ - x0_) * w : kLeft + w / 2;
  }
  // Clamped to the plot, so a huge tolerance band or outlier cannot draw outside it.
  double y(double v) const {
    const double h = kHeight - kTop - kBottom;
    const double py = kTop + (y1_ - v) / (y1_ - y0_) * h;
    return std::clamp(py, kTop, kTop + h);
  }
  double x0() const { return x0_; }
  double x1() const { return x1_; }
  double y0() const { return y0_; }
  double y1() const { return y1_; }

 private:
  double x0_, x1_, y0_, y1_;
};

// Steps and values spanned by the series; the band widens the value range by at most the
// series' own span on each side, so one absurd tolerance does not flatten the curves.
Scale scale_for(const Chart& chart) {
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const auto& s : chart.series)
    for (const auto& p : s.points) {
      x0 = std::min(x0, p.step), x1 = std::max(x1, p.step);
      if (p.value) y0 = std::min(y0, *p.value), y1 = std::max(y1, *p.value);
    }
  if (!std::isfinite(x0)) x0 = 0, x1 = 1;
  if (!std::isfinite(y0)) y0 = 0, y1 = 1;
  if (chart.band) {
    const double span = std::max(y1 - y0, 1e-12);
    for (const auto& s : chart.series) {
      if (s.role != "reference") continue;
      for (const auto& p : s.points) {
        if (!p.value) continue;
        const double w = band_width(*p.value, *chart.band);
        y0 = std::min(y0, std::max(*p.value - w, y0 - span));
        y1 = std::max(y1, std::min(*p.value + w, y1 + span));
      }
    }
  }
  const double pad = std::max((y1 - y0) * 0.05, std::max(std::fabs(y1) * 1e-3, 1e-9));
  return Scale(x0, x1, y0 - pad, y1 + pad);
}

// "M x y L x y ..." with a fresh M after each gap.
std::string path_d(const std::vector<Point>& points, const Scale& sc) {
  std::string d;
  bool pen_down = false;
  for (const auto& p : points) {
    if (!p.value) {
      pen_down = false;
      continue;
    }
    d += (pen_down ? "L" : "M") + fixed1(sc.x(p.step)) + " " + fixed1(sc.y(*p.value));
    pen_down = true;
  }
  return d;
}

// The region within tolerance of the reference: upper edge forward, lower edge back.
std::string band_path(const Series& reference, const std::pair<double, double>& band, const Scale& sc) {
  std::vector<std::string> upper, lower;
  for (const auto& p : reference.points) {
    if (!p.value) continue;
    const double w = band_width(*p.value, band);
    upper.push_back(fixed1(sc.x(p.step)) + " " + fixed1(sc.y(*p.value + w)));
    lower.push_back(fixed1(sc.x(p.step)) + " " + fixed1(sc.y(*p.value - w)));
  }
  if (upper.empty()) return "";
  std::string d = "M" + upper[0];
  for (size_t i = 1; i < upper.size(); ++i) d += "L" + upper[i];
  for (size_t i = lower.size(); i-- > 0;) d += "L" + lower[i];
  return "<path class=\"band\" data-series=\"band\" d=\"" + d + "Z\"><title>tolerance band</title></path>";
}

std::string axes(const Scale& sc) {
  const double left = Scale::kLeft, right = Scale::kWidth - Scale::kRight;
  const double bottom = Scale::kHeight - Scale::kBottom;
  std::string out = "<g class=\"axes\">";
  for (const double v : {sc.y0(), (sc.y0() + sc.y1()) / 2, sc.y1()}) {
    const std::string y = fixed1(sc.y(v));
    out += "<line x1=\"" + fixed1(left) + "\" x2=\"" + fixed1(right) + "\" y1=\"" + y + "\" y2=\"" + y + "\"/>";
    out += "<text x=\"" + fixed1(left - 4) + "\" y=\"" + y + "\" text-anchor=\"end\" dy=\"4\">" + short_number(v) + "</text>";
  }
  const std::string ty = fixed1(bottom + 16);
  out += "<text x=\"" + fixed1(left) + "\" y=\"" + ty + "\">step " + short_number(sc.x0()) + "</text>";
  out += "<text x=\"" + fixed1(right) + "\" y=\"" + ty + "\" text-anchor=\"end\">step " + short_number(sc.x1()) +
         "</text></g>";
  return out;
}

// A vertical line at the first step outside the band, and a dot on the subject there.
std::string marker(const Chart& chart, const Scale& sc) {
  const json& step = *chart.marker_step;
  const std::string step_text = esc(scalar_text(step), 64);
  std::string out = "<g class=\"marker\" data-step=\"" + step_text + "\"><title>first step outside tolerance: " +
                    step_text + "</title>";
  if (!step.is_number()) return out + "</g>";
  const double s = step.get<double>();
  const std::string x = fixed1(sc.x(s));
  out += "<line x1=\"" + x + "\" x2=\"" + x + "\" y1=\"" + fixed1(Scale::kTop) + "\" y2=\"" +
         fixed1(Scale::kHeight - Scale::kBottom) + "\"/>";
  for (const auto& series : chart.series) {
    if (series.role != "subject") continue;
    for (const auto& p : series.points)
      if (p.step == s && p.value)
        out += "<circle cx=\"" + x + "\" cy=\"" + fixed1(sc.y(*p.value)) + "\" r=\"4\"/>";
  }
  return out + "</g>";
}

// The chart as a <figure>: SVG, then an HTML legend (labels are data, so escaped text).
std::string svg_chart(const Chart& chart) {
  const Scale sc = scale_for(chart);
  std::string out = "<figure class=\"chart\"><figcaption>" + esc(chart.title) + "</figcaption>";
  out += "<svg viewBox=\"0 0 640 200\" width=\"640\" height=\"200\" role=\"img\" aria-label=\"" +
         esc(chart.title) + "\">" + axes(sc);
  if (chart.band)
    for (const auto& s : chart.series)
      if (s.role == "reference") out += band_path(s, *chart.band, sc);
  for (const auto& s : chart.series)
    out += "<path class=\"line " + s.css + "\" data-series=\"" + esc(s.role, 64) + "\" d=\"" + path_d(s.points, sc) +
           "\"><title>" + esc(s.label) + "</title></path>";
  if (chart.marker_step) out += marker(chart, sc);
  out += "</svg><ul class=\"legend\">";
  for (const auto& s : chart.series) out += "<li><span class=\"sw " + s.css + "\"></span>" + esc(s.label) + "</li>";
  if (chart.band) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "band: |diff| &le; %.3g + %.3g &times; |reference|", chart.band->second,
                  chart.band->first);
    out += std::string("<li><span class=\"sw band\"></span>") + buf + "</li>";
  }
  if (chart.marker_step) out += "<li><span class=\"sw marker\"></span>first step outside the band</li>";
  return out + "</ul></figure>";
}

// The phases' curves (loss at column 1, grad_norm at column 2) on one step axis: a resumed
// phase's curve starts at its resume step, so it continues where the earlier one stopped.
std::optional<Chart> phase_chart(const json& c, size_t column, const std::string& metric) {
  Chart chart;
  chart.title = metric + " per step, by phase";
  size_t index = 0;
  bool any_value = false;
  for (const auto& phase : list(c, "phases")) {
    const std::vector<Point> pts = points_of(list(phase, "curve"), column);
    const size_t i = index++;
    if (pts.empty()) continue;
    for (const auto& p : pts) any_value |= p.value.has_value();
    chart.series.push_back({"phase-" + std::to_string(i), "s-p" + std::to_string(i % 6),
                            "phase " + str(phase, "name"), pts});
  }
  if (!any_value) return std::nullopt;
  return chart;
}

// One chart per metric a check recorded series for: subject, reference, band, marker.
std::vector<Chart> check_charts(const json& check) {
  std::map<std::string, Chart> by_metric;
  for (const auto& s : list(check, "series")) {
    const std::string metric = str(s, "metric").empty() ? "loss" : str(s, "metric");
    Chart& chart = by_metric[metric];
    chart.title = str(check, "kind") + ": " + metric + ", subject vs reference";
    const std::string role = str(s, "role");
    const bool known = role == "subject" || role == "reference";
    chart.series.push_back({known ? role : "other", known ? "s-" + role : "s-p5", str(s, "label"),
                            points_of(list(s, "points"), 1)});
  }
  std::vector<Chart> out;
  const json& band = field(check, "band");
  for (auto& [metric, chart] : by_metric) {
    if (band.is_object()) chart.band = std::make_pair(num(band, "rtol"), num(band, "atol"));
    if (!field(check, "step").is_null()) chart.marker_step = field(check, "step");
    out.push_back(std::move(chart));
  }
  return out;
}

// ---- per case sections ----

// Context shared by the sections of one page.
struct Page {
  fs::path base;                           // the report's folder, for relative links
  std::map<std::string, int> tag_index;    // tag → its number in the filter (t0, t1, ...)
};

std::string tag_tokens(const json& c, const Page& page) {
  std::string out = " ";
  for (const auto& t : list(c, "tags"))
    if (t.is_string()) out += "t" + std::to_string(page.tag_index.at(t.get<std::string>())) + " ";
  return out;
}

// The attributes the filters read; every filterable element (section, chip) carries them.
std::string filter_attrs(const json& c, const Page& page) {
  return " data-status=\"" + status_token(c) + "\" data-met=\"" + (flag(c, "met_expectation") ? "1" : "0") +
         "\" data-tags=\"" + tag_tokens(c, page) + "\"";
}

std::string badge(const json& c) {
  return "<span class=\"badge " + colour_class(c) + "\">" + esc(str(c, "status"), 64) + "</span>";
}

std::string dl_row(const std::string& term, const std::string& html) {
  return "<dt>" + term + "</dt><dd>" + html + "</dd>";
}

// The facts a person checks first: verdict, expectation, layout, time, where it came from.
std::string facts(const json& c) {
  const json& v = field(c, "verdict");
  std::string out = "<dl class=\"facts\">";
  out += dl_row("verdict", "<b>" + esc(str(v, "kind"), 64) + "</b><div class=\"msg\">" + esc(str(v, "message"), kTextCap) +
                               "</div>");
  std::string where;
  for (const char* key : {"check", "phase", "rank", "signal", "exit_code", "step", "value", "reference", "tolerance"})
    if (!field(v, key).is_null()) where += std::string(where.empty() ? "" : ", ") + key + " " + esc(scalar_text(field(v, key)));
  if (!where.empty()) out += dl_row("where", where);
  out += dl_row("expect", esc(str(c, "expect")));
  out += dl_row("met expectation", flag(c, "met_expectation") ? "yes" : "<b>no</b>");
  out += dl_row("mesh", esc(str(c, "meshes").empty() ? str(c, "mesh") : str(c, "meshes")));
  std::string time = human_seconds(num(c, "duration_s"));
  if (num(c, "expected_s") > 0) time += " (expected about " + human_seconds(num(c, "expected_s")) + ")";
  out += dl_row("duration", time);
  out += dl_row("devices", "ngpu " + esc(scalar_text(field(c, "ngpu"))) + "; " + esc(scalar_text(field(c, "devices"))));
  for (const char* key : {"model", "seed", "tags", "file", "dir", "timestamp"})
    if (!scalar_text(field(c, key)).empty()) out += dl_row(key, esc(scalar_text(field(c, key)), kTextCap));
  return out + "</dl>";
}

std::string repro(const json& c, size_t index) {
  if (str(c, "repro").empty()) return "";
  const std::string id = "repro-" + std::to_string(index);
  return "<div class=\"repro\"><span>repro</span> <code id=\"" + id + "\">" + esc(str(c, "repro"), kReproCap) +
         "</code> <button type=\"button\" class=\"copy\" data-for=\"" + id + "\" hidden>Copy</button></div>";
}

std::string charts(const json& c) {
  std::string out;
  if (auto loss = phase_chart(c, 1, "loss")) out += svg_chart(*loss);
  if (auto grad = phase_chart(c, 2, "grad_norm")) out += svg_chart(*grad);
  for (const auto& check : list(c, "checks"))
    for (const auto& chart : check_charts(check)) out += svg_chart(chart);
  return out.empty() ? "" : "<div class=\"charts\">" + out + "</div>";
}

std::string checks_table(const json& c) {
  const json& checks = list(c, "checks");
  if (checks.empty()) return "";
  std::string out = "<table class=\"checks\"><tr><th>check</th><th>result</th><th>phase</th><th>step</th><th>message</th></tr>";
  for (const auto& k : checks) {
    const bool judged = field(k, "judged").is_null() || flag(k, "judged");
    const std::string result = !judged ? "not judged" : flag(k, "passed") ? "passed" : "failed";
    out += "<tr class=\"r-" + (judged ? result : std::string("not-judged")) + "\"><td>" + esc(str(k, "kind"), 64) +
           "</td><td>" + result + "</td><td>" + esc(scalar_text(field(k, "phase"))) + "</td><td>" +
           esc(scalar_text(field(k, "step"))) + "</td><td><div class=\"msg\">" + esc(str(k, "message"), kTextCap) +
           "</div>";
    if (!str(k, "details").empty()) out += "<pre>" + esc(str(k, "details"), kTextCap) + "</pre>";
    out += "</td></tr>";
  }
  return out + "</table>";
}

std::string rank_links(const json& phase, const Page& page) {
  if (str(phase, "dir").empty()) return "";
  const int nproc = std::clamp(static_cast<int>(num(phase, "nproc", 1)), 0, kMaxRankLinks);
  std::string out;
  for (int r = 0; r < nproc; ++r) {
    const std::string path = (fs::path(str(phase, "dir")) / ("rank" + std::to_string(r) + ".log")).string();
    out += "<a href=\"" + file_href(path, page.base) + "\">rank" + std::to_string(r) + "</a> ";
  }
  return out;
}

// Only the exits that tell something: non-zero codes and signals.
std::string bad_exits(const json& phase) {
  std::string out;
  for (const auto& e : list(phase, "exits")) {
    const double code = num(e, "exit_code"), sig = num(e, "signal");
    if (code == 0 && sig == 0) continue;
    out += (out.empty() ? "" : ", ") + std::string("rank ") + esc(scalar_text(field(e, "rank"))) +
           (sig != 0 ? " signal " + esc(scalar_text(field(e, "signal"))) : " exit " + esc(scalar_text(field(e, "exit_code"))));
  }
  return out;
}

std::string phases_table(const json& c, const Page& page) {
  const json& phases = list(c, "phases");
  if (phases.empty()) return "";
  std::string out =
      "<table class=\"phases\"><tr><th>phase</th><th>ranks</th><th>result</th><th>time</th><th>why it stopped</th><th>logs</th></tr>";
  for (const auto& p : phases) {
    std::string result = !flag(p, "ran") ? "did not run" : flag(p, "ok") ? "ok" : "failed";
    if (flag(p, "timed_out")) result += ", timed out";
    if (flag(p, "killed")) result += ", killed";
    if (num(p, "attempts") > 1) result += ", " + esc(scalar_text(field(p, "attempts"))) + " attempts";
    std::string why = esc(str(p, "stopped_because"), kTextCap);
    const std::string exits = bad_exits(p);
    if (!exits.empty()) why += (why.empty() ? "" : "<br>") + exits;
    if (!str(p, "launch_error").empty()) why += (why.empty() ? "" : "<br>") + esc(str(p, "launch_error"), kTextCap);
    if (!str(field(p, "first_failure"), "what").empty())
      why += "<br>first failure: " + esc(str(field(p, "first_failure"), "what"));
    out += "<tr><td>" + esc(str(p, "name")) + "</td><td>" + esc(scalar_text(field(p, "nproc"))) + "</td><td>" + result +
           "</td><td>" + human_seconds(num(p, "duration_s")) + "</td><td>" + why + "</td><td>" + rank_links(p, page) +
           "</td></tr>";
  }
  return out + "</table>";
}

std::string earlier_attempts(const json& c) {
  const json& attempts = list(c, "earlier_attempts");
  if (attempts.empty()) return "";
  std::string out = "<h4>Earlier attempts</h4><ol class=\"attempts\">";
  for (const auto& a : attempts) {
    out += "<li><b>" + esc(str(field(a, "verdict"), "kind"), 64) + "</b> " + esc(str(a, "reason")) + " (" +
           human_seconds(num(a, "duration_s")) + ")";
    if (!str(a, "failing_log").empty()) out += "<br>log: " + esc(str(a, "failing_log"));
    if (!str(a, "details").empty()) out += "<pre>" + esc(str(a, "details"), kTextCap) + "</pre>";
    out += "</li>";
  }
  return out + "</ol>";
}

// The failing rank's last lines, read now: the run's folder may have been cleaned since.
std::string log_tail(const json& c, const Page& page) {
  const std::string path = str(c, "failing_log");
  if (path.empty()) return "";
  const std::string title = "<h4>Last " + std::to_string(kLogLines) + " lines of <a href=\"" + file_href(path, page.base) +
                            "\">" + esc(path) + "</a></h4>";
  const std::optional<std::string> tail = tail_lines(path, kLogReadBytes, kLogLines);
  if (!tail) return title + "<p class=\"gone\">The log is gone (its folder was removed or moved since the run).</p>";
  return title + "<pre class=\"log\">" + esc(*tail, kLogShownCap) + "</pre>";
}

std::string case_section(const json& c, size_t index, const Page& page) {
  const bool missed = !flag(c, "met_expectation");
  std::string out = "<details class=\"case " + colour_class(c) + "\" id=\"" + anchor_of(str(c, "id")) + "\"" +
                    filter_attrs(c, page) + (missed ? " open" : "") + ">";
  out += "<summary>" + badge(c) + " <span class=\"case-id\">" + esc(str(c, "id")) + "</span> <span class=\"kind\">" +
         esc(verdict_kind(c), 64) + "</span>" + (missed ? " <span class=\"missed\">missed expectation</span>" : "") +
         " <span class=\"reason\">" + esc(str(c, "reason")) + "</span></summary><div class=\"body\">";
  out += facts(c) + repro(c, index) + charts(c) + checks_table(c) + phases_table(c, page) + earlier_attempts(c) +
         log_tail(c, page);
  return out + "</div></details>\n";
}

// ---- the overview: header, filters, grid, reshard tables ----

std::map<std::string, int> status_counts(const json& cases) {
  std::map<std::string, int> counts;
  for (const auto& c : cases) ++counts[status_token(c)];
  return counts;
}

std::string header(const json& summary) {
  const json& cases = list(summary, "cases");
  std::string out = "<header><h1>meshtest report</h1><p class=\"counts\">";
  for (const auto& [status, n] : status_counts(cases))
    out += "<span class=\"badge k-" + status + "\">" + std::to_string(n) + " " + status + "</span> ";
  out += "</p><p>";
  size_t missed = 0;
  for (const auto& c : cases) missed += !flag(c, "met_expectation");
  out += missed == 0 ? "<b class=\"ok\">Every case met its expectation.</b>"
                     : "<b class=\"bad\">" + std::to_string(missed) + " of " + std::to_string(cases.size()) +
                           " cases missed their expectation.</b>";
  if (num(summary, "interrupted_by_signal") != 0)
    out += " <b class=\"bad\">Interrupted by signal " + esc(scalar_text(field(summary, "interrupted_by_signal"))) + ".</b>";
  out += "</p><dl class=\"facts\">";
  out += dl_row("wall time", human_seconds(num(summary, "wall_s")));
  out += dl_row("backend", esc(str(summary, "backend")));
  out += dl_row("devices", esc(scalar_text(field(summary, "devices"))));
  out += dl_row("retries", esc(scalar_text(field(summary, "retries"))));
  out += dl_row("host", esc(str(summary, "hostname")));
  out += dl_row("matrices", esc(scalar_text(field(summary, "matrices")), kTextCap));
  if (num(summary, "format_version") != 2)
    out += dl_row("format", "summary format_version " + esc(scalar_text(field(summary, "format_version"))) +
                                " (this page expects 2; some parts may be missing)");
  return out + "</dl></header>\n";
}

// The cases that missed their expectation, first thing on the page.
std::string attention(const json& cases) {
  std::string items;
  size_t n = 0;
  for (const auto& c : cases) {
    if (flag(c, "met_expectation")) continue;
    if (n++ < kMaxAttentionLinks)
      items += "<li>" + badge(c) + " <a href=\"#" + anchor_of(str(c, "id")) + "\">" + esc(str(c, "id")) + "</a>: " +
               esc(str(c, "reason")) + "</li>";
  }
  if (n == 0) return "";
  if (n > kMaxAttentionLinks) items += "<li>and " + std::to_string(n - kMaxAttentionLinks) + " more</li>";
  return "<section id=\"attention\"><h2>Missed expectations</h2><ul>" + items + "</ul></section>\n";
}

// Hidden until the script runs: controls that do nothing without JavaScript would mislead.
std::string filters(const json& cases, const Page& page) {
  std::string out = "<form id=\"filters\" hidden><fieldset><legend>Show</legend>";
  for (const auto& [status, n] : status_counts(cases))
    out += "<label><input type=\"checkbox\" name=\"status\" value=\"" + status + "\" checked> " + status + " (" +
           std::to_string(n) + ")</label> ";
  out += "<label><input type=\"checkbox\" id=\"only-missed\"> only missed expectations</label> ";
  out += "<label>tag <select id=\"tag\"><option value=\"\">any</option>";
  for (const auto& [tag, i] : page.tag_index)
    out += "<option value=\"t" + std::to_string(i) + "\">" + esc(tag, 200) + "</option>";
  out += "</select></label> <output id=\"shown\"></output></fieldset></form>\n";
  return out;
}

std::string legend(const json& cases) {
  std::set<std::string> present;
  for (const auto& c : cases) present.insert(colour_class(c));
  std::string out = "<ul class=\"legend\" id=\"legend\">";
  for (const auto& [kind, meaning] : kKinds)
    if (present.count("k-" + kind)) out += "<li><span class=\"sw k-" + kind + "\"></span>" + kind + ": " + meaning + "</li>";
  if (present.count("k-other")) out += "<li><span class=\"sw k-other\"></span>other: a status this page does not know</li>";
  return out + "</ul>";
}

std::string chip(const json& c, const Page& page) {
  return "<a class=\"chip " + colour_class(c) + "\" href=\"#" + anchor_of(str(c, "id")) + "\"" + filter_attrs(c, page) +
         " title=\"" + esc(str(c, "id") + " — " + verdict_kind(c) + ": " + str(c, "reason")) + "\">" +
         esc(str(c, "name").empty() ? str(c, "id") : str(c, "name")) + "</a>";
}

// The meshes a case ran under, one per phase ("dp_shard=4 -> tp=4").
std::vector<std::string> phase_meshes(const json& c) {
  std::vector<std::string> out;
  const std::string all = str(c, "meshes");
  for (size_t start = 0; start <= all.size();) {
    const size_t arrow = all.find(" -> ", start);
    out.push_back(all.substr(start, arrow == std::string::npos ? std::string::npos : arrow - start));
    if (arrow == std::string::npos) break;
    start = arrow + 4;
  }
  return out;
}

std::string suite_grid(const std::string& suite, const std::vector<const json*>& cases, const Page& page) {
  std::map<std::string, std::string> by_layout;  // mesh → chips
  for (const json* c : cases) {
    const std::string layout = str(*c, "mesh").empty() ? "(no mesh)" : str(*c, "mesh");
    by_layout[layout] += chip(*c, page);
  }
  std::string out = "<h3>" + esc(suite) + "</h3><table class=\"grid\"><tr><th>layout</th><th>cases</th></tr>";
  for (const auto& [layout, chips] : by_layout) out += "<tr><th>" + esc(layout) + "</th><td>" + chips + "</td></tr>";
  return out + "</table>";
}

// Cases that save under one layout and load under another: one cell per (from, to) step of
// the chain, so a chain dp -> dp,tp -> tp shows in both of its cells.
std::string reshard_table(const std::vector<const json*>& cases, const Page& page) {
  std::map<std::pair<std::string, std::string>, std::string> cells;
  std::set<std::string> from, to;
  for (const json* c : cases) {
    const std::vector<std::string> meshes = phase_meshes(*c);
    for (size_t i = 1; i < meshes.size(); ++i) {
      if (meshes[i] == meshes[i - 1]) continue;
      from.insert(meshes[i - 1]), to.insert(meshes[i]);
      cells[{meshes[i - 1], meshes[i]}] += chip(*c, page);
    }
  }
  if (cells.empty()) return "";
  std::string out = "<table class=\"grid reshard\"><tr><th>saved under ↓ / loaded under →</th>";
  for (const auto& t : to) out += "<th>" + esc(t) + "</th>";
  out += "</tr>";
  for (const auto& f : from) {
    out += "<tr><th>" + esc(f) + "</th>";
    for (const auto& t : to) {
      const auto it = cells.find({f, t});
      out += "<td>" + (it == cells.end() ? std::string() : it->second) + "</td>";
    }
    out += "</tr>";
  }
  return out + "</table>";
}

std::string overview(const json& cases, const Page& page) {
  std::map<std::string, std::vector<const json*>> suites;
  for (const auto& c : cases) suites[str(c, "suite")].push_back(&c);
  std::string out = "<section id=\"grid\"><h2>Cases by suite and layout</h2>" + legend(cases);
  for (const auto& [suite, members] : suites) {
    out += suite_grid(suite, members, page);
    const std::string reshard = reshard_table(members, page);
    if (!reshard.empty()) out += "<h4>" + esc(suite) + ": resharding, saved layout × loaded layout</h4>" + reshard;
  }
  return out + "</section>\n";
}

// ---- fixed parts: style and script (no data in them, ever) ----

const char* kStyle = R"CSS(
body{font:14px/1.4 system-ui,sans-serif;margin:0 1.5em 3em;color:#1a1a1a;background:#fff}
h1{margin:.6em 0 .2em}h2{margin-top:1.4em}h3{margin:1em 0 .3em}
code,pre{font:12px/1.35 ui-monospace,monospace}
pre{background:#f5f5f5;padding:.5em;overflow:auto;max-height:28em;white-space:pre-wrap;word-break:break-all}
.note{background:#fff8e1;padding:.4em .8em;border-left:4px solid #f9a825}
#js-errors{background:#ffebee;color:#b71c1c;padding:.4em .8em;white-space:pre-wrap}#js-errors:empty{display:none}
.ok{color:#2e7d32}.bad{color:#c62828}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:.1em 1em;margin:.5em 0}dl.facts dt{color:#555}dl.facts dd{margin:0}
.msg{white-space:pre-wrap}
.badge,.chip{display:inline-block;padding:0 .45em;border-radius:3px;border:1px solid #0003;color:#1a1a1a;text-decoration:none}
.chip{margin:1px;font-size:12px}
.sw{display:inline-block;width:1em;height:.8em;margin-right:.35em;vertical-align:middle;border:1px solid #0003}
ul.legend{list-style:none;padding:0;display:flex;flex-wrap:wrap;gap:.2em 1.2em;font-size:12px}
table{border-collapse:collapse;margin:.3em 0}th,td{border:1px solid #ddd;padding:.2em .45em;text-align:left;vertical-align:top}
table.grid th{background:#fafafa;font-weight:600;white-space:nowrap}
details.case{border:1px solid #ddd;border-left-width:8px;margin:.35em 0;padding:.2em .6em;content-visibility:auto;contain-intrinsic-size:auto 2.2em}
details.case>summary{cursor:pointer}.case-id{font-weight:600;font-family:ui-monospace,monospace}
.kind{color:#444}.reason{color:#333}.missed{color:#c62828;font-weight:600}
.body{padding:.3em 0 .6em}
.repro{margin:.4em 0}.repro code{background:#f5f5f5;padding:.15em .35em;word-break:break-all}
.charts{display:flex;flex-wrap:wrap;gap:1em}figure.chart{margin:.3em 0}figcaption{font-size:12px;color:#444}
svg{background:#fff;border:1px solid #eee;max-width:100%;height:auto}
.axes line{stroke:#eee}.axes text{font-size:10px;fill:#666}
path.line{fill:none;stroke-width:1.6;stroke-linejoin:round;stroke-linecap:round}
path.band{fill:#1565c033;stroke:none}.sw.band{background:#1565c033}
g.marker line{stroke:#c62828;stroke-dasharray:4 3;stroke-width:1.5}g.marker circle{fill:#c62828}.sw.marker{background:#c62828}
path.s-subject{stroke:#d84315}.sw.s-subject{background:#d84315}
path.s-reference{stroke:#1565c0}.sw.s-reference{background:#1565c0}
path.s-p0{stroke:#2e7d32}.sw.s-p0{background:#2e7d32}path.s-p1{stroke:#6a1b9a}.sw.s-p1{background:#6a1b9a}
path.s-p2{stroke:#ef6c00}.sw.s-p2{background:#ef6c00}path.s-p3{stroke:#00838f}.sw.s-p3{background:#00838f}
path.s-p4{stroke:#ad1457}.sw.s-p4{background:#ad1457}path.s-p5{stroke:#5d4037}.sw.s-p5{background:#5d4037}
tr.r-failed td:nth-child(2){color:#c62828;font-weight:600}tr.r-not-judged td:nth-child(2){color:#e65100}
.gone{color:#777;font-style:italic}
.k-passed,.k-canary_caught{background:#c8e6c9;border-left-color:#2e7d32}
.k-xfailed{background:#b2dfdb;border-left-color:#00796b}
.k-skipped{background:#eeeeee;border-left-color:#9e9e9e}
.k-cancelled{background:#d7ccc8;border-left-color:#6d4c41}
.k-failed,.k-check_failed,.k-xpassed,.k-xfailed_differently,.k-canary_not_caught{background:#ffcdd2;border-left-color:#c62828}
.k-crashed,.k-exit_code,.k-timed_out,.k-launch_error,.k-canary_crashed,.k-not_judged{background:#ffe0b2;border-left-color:#e65100}
.k-other{background:#fff59d;border-left-color:#f9a825}
details.case[class]{background:#fff}
)CSS";

// Filtering, Copy buttons and opening a case linked to. Errors land in #js-errors, so a
// headless DOM dump shows them; every lookup tolerates a missing element.
const char* kScript = R"JS(
(function () {
  'use strict';
  var errors = document.getElementById('js-errors');
  window.onerror = function (message, source, line, column) {
    if (errors) errors.appendChild(document.createTextNode('JavaScript error: ' + message + ' (line ' + line + ':' + column + ')\n'));
    return false;
  };
  function all(selector) { return Array.prototype.slice.call(document.querySelectorAll(selector)); }

  var form = document.getElementById('filters');
  var onlyMissed = document.getElementById('only-missed');
  var tag = document.getElementById('tag');
  var shown = document.getElementById('shown');
  function applyFilters() {
    var statuses = {};
    all('#filters input[name=status]').forEach(function (box) { statuses[box.value] = box.checked; });
    var wantTag = tag ? tag.value : '';
    var wantMissed = onlyMissed ? onlyMissed.checked : false;
    var visible = 0, total = 0;
    all('[data-status]').forEach(function (el) {
      var ok = statuses[el.getAttribute('data-status')] !== false &&
               (!wantMissed || el.getAttribute('data-met') === '0') &&
               (!wantTag || (el.getAttribute('data-tags') || '').indexOf(' ' + wantTag + ' ') >= 0);
      el.hidden = !ok;
      if (el.classList.contains('case')) { total++; if (ok) visible++; }
    });
    if (shown) shown.textContent = visible + ' of ' + total + ' cases shown';
  }
  if (form) {
    form.hidden = false;
    form.addEventListener('change', applyFilters);
    // Everything starts shown: count instead of touching every element of a 1,000-case page.
    if (shown) {
      var total = document.querySelectorAll('details.case').length;
      shown.textContent = total + ' of ' + total + ' cases shown';
    }
  }

  function selectText(el) {
    var range = document.createRange();
    range.selectNodeContents(el);
    var selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  }
  function copied(button, text) {
    button.textContent = text;
    setTimeout(function () { button.textContent = 'Copy'; }, 1500);
  }
  all('button.copy').forEach(function (button) {
    var code = document.getElementById(button.getAttribute('data-for'));
    if (!code) return;
    button.hidden = false;
    button.addEventListener('click', function () {
      var text = code.textContent;
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(text).then(function () { copied(button, 'Copied'); },
          function () { selectText(code); copied(button, 'Press Ctrl+C'); });
      } else {
        selectText(code);
        var ok = false;
        try { ok = document.execCommand('copy'); } catch (e) { ok = false; }
        copied(button, ok ? 'Copied' : 'Press Ctrl+C');
      }
    });
  });

  function openTarget() {
    var id = decodeURIComponent(location.hash.slice(1));
    var target = id ? document.getElementById(id) : null;
    if (target && target.tagName === 'DETAILS') { target.open = true; target.hidden = false; }
  }
  window.addEventListener('hashchange', openTarget);
  openTarget();
})();
)JS";

std::map<std::string, int> index_tags(const json& cases) {
  std::set<std::string> tags;
  for (const auto& c : cases)
    for (const auto& t : list(c, "tags"))
      if (t.is_string()) tags.insert(t.get<std::string>());
  std::map<std::string, int> index;
  for (const auto& t : tags) index.emplace(t, static_cast<int>(index.size()));
  return index;
}

std::string render(const json& summary, const fs::path& base) {
  const json& cases = list(summary, "cases");
  const Page page{base, index_tags(cases)};
  std::string out =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
      "script-src 'unsafe-inline'; img-src data:\">"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>meshtest report</title><style>";
  out += kStyle;
  out += "</style></head><body>\n";
  out += header(summary);
  out += "<noscript><p class=\"note\">JavaScript is off: every case and its verdict is listed below; "
         "only filtering and the Copy buttons need JavaScript.</p></noscript>\n<div id=\"js-errors\"></div>\n";
  out += filters(cases, page) + attention(cases) + overview(cases, page);
  out += "<section id=\"cases\"><h2>Cases</h2>\n";
  for (size_t i = 0; i < cases.size(); ++i) out += case_section(cases[i], i, page);
  out += "</section>\n<script>";
  out += kScript;
  out += "</script></body></html>\n";
  return out;
}

}  // namespace

std::string html_report(const json& summary) { return render(summary, fs::current_path()); }

void write_html_report(const json& summary, const std::string& path) {
  const fs::path target = fs::absolute(path).lexically_normal();
  if (!target.parent_path().empty()) fs::create_directories(target.parent_path());
  const std::string page = render(summary, target.parent_path());
  const std::string tmp = target.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(page.data(), static_cast<std::streamsize>(page.size()));
    if (!out.flush()) throw std::runtime_error("cannot write " + tmp);
  }
  fs::rename(tmp, target);
}

}  // namespace meshtest
