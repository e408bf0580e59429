#include "report/summary.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

namespace fs = std::filesystem;

namespace meshtest {

namespace {

// A number, or null where JSON has none (NaN, infinities).
nlohmann::json number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

nlohmann::json curve_json(const std::vector<PhaseOutcome::Point>& curve) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& p : curve) out.push_back({p.step, number(p.loss), number(p.grad_norm)});
  return out;
}

nlohmann::json check_json(const CheckResult& k) {
  nlohmann::json j = {
      {"kind", k.kind}, {"passed", k.passed}, {"judged", k.judged}, {"message", k.message}, {"details", k.details}};
  if (!k.passed) {
    // The numbers and place of the failure, without repeating kind or message.
    nlohmann::json f = verdict_to_json(k.finding);
    for (const char* key : {"phase", "rank", "signal", "exit_code", "step", "value", "reference", "tolerance"})
      if (f.contains(key)) j[key] = f[key];
  }
  if (!k.series.empty()) {
    j["series"] = nlohmann::json::array();
    for (const auto& s : k.series) {
      nlohmann::json points = nlohmann::json::array();
      for (const auto& [step, v] : s.points) points.push_back({step, number(v)});
      j["series"].push_back({{"role", s.role}, {"label", s.label}, {"metric", s.metric}, {"points", points}});
    }
  }
  if (k.band) j["band"] = {{"rtol", k.band->first}, {"atol", k.band->second}};
  if (k.margin) j["margin"] = margin_json(*k.margin);
  return j;
}

// Phase `i` of case `o`.
nlohmann::json phase_json(const CaseOutcome& o, size_t i) {
  const PhaseOutcome& p = o.phases[i];
  const Case& spec = *o.spec;
  nlohmann::json jp = {{"name", p.name}, {"argv", p.argv},         {"nproc", p.nproc}, {"dir", p.dir},
                       {"ran", p.ran},   {"attempts", p.attempts}, {"ok", p.ok()}};
  if (!p.launch_error.empty()) jp["launch_error"] = p.launch_error;
  if (!p.curve.empty()) jp["curve"] = curve_json(p.curve);
  for (const auto& phase_spec : spec.phases)
    if (phase_spec.name == p.name) jp["outputs"] = outputs_to_json(phase_spec.outputs);
  if (p.ran) {
    const auto& r = p.result;
    jp["duration_s"] = r.duration_s;
    if (r.started_at > 0) jp["started_at"] = r.started_at;
    if (r.ended_at > 0) jp["ended_at"] = r.ended_at;
    // What its metrics were read from, for whatever reads them again (golden export, diff).
    if (const auto window = launch_window(o.phases, i))
      jp["metrics_window"] = {{"from", window->from}, {"to", window->to}};
    jp["timed_out"] = r.timed_out;
    jp["killed"] = r.killed;
    jp["stopped_because"] = r.stopped_because;
    jp["exits"] = nlohmann::json::array();
    for (const auto& e : r.exits)
      jp["exits"].push_back({{"rank", e.rank}, {"exit_code", e.exit_code}, {"signal", e.signal}});
    if (r.first_failure.rank >= 0)
      jp["first_failure"] = {{"rank", r.first_failure.rank},
                             {"exit_code", r.first_failure.exit_code},
                             {"signal", r.first_failure.signal},
                             {"what", r.first_failure.describe()}};
  }
  return jp;
}

// `mesh` (the first phase's), `phase_meshes` (one per phase) and `meshes`, the same joined
// by " -> " as summaries before `phase_meshes` had it (dashboards read it).
void add_meshes(nlohmann::json& c, const Case& spec) {
  const auto& first = spec.phases.front();
  c["mesh"] = first.mesh ? first.mesh->to_compact_string() : "";
  std::vector<std::string> meshes;
  for (const auto& sp : spec.phases)
    meshes.push_back(sp.mesh ? sp.mesh->to_compact_string() : std::to_string(sp.nproc) + " ranks");
  std::string chain;
  for (const auto& m : meshes) chain += (chain.empty() ? "" : " -> ") + m;
  c["meshes"] = chain;
  c["phase_meshes"] = meshes;
}

nlohmann::json case_json(const CaseOutcome& o) {
  nlohmann::json c;
  c["id"] = o.spec->id;
  c["suite"] = o.spec->suite;
  c["name"] = o.spec->name;
  c["file"] = o.spec->where.str();
  c["status"] = status_name(o.status());
  c["met_expectation"] = o.met_expectation();
  c["expect"] = o.spec->expect.str();
  c["reason"] = o.reason();
  c["verdict"] = verdict_to_json(o.verdict);
  c["details"] = o.details;
  c["ngpu"] = o.spec->ngpu;
  c["simulated"] = o.spec->simulated;
  c["devices"] = o.devices;
  c["model"] = o.spec->model;
  c["seed"] = o.spec->seed;
  c["tags"] = o.spec->tags;
  c["expected_s"] = o.expected_s;
  c["start_s"] = o.start_s;
  c["duration_s"] = o.duration_s;
  c["timestamp"] = o.timestamp;
  c["dir"] = o.dir;
  c["repro"] = o.repro;
  c["failing_log"] = o.failing_log();
  c["phases"] = nlohmann::json::array();
  for (size_t i = 0; i < o.phases.size(); ++i) c["phases"].push_back(phase_json(o, i));
  c["checks"] = nlohmann::json::array();
  for (const auto& k : o.checks) c["checks"].push_back(check_json(k));
  c["earlier_attempts"] = nlohmann::json::array();
  for (const auto& a : o.earlier_attempts)
    c["earlier_attempts"].push_back({{"reason", a.verdict.message},
                                     {"verdict", verdict_to_json(a.verdict)},
                                     {"details", a.details},
                                     {"failing_log", a.failing_log},
                                     {"duration_s", a.duration_s}});
  if (o.spec->phases.size() && o.phases.size()) add_meshes(c, *o.spec);
  return c;
}

}  // namespace

nlohmann::json summary_json(const RunResult& run, const RunOptions& opt) {
  nlohmann::json j;
  j["format_version"] = kSummaryFormatVersion;
  j["matrices"] = opt.matrices;
  j["retries"] = opt.retries;
  j["backend"] = opt.backend;
  j["devices"] = opt.devices;
  j["launcher"] = opt.launcher;
  if (opt.launcher == "slurm") j["slurm"] = opt.slurm.to_json();
  j["wall_s"] = run.wall_s;
  j["interrupted_by_signal"] = run.interrupted_by;
  j["all_met"] = run.all_met();
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  j["hostname"] = host;
  std::map<std::string, int> counts;
  j["cases"] = nlohmann::json::array();
  for (const auto& o : run.cases) {
    ++counts[status_name(o.status())];
    j["cases"].push_back(case_json(o));
  }
  j["counts"] = counts;
  return j;
}

void write_summary(const nlohmann::json& j, const std::string& path) {
  fs::create_directories(fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path());
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  fs::rename(tmp, path);
}

}  // namespace meshtest
