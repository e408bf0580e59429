#include "judge/log_checks.h"

#include <csignal>
#include <fstream>
#include <sstream>

#include "readers/rank_files.h"

namespace meshtest {

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Which rank to read first in a timed-out phase: the first still running when time ran out.
int hung_rank(const LaunchResult& res) {
  for (const auto& e : res.exits)
    if (e.signal == SIGTERM || e.signal == SIGKILL) return e.rank;
  return -1;
}

}  // namespace

void check_log_contains(const CaseOutcome& o, const CheckSpec& spec, const CheckSources&, CheckResult&) {
  const Target t = subject(o, spec);
  const std::string text = spec.params.text.value();       // never empty: the loader refuses it
  const std::optional<long long> only = spec.params.rank;  // none: any rank
  for (int r = 0; r < t.phase->nproc; ++r)
    if ((!only || *only == r) && read_file(t.phase->log_path(r)).find(text) != std::string::npos) return;
  throw Finding{"no log of " + t.label + (only ? " rank " + std::to_string(*only) : "") + " contains '" + text + "'",
                ""};
}

void check_error_matches(const CaseOutcome& o, const CheckSpec& spec, const CheckSources&, CheckResult&) {
  const Target t = subject(o, spec);
  const std::string text = spec.params.text.value();  // never empty: the loader refuses it
  const auto& r = t.phase->result;
  if (t.phase->ok()) throw Finding{t.label + " exited 0 on every rank; expected it to fail with '" + text + "'", ""};
  const int rank = r.first_failure.rank >= 0 ? r.first_failure.rank : 0;
  const std::string log = read_file(t.phase->log_path(rank));
  if (log.find(text) != std::string::npos) return;
  std::string last = tail_of_file(t.phase->log_path(rank), 1);
  while (!last.empty() && (last.back() == '\n' || last.back() == '\r')) last.pop_back();
  throw Finding{t.label + ": rank " + std::to_string(rank) + " failed (" + r.first_failure.describe() +
                    ") but not with '" + text + "'; its last line: " + last,
                ""};
}

CheckResult check_exit(const CaseOutcome& o) {
  CheckResult r{"exit", true, "", "", true};
  r.made_by = CheckKind::kExit;
  for (const auto& p : o.phases) {
    if (!p.ran || p.ok()) continue;
    r.passed = false;
    Verdict& v = r.finding;
    v.check = "exit";
    v.phase = p.name;
    if (!p.launch_error.empty()) {
      v.kind = VerdictKind::kLaunchError;
      r.message = "phase " + p.name + ": " + p.launch_error;
      return r;
    }
    const auto& res = p.result;
    if (res.timed_out) {
      std::string alive;
      for (const auto& e : res.exits)
        if (e.signal == SIGTERM || e.signal == SIGKILL) alive += (alive.empty() ? "" : ",") + std::to_string(e.rank);
      v.kind = VerdictKind::kTimedOut;
      v.rank = hung_rank(res);
      r.message = "phase " + p.name + " " + res.stopped_because +
                  " (ranks still running: " + (alive.empty() ? "none" : alive) + ")" +
                  (res.killed ? "; SIGKILL after the grace period" : "");
      int behind = -1;
      const std::string late = ranks_not_arrived(p.dir, static_cast<int>(res.exits.size()), &behind);
      if (!late.empty()) r.message += "; " + late, v.rank = behind;
    } else if (res.first_failure.rank >= 0) {
      v.kind = res.first_failure.signal != 0 ? VerdictKind::kCrashed : VerdictKind::kExitCode;
      v.rank = res.first_failure.rank;
      v.signal = res.first_failure.signal;
      v.exit_code = res.first_failure.exit_code;
      r.message = "phase " + p.name + ": rank " + std::to_string(res.first_failure.rank) + " failed first with " +
                  res.first_failure.describe();
      const std::string error = rank_error_message(p.dir, res.first_failure.rank);
      if (!error.empty()) r.message += ": " + error.substr(0, error.find('\n'));
    } else {
      // Stopped from outside with no rank failing first (meshtest's own stop): no rank to blame.
      v.kind = VerdictKind::kCrashed;
      r.message = "phase " + p.name + " stopped: " + res.stopped_because;
    }
    for (const auto& e : res.exits) r.details += "rank " + std::to_string(e.rank) + ": " + e.describe() + "\n";
    return r;
  }
  return r;
}

}  // namespace meshtest
