#include "judge/checks.h"

#include <stdexcept>

#include "core/check_kinds.h"
#include "judge/check_context.h"
#include "judge/checkpoint_checks.h"
#include "judge/curve_checks.h"
#include "judge/log_checks.h"
#include "judge/rank_checks.h"

namespace meshtest {

namespace {

// The function that runs a declared check of `kind`. A switch with no default, built with
// -Werror=switch (CMakeLists.txt): a kind added to core/check_kinds.h without a function
// here does not compile.
CheckFn implementation_of(CheckKind kind) {
  switch (kind) {
    case CheckKind::kExit: return nullptr;  // judged first for every case, declared or not
    case CheckKind::kLossFinite: return check_loss_finite;
    case CheckKind::kLossDecreases: return check_loss_decreases;
    case CheckKind::kLossMatches: return check_loss_matches;
    case CheckKind::kResumeMatches: return check_resume_matches;
    case CheckKind::kKeysMatch: return check_keys_match;
    case CheckKind::kTensorsMatch: return check_tensors_match;
    case CheckKind::kTokensMatch: return check_tokens_match;
    case CheckKind::kReplicasEqual: return check_replicas_equal;
    case CheckKind::kParamsMatch: return check_params_match;
    case CheckKind::kSavedOnce: return check_saved_once;
    case CheckKind::kLogContains: return check_log_contains;
    case CheckKind::kErrorMatches: return check_error_matches;
    case CheckKind::kDrift: return check_drift;
  }
  return nullptr;  // not reached: every kind has a case above
}

// Runs one declared check into `r`: a Failure becomes its message and verdict numbers,
// any other exception (a file of the wrong shape) "malformed output".
void run_declared(const CaseOutcome& o, const CheckSpec& spec, CheckFn check, const CheckSources& from,
                  CheckResult& r) {
  try {
    check(o, spec, from, r);
  } catch (const Failure& f) {
    r.passed = false;
    r.judged = f.judged;
    r.message = f.message;
    r.details = f.details;
    r.finding.step = f.step;
    r.finding.value = f.value;
    r.finding.reference = f.reference;
    r.finding.tolerance = f.tolerance;
    r.finding.margin = r.margin;
  } catch (const std::exception& e) {
    r.passed = false;
    r.judged = false;
    r.message = std::string("malformed output: ") + e.what();
  }
}

}  // namespace

std::vector<CheckResult> run_checks(const CaseOutcome& o, const CheckSources& from) {
  std::vector<CheckResult> out;
  out.push_back(check_exit(o));
  for (const auto& spec : o.spec->checks) {
    if (spec.kind == CheckKind::kExit) continue;
    CheckResult r{check_kind_name(spec.kind), true, "", ""};
    r.made_by = spec.kind;
    run_declared(o, spec, implementation_of(spec.kind), from, r);
    if (!r.passed) {
      r.finding.kind = r.judged ? VerdictKind::kCheckFailed : VerdictKind::kNotJudged;
      r.finding.check = r.kind;
      r.finding.phase = spec.params.phase.value_or(o.phases.empty() ? std::string() : o.phases.back().name);
    }
    out.push_back(r);
  }
  return out;
}

}  // namespace meshtest
