// The checks that read the small JSON files a trainer's ranks leave beside their logs
// (the contract files, docs/contracts.md): rank<R>.json (the pieces each rank holds,
// the checkpoint bytes it wrote), param_digest.json and the generated tokens.
#pragma once

#include "judge/check_context.h"

namespace meshtest {

void check_replicas_equal(const CaseOutcome& o, const CheckSpec& spec, const CheckSources& from, CheckResult& result);
void check_params_match(const CaseOutcome& o, const CheckSpec& spec, const CheckSources& from, CheckResult& result);
void check_saved_once(const CaseOutcome& o, const CheckSpec& spec, const CheckSources& from, CheckResult& result);
void check_tokens_match(const CaseOutcome& o, const CheckSpec& spec, const CheckSources& from, CheckResult& result);

}  // namespace meshtest
