// Runs a plan (plan.h): packs its cases onto the device pool (schedule.h), launches
// each phase's ranks (launch.h), checks and judges each finished case (judge/checks.h, judge/judge.h);
// the states a case goes through are in run_loop.h. SIGINT/SIGTERM stop every
// running case the same way a failure does, and every case still gets a verdict.
#pragma once

#include <csignal>

#include <string>
#include <vector>

#include "core/run_options.h"

namespace meshtest {

// Set by the signal handler; the runner polls it.
extern volatile std::sig_atomic_t g_stop_signal;
void install_stop_handlers();

struct Plan;
struct HistorySource;
// `history`: the run history as a drift check reads it (judge/check_sources.h).
RunResult run_cases(const Plan& plan, const RunOptions& options, const HistorySource& history);

struct LaunchSpec;
// `meshtest launch`: runs one command on its ranks in the foreground, stopping them on SIGINT
// or SIGTERM. Returns 0 when every rank succeeded, else what torchrun would exit with: 128 +
// the signal that stopped meshtest or killed the first rank, 124 on the timeout, or the first
// failing rank's code; each rank's exit is said on stderr.
int launch_command(const LaunchSpec& spec);

}  // namespace meshtest
