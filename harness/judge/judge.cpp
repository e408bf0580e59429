#include "judge/judge.h"

#include <cmath>
#include <cstdio>

#include "core/check_kinds.h"

namespace meshtest {

namespace {

// Orders the results of one kind: a judged failure, then any failure, then a pass.
int verdict_rank(const CheckResult& c) { return c.passed ? 0 : c.judged ? 2 : 1; }

// A message check's result says why a run failed; every other result is weighed as a number.
bool is_message_result(const CheckResult& c) { return c.made_by && is_message_check(*c.made_by); }

// " (margin 34x)": how far past its tolerance a canary's check went.
std::string margin_text(const std::optional<double>& margin) {
  if (!margin) return "";
  if (!std::isfinite(*margin)) return " (margin inf)";
  char buf[48];
  std::snprintf(buf, sizeof(buf),
                *margin < 100   ? " (margin %.3gx)"
                : *margin < 1e6 ? " (margin %.0fx)"
                                : " (margin %.2gx)",
                *margin);
  return buf;
}

}  // namespace

void judge(CaseOutcome& o) {
  const Expectation& e = o.spec->expect;
  const CheckResult* first_failed = nullptr;
  const CheckResult* failed_message_check = nullptr;
  const CheckResult* first_failed_other = nullptr;  // a judged failure, preferably not `exit`
  const CheckResult* unjudged = nullptr;            // a check that could not look
  const CheckResult* expected = nullptr;
  for (const auto& c : o.checks) {
    if (!c.passed && !first_failed) first_failed = &c;
    if (!c.passed && is_message_result(c) && !failed_message_check) failed_message_check = &c;
    // The most telling failure: a disagreeing check says more than "exit code 1".
    if (!c.passed && !is_message_result(c) && c.judged &&
        (!first_failed_other || first_failed_other->made_by == CheckKind::kExit))
      first_failed_other = &c;
    if (!c.passed && !c.judged && !unjudged) unjudged = &c;
    // A canary is caught when a check of the named kind judged and failed.
    // Of several checks of that kind, the clearest catch counts.
    if (e.kind == Expectation::kFail && c.made_by == e.check &&
        (!expected || verdict_rank(c) > verdict_rank(*expected) ||
         (verdict_rank(c) == verdict_rank(*expected) && c.margin.value_or(0) > expected->margin.value_or(0))))
      expected = &c;
  }
  o.details.clear();
  for (const auto& c : o.checks)
    if (!c.passed) o.details += c.kind + ": " + c.message + "\n" + c.details;
  // A verdict decided by check `c`: its finding, with a message that says which check.
  auto decided_by = [](const CheckResult& c, VerdictKind kind, std::string message) {
    Verdict v = c.finding;
    v.kind = kind;
    v.message = std::move(message);
    return v;
  };
  switch (e.kind) {
    case Expectation::kSkip: o.verdict = Verdict::skipped(e.reason); return;
    case Expectation::kPass:
      if (!first_failed)
        o.verdict = {VerdictKind::kPassed, ""};
      else
        o.verdict =
            decided_by(*first_failed, first_failed->finding.kind, first_failed->kind + ": " + first_failed->message);
      return;
    case Expectation::kXfail:
      // It must fail, and for the declared reason when log_contains / error_matches say which.
      if (failed_message_check) {
        o.verdict = decided_by(*failed_message_check, VerdictKind::kXfailedDifferently,
                               "xfail (" + e.reason + ") failed differently: " + failed_message_check->kind + ": " +
                                   failed_message_check->message);
      } else if (unjudged && !first_failed_other) {
        // The run ended well and a check could not look: that proves nothing about the known bug.
        o.verdict =
            decided_by(*unjudged, VerdictKind::kXfailedDifferently,
                       "xfail (" + e.reason + ") could not be judged: " + unjudged->kind + ": " + unjudged->message);
      } else if (first_failed_other) {
        o.verdict = decided_by(*first_failed_other, VerdictKind::kXfailed,
                               e.reason + " (" + first_failed_other->kind + ": " + first_failed_other->message + ")");
      } else {
        o.verdict = {VerdictKind::kXpassed, "XPASS: expected to fail (" + e.reason + ") but every check passed"};
      }
      return;
    case Expectation::kFail: {
      const CheckResult& exit = o.checks.front();
      const std::string check = check_kind_name(e.check);
      // A canary for a number check must run to the end; one for a message check must fail.
      if (e.check != CheckKind::kExit && !is_message_check(e.check) && !exit.passed) {
        o.verdict =
            decided_by(exit, VerdictKind::kCanaryCrashed, "canary for " + check + " crashed instead: " + exit.message);
      } else if (expected && !expected->passed && !expected->judged) {
        o.verdict = decided_by(*expected, VerdictKind::kCanaryCrashed,
                               "canary for " + check + " could not be judged: " + expected->message);
      } else if (expected && !expected->passed) {
        o.verdict = decided_by(*expected, VerdictKind::kCanaryCaught,
                               "canary caught by " + check + margin_text(expected->margin) + ": " + expected->message);
      } else {
        o.verdict = {VerdictKind::kCanaryNotCaught, "canary not caught: check " + check + " passed on a known-bad run"};
        o.verdict.check = check;
      }
      return;
    }
  }
}

}  // namespace meshtest
