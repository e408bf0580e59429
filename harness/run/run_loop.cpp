#include "run/run_loop.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <sstream>

#include "contract/rank_environment.h"
#include "core/adapters.h"
#include "judge/checks.h"
#include "judge/judge.h"

namespace fs = std::filesystem;

namespace meshtest {

namespace {

std::string iso_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", std::localtime(&t));
  return buf;
}

// A simulated world's additions to its ranks' environment (the adapter's SimulatedWorld): its
// variables, and its Python folder first on PYTHONPATH, before the case's own or meshtest's.
void add_simulation_env(const Case& c, std::vector<std::pair<std::string, std::string>>& env) {
  const TrainerAdapter* adapter = c.trainer_adapter;
  const auto simulation = adapter ? adapter->simulation() : std::nullopt;
  if (!simulation) return;
  for (const auto& kv : simulation->env) env.push_back(kv);
  if (simulation->python_path.empty()) return;
  std::string path = simulation->python_path;
  auto own = std::find_if(env.begin(), env.end(), [](const auto& kv) { return kv.first == "PYTHONPATH"; });
  const char* inherited = std::getenv("PYTHONPATH");
  const std::string rest = own != env.end() ? own->second : (inherited ? inherited : "");
  if (!rest.empty()) path += ":" + rest;
  if (own != env.end())
    own->second = path;
  else
    env.emplace_back("PYTHONPATH", path);
}

// Pool slot i is the i-th GPU meshtest itself may use: CUDA_VISIBLE_DEVICES when set.
std::vector<std::string> physical_gpus(const std::vector<int>& slots) {
  std::vector<std::string> ids;
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"); visible && *visible) {
    std::stringstream in(visible);
    for (std::string item; std::getline(in, item, ',');) ids.push_back(item);
  }
  std::vector<std::string> out;
  for (int s : slots) out.push_back(s < static_cast<int>(ids.size()) ? ids[s] : std::to_string(s));
  return out;
}

}  // namespace

const char* case_state_name(CaseState s) {
  switch (s) {
    case CaseState::kPending: return "pending";
    case CaseState::kRunning: return "running";
    case CaseState::kAwaiting: return "awaiting";
    case CaseState::kFinal: return "final";
  }
  return "?";
}

RunLoop::RunLoop(Plan plan, const RunOptions& options, Launcher launcher, HistorySource history)
    : plan_(std::move(plan)),
      opt_(options),
      launcher_(std::move(launcher)),
      sources_{[this](const std::string& id) { return find(id); }, std::move(history)},
      outcomes_(plan_.cases),
      states_(plan_.cases.size(), CaseState::kPending),
      scheduler_(plan_.tasks, options.devices, options.jobs),
      pool_(options.devices),
      programs_(trainer_adapters().placeholders()) {
  for (size_t i = 0; i < outcomes_.size(); ++i) index_of_[outcomes_[i].spec->id] = i;
}

bool RunLoop::turn(double now_s, int stop_signal) {
  if (stop_signal != 0 && stopped_by_ == 0) stop(stop_signal);
  if (stopped_by_ == 0) {
    std::vector<Scheduler::Running> running;
    for (const auto& [i, flight] : in_flight_)
      running.push_back({static_cast<int>(i), outcomes_[i].start_s + outcomes_[i].expected_s});
    std::vector<int> held;  // picked while the launcher has no room: back to the queue's head, in order
    for (int t : scheduler_.pick(now_s, pool_.free(), running)) {
      if (launcher_.has_room && !launcher_.has_room())
        held.push_back(t);
      else
        start(static_cast<size_t>(t), now_s);
    }
    for (auto it = held.rbegin(); it != held.rend(); ++it) scheduler_.requeue(*it);
  }
  std::vector<size_t> ended;
  for (auto& [i, flight] : in_flight_)
    if (flight.process->poll()) ended.push_back(i);
  for (size_t i : ended) phase_ended(i, now_s);
  return finals_ < outcomes_.size();
}

void RunLoop::stop(int signal) {
  stopped_by_ = signal;
  for (size_t i = 0; i < outcomes_.size(); ++i) {
    switch (states_[i]) {
      case CaseState::kPending: finalize(i, Verdict::cancelled("not run: " + stop_reason(signal))); break;
      case CaseState::kRunning:
        in_flight_.at(i).process->stop(stop_reason(signal));  // judged once its ranks are reaped
        break;
      case CaseState::kAwaiting: cancel_unjudged(i); break;
      case CaseState::kFinal: break;
    }
  }
}

void RunLoop::start(size_t i, double now_s) {
  CaseOutcome& o = outcomes_[i];
  if (!plan_.runs(i)) {
    finalize(i, Verdict::skipped(plan_.skip[i]));
    return;
  }
  o.devices = pool_.acquire(o.spec->devices(on_gpus(opt_)));
  o.start_s = now_s;
  o.timestamp = iso_now();
  std::error_code ec;
  fs::remove_all(o.dir, ec);  // a stale checkpoint would be resumed
  fs::create_directories(o.dir);
  states_[i] = CaseState::kRunning;
  in_flight_[i] = InFlight{};
  if (!start_phase(i)) phase_ended(i, now_s);
}

bool RunLoop::start_phase(size_t i) {
  CaseOutcome& o = outcomes_[i];
  InFlight& flight = in_flight_.at(i);
  PhaseOutcome& po = o.phases[flight.phase];
  const Phase& spec = o.spec->phases[flight.phase];
  po.ran = true;
  ++po.attempts;
  LaunchSpec ls;
  ls.argv = po.argv;
  ls.nproc = spec.nproc;
  for (const auto& [key, value] : spec.env)  // run-time placeholders, as in the command
    ls.env.emplace_back(key,
                        resolve_argv({value}, {backend_of(*o.spec, opt_.backend), o.dir, po.dir, programs_}).front());
  if (o.spec->simulated) add_simulation_env(*o.spec, ls.env);
  ls.env.emplace_back(contract::rank_environment::kCaseId, o.spec->id);
  ls.env.emplace_back(contract::rank_environment::kPhase, spec.name);
  ls.env.emplace_back(contract::rank_environment::kCaseDir, fs::absolute(o.dir).string());
  ls.log_dir = po.dir;
  if (opt_.backend == "nccl") ls.gpus = physical_gpus(o.devices);
  ls.timeout_s = spec.timeout_s;
  ls.grace_s = opt_.grace_s;
  ls.case_id = o.spec->id;
  if (o.spec->trainer_adapter) ls.fork_server = o.spec->trainer_adapter->fork_server(ls.argv);
  try {
    flight.process = launcher_.start(ls);
    return true;
  } catch (const LaunchError& e) {
    po.launch_error = e.what();
    flight.process.reset();
    return false;
  }
}

void RunLoop::phase_ended(size_t i, double now_s) {
  CaseOutcome& o = outcomes_[i];
  InFlight& flight = in_flight_.at(i);
  PhaseOutcome& po = o.phases[flight.phase];
  bool retry_port = false;
  if (flight.process) {
    po.result = flight.process->result();
    po.launch_error = flight.process->launch_error();
    retry_port = flight.process->lost_port_race() && po.attempts < 3 && stopped_by_ == 0;
    flight.process.reset();
    std::set<pid_t> keep;
    for (const auto& [j, other] : in_flight_)
      if (other.process)
        for (pid_t p : other.process->pids()) keep.insert(p);
    launcher_.sweep_orphans(keep);
  }
  if (stopped_by_ == 0 && (retry_port || (po.ok() && flight.phase + 1 < o.phases.size()))) {
    if (!retry_port) ++flight.phase;
    if (start_phase(i)) return;
    phase_ended(i, now_s);  // could not start: the case ends here
    return;
  }
  in_flight_.erase(i);
  if (launcher_.case_ended) launcher_.case_ended(o.spec->id);
  o.duration_s = now_s - o.start_s;
  pool_.release(o.devices);
  judge_case(i);
}

void RunLoop::judge_case(size_t i) {
  CaseOutcome& o = outcomes_[i];
  for (const auto& b : o.spec->baselines()) {
    auto it = index_of_.find(b);
    if (it != index_of_.end() && states_[it->second] != CaseState::kFinal) {
      if (stopped_by_ != 0)
        cancel_unjudged(i);
      else
        states_[i] = CaseState::kAwaiting;  // judged when that baseline is final
      return;
    }
  }
  o.checks = run_checks(o, sources_);
  judge(o);
  record_curves(o);
  if (stopped_by_ != 0) {
    // Failed because meshtest stopped it: the case did not get to show what it does.
    for (const auto& p : o.phases)
      if (o.status() == Status::kFailed && p.ran && p.result.stopped_because == stop_reason(stopped_by_))
        o.verdict = Verdict::cancelled(p.result.stopped_because);
  }
  const bool ran = !o.phases.empty() && o.phases.front().ran;
  if (!o.met_expectation() && ran && stopped_by_ == 0 && static_cast<int>(o.earlier_attempts.size()) < opt_.retries) {
    retry(i);
    return;
  }
  finalize(i);
}

void RunLoop::cancel_unjudged(size_t i) {
  CaseOutcome& o = outcomes_[i];
  // What can be judged still shows in the report; the verdict says why it is not final.
  o.checks = run_checks(o, sources_);
  judge(o);
  record_curves(o);
  finalize(i, Verdict::cancelled("not judged: its baseline did not run before " + stop_reason(stopped_by_)));
}

void RunLoop::retry(size_t i) {
  CaseOutcome& o = outcomes_[i];
  // Keep this attempt's folder and evidence, then queue the case again.
  const std::string kept = o.dir + ".attempt" + std::to_string(o.earlier_attempts.size() + 1);
  std::string log = o.failing_log();
  if (log.rfind(o.dir, 0) == 0) log = kept + log.substr(o.dir.size());
  std::error_code ec;
  fs::remove_all(kept, ec);
  fs::rename(o.dir, kept, ec);
  o.earlier_attempts.push_back({o.verdict, o.details, log, o.duration_s});
  std::fprintf(stderr, "%s[retry %zu/%d] %s: %s\n", opt_.progress ? "\r\033[K" : "", o.earlier_attempts.size(),
               opt_.retries, o.spec->id.c_str(), o.reason().c_str());
  for (auto& p : o.phases) {
    p.ran = false;
    p.attempts = 0;
    p.launch_error.clear();
    p.result = RankGroup::Result{};
    p.curve.clear();
  }
  o.checks.clear();
  o.verdict = {};
  o.details.clear();
  states_[i] = CaseState::kPending;
  scheduler_.requeue(static_cast<int>(i));
}

void RunLoop::finalize(size_t i, Verdict verdict) {
  outcomes_[i].verdict = std::move(verdict);
  finalize(i);
}

void RunLoop::finalize(size_t i) {
  CaseOutcome& o = outcomes_[i];
  states_[i] = CaseState::kFinal;
  o.finished = true;
  ++finals_;
  if (opt_.progress) std::fprintf(stderr, "\r\033[K");
  std::fprintf(stderr, "[%zu/%zu] %-9s %s (%d %s%s, %s)%s%s\n", finals_, outcomes_.size(), status_name(o.status()),
               o.spec->id.c_str(), o.spec->devices(on_gpus(opt_)), plan_.unit.c_str(),
               o.spec->simulated ? (", " + std::to_string(o.spec->ngpu) + " ranks simulated").c_str() : "",
               human_seconds(o.duration_s).c_str(), o.reason().empty() ? "" : ": ", o.reason().c_str());
  // Cases judged against this one may be ready now.
  if (stopped_by_ != 0) return;  // stop() cancels them
  for (size_t w = 0; w < outcomes_.size(); ++w)
    if (states_[w] == CaseState::kAwaiting) judge_case(w);
}

const CaseOutcome* RunLoop::find(const std::string& id) const {
  auto it = index_of_.find(id);
  return it == index_of_.end() ? nullptr : &outcomes_[it->second];
}

std::string RunLoop::progress_line(double now_s) const {
  double eta = 0;
  for (const auto& [i, flight] : in_flight_)
    eta = std::max(eta, outcomes_[i].start_s + outcomes_[i].expected_s - now_s);
  return std::to_string(finals_) + "/" + std::to_string(outcomes_.size()) + " done, " +
         std::to_string(in_flight_.size()) + " running, elapsed " + human_seconds(now_s) +
         ", ETA >= " + human_seconds(std::max(0.0, eta));
}

RunResult RunLoop::result(double wall_s) && {
  RunResult r;
  r.cases = std::move(outcomes_);
  r.wall_s = wall_s;
  r.interrupted_by = stopped_by_;
  return r;
}

}  // namespace meshtest
