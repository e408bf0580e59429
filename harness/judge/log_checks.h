// The checks that read how a phase's ranks ended and what they wrote to their logs:
// `exit` (a crash, an exit code, a hang and the ranks it waited on), and the message
// checks `log_contains` and `error_matches`, which say *why* an expected failure happened.
#pragma once

#include "judge/check_context.h"

namespace meshtest {

// `exit`, judged for every case: the first phase that failed, as a verdict (crashed,
// exit code, timed out, launch error) naming the rank to read first.
CheckResult check_exit(const CaseOutcome& o);

void check_log_contains(const CaseOutcome& o, const CheckSpec& spec, const CheckSources& from, CheckResult& result);
void check_error_matches(const CaseOutcome& o, const CheckSpec& spec, const CheckSources& from, CheckResult& result);

}  // namespace meshtest
