// What running a case produced: per phase, how every rank ended; per check, its
// verdict; and the case's status against its expectation. Shared by the runner,
// the checks and the reports.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/matrix.h"
#include "core/verdict.h"
#include "readers/metric_series.h"

namespace meshtest {

// How a rank ended: an exit code, or the signal that killed it.
struct RankExit {
  int rank = -1;
  int exit_code = 0;
  int signal = 0;
  bool ok() const { return exit_code == 0 && signal == 0; }
  std::string describe() const;  // "exit code 3", "signal 11 (SIGSEGV)"
};

// How a phase's ranks ended as a group.
struct LaunchResult {
  std::vector<RankExit> exits;  // by rank
  RankExit first_failure;       // rank -1 when every rank exited 0
  bool timed_out = false;
  std::string stopped_because;  // "" unless stop() or a failure/timeout ended the group
  bool killed = false;          // the grace period ran out and SIGKILL was sent
  double duration_s = 0;
  // The wall clock (seconds since the epoch) just before the launcher started the ranks, and
  // when it saw the last one end; 0 where not recorded. launch_window() is made from them.
  double started_at = 0;
  double ended_at = 0;
  bool ok() const { return first_failure.rank < 0 && !timed_out && stopped_because.empty(); }
};

struct PhaseOutcome {
  std::string name;
  std::vector<std::string> argv;  // exactly what ran
  int nproc = 1;
  std::string dir;           // the phase's folder: rank<R>.log and the trainer's outputs
  bool ran = false;          // false: an earlier phase failed, or the run was interrupted
  int attempts = 0;          // > 1 when MASTER_PORT was lost to another process
  std::string launch_error;  // the program could not be started
  LaunchResult result;
  // (step, loss, grad_norm or NaN) as its outputs say, read once the case is judged; for the report.
  struct Point {
    long long step;
    double loss, grad_norm;
  };
  std::vector<Point> curve;
  bool ok() const { return ran && launch_error.empty() && result.ok(); }
  std::string log_path(int rank) const;
};

// Seconds a launch window reaches past its launch on either side: for the ranks' machines and
// meshtest's disagreeing a little about the time, and writers that round their time stamps.
constexpr double kLaunchWindowSlackS = 1.0;

// When phase `i` of `phases` (one case's, in order) ran, as the wall-clock window a reader keeps
// its outputs from when a source is shared with another launch (TensorBoard, readers/tensorboard.h):
// from its start to its end, widened by kLaunchWindowSlackS but never back past the end of the
// phase before it nor on past the start of the phase after it. None when its launch times were
// not recorded (a phase that did not run).
std::optional<TimeWindow> launch_window(const std::vector<PhaseOutcome>& phases, size_t i);

// A curve a number check compared, kept so a report can draw what was judged.
struct Series {
  std::string role;    // "subject" or "reference"
  std::string label;   // "phase train", "baseline s/ddp (phase train)", "golden losses.txt"
  std::string metric;  // "loss" or "grad_norm"
  std::vector<std::pair<long long, double>> points;
};

struct CheckResult {
  std::string kind;  // the check's name, as summary.json and the reports write it
  bool passed = false;
  std::string message;  // one line: what, where, expected vs got, tolerance
  std::string details;  // more lines for the report body
  bool judged = true;   // false: it could not look (missing output, a baseline that did not run)
  // When it failed: what that means as a verdict (kind, phase, rank, signal, numbers).
  Verdict finding;
  std::vector<Series> series;
  std::optional<std::pair<double, double>> band;  // (rtol, atol) around the reference
  // Number checks: the largest |diff| / tolerance compared (below 1 passes): a pass's headroom,
  // a failure's margin. Absent for checks with no tolerance (keys, hashes, tokens, messages).
  std::optional<double> margin;
  // The kind that judged, for judge() to weigh it by: none for a result no kind made (the run
  // history's drift, history/record.cpp).
  std::optional<CheckKind> made_by;
};

struct CaseOutcome {
  const Case* spec = nullptr;
  Verdict verdict;
  std::string details;  // the failure body
  std::string dir;
  std::vector<int> devices;
  double expected_s = 0;
  double start_s = 0;  // seconds since the run began
  double duration_s = 0;
  std::string timestamp;  // ISO 8601 start time
  std::vector<PhaseOutcome> phases;
  std::vector<CheckResult> checks;
  std::string repro;  // a command that reruns just this case
  bool finished = false;

  // Earlier attempts of a case run with --retries, oldest first; their folders are
  // kept as <dir>.attempt<N>.
  struct Attempt {
    Verdict verdict;
    std::string details;
    std::string failing_log;
    double duration_s = 0;
  };
  std::vector<Attempt> earlier_attempts;

  Status status() const { return verdict.status(); }
  const std::string& reason() const { return verdict.message; }  // one line
  bool met_expectation() const { return verdict.met_expectation(); }
  // The rank log a person should read first: the failing rank of the failing phase.
  std::string failing_log() const;
};

// Another case of the same run, by id (a check's baseline); nullptr when it is not part of the run.
using FindCase = std::function<const CaseOutcome*(const std::string& id)>;

// "12.3 s", "4m05s": durations in the terminal table, progress lines and reports.
std::string human_seconds(double seconds);

}  // namespace meshtest
