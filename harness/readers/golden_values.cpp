#include "readers/golden_values.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>
#include <sstream>

#include "readers/metric_series.h"

namespace meshtest {

namespace {

constexpr long long kLastStep = 1000000000000000LL;  // no run is longer: keeps the grid's arithmetic finite

template <class Json>
const char* kind_of(const Json& j) {
  if (j.is_object()) return "an object";
  if (j.is_array()) return "a list";
  if (j.is_string()) return "a string";
  if (j.is_boolean()) return "a boolean";
  if (j.is_null()) return "null";
  return "a number";
}

// "2, 3, 4 and 31 more"
std::string first_steps(const std::vector<long long>& steps, size_t total) {
  std::string s;
  for (size_t i = 0; i < steps.size(); ++i) s += (i ? ", " : "") + std::to_string(steps[i]);
  if (total > steps.size()) s += " and " + std::to_string(total - steps.size()) + " more";
  return s;
}

long long whole_number(const nlohmann::ordered_json& entry, const char* key, const std::string& where) {
  const auto& v = entry.at(key);
  if (v.is_number_integer()) return v.get<long long>();
  if (v.is_number_float() && std::isfinite(v.get<double>()) && v.get<double>() == std::floor(v.get<double>()) &&
      std::fabs(v.get<double>()) < 9e15)
    return static_cast<long long>(v.get<double>());
  throw MetricsError(where + std::string(key) + " must be a whole number, got " + v.dump());
}

// How `m`'s steps sit on the grid {start} and every multiple of `every` after it up to end_step:
// the steps off it, and how many of the grid's it holds.
struct GridFit {
  std::vector<long long> off;
  long long held = 0, size = 0;
  bool exact() const { return off.empty() && held == size; }
};

GridFit fit(const GoldenValuesMetric& m, long long every) {
  GridFit f;
  const long long start = m.start_step, end = m.end_step;
  for (const auto& [step, value] : m.values) {
    if (step == start || (step > start && step <= end && step % every == 0))
      ++f.held;
    else
      f.off.push_back(step);
  }
  f.size = 1 + end / every - start / every;
  return f;
}

// The steps of `m` checked against its grid. The grid is walked only as far as it takes to name
// ten missing steps. When the steps fill the grid of the interval Megatron would infer from them,
// the message says so: the file's step_interval is what is wrong.
void check_grid(const GoldenValuesMetric& m, const std::string& where) {
  const long long start = m.start_step, end = m.end_step, every = m.step_interval;
  GridFit f = fit(m, every);
  if (f.exact()) return;
  const std::string grid = "(" + std::to_string(start) + ", then every multiple of " + std::to_string(every) +
                           " up to " + std::to_string(end) + ")";
  std::vector<long long> keys;
  for (const auto& [step, value] : m.values) keys.push_back(step);
  const long long inferred = infer_step_interval(keys, start);
  const std::string hint = inferred != every && fit(m, inferred).exact()
                               ? "; its steps are every " + std::to_string(inferred) +
                                     " (Megatron's _infer_step_interval), its step_interval says " +
                                     std::to_string(every)
                               : "";
  if (!f.off.empty()) {
    const size_t total = f.off.size();
    f.off.resize(std::min<size_t>(f.off.size(), 10));
    throw MetricsError(where + "step" + (total == 1 ? " " : "s ") + first_steps(f.off, total) +
                       (total == 1 ? " is" : " are") + " not on its grid " + grid + hint);
  }
  std::vector<long long> missing;
  for (long long s = start; missing.size() < 10 && s <= end; s = s == start ? (start / every + 1) * every : s + every)
    if (!m.values.count(s)) missing.push_back(s);
  const auto total = static_cast<size_t>(f.size - f.held);
  throw MetricsError(where + std::to_string(total) + " step" + (total == 1 ? "" : "s") + " of its grid " + grid +
                     (total == 1 ? " has" : " have") + " no value: " + first_steps(missing, total) + hint);
}

GoldenValuesMetric read_metric(const std::string& name, const nlohmann::ordered_json& entry, const std::string& file) {
  const std::string where = file + ": \"" + name + "\": ";
  if (!entry.is_object())
    throw MetricsError(where + "is " + kind_of(entry) + ", not {start_step, end_step, step_interval, values}");
  std::vector<std::string> lacking;
  for (const char* key : {"start_step", "end_step", "step_interval", "values"})
    if (!entry.contains(key)) lacking.push_back(key);
  if (!lacking.empty()) {
    std::string keys;
    for (const auto& k : lacking) keys += (keys.empty() ? "" : ", ") + k;
    throw MetricsError(where + "has no " + keys + " (every metric of a golden values file has start_step, " +
                       "end_step, step_interval and values" +
                       (lacking.size() == 4 ? "; an inference golden file is another format" : "") + ")");
  }
  GoldenValuesMetric m;
  m.start_step = whole_number(entry, "start_step", where);
  m.end_step = whole_number(entry, "end_step", where);
  m.step_interval = whole_number(entry, "step_interval", where);
  if (m.start_step < 0 || m.step_interval < 1 || m.end_step < m.start_step || m.end_step > kLastStep)
    throw MetricsError(where + "start_step " + std::to_string(m.start_step) + ", end_step " +
                       std::to_string(m.end_step) + ", step_interval " + std::to_string(m.step_interval) +
                       ": expected 0 <= start_step <= end_step <= 10^15 and step_interval >= 1");
  const auto& values = entry.at("values");
  if (values.is_array())
    throw MetricsError(where + "values is a list (Megatron's older format); meshtest reads {\"<step>\": value}");
  if (!values.is_object()) throw MetricsError(where + "values is " + kind_of(values) + ", not {\"<step>\": value}");
  if (values.empty()) throw MetricsError(where + "values is empty");
  for (const auto& [key, value] : values.items()) {
    if (key.empty() || key.size() > 15 || key.find_first_not_of("0123456789") != std::string::npos)
      throw MetricsError(where + "values has the key \"" + key + "\", not a step number");
    const long long step = std::stoll(key);
    if (m.values.count(step)) throw MetricsError(where + "values has step " + std::to_string(step) + " twice");
    if (value.is_number())
      m.values[step] = value.get<double>();
    else if (value.is_string() && value.get<std::string>() == "nan")
      m.values[step] = NAN;
    else
      throw MetricsError(where + "step " + key + " has " + value.dump() + ": a value is a number or \"nan\"");
  }
  check_grid(m, where);
  return m;
}

}  // namespace

long long infer_step_interval(const std::vector<long long>& steps, long long start) {
  std::vector<long long> cadence;
  for (long long s : steps)
    if (s != start) cadence.push_back(s);
  std::sort(cadence.begin(), cadence.end());
  if (cadence.size() == 1) return cadence[0] > 0 ? cadence[0] : 1;
  long long g = 0;
  for (size_t i = 1; i < cadence.size(); ++i) g = std::gcd(g, cadence[i] - cadence[i - 1]);
  return g > 0 ? g : 1;
}

GoldenValues parse_golden_values(const std::string& text, const std::string& file) {
  nlohmann::ordered_json doc;
  try {
    doc = nlohmann::ordered_json::parse(text);
  } catch (const std::exception& e) {
    throw MetricsError(file + ": not JSON (" + e.what() + ")");
  }
  if (!doc.is_object())
    throw MetricsError(file + ": not Megatron golden values: the top level is " + kind_of(doc) +
                       ", not an object of metric -> {start_step, end_step, step_interval, values}");
  if (doc.empty()) throw MetricsError(file + ": no metrics in it ({})");
  GoldenValues out;
  for (const auto& [name, entry] : doc.items()) out.emplace_back(name, read_metric(name, entry, file));
  return out;
}

GoldenValues read_golden_values(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw MetricsError("cannot read " + path);
  std::ostringstream text;
  text << in.rdbuf();
  return parse_golden_values(text.str(), path);
}

nlohmann::ordered_json golden_values_json(
    const std::vector<std::pair<std::string, std::map<long long, double>>>& metrics) {
  nlohmann::ordered_json doc = nlohmann::ordered_json::object();
  for (const auto& [name, values] : metrics) {
    if (values.empty()) continue;
    std::vector<long long> steps;
    nlohmann::ordered_json by_step = nlohmann::ordered_json::object();
    for (const auto& [step, v] : values) {
      steps.push_back(step);
      by_step[std::to_string(step)] = std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json("nan");
    }
    doc[name] = {{"start_step", steps.front()},
                 {"end_step", steps.back()},
                 {"step_interval", infer_step_interval(steps, steps.front())},
                 {"values", by_step}};
  }
  return doc;
}

}  // namespace meshtest
