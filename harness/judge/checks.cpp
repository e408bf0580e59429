#include "judge/checks.h"

#include <map>
#include <stdexcept>

#include "judge/check_context.h"
#include "judge/checkpoint_checks.h"
#include "judge/curve_checks.h"
#include "judge/log_checks.h"
#include "judge/rank_checks.h"

namespace meshtest {

namespace {

const std::map<std::string, CheckFn>& implementations() {
  static const std::map<std::string, CheckFn> fns = {
      {"loss_finite", check_loss_finite},   {"loss_decreases", check_loss_decreases},
      {"loss_matches", check_loss_matches}, {"resume_matches", check_resume_matches},
      {"keys_match", check_keys_match},     {"tokens_match", check_tokens_match},
      {"replicas_equal", check_replicas_equal}, {"params_match", check_params_match},
      {"tensors_match", check_tensors_match},     {"saved_once", check_saved_once},
      {"log_contains", check_log_contains}, {"error_matches", check_error_matches},
  };
  return fns;
}

// Runs one declared check into `r`: a Failure becomes its message and verdict numbers,
// any other exception (a file of the wrong shape) "malformed output".
void run_declared(const CaseOutcome& o, const CheckSpec& spec, const FindCase& find, CheckResult& r) {
  try {
    implementations().at(spec.kind)(o, spec, find, r);
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

std::vector<CheckResult> run_checks(const CaseOutcome& o, const FindCase& find) {
  std::vector<CheckResult> out;
  out.push_back(check_exit(o));
  for (const auto& spec : o.spec->checks) {
    if (spec.kind == "exit") continue;
    CheckResult r{spec.kind, true, "", ""};
    run_declared(o, spec, find, r);
    if (!r.passed) {
      r.finding.kind = r.judged ? VerdictKind::kCheckFailed : VerdictKind::kNotJudged;
      r.finding.check = spec.kind;
      r.finding.phase = spec.params.value("phase", o.phases.empty() ? std::string() : o.phases.back().name);
    }
    out.push_back(r);
  }
  return out;
}

}  // namespace meshtest
