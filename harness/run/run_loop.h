// The run loop as a state machine. Each case moves through
//
//   pending --start--> running --a phase ends, more to run--> running
//      ^                  | the last phase ends, or one fails
//      |                  v
//      +----retry----- (judged) --its baselines still running--> awaiting --they end--> (judged)
//                         |
//                         +--met its expectation, or no retries left--> final
//
// and a stop signal (Ctrl-C, SIGTERM) ends every state: pending cases become
// cancelled ("not run"); running ones are stopped and, once their ranks are reaped,
// judged and marked cancelled if the stop is what failed them; awaiting ones are
// cancelled ("not judged"); final ones keep their verdict. Processes are reached
// through a Launcher, so the transitions are unit-tested without spawning ranks.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "judge/check_sources.h"
#include "run/launch.h"
#include "core/plan.h"
#include "core/run_options.h"
#include "core/schedule.h"

namespace meshtest {

enum class CaseState { kPending, kRunning, kAwaiting, kFinal };
const char* case_state_name(CaseState s);

// A phase's ranks in flight; a RankGroup in a real run.
class PhaseProcess {
 public:
  virtual ~PhaseProcess() = default;
  virtual bool poll() = 0;  // true once every rank is reaped
  virtual void stop(const std::string& reason) = 0;
  virtual const RankGroup::Result& result() const = 0;
  virtual bool lost_port_race() const = 0;
  virtual std::vector<pid_t> pids() const = 0;
  // Why the phase never started, found after start() returned (a batch system's refusal).
  virtual std::string launch_error() const { return ""; }
};

struct Launcher {
  std::function<std::unique_ptr<PhaseProcess>(const LaunchSpec&)> start;  // throws LaunchError
  std::function<void(const std::set<pid_t>& keep)> sweep_orphans;         // after a phase ends
  // Optional, for a batch system: false holds new cases back (its queue is full), and
  // case_ended gives back what the case held between its phases.
  std::function<bool()> has_room;
  std::function<void(const std::string& case_id)> case_ended;
};

class RunLoop {
 public:
  // `history`: what a drift check reads (none: the run has no history).
  RunLoop(Plan plan, const RunOptions& options, Launcher launcher, HistorySource history = {});
  RunLoop(const RunLoop&) = delete;
  RunLoop& operator=(const RunLoop&) = delete;

  // One turn at `now_s` seconds into the run: takes a stop signal (0: none), starts what
  // the scheduler picks, and advances every phase in flight. False once every case is final.
  bool turn(double now_s, int stop_signal);

  CaseState state(size_t i) const { return states_[i]; }
  const CaseOutcome& outcome(size_t i) const { return outcomes_[i]; }
  size_t size() const { return outcomes_.size(); }
  std::string progress_line(double now_s) const;
  // The outcomes, once turn() has returned false.
  RunResult result(double wall_s) &&;

 private:
  struct InFlight {
    size_t phase = 0;
    std::unique_ptr<PhaseProcess> process;
  };

  void stop(int signal);
  void start(size_t i, double now_s);        // pending -> running, or -> final (skipped, launch error)
  bool start_phase(size_t i);                // false: the program could not be started
  void phase_ended(size_t i, double now_s);  // running -> running, or -> judged
  void judge_case(size_t i);                 // -> awaiting, pending (a retry) or final
  void retry(size_t i);                      // judged -> pending
  void cancel_unjudged(size_t i);            // awaiting -> final, on a stop
  void finalize(size_t i, Verdict verdict);  // -> final
  void finalize(size_t i);                   // -> final with the verdict it has
  const CaseOutcome* find(const std::string& id) const;

  Plan plan_;
  RunOptions opt_;
  Launcher launcher_;
  CheckSources sources_;                // what the checks read beyond a case: the other cases, the history
  std::vector<CaseOutcome>& outcomes_;  // plan_.cases
  std::vector<CaseState> states_;
  std::map<size_t, InFlight> in_flight_;  // running cases by index
  std::map<std::string, size_t> index_of_;
  Scheduler scheduler_;
  DevicePool pool_;
  // The adapters' program placeholders for the phases' env, asked once (an adapter may search PATH).
  const std::vector<std::pair<std::string, std::string>> programs_;
  int stopped_by_ = 0;
  size_t finals_ = 0;
};

}  // namespace meshtest
