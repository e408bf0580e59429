#include "core/outcome.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "readers/rank_files.h"

namespace meshtest {

std::string RankExit::describe() const {
  if (signal != 0) {
    const char* name = sigabbrev_np(signal);
    return "signal " + std::to_string(signal) + (name ? " (SIG" + std::string(name) + ")" : "");
  }
  return "exit code " + std::to_string(exit_code);
}

std::string PhaseOutcome::log_path(int rank) const { return rank_log_path(dir, rank); }

std::optional<TimeWindow> launch_window(const std::vector<PhaseOutcome>& phases, size_t i) {
  if (i >= phases.size()) return std::nullopt;
  const LaunchResult& r = phases[i].result;
  if (!phases[i].ran || r.started_at <= 0 || r.ended_at < r.started_at) return std::nullopt;
  TimeWindow window{r.started_at - kLaunchWindowSlackS, r.ended_at + kLaunchWindowSlackS};
  for (size_t j = 0; j < phases.size(); ++j) {
    const LaunchResult& other = phases[j].result;
    if (j == i || !phases[j].ran || other.started_at <= 0) continue;
    if (j < i && other.ended_at > 0) window.from = std::max(window.from, other.ended_at);
    if (j > i) window.to = std::min(window.to, other.started_at);
  }
  return window;
}

std::string CaseOutcome::failing_log() const {
  for (const auto& p : phases) {
    if (!p.ran || p.ok()) continue;
    int rank = p.result.first_failure.rank >= 0 ? p.result.first_failure.rank : 0;
    if (p.result.timed_out)  // the first rank still running when time ran out: the one to read
      for (const auto& e : p.result.exits)
        if (e.signal == SIGTERM || e.signal == SIGKILL) {
          rank = e.rank;
          break;
        }
    return p.log_path(rank);
  }
  for (auto it = phases.rbegin(); it != phases.rend(); ++it)
    if (it->ran) return it->log_path(0);
  return "";
}

std::string human_seconds(double s) {
  char buf[32];
  if (s < 60)
    std::snprintf(buf, sizeof(buf), "%.1f s", s);
  else
    std::snprintf(buf, sizeof(buf), "%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  return buf;
}

}  // namespace meshtest
