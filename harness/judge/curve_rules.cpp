#include "judge/curve_rules.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

namespace meshtest {

namespace {

// One golden step, judged.
struct Judged {
  long long step = 0;
  bool logged = false;   // the subject logged the metric at this step
  double got = NAN;      // as logged
  double rounded = NAN;  // as compared: to 5 decimals; inf where not logged
  GoldenBand want;       // as the reference has it
  bool close = false;
  double distance = 0;   // outside the band (0 inside it)
  double edge = 0;       // the band's end it was compared with (Megatron's reading)
  double tolerance = 0;  // at that end
  double ratio = 0;      // distance / tolerance; inf where no tolerance meets it
};

// A golden value as Megatron reads it: "nan" as inf, the rest rounded to 5 decimals.
double as_megatron(double golden) { return std::isnan(golden) ? INFINITY : megatron_round(golden); }

Judged judge_step(long long step, const GoldenBand& want, const std::map<long long, double>& got, double rtol) {
  Judged j;
  j.step = step, j.want = want;
  const auto it = got.find(step);
  j.logged = it != got.end();
  j.got = j.logged ? it->second : NAN;
  const double a = j.logged ? megatron_round(j.got) : INFINITY;  // a step not logged is Megatron's "nan": inf
  const double lo = as_megatron(want.min), hi = as_megatron(want.max);
  j.rounded = a, j.edge = lo;
  if (std::isnan(a)) {  // np.isclose: nan is close to nothing
    j.distance = NAN, j.ratio = INFINITY;
    return j;
  }
  // np.isclose(a, b, rtol, atol=0): |a - b| <= rtol x |b|, against the band's nearer end (a
  // itself inside it, so a finite loss inside a band open at one end is inside it).
  const double nearer = a < lo ? lo : a > hi ? hi : a;
  if (!std::isfinite(a) || !std::isfinite(nearer)) {  // an infinity meets only itself
    j.close = a == lo || a == hi;
    j.edge = a == hi ? hi : lo;
    j.distance = j.close ? 0 : INFINITY;
    j.ratio = j.close ? 0 : INFINITY;
    return j;
  }
  j.edge = nearer;
  j.distance = a < lo ? lo - a : a > hi ? a - hi : 0;
  j.tolerance = rtol * std::fabs(j.edge);
  j.close = j.distance <= j.tolerance;
  j.ratio = j.tolerance > 0 ? j.distance / j.tolerance : j.distance > 0 ? INFINITY : 0;
  // The ratio says the verdict, whatever the rounding of the division.
  j.ratio = j.close ? std::min(j.ratio, 1.0) : std::max(j.ratio, std::nextafter(1.0, 2.0));
  return j;
}

std::string nine_digits(double v) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.9g", v);
  return text;
}

std::string want_text(const GoldenBand& b) {
  auto one = [](double v) { return std::isnan(v) ? std::string("nan") : golden_number(megatron_round(v)); };
  return b.min == b.max || (std::isnan(b.min) && std::isnan(b.max)) ? one(b.min)
                                                                    : "[" + one(b.min) + ", " + one(b.max) + "]";
}

std::string got_text(const Judged& j) {
  if (!j.logged) return "-";
  std::string s = golden_number(j.rounded);
  if (std::isfinite(j.got) && j.rounded != j.got) s += " (" + nine_digits(j.got) + " as logged)";
  return s;
}

// "step 10: loss 11.5 in phase train vs 10.82907 in golden g.txt: |diff| 6.71e-01 > ..."
std::string miss_text(const Judged& j, const RuleCurves& c, bool approximate, double rtol) {
  const std::string at = "step " + std::to_string(j.step) + ": ", want = want_text(j.want) + " in " + c.want_label;
  if (!j.logged)
    return at + c.got_label + " logged no " + c.metric + " there (a step not logged counts as nan, which meets only " +
           "a golden nan) vs " + want;
  const std::string s = at + c.metric + " " + got_text(j) + " in " + c.got_label + " vs " + want;
  if (std::isnan(j.want.min)) return s + ": a golden nan marks a step that logged no value (Megatron reads it as inf)";
  if (std::isnan(j.got)) return s + ": nan meets no value";
  if (!approximate || !std::isfinite(j.distance)) return s;
  return s + ": |diff| " + sci(j.distance) + (j.want.min != j.want.max ? " outside the band" : "") + " > " +
         tolerance_text(0, rtol, j.edge);
}

std::string details_table(const std::vector<Judged>& steps, const RuleCurves& c) {
  std::string table = "  step  " + c.got_label + "  |  " + c.want_label + "  |  |diff|\n";
  for (const Judged& j : steps) {
    char row[320];
    std::snprintf(row, sizeof(row), "%6lld  %24s  %24s  %10s%s\n", j.step, got_text(j).c_str(),
                  want_text(j.want).c_str(), std::isfinite(j.distance) ? sci(j.distance).c_str() : "-",
                  j.close ? "" : "  <-");
    table += row;
  }
  return table;
}

// "at most 1 may (Megatron's min(max(21 // 100, 1), 50))"
std::string may_text(const MegatronAllowance& a, int n) {
  if (n == 1) return "and none may (the golden has one step)";
  const std::string formula = "min(max(" + std::to_string(n) + " // 100, 1), 50)";
  if (a.effective == a.allowed) return "at most " + std::to_string(a.allowed) + " may (Megatron's " + formula + ")";
  return "at most " + std::to_string(a.effective) + " may (Megatron's " + formula + " is " + std::to_string(a.allowed) +
         ", but its test mean(is_close) >= 1 - " + std::to_string(a.allowed) + "/" + std::to_string(n) +
         " in doubles lets through " + std::to_string(a.effective) + ")";
}

std::vector<std::pair<long long, double>> as_points(const std::map<long long, double>& m) {
  return {m.begin(), m.end()};
}

std::vector<std::pair<long long, double>> band_ends(const std::map<long long, GoldenBand>& m, bool max) {
  std::vector<std::pair<long long, double>> out;
  for (const auto& [step, b] : m) out.emplace_back(step, max ? b.max : b.min);
  return out;
}

}  // namespace

double megatron_round(double v) {
  if (!std::isfinite(v)) return v;
  char text[400];  // %.5f of the largest double: 309 digits and 6 more
  std::snprintf(text, sizeof(text), "%.5f", v);
  return std::strtod(text, nullptr);
}

MegatronAllowance megatron_allowance(int n) {
  if (n <= 1) return {0, 0};
  MegatronAllowance a;
  a.allowed = std::min(std::max(n / 100, 1), 50);
  a.effective = a.allowed;
  const double bar = 1.0 - static_cast<double>(a.allowed) / n;
  while (a.effective > 0 && !(static_cast<double>(n - a.effective) / n >= bar)) --a.effective;
  return a;
}

double megatron_rtol(const std::string& metric) { return metric == "num_zeros" ? 0.20 : 0.05; }

void judge_by_rule(CurveRule rule, const RuleCurves& c, CheckResult& result) {
  const bool approximate = rule == CurveRule::kMegatronApproximate;
  const double rtol = approximate ? megatron_rtol(c.metric) : 0;
  result.series = {{"subject", c.got_label, c.metric, as_points(c.got)},
                   {"reference", c.want_label, c.metric, band_ends(c.want, false)}};
  if (std::any_of(c.want.begin(), c.want.end(), [](const auto& s) { return s.second.min != s.second.max; }))
    result.series.push_back({"reference-max", c.want_label + " (max)", c.metric, band_ends(c.want, true)});
  result.band = std::make_pair(rtol, 0.0);
  if (c.got.empty()) throw Failure{c.got_label + " reports no " + c.metric + c.hint, ""};
  if (c.want.empty()) throw Failure{c.want_label + " has no " + c.metric, ""};
  std::vector<Judged> steps;
  for (const auto& [step, band] : c.want) steps.push_back(judge_step(step, band, c.got, rtol));
  const int n = static_cast<int>(steps.size());
  const int missed =
      static_cast<int>(std::count_if(steps.begin(), steps.end(), [](const Judged& j) { return !j.close; }));
  const MegatronAllowance allowance = approximate ? megatron_allowance(n) : MegatronAllowance{};
  if (approximate) {
    std::vector<double> ratios;
    for (const Judged& j : steps) ratios.push_back(j.ratio);
    std::sort(ratios.begin(), ratios.end(), std::greater<double>());
    result.margin = ratios[static_cast<size_t>(allowance.effective)];
  }
  const std::string head = approximate ? std::string(curve_rule_name(rule)) + " (rtol " + num(rtol) + ", atol 0)"
                                       : std::string(curve_rule_name(rule));
  const std::string of_n = std::to_string(missed) + " of " + std::to_string(n) + " golden steps ";
  if (missed <= allowance.effective) {
    result.message = approximate ? head + ": " + of_n + "missed, " + may_text(allowance, n)
                                 : head + ": all " + std::to_string(n) + " golden steps equal to 5 decimals";
    return;
  }
  const Judged& first = *std::find_if(steps.begin(), steps.end(), [](const Judged& j) { return !j.close; });
  Finding f{
      head + ": " + of_n +
          (approximate ? "missed, " + may_text(allowance, n) : "differ after rounding to 5 decimals, and none may") +
          "; first " + (approximate ? "miss" : "difference") + ": " + miss_text(first, c, approximate, rtol),
      details_table(steps, c)};
  f.step = first.step, f.value = first.logged ? first.got : NAN, f.reference = first.edge;
  f.tolerance = first.tolerance;
  throw f;
}

}  // namespace meshtest
