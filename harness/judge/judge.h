// A case's verdict: its check results (exit first) weighed against its expectation
// (pass, xfail, skip, or a canary's fail: <check>). The table of what each expectation
// makes of the checks is docs/checks.md#how-expectations-judge-the-checks.
#pragma once

#include "core/outcome.h"

namespace meshtest {

// Sets `outcome.verdict` and `outcome.details` from `outcome.checks` and `outcome.spec->expect`.
void judge(CaseOutcome& outcome);

}  // namespace meshtest
