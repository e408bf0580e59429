// The checks that read a phase's curves (loss, grad norm, validation loss per step), from
// wherever its `outputs.metrics` says: metrics.jsonl, a rank's log, TensorBoard. Each
// compares them with a bound, another phase or case, or a golden file, and leaves both
// curves and the tolerance band in the result so a report can draw what was judged.
// `drift` compares them with the band of the case's own recent green runs in the history.
#pragma once

#include "judge/check_context.h"

namespace meshtest {

void check_loss_finite(const CaseOutcome& o, const CheckSpec& spec, const CheckSources& from, CheckResult& result);
void check_loss_decreases(const CaseOutcome& o, const CheckSpec& spec, const CheckSources& from, CheckResult& result);
void check_loss_matches(const CaseOutcome& o, const CheckSpec& spec, const CheckSources& from, CheckResult& result);
void check_resume_matches(const CaseOutcome& o, const CheckSpec& spec, const CheckSources& from, CheckResult& result);
void check_drift(const CaseOutcome& o, const CheckSpec& spec, const CheckSources& from, CheckResult& result);

}  // namespace meshtest
