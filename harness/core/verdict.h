// What a case's outcome means, as data. A verdict carries its kind, the check and
// phase that decided it, the rank and signal of a crash, and the numbers a check
// judged by. Every report (JUnit and Surefire types, HTML colours, Markdown) derives
// from the kind; the message is for people only, so rewording it changes no report.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace meshtest {

enum class VerdictKind {
  kPassed,              // every check passed
  kCanaryCaught,        // a known-bad case failed the check it names: the check works
  kXfailed,             // failed as declared
  kSkipped,             // not run: skip declared, too wide for the pool, or a skipped baseline
  kCheckFailed,         // a check judged and disagreed
  kNotJudged,           // a check could not look: an output missing, a baseline that did not run
  kCrashed,             // a rank died by a signal
  kExitCode,            // a rank exited non-zero
  kTimedOut,            // the phase ran past its timeout; `rank` is a rank still running
  kLaunchError,         // the trainer could not be started
  kXpassed,             // declared xfail, but every check passed
  kXfailedDifferently,  // declared xfail, but failed another way (or could not be judged)
  kCanaryNotCaught,     // the named check passed on a known-bad run
  kCanaryCrashed,       // a canary that crashed (or could not be judged) before its check could catch it
  kCancelled,           // meshtest was interrupted before the case was judged
};

// The five statuses the table, summary.json and --rerun-failed speak in.
enum class Status { kPassed, kFailed, kSkipped, kXfailed, kCancelled };
const char* status_name(Status s);

struct Verdict {
  VerdictKind kind = VerdictKind::kSkipped;
  std::string message;  // one line for people
  std::string check;    // the check that decided it; "exit" for crashes, timeouts and launch errors
  std::string phase;
  int rank = -1;  // the failing rank, or a hung one
  int signal = 0;
  int exit_code = 0;
  // What a number check compared at the first step that disagreed.
  std::optional<long long> step;
  std::optional<double> value, reference, tolerance;
  // The largest |diff| / tolerance over everything the check compared: how far past its
  // tolerance a failure went (a canary's safety margin). Infinite for NaN or a zero tolerance.
  std::optional<double> margin;

  Status status() const;
  bool met_expectation() const;
  static Verdict skipped(std::string why) { return {VerdictKind::kSkipped, std::move(why)}; }
  static Verdict cancelled(std::string why) { return {VerdictKind::kCancelled, std::move(why)}; }
};

const char* verdict_kind_name(VerdictKind kind);  // "check_failed", ...
// A margin in summary.json: a number, or "inf" (JSON has no infinity).
nlohmann::json margin_json(double margin);
VerdictKind verdict_kind_from_name(const std::string& name);  // throws std::invalid_argument

// How a verdict appears in JUnit and Surefire: which element, and its `type` attribute.
enum class JunitElement { kNone, kSkipped, kFailure, kError };
JunitElement junit_element(VerdictKind kind);
std::string junit_type(const Verdict& v);  // "loss_matches", "Crash", "CanaryNotCaught", ...

nlohmann::json verdict_to_json(const Verdict& v);
Verdict verdict_from_json(const nlohmann::json& j);  // throws std::invalid_argument on an unknown kind

}  // namespace meshtest
