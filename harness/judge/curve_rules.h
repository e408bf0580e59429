// loss_matches with `rule:` (core/check_kinds.h CurveRule): a curve judged against its reference
// as Megatron-LM's functional tests judge TensorBoard against golden values
// (tests/functional_tests/python_test_utils/common.py, `pipeline`):
// - the reference's steps are the ones judged; the subject's others are not looked at;
// - both sides are rounded to 5 decimals, as Megatron rounds what it reads from TensorBoard;
// - a step the subject did not log counts as Megatron's "nan", and "nan" (in a golden file too)
//   counts as inf, so it meets only a golden "nan" (Megatron's mark for a step that logged none);
// - megatron-deterministic: every step equal; megatron-approximate: np.isclose with rtol 0.05
//   (0.20 for num_zeros) and atol 0, where min(max(n // 100, 1), 50) of the n steps may miss
//   (none when n is 1), as Megatron's floating-point test of the mean allows.
// A band reference (`<step> <min> <max>`) is met inside [min - tol(min), max + tol(max)].
#pragma once

#include <map>
#include <string>

#include "core/check_kinds.h"
#include "judge/check_context.h"
#include "readers/golden_curve.h"

namespace meshtest {

struct RuleCurves {
  std::map<long long, double> got;       // the subject's steps that reported `metric`
  std::map<long long, GoldenBand> want;  // the reference's
  std::string metric, got_label, want_label;
  std::string hint;  // ends the message when the subject reported no `metric` at all
};

// Passes with a one-line summary in result.message, or throws a Finding: how many steps missed,
// how many may, the first miss. result.margin (approximate only) is the |diff| / tolerance of
// the step that would fail the check if it missed: its (allowed + 1)-th worst, so that below 1
// passes, as every margin does.
void judge_by_rule(CurveRule rule, const RuleCurves& curves, CheckResult& result);

// Python's round(v, 5), as Megatron rounds TensorBoard's scalars.
double megatron_round(double v);

// How many of `n` golden steps may miss under megatron-approximate: `allowed` is Megatron's
// min(max(n // 100, 1), 50) (0 when n is 1); `effective` what its test, mean(is_close) >= 1 -
// allowed / n in doubles, lets through, one less for a few n (3, 7, 19, 27, 63, ...).
struct MegatronAllowance {
  int allowed = 0;
  int effective = 0;
};
MegatronAllowance megatron_allowance(int n);

// megatron-approximate's rtol for `metric`: 0.20 for num_zeros, else 0.05.
double megatron_rtol(const std::string& metric);

}  // namespace meshtest
