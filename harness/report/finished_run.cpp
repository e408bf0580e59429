#include "report/finished_run.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>

#include "core/outputs.h"
#include "judge/checks.h"
#include "report/html_report.h"
#include "report/markdown_report.h"
#include "report/report.h"
#include "report/summary.h"
#include "report/summary_view.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace meshtest {

json read_summary(const std::string& dir) {
  const std::string path = (fs::path(dir) / "summary.json").string();
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path + " (is it a meshtest --out folder?)");
  json summary = json::parse(in);
  const int version = summary.value("format_version", 0);
  if (version != kSummaryFormatVersion)
    throw std::runtime_error(path + " is summary format " + std::to_string(version) + "; this meshtest reads format " +
                             std::to_string(kSummaryFormatVersion) + " (rerun the cases with it)");
  return summary;
}

json merged_summary(const std::vector<std::string>& dirs) {
  if (dirs.empty()) throw std::runtime_error("merge needs at least one run folder");
  json merged = read_summary(dirs.front());
  std::set<std::string> ids, matrices;
  merged["cases"] = json::array();
  merged["wall_s"] = 0.0;
  merged["all_met"] = true;
  merged["counts"] = json::object();
  for (const auto& dir : dirs) {
    const json s = read_summary(dir);
    for (const auto& m : s.value("matrices", json::array())) matrices.insert(m.get<std::string>());
    merged["wall_s"] = std::max(merged["wall_s"].get<double>(), s.value("wall_s", 0.0));
    merged["all_met"] = merged["all_met"].get<bool>() && s.value("all_met", false);
    if (s.value("interrupted_by_signal", 0)) merged["interrupted_by_signal"] = s["interrupted_by_signal"];
    for (const auto& c : s.at("cases")) {
      if (!ids.insert(c.value("id", "")).second)
        throw std::runtime_error("case " + c.value("id", "") + " is in two of the runs being merged (" + dir + ")");
      // A case is judged by its own verdict too: a shard's all_met may be missing or edited.
      if (!c.value("met_expectation", false)) merged["all_met"] = false;
      merged["cases"].push_back(c);
      merged["counts"][c.value("status", "")] = merged["counts"].value(c.value("status", ""), 0) + 1;
    }
  }
  merged["matrices"] = std::vector<std::string>(matrices.begin(), matrices.end());
  merged["merged_from"] = dirs;
  return merged;
}

// junit.xml, surefire/TEST-<suite>.xml, report.html and the terminal table, all from summary.json.
int render_reports(const std::string& dir, bool exit_by_expectations) {
  const RunView run = summary_view(read_summary(dir));
  write_junit(run, (fs::path(dir) / "junit.xml").string());
  write_surefire(run, (fs::path(dir) / "surefire").string());
  write_html_report(run, (fs::path(dir) / "report.html").string());
  print_report(run, stdout);
  std::printf("reports: %s/report.html, %s/junit.xml, %s/surefire/, %s/summary.json\n", dir.c_str(), dir.c_str(),
              dir.c_str(), dir.c_str());
  std::fflush(stdout);
  if (!exit_by_expectations) return 0;
  return run.all_met ? 0 : 1;
}

int write_html_only(const std::string& dir, const std::string& html) {
  const RunView run = summary_view(read_summary(dir));
  write_html_report(run, html);
  std::printf("report: %s\n", html.c_str());
  return run.all_met ? 0 : 1;
}

int print_markdown_summary(const std::string& dir) {
  std::fputs(markdown_summary(summary_view(read_summary(dir))).c_str(), stdout);
  return 0;
}

namespace {

const json* find_case(const json& summary, const std::string& id) {
  for (const auto& c : summary.at("cases"))
    if (c.value("id", "") == id) return &c;
  throw std::runtime_error("no case '" + id + "' in this run's summary.json");
}

// A phase of a finished case (default: the last): its folder, where its numbers are, and
// when it wrote them.
struct FinishedPhase {
  std::string name;
  std::string dir;
  Outputs outputs;
  std::optional<TimeWindow> window;  // none in a summary written before meshtest recorded it
};

std::optional<TimeWindow> window_of(const json& phase) {
  const json w = phase.value("metrics_window", json());
  if (!w.is_object() || !w.value("from", json()).is_number() || !w.value("to", json()).is_number()) return std::nullopt;
  return TimeWindow{w["from"].get<double>(), w["to"].get<double>()};
}

FinishedPhase finished_phase(const json& c, const std::string& phase) {
  const json& phases = c.at("phases");
  const json* found = phases.empty() ? nullptr : &phases.back();
  if (!phase.empty()) {
    found = nullptr;
    for (const auto& p : phases)
      if (p.value("name", "") == phase) found = &p;
    if (!found) throw std::runtime_error(c.value("id", "") + " has no phase '" + phase + "'");
  }
  if (!found) return {};
  return {found->value("name", ""), found->value("dir", ""), outputs_from_json(found->value("outputs", json::object())),
          window_of(*found)};
}

}  // namespace

int diff_cases(const std::string& dir, const std::string& a, const std::string& b) {
  const json summary = read_summary(dir);
  const FinishedPhase pa = finished_phase(*find_case(summary, a), ""), pb = finished_phase(*find_case(summary, b), "");
  const std::string &da = pa.dir, &db = pb.dir;
  std::map<long long, double> la, lb;
  try {
    la = read_loss_curve(da, pa.outputs, "loss", pa.window);
  } catch (const std::exception& e) {
    std::printf("%s: %s\n", a.c_str(), e.what());
  }
  try {
    lb = read_loss_curve(db, pb.outputs, "loss", pb.window);
  } catch (const std::exception& e) {
    std::printf("%s: %s\n", b.c_str(), e.what());
  }
  std::set<long long> steps;
  for (const auto& [s, v] : la) steps.insert(s);
  for (const auto& [s, v] : lb) steps.insert(s);
  int differ = 0;
  std::printf("%6s  %16s  %16s  %10s\n", "step", "A loss", "B loss", "|A-B|");
  for (long long s : steps) {
    const bool ha = la.count(s), hb = lb.count(s);
    const double diff = ha && hb ? std::fabs(la[s] - lb[s]) : NAN;
    differ += !(ha && hb) || diff != 0;
    std::printf("%6lld  %16s  %16s  %10s\n", s, ha ? std::to_string(la[s]).c_str() : "-",
                hb ? std::to_string(lb[s]).c_str() : "-", ha && hb ? std::to_string(diff).c_str() : "-");
  }
  std::printf("A = %s (%s)\nB = %s (%s)\n", a.c_str(), da.c_str(), b.c_str(), db.c_str());
  try {
    const auto ka = read_tensor_keys(da, pa.outputs), kb = read_tensor_keys(db, pb.outputs);
    for (const auto& [k, shape] : ka)
      if (!kb.count(k))
        std::printf("only in A: %s %s\n", k.c_str(), shape.c_str()), ++differ;
      else if (kb.at(k) != shape)
        std::printf("shape: %s %s vs %s\n", k.c_str(), shape.c_str(), kb.at(k).c_str()), ++differ;
    for (const auto& [k, shape] : kb)
      if (!ka.count(k)) std::printf("only in B: %s %s\n", k.c_str(), shape.c_str()), ++differ;
  } catch (const std::exception& e) {
    std::printf("keys: %s\n", e.what());
  }
  return differ ? 1 : 0;
}

// torchtitan's "<step> <loss>" golden format from a finished case (or its grad norms).
int export_golden(const std::string& dir, const std::string& id, const std::string& phase, const std::string& metric) {
  const json summary = read_summary(dir);
  const FinishedPhase p = finished_phase(*find_case(summary, id), phase);
  for (const auto& [step, value] : read_loss_curve(p.dir, p.outputs, metric, p.window))
    std::printf("%lld %.9g\n", step, value);
  return 0;
}

FinishedCurves finished_curves(const std::string& dir, const std::string& id, const std::string& phase) {
  const json summary = read_summary(dir);
  const FinishedPhase p = finished_phase(*find_case(summary, id), phase);
  if (p.dir.empty()) throw std::runtime_error(id + " has no phase that ran");
  return {p.name, read_phase_curves(p.dir, p.outputs, p.window)};
}

}  // namespace meshtest
