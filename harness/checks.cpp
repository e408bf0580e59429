#include "checks.h"

#include <algorithm>
#include <csignal>

namespace meshtest {

namespace {

CheckResult check_exit(const CaseOutcome& o) {
  CheckResult r{"exit", true, "", ""};
  for (const auto& p : o.phases) {
    if (!p.ran) continue;
    if (!p.launch_error.empty()) {
      r.passed = false;
      r.message = "phase " + p.name + ": " + p.launch_error;
      return r;
    }
    const auto& res = p.result;
    if (res.ok()) continue;
    r.passed = false;
    if (res.timed_out) {
      std::string alive;
      for (const auto& e : res.exits)
        if (e.signal == SIGTERM || e.signal == SIGKILL) alive += (alive.empty() ? "" : ",") + std::to_string(e.rank);
      r.message = "phase " + p.name + " " + res.stopped_because + " (ranks still running: " +
                  (alive.empty() ? "none" : alive) + ")" + (res.killed ? "; SIGKILL after the grace period" : "");
    } else if (res.first_failure.rank >= 0) {
      r.message = "phase " + p.name + ": rank " + std::to_string(res.first_failure.rank) + " failed first with " +
                  res.first_failure.describe();
    } else {
      r.message = "phase " + p.name + " stopped: " + res.stopped_because;
    }
    for (const auto& e : res.exits)
      r.details += "rank " + std::to_string(e.rank) + ": " + e.describe() + "\n";
    return r;
  }
  return r;
}

}  // namespace

std::vector<CheckResult> run_checks(const CaseOutcome& o, const FindCase& find) {
  (void)find;
  std::vector<CheckResult> out;
  out.push_back(check_exit(o));
  for (const auto& spec : o.spec->checks) {
    if (spec.kind == "exit") continue;
    out.push_back({spec.kind, false, "check '" + spec.kind + "' is not implemented", ""});
  }
  return out;
}

void judge(CaseOutcome& o) {
  const Expectation& e = o.spec->expect;
  const CheckResult* first_failed = nullptr;
  const CheckResult* expected = nullptr;
  for (const auto& c : o.checks) {
    if (!c.passed && !first_failed) first_failed = &c;
    if (e.kind == Expectation::kFail && c.kind == e.check) expected = &c;
  }
  auto details_of = [&](const CheckResult& c) { return c.kind + ": " + c.message + (c.details.empty() ? "" : "\n" + c.details); };
  o.details.clear();
  for (const auto& c : o.checks)
    if (!c.passed) o.details += details_of(c) + "\n";
  switch (e.kind) {
    case Expectation::kSkip:
      o.status = Status::kSkipped, o.reason = e.reason;
      return;
    case Expectation::kPass:
      if (!first_failed) o.status = Status::kPassed, o.reason.clear();
      else o.status = Status::kFailed, o.reason = first_failed->kind + ": " + first_failed->message;
      return;
    case Expectation::kXfail:
      if (first_failed) {
        o.status = Status::kXfailed;
        o.reason = e.reason + " (" + first_failed->kind + ": " + first_failed->message + ")";
      } else {
        o.status = Status::kFailed;
        o.reason = "XPASS: expected to fail (" + e.reason + ") but every check passed";
      }
      return;
    case Expectation::kFail: {
      const CheckResult& exit = o.checks.front();
      if (e.check != "exit" && !exit.passed) {
        o.status = Status::kFailed;
        o.reason = "canary for " + e.check + " crashed instead: " + exit.message;
      } else if (expected && !expected->passed) {
        o.status = Status::kPassed;
        o.reason = "canary caught by " + e.check + ": " + expected->message;
      } else {
        o.status = Status::kFailed;
        o.reason = "canary not caught: check " + e.check + " passed on a known-bad run";
      }
      return;
    }
  }
}

}  // namespace meshtest
