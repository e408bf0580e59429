// The checks that read a phase's curves (loss, grad norm, validation loss per step), from
// wherever its `outputs.metrics` says: metrics.jsonl, a rank's log, TensorBoard. Each
// compares them with a bound, another phase or case, or a golden file, and leaves both
// curves and the tolerance band in the result so a report can draw what was judged.
#pragma once

#include "judge/check_context.h"

namespace meshtest {

void check_loss_finite(const CaseOutcome& o, const CheckSpec& spec, const FindCase& find, CheckResult& result);
void check_loss_decreases(const CaseOutcome& o, const CheckSpec& spec, const FindCase& find, CheckResult& result);
void check_loss_matches(const CaseOutcome& o, const CheckSpec& spec, const FindCase& find, CheckResult& result);
void check_resume_matches(const CaseOutcome& o, const CheckSpec& spec, const FindCase& find, CheckResult& result);

}  // namespace meshtest
