#include "report/megatron_golden.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>

#include "judge/curve_rules.h"
#include "readers/golden_curve.h"
#include "readers/golden_values.h"
#include "readers/metric_series.h"
#include "report/finished_run.h"

namespace fs = std::filesystem;

namespace meshtest {

namespace {

std::string meshtest_name_of(const std::string& megatron_name) {
  for (const auto& [megatron, meshtest] : megatron_metric_names())
    if (megatron == megatron_name) return meshtest;
  return "";
}

// One golden file to write: where, and what.
struct Planned {
  std::string path;
  GoldenCurve curve;
  std::string line;  // what the command prints for it
};

GoldenCurve imported_curve(const std::string& source, const std::string& megatron, const std::string& metric,
                           const GoldenValuesMetric& m) {
  GoldenCurve c;
  bool has_nan = false;
  for (const auto& [step, v] : m.values) c.steps[step] = {v, v}, has_nan = has_nan || std::isnan(v);
  c.comments = {"Megatron-LM golden values, imported by `meshtest golden import megatron`", "from: " + source,
                "metric: \"" + megatron + "\" (start_step " + std::to_string(m.start_step) + ", end_step " +
                    std::to_string(m.end_step) + ", step_interval " + std::to_string(m.step_interval) + "; " +
                    std::to_string(m.values.size()) + " steps) as meshtest's " + metric,
                "judge with loss_matches: {golden: <this file>, metric: " + metric +
                    ", rule: megatron-approximate} (or megatron-deterministic)"};
  if (has_nan)
    c.comments.push_back(
        "nan: Megatron logged no value at that step; the megatron rules read it as Megatron does (inf)");
  return c;
}

// What importing `file` writes, checked; throws MetricsError with why not.
std::vector<Planned> plan_import(const std::string& file, const std::string& out_dir, std::string& skipped) {
  const GoldenValues golden = read_golden_values(file);
  const fs::path source = fs::absolute(file).lexically_normal();
  const fs::path dir = out_dir.empty() ? source.parent_path() : fs::path(out_dir);
  std::vector<Planned> out;
  for (const auto& [name, m] : golden) {
    const std::string metric = meshtest_name_of(name);
    if (metric.empty()) {
      skipped += (skipped.empty() ? "" : ", ") + name;
      continue;
    }
    const std::string path = (dir / (source.stem().string() + "." + metric + ".txt")).string();
    out.push_back({path, imported_curve(source.string(), name, metric, m),
                   file + ": " + name + " -> " + path + " (" + std::to_string(m.values.size()) + " steps, " +
                       std::to_string(m.values.begin()->first) + "-" + std::to_string(m.values.rbegin()->first) + ")"});
  }
  if (out.empty()) {
    std::string known;
    for (const auto& [megatron, meshtest] : megatron_metric_names()) known += (known.empty() ? "" : ", ") + megatron;
    throw MetricsError(file + ": none of its metrics (" + skipped + ") is one meshtest judges (" + known + ")");
  }
  return out;
}

}  // namespace

const std::vector<std::pair<std::string, std::string>>& megatron_metric_names() {
  static const std::vector<std::pair<std::string, std::string>> names = {{"lm loss", "loss"},
                                                                         {"num-zeros", "num_zeros"},
                                                                         {"grad-norm", "grad_norm"},
                                                                         {"lm loss validation", "validation_loss"}};
  return names;
}

int import_megatron_golden(const std::vector<std::string>& files, const std::string& out_dir) {
  std::vector<Planned> planned;
  std::vector<std::string> notes;
  std::map<std::string, std::string> written_by;  // output path -> input file
  for (const auto& file : files) {
    std::string skipped;
    try {
      for (auto& p : plan_import(file, out_dir, skipped)) {
        if (auto [it, fresh] = written_by.emplace(p.path, file); !fresh)
          throw std::runtime_error(it->second + " and " + file + " would both write " + p.path +
                                   " (files of one name: import them into different --out folders)");
        planned.push_back(std::move(p));
      }
    } catch (const MetricsError& e) {
      throw std::runtime_error(e.what());
    }
    if (!skipped.empty()) notes.push_back(file + ": skipped " + skipped + " (meshtest judges no such metric)");
  }
  for (const auto& p : planned) {
    fs::create_directories(fs::path(p.path).parent_path());
    std::ofstream out(p.path);
    out << p.curve.text();
    if (!out.flush()) throw std::runtime_error("cannot write " + p.path);
    std::printf("%s\n", p.line.c_str());
  }
  for (const auto& n : notes) std::printf("%s\n", n.c_str());
  return 0;
}

int export_megatron_golden(const std::string& dir, const std::string& id, const std::string& phase) {
  const FinishedCurves curves = finished_curves(dir, id, phase);
  std::vector<std::pair<std::string, std::map<long long, double>>> metrics;
  for (const auto& [megatron, meshtest] : megatron_metric_names()) {
    const auto it = curves.metrics.find(meshtest);
    if (it == curves.metrics.end()) continue;
    std::map<long long, double> rounded;
    for (const auto& [step, v] : it->second) rounded[step] = megatron_round(v);
    metrics.emplace_back(megatron, rounded);
  }
  if (metrics.empty()) throw std::runtime_error(id + " (phase " + curves.phase + ") reported no loss");
  const std::string text = golden_values_json(metrics).dump(4);
  try {  // what Megatron would write, even when its own grid has gaps: said, not hidden
    parse_golden_values(text, id + " (phase " + curves.phase + ")");
  } catch (const MetricsError& e) {
    std::fprintf(stderr, "meshtest: warning: %s; `golden import megatron` will refuse it\n", e.what());
  }
  std::printf("%s\n", text.c_str());
  return 0;
}

}  // namespace meshtest
