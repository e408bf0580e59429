#include "history/record.h"

#include <mutex>
#include <set>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <ctime>
#include <functional>
#include <random>

#include "core/git.h"
#include "core/matrix.h"

namespace meshtest {

void warn_history_unusable(std::FILE* log, const std::string& path, const std::string& what,
                           const std::exception& error) {
  static std::mutex mutex;
  static std::set<std::string> warned;
  const std::lock_guard<std::mutex> lock(mutex);
  if (!log || !warned.insert(path).second) return;
  std::fprintf(log, "meshtest: warning: %s: %s\n", what.c_str(), error.what());
}

RunIdentity run_identity(const nlohmann::json& summary, const std::string& commit, const std::string& repo_dir,
                         const std::string& version) {
  RunIdentity id;
  id.run_id = summary.value("run_id", "");
  if (id.run_id.empty()) id.run_id = new_run_id(summary.value("hostname", ""));
  id.host = summary.value("hostname", "");
  id.launcher = summary.value("launcher", "");
  id.version = version;
  id.time = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  id.commit = commit.empty() ? git_line(repo_dir, {"rev-parse", "HEAD"}) : commit;
  if (id.commit.empty()) id.commit = "unknown";
  id.branch = git_line(repo_dir, {"rev-parse", "--abbrev-ref", "HEAD"});
  std::string matrices;
  for (const auto& m : summary.value("matrices", nlohmann::json::array())) matrices += m.dump();
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016zx", std::hash<std::string>{}(matrices));
  id.matrix_hash = hash;
  return id;
}

std::map<std::string, DriftFinding> recorded_drift(const History& history, const nlohmann::json& summary,
                                                   const std::string& run_id) {
  std::map<std::string, DriftFinding> drift;
  const DriftRule rule = drift_rule();
  for (const auto& c : summary.value("cases", nlohmann::json::array())) {
    if (!c.is_object() || c.value("status", "") != "passed" || !c.contains("id")) continue;
    bool declared = false;  // a case that declares drift has its own verdict on it
    for (const auto& check : c.value("checks", nlohmann::json::array()))
      declared = declared || (check.is_object() && check.value("kind", "") == "drift");
    if (declared) continue;
    const auto runs = history.case_runs(c["id"].get<std::string>(), rule.window + 8, true);
    for (size_t i = 0; i < runs.size(); ++i)
      if (runs[i].run_id == run_id) {
        if (auto f =
                find_drift(runs[i], std::vector<CaseRun>(runs.begin() + static_cast<long>(i) + 1, runs.end()), rule))
          drift[c["id"].get<std::string>()] = *f;
        break;
      }
  }
  return drift;
}

void add_drift_notes(nlohmann::json& summary, const std::map<std::string, DriftFinding>& drift) {
  if (!summary.contains("cases") || !summary["cases"].is_array()) return;
  for (auto& c : summary["cases"]) {
    if (!c.is_object() || !c.contains("id") || !c["id"].is_string()) continue;
    const auto it = drift.find(c["id"].get<std::string>());
    if (it == drift.end()) continue;
    const DriftFinding& f = it->second;
    c["drift"] = {{"message", "drifted: " + f.describe()},
                  {"curve", f.curve},
                  {"step", f.step},
                  {"value", f.value},
                  {"center", f.center},
                  {"half_width", f.half_width},
                  {"reference_runs", f.reference_runs}};
  }
}

void add_history_strips(nlohmann::json& summary, const History& history, int runs, std::FILE* log) {
  if (!summary.contains("cases") || !summary["cases"].is_array()) return;
  try {
    std::string from, to;
    double from_time = 0, to_time = 0;
    for (auto& c : summary["cases"]) {
      if (!c.is_object() || !c.contains("id") || !c["id"].is_string()) continue;
      auto list = history.case_runs(c["id"].get<std::string>(), runs);
      nlohmann::json strip = nlohmann::json::array();
      for (auto it = list.rbegin(); it != list.rend(); ++it) {
        strip.push_back({{"commit", it->commit},
                         {"status", it->status},
                         {"time", it->time},
                         {"duration_s", it->duration_s},
                         {"final_loss", it->final_loss ? nlohmann::json(*it->final_loss) : nlohmann::json(nullptr)}});
        if (from.empty() || it->time < from_time) from = it->commit, from_time = it->time;
        if (to.empty() || it->time > to_time) to = it->commit, to_time = it->time;
      }
      if (!strip.empty()) c["history"] = strip;
    }
    if (!from.empty()) summary["history"] = {{"from_commit", from}, {"to_commit", to}};
  } catch (const std::exception& e) {
    warn_history_unusable(log, history.path(), "no history strips", e);
  }
}

std::string new_run_id(const std::string& host) {
  const std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%S", std::gmtime(&now));
  std::random_device random;
  const size_t mix =
      std::hash<std::string>{}(host + std::to_string(::getpid()) + std::to_string(random()) +
                               std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
  char id[64];
  std::snprintf(id, sizeof id, "%s-%08zx", stamp, mix & 0xffffffffu);
  return id;
}

}  // namespace meshtest
