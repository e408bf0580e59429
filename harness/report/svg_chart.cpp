#include "report/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "report/html_text.h"

namespace meshtest {

namespace {

using Point = StepValue;  // value nullopt: not a finite number (a gap in the line)

struct ChartSeries {
  std::string role;   // data-series: "subject", "reference", "phase-0", ...
  std::string css;    // colour class
  std::string label;  // raw text, escaped when drawn
  std::vector<Point> points;
};

struct Chart {
  std::string title;  // raw text
  std::vector<ChartSeries> series;
  std::optional<std::pair<double, double>> band;  // (rtol, atol) around the "reference" series
  std::optional<long long> marker_step;           // the first step outside the band
};

// The points in step order (a resumed run may have written them out of order).
std::vector<Point> by_step(std::vector<Point> points) {
  std::stable_sort(points.begin(), points.end(), [](const Point& a, const Point& b) { return a.step < b.step; });
  return points;
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
std::string band_path(const ChartSeries& reference, const std::pair<double, double>& band, const Scale& sc) {
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
    out += "<text x=\"" + fixed1(left - 4) + "\" y=\"" + y + "\" text-anchor=\"end\" dy=\"4\">" + short_number(v) +
           "</text>";
  }
  const std::string ty = fixed1(bottom + 16);
  out += "<text x=\"" + fixed1(left) + "\" y=\"" + ty + "\">step " + short_number(sc.x0()) + "</text>";
  out += "<text x=\"" + fixed1(right) + "\" y=\"" + ty + "\" text-anchor=\"end\">step " + short_number(sc.x1()) +
         "</text></g>";
  return out;
}

// A vertical line at the first step outside the band, and a dot on the subject there.
std::string marker(const Chart& chart, const Scale& sc) {
  const std::string step_text = std::to_string(*chart.marker_step);
  std::string out = "<g class=\"marker\" data-step=\"" + step_text +
                    "\"><title>first step outside tolerance: " + step_text + "</title>";
  const double s = static_cast<double>(*chart.marker_step);
  const std::string x = fixed1(sc.x(s));
  out += "<line x1=\"" + x + "\" x2=\"" + x + "\" y1=\"" + fixed1(Scale::kTop) + "\" y2=\"" +
         fixed1(Scale::kHeight - Scale::kBottom) + "\"/>";
  for (const auto& series : chart.series) {
    if (series.role != "subject") continue;
    for (const auto& p : series.points)
      if (p.step == s && p.value) out += "<circle cx=\"" + x + "\" cy=\"" + fixed1(sc.y(*p.value)) + "\" r=\"4\"/>";
  }
  return out + "</g>";
}

// The chart as a <figure>: SVG, then an HTML legend (labels are data, so escaped text).
std::string svg_chart(const Chart& chart) {
  const Scale sc = scale_for(chart);
  std::string out = "<figure class=\"chart\"><figcaption>" + esc(chart.title) + "</figcaption>";
  out += "<svg viewBox=\"0 0 640 200\" width=\"640\" height=\"200\" role=\"img\" aria-label=\"" + esc(chart.title) +
         "\">" + axes(sc);
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
std::optional<Chart> phase_chart(const CaseView& c, std::vector<StepValue> PhaseView::*curve,
                                 const std::string& metric) {
  Chart chart;
  chart.title = metric + " per step, by phase";
  size_t index = 0;
  bool any_value = false;
  for (const auto& phase : c.phases) {
    const std::vector<Point> pts = by_step(phase.*curve);
    const size_t i = index++;
    if (pts.empty()) continue;
    for (const auto& p : pts) any_value |= p.value.has_value();
    chart.series.push_back({"phase-" + std::to_string(i), "s-p" + std::to_string(i % 6), "phase " + phase.name, pts});
  }
  if (!any_value) return std::nullopt;
  return chart;
}

// One chart per metric a check recorded series for: subject, reference, band, marker.
std::vector<Chart> check_charts(const CheckView& check) {
  std::map<std::string, Chart> by_metric;
  for (const auto& s : check.series) {
    const std::string metric = s.metric.empty() ? "loss" : s.metric;
    Chart& chart = by_metric[metric];
    chart.title = check.kind + ": " + metric + ", subject vs reference";
    const bool known = s.role == "subject" || s.role == "reference";
    chart.series.push_back({known ? s.role : "other", known ? "s-" + s.role : "s-p5", s.label, by_step(s.points)});
  }
  std::vector<Chart> out;
  for (auto& [metric, chart] : by_metric) {
    if (check.band) chart.band = std::make_pair(check.band->rtol, check.band->atol);
    chart.marker_step = check.step;
    out.push_back(std::move(chart));
  }
  return out;
}

}  // namespace

std::string case_charts_html(const CaseView& c) {
  std::string out;
  if (auto loss = phase_chart(c, &PhaseView::loss, "loss")) out += svg_chart(*loss);
  if (auto grad = phase_chart(c, &PhaseView::grad_norm, "grad_norm")) out += svg_chart(*grad);
  for (const auto& check : c.checks)
    for (const auto& chart : check_charts(check)) out += svg_chart(chart);
  return out.empty() ? "" : "<div class=\"charts\">" + out + "</div>";
}

}  // namespace meshtest
