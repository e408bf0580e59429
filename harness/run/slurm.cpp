#include "run/slurm.h"

#include <boost/process.hpp>
#include <boost/process/extend.hpp>
#include <nlohmann/json.hpp>

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "core/plan.h"
#include "run/ports.h"
#include "run/run_loop.h"

namespace bp = boost::process;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace meshtest {

SlurmShape slurm_shape(int nproc, int gpus_per_node) {
  SlurmShape s;
  s.tasks_per_node = std::max(1, std::min(nproc, gpus_per_node));
  s.nodes = (nproc + s.tasks_per_node - 1) / s.tasks_per_node;
  return s;
}

std::string rank_exit_file(const std::string& dir, int rank) {
  return (fs::path(dir) / ("exit_rank" + std::to_string(rank) + ".json")).string();
}

namespace {

using Clock = std::chrono::steady_clock;

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

long long wall_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) throw std::runtime_error(std::string(name) + " is not set: not inside a Slurm step?");
  return std::atoi(v);
}

// meshtest's environment without the SLURM_* of an allocation meshtest may itself run in
// (a step would inherit its sizes), SLURM_CONF kept.
bp::environment client_environment() {
  bp::environment env = boost::this_process::environment();
  std::vector<std::string> drop;
  for (const auto& entry : env)
    if (entry.get_name().rfind("SLURM_", 0) == 0 && entry.get_name() != "SLURM_CONF") drop.push_back(entry.get_name());
  for (const auto& name : drop) env.erase(name);
  return env;
}

// Runs a Slurm client command to its end: its exit code, and stdout+stderr in `output`.
int run_client(const std::vector<std::string>& argv, std::string* output) {
  const auto program = bp::search_path(argv.front());
  if (program.empty()) {
    if (output) *output = argv.front() + ": not found on PATH";
    return 127;
  }
  bp::ipstream out;
  std::error_code ec;
  bp::child c(program, bp::args = std::vector<std::string>(argv.begin() + 1, argv.end()), client_environment(),
              (bp::std_out & bp::std_err) > out, bp::std_in < bp::null, ec);
  if (ec) {
    if (output) *output = ec.message();
    return 127;
  }
  std::string text, line;
  while (std::getline(out, line)) text += line + "\n";
  c.wait(ec);
  if (output) *output = text;
  return c.exit_code();
}

void scancel(long job, const std::string& signal = "") {
  std::vector<std::string> argv{"scancel"};
  if (!signal.empty()) argv.push_back("--signal=" + signal);
  argv.push_back(std::to_string(job));
  run_client(argv, nullptr);
}

// The last line of a client's output that says "error" (Slurm's reason), else its last line.
std::string slurm_reason(const std::string& log_path) {
  std::istringstream lines(tail_of_file(log_path, 20));
  std::string found, last;
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    last = line;
    if (line.find("error") != std::string::npos) found = line;
  }
  return found.empty() ? last : found;
}

// "4(x2),1" -> 4 4 1: SLURM_STEP_TASKS_PER_NODE.
std::vector<int> expand_tasks_per_node(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    int count = 0, times = 1;
    if (std::sscanf(item.c_str(), "%d(x%d)", &count, &times) < 1) continue;
    for (int i = 0; i < times; ++i) out.push_back(count);
  }
  return out;
}

// The address of the first node of a step: its NodeAddr (node names need not resolve).
std::string first_node_address(const std::string& nodelist) {
  std::string hosts;
  if (run_client({"scontrol", "show", "hostnames", nodelist}, &hosts) != 0 || hosts.empty()) return nodelist;
  const std::string first = hosts.substr(0, hosts.find('\n'));
  std::string node;
  if (run_client({"scontrol", "-o", "show", "node", first}, &node) == 0) {
    static const std::regex node_addr("NodeAddr=(\\S+)");
    std::smatch m;
    if (std::regex_search(node, m, node_addr)) return m[1];
  }
  return first;
}

// A pending job's reasons that no amount of waiting clears: the request cannot be met as submitted.
bool hopeless_reason(const std::string& reason) {
  static const std::set<std::string> never = {"PartitionConfig",   "PartitionNodeLimit",      "PartitionTimeLimit",
                                              "BadConstraints",    "InvalidAccount",          "InvalidQOS",
                                              "AccountNotAllowed", "DependencyNeverSatisfied"};
  static const std::regex qos_per_job("QOSMax.*PerJob.*");
  return never.count(reason) > 0 || std::regex_match(reason, qos_per_job);
}

// salloc and srun run in their own process group, so a Ctrl-C at the terminal reaches
// meshtest only (which then stops them in order), and get SIGTERM if meshtest dies:
// salloc then withdraws its request and srun stops its step.
struct OwnGroupDieWithMeshtest {
  template <class Executor>
  void operator()(Executor&) const {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  }
};

// The job id salloc printed ("Pending job allocation N", "Granted job allocation N"); 0 before.
long job_in_log(const std::string& log) {
  static const std::regex allocation("job allocation (\\d+)");
  std::smatch m;
  const std::string text = tail_of_file(log, 20);
  return std::regex_search(text, m, allocation) ? std::stol(m[1]) : 0;
}

struct JobState {
  std::string state = "unknown", reason;
  bool running() const { return state == "RUNNING"; }
  bool hit_time_limit() const { return state == "TIMEOUT" || reason == "TimeLimit"; }
  std::string describe(long job) const {
    return "Slurm ended job " + std::to_string(job) + " (JobState=" + state +
           (reason.empty() ? "" : " Reason=" + reason) + ")";
  }
};

// A job's state and reason. COMPLETING lasts a second or two after an end; the state after it says why.
JobState job_state(long job) {
  static const std::regex state_re("JobState=(\\S+)"), reason_re("Reason=(\\S+)");
  JobState js;
  for (int tries = 0; tries < 20; ++tries) {
    std::string out;
    run_client({"scontrol", "-o", "show", "job", std::to_string(job)}, &out);
    std::smatch m;
    js.state = std::regex_search(out, m, state_re) ? m[1].str() : "unknown";
    js.reason = std::regex_search(out, m, reason_re) ? m[1].str() : "";
    if (js.state != "COMPLETING") break;
    ::usleep(100000);
  }
  return js;
}

// Waits up to `seconds` for a child, then kills it: a client must not stall the run loop.
void reap(bp::child& c, double seconds) {
  std::error_code ec;
  for (int i = 0; i < seconds * 100 && c.running(ec); ++i) ::usleep(10000);
  if (c.running(ec)) ::kill(c.id(), SIGKILL);
  c.wait(ec);
}

}  // namespace

RankPlace rank_place_from_slurm() {
  RankPlace p;
  p.rank = env_int("SLURM_PROCID");
  p.world = std::atoi(env_or("SLURM_STEP_NUM_TASKS", env_or("SLURM_NTASKS", "1")).c_str());
  p.local_rank = env_int("SLURM_LOCALID");
  p.group_rank = env_int("SLURM_NODEID");
  p.group_world = std::atoi(env_or("SLURM_STEP_NUM_NODES", env_or("SLURM_NNODES", "1")).c_str());
  const auto per_node = expand_tasks_per_node(env_or("SLURM_STEP_TASKS_PER_NODE", env_or("SLURM_TASKS_PER_NODE", "")));
  p.local_world = p.group_rank < static_cast<int>(per_node.size()) ? per_node[p.group_rank] : p.world;
  const std::string nodelist = env_or("SLURM_STEP_NODELIST", env_or("SLURM_JOB_NODELIST", ""));
  if (nodelist.empty()) throw std::runtime_error("SLURM_STEP_NODELIST is not set: not inside a Slurm step?");
  p.master_addr = first_node_address(nodelist);
  p.master_port = env_int("MESHTEST_MASTER_PORT");
  return p;
}

namespace {

// A rank's exit record: in exit_rank<R>.json and as one "meshtest-exit {...}" line on the
// task's stdout, which srun carries back to meshtest (srun.log) even when a shared file
// system is slow to show the file on the login node.
void record_exit(const std::string& log_dir, int rank, const RankExit& e, bool stopped, const std::string& error) {
  json record = {{"rank", rank},
                 {"node", env_or("SLURMD_NODENAME", "")},
                 {"exit_code", e.exit_code},
                 {"signal", e.signal},
                 {"stopped", stopped},
                 {"ended_ns", wall_ns()}};
  if (!error.empty()) record["error"] = error;
  std::printf("meshtest-exit %s\n", record.dump().c_str());
  std::fflush(stdout);
  const std::string path = rank_exit_file(log_dir, rank);
  std::ofstream(path + ".tmp") << record.dump() << "\n";
  std::error_code ec;
  fs::rename(path + ".tmp", path, ec);
}

}  // namespace

int run_slurm_task(const std::string& log_dir, const std::vector<std::string>& command) {
  // Held until run_placed_rank takes them: a stop while the place is worked out still counts.
  sigset_t stops;
  sigemptyset(&stops);
  sigaddset(&stops, SIGTERM);
  sigaddset(&stops, SIGINT);
  ::sigprocmask(SIG_BLOCK, &stops, nullptr);
  RankPlace place;
  try {
    place = rank_place_from_slurm();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "meshtest slurm-task: error: %s\n", e.what());
    return 1;
  }
  bool stopped = false;
  RankExit e;
  e.rank = place.rank;
  try {
    e = run_placed_rank(place, log_dir, command, &stopped);
  } catch (const std::exception& err) {
    const std::string error = "meshtest slurm-task: error: rank " + std::to_string(place.rank) + ": " + err.what();
    std::ofstream(rank_log_path(log_dir, place.rank), std::ios::app) << error << "\n";  // quoted by the verdict
    e.exit_code = 127;
    record_exit(log_dir, place.rank, e, stopped, error);
    return 127;
  }
  record_exit(log_dir, place.rank, e, stopped, "");
  return e.signal != 0 ? 128 + e.signal : e.exit_code;
}

// ---- the launcher -----------------------------------------------------------

namespace {

// One case's allocation: `salloc --no-shell` runs until Slurm grants it, then the job
// holds the nodes until case_ended cancels it.
struct Allocation {
  long job = 0;  // 0 until salloc names it
  bool granted = false;
  std::string refused;  // why Slurm will never run it
  std::unique_ptr<bp::child> salloc;
  std::string log;  // salloc's output
  Clock::time_point next_check{};
};

struct CaseNeeds {
  int nproc = 1;            // its widest phase
  double time_limit_s = 0;  // 0 = no limit known
};

}  // namespace

struct SlurmLauncher::State {
  SlurmOptions opt;
  std::map<std::string, CaseNeeds> needs;
  std::map<std::string, std::shared_ptr<Allocation>> allocations;  // by case id
  std::string meshtest_exe;

  int pending() const {
    int n = 0;
    for (const auto& [id, a] : allocations) n += a->granted || !a->refused.empty() ? 0 : 1;
    return n;
  }

  std::shared_ptr<Allocation> allocate(const std::string& case_id, const std::string& log_path) {
    auto a = std::make_shared<Allocation>();
    const CaseNeeds need = needs.count(case_id) ? needs.at(case_id) : CaseNeeds{};
    const SlurmShape shape = slurm_shape(need.nproc, opt.gpus_per_node);
    std::vector<std::string> args{"--no-shell", "--job-name=meshtest/" + case_id,
                                  "--nodes=" + std::to_string(shape.nodes), "--ntasks=" + std::to_string(need.nproc),
                                  "--ntasks-per-node=" + std::to_string(shape.tasks_per_node)};
    if (opt.gpus) args.push_back("--gpus-per-node=" + std::to_string(shape.tasks_per_node));
    if (!opt.partition.empty()) args.push_back("--partition=" + opt.partition);
    if (!opt.account.empty()) args.push_back("--account=" + opt.account);
    const double limit_s = opt.time_limit_min > 0 ? opt.time_limit_min * 60.0 : need.time_limit_s;
    if (limit_s > 0) args.push_back("--time=" + std::to_string(static_cast<int>(std::ceil(limit_s / 60))));
    a->log = log_path;
    fs::create_directories(fs::path(log_path).parent_path());
    const auto program = bp::search_path("salloc");
    if (program.empty()) {
      a->refused = "salloc not found on PATH (is this a Slurm login node?)";
      return a;
    }
    std::error_code ec;
    a->salloc = std::make_unique<bp::child>(program, bp::args = args, client_environment(),
                                            (bp::std_out & bp::std_err) > log_path, bp::std_in < bp::null,
                                            bp::extend::on_exec_setup = OwnGroupDieWithMeshtest{}, ec);
    if (ec) a->refused = "cannot start salloc: " + ec.message();
    allocations[case_id] = a;
    return a;
  }

  // Moves an allocation on: learns its job id, sees it granted or refused, and asks
  // Slurm now and then why it still waits.
  void advance(Allocation& a) {
    if (a.granted || !a.refused.empty() || !a.salloc) return;
    if (a.job == 0) a.job = job_in_log(a.log);
    std::error_code ec;
    if (!a.salloc->running(ec)) {
      const int rc = a.salloc->exit_code();
      a.salloc.reset();
      if (a.job == 0) a.job = job_in_log(a.log);
      if (rc == 0 && a.job != 0)
        a.granted = true;
      else if (rc == 0)
        a.refused = "salloc reported no job id: " + slurm_reason(a.log);
      else
        a.refused = "Slurm refused the allocation: " + slurm_reason(a.log);
      return;
    }
    if (a.job != 0 && Clock::now() >= a.next_check) {
      a.next_check = Clock::now() + std::chrono::seconds(5);
      std::string out;
      if (run_client({"squeue", "--noheader", "--jobs=" + std::to_string(a.job), "--format=%T %r"}, &out) != 0) return;
      std::istringstream in(out);
      std::string state, reason;
      in >> state >> reason;
      if (state == "PENDING" && hopeless_reason(reason)) {
        a.refused =
            "Slurm cannot start job " + std::to_string(a.job) + ": it waits for " + reason + ", which does not clear";
        release(a);
      }
    }
  }

  void release(Allocation& a) {
    if (a.salloc) {
      std::error_code ec;
      if (a.salloc->running(ec)) ::kill(a.salloc->id(), SIGTERM);  // salloc withdraws a pending request
      reap(*a.salloc, 5);
      a.salloc.reset();
    }
    if (a.job == 0) a.job = job_in_log(a.log);  // granted (or pending) since the last look
    if (a.job != 0) scancel(a.job);
  }

  void case_ended(const std::string& case_id) {
    auto it = allocations.find(case_id);
    if (it == allocations.end()) return;
    release(*it->second);
    allocations.erase(it);
  }
};

namespace {

// One phase: the case's allocation (waited for by the first phase), then one srun step.
class SlurmPhase : public PhaseProcess {
 public:
  SlurmPhase(std::shared_ptr<SlurmLauncher::State> state, std::shared_ptr<Allocation> allocation, LaunchSpec spec)
      : state_(std::move(state)), alloc_(std::move(allocation)), spec_(std::move(spec)) {
    result_.exits.resize(static_cast<size_t>(spec_.nproc));
    for (int r = 0; r < spec_.nproc; ++r) result_.exits[r].rank = r;
  }

  bool poll() override {
    if (done_) return true;
    if (!srun_) {
      state_->advance(*alloc_);
      if (!alloc_->refused.empty()) return finish_unstarted(alloc_->refused);
      if (stopping_ && !alloc_->salloc) return finish_unstarted("");
      if (!alloc_->granted) return false;
      if (stopping_) return finish_unstarted("");
      start_step();
      if (done_) return true;
    }
    std::error_code ec;
    if (srun_->running(ec)) {
      if (!stopping_)
        if (const auto why =
                past_timeout(spec_.timeout_s, std::chrono::duration<double>(Clock::now() - started_).count(), result_))
          stop(*why);
      if (stopping_ && !result_.killed && Clock::now() >= kill_at_) {
        scancel(alloc_->job, "KILL");
        result_.killed = true;
      }
      if (result_.killed && Clock::now() >= kill_at_ + std::chrono::seconds(10)) ::kill(srun_->id(), SIGKILL);
      return false;
    }
    collect(srun_->exit_code());
    return true;
  }

  void stop(const std::string& reason) override {
    if (stopping_ || done_) return;
    stopping_ = true;
    result_.stopped_because = reason;
    kill_at_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(spec_.grace_s));
    if (srun_)
      scancel(alloc_->job, "TERM");  // every rank of the step; the allocation stays until case_ended
    else if (!alloc_->granted)
      state_->release(*alloc_);
  }

  const RankGroup::Result& result() const override { return result_; }
  bool lost_port_race() const override {
    return srun_ran_ && !ended_by_slurm_ && !result_.ok() && meshtest::lost_port_race(spec_.log_dir, spec_.nproc);
  }
  std::vector<pid_t> pids() const override {
    std::vector<pid_t> out;
    if (srun_) out.push_back(srun_->id());
    if (alloc_->salloc) out.push_back(alloc_->salloc->id());
    return out;
  }
  std::string launch_error() const override { return launch_error_; }

 private:
  bool finish_unstarted(const std::string& error) {
    launch_error_ = error;
    done_ = true;
    return true;
  }

  void start_step() {
    fs::create_directories(spec_.log_dir);
    for (int r = 0; r < spec_.nproc; ++r) {
      fs::remove(rank_exit_file(spec_.log_dir, r));
      fs::remove(rank_log_path(spec_.log_dir, r));
    }
    int port = 0;
    try {
      port = spec_.master_port ? spec_.master_port : reserve_store_port();
    } catch (const std::exception& e) {
      finish_unstarted(e.what());
      return;
    }
    const SlurmShape shape = slurm_shape(spec_.nproc, state_->opt.gpus_per_node);
    std::vector<std::string> args{"--jobid=" + std::to_string(alloc_->job),
                                  "--nodes=" + std::to_string(shape.nodes),
                                  "--ntasks=" + std::to_string(spec_.nproc),
                                  "--ntasks-per-node=" + std::to_string(shape.tasks_per_node),
                                  "--kill-on-bad-exit=1",
                                  "--chdir=" + (spec_.work_dir.empty() ? fs::current_path().string() : spec_.work_dir)};
    if (state_->opt.gpus) args.push_back("--gpus-per-node=" + std::to_string(shape.tasks_per_node));
    args.insert(args.end(), state_->opt.srun_args.begin(), state_->opt.srun_args.end());
    args.insert(args.end(),
                {"--", state_->meshtest_exe, "slurm-task", "--dir", fs::absolute(spec_.log_dir).string(), "--"});
    args.insert(args.end(), spec_.argv.begin(), spec_.argv.end());
    bp::environment env = client_environment();
    for (const auto& [k, v] : spec_.env) env.set(k, v);
    env.set("MESHTEST_MASTER_PORT", std::to_string(port));
    const auto program = bp::search_path("srun");
    if (program.empty()) {
      finish_unstarted("srun not found on PATH");
      return;
    }
    std::error_code ec;
    started_ = Clock::now();
    result_.started_at = wall_clock_s();
    const std::string srun_log = (fs::path(spec_.log_dir) / "srun.log").string();
    std::ofstream(srun_log, std::ios::trunc).close();  // Boost opens without O_TRUNC; a port-race retry reuses it
    srun_ =
        std::make_unique<bp::child>(program, bp::args = args, env, (bp::std_out & bp::std_err) > srun_log,
                                    bp::std_in < bp::null, bp::extend::on_exec_setup = OwnGroupDieWithMeshtest{}, ec);
    if (ec) {
      srun_.reset();
      finish_unstarted("cannot start srun: " + ec.message());
      return;
    }
    srun_ran_ = true;
  }

  // After srun: each rank's own record, the first rank to fail on its own, and otherwise
  // what ended the step (Slurm, or a rank that left no record).
  void collect(int srun_exit) {
    done_ = true;
    result_.duration_s = std::chrono::duration<double>(Clock::now() - started_).count();
    result_.ended_at = wall_clock_s();
    const std::map<int, json> records = exit_records();
    if (records.empty() && !any_rank_log()) {
      if (stopping_) return;
      const JobState js = job_state(alloc_->job);
      if (!js.running()) {
        result_.stopped_because = js.describe(alloc_->job);
        result_.timed_out = js.hit_time_limit();
        ended_by_slurm_ = true;
        return;
      }
      launch_error_ = "srun started no rank (exit " + std::to_string(srun_exit) +
                      "): " + slurm_reason((fs::path(spec_.log_dir) / "srun.log").string());
      return;
    }
    std::vector<int> unrecorded;
    for (int r = 0; r < spec_.nproc; ++r) {
      RankExit& e = result_.exits[r];
      auto it = records.find(r);
      if (it == records.end()) {
        e.signal = SIGKILL;  // ended before it could say how
        unrecorded.push_back(r);
        continue;
      }
      e.exit_code = it->second.value("exit_code", 0);
      e.signal = it->second.value("signal", 0);
    }
    pick_first_failure(records);
    const bool any_failed = !unrecorded.empty() || std::any_of(result_.exits.begin(), result_.exits.end(),
                                                               [](const RankExit& e) { return !e.ok(); });
    if (any_failed && !stopping_) explain_without_failure(unrecorded);
  }

  // Per rank: srun's copy of its record, else the file.
  std::map<int, json> exit_records() const {
    std::map<int, json> records;
    std::ifstream srun_log(fs::path(spec_.log_dir) / "srun.log");
    for (std::string line; std::getline(srun_log, line);) {
      if (line.rfind("meshtest-exit ", 0) != 0) continue;
      const json j = json::parse(line.substr(14), nullptr, false);
      if (j.is_object() && j.value("rank", -1) >= 0) records[j.value("rank", -1)] = j;
    }
    for (int r = 0; r < spec_.nproc; ++r) {
      if (records.count(r)) continue;
      std::ifstream in(rank_exit_file(spec_.log_dir, r));
      const json j = in ? json::parse(in, nullptr, false) : json();
      if (j.is_object()) records[r] = j;
    }
    return records;
  }

  bool any_rank_log() const {
    for (int r = 0; r < spec_.nproc; ++r)
      if (fs::exists(rank_log_path(spec_.log_dir, r))) return true;
    return false;
  }

  // The earliest failure that was not a stop: srun's --kill-on-bad-exit, Slurm and meshtest
  // all stop the other ranks with SIGTERM, which a trainer may get before its task does.
  void pick_first_failure(const std::map<int, json>& records) {
    long long first_end = 0;
    for (const auto& [r, record] : records) {
      const RankExit& e = result_.exits[r];
      const bool stop_signal = e.signal == SIGTERM || e.signal == SIGKILL || e.signal == SIGINT;
      const bool on_its_own = !record.value("stopped", false) && !(stopping_ && stop_signal);
      const long long ended = record.value("ended_ns", 0LL);
      if (!e.ok() && on_its_own && (first_end == 0 || ended < first_end)) {
        first_end = ended;
        result_.first_failure = e;
      }
    }
  }

  // Ranks failed but none first on its own, or some left no record. The allocation outlives
  // its steps, so a job that no longer runs was ended by Slurm (time limit, scancel from
  // outside, a lost node); its SIGTERM may have reached trainers before their tasks.
  void explain_without_failure(const std::vector<int>& unrecorded) {
    const JobState js = job_state(alloc_->job);
    if (js.running()) {
      if (result_.first_failure.rank >= 0) return;  // a rank failed: srun stopped the others
      if (!unrecorded.empty()) {
        std::string ranks;
        for (int r : unrecorded) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
        result_.stopped_because = "rank(s) " + ranks + " ended without an exit record (killed outside meshtest?)";
        return;
      }
    }
    ended_by_slurm_ = !js.running();
    result_.first_failure = RankExit{};
    result_.stopped_because = js.describe(alloc_->job);
    result_.timed_out = js.hit_time_limit();
  }

  std::shared_ptr<SlurmLauncher::State> state_;
  std::shared_ptr<Allocation> alloc_;
  LaunchSpec spec_;
  std::unique_ptr<bp::child> srun_;
  bool srun_ran_ = false;
  RankGroup::Result result_;
  std::string launch_error_;
  Clock::time_point started_ = Clock::now();
  Clock::time_point kill_at_{};
  bool stopping_ = false;
  bool ended_by_slurm_ = false;  // the job itself ended: nothing more runs in this allocation
  bool done_ = false;
};

}  // namespace

SlurmLauncher::SlurmLauncher(const Plan& plan, SlurmOptions options) : state_(std::make_shared<State>()) {
  state_->opt = std::move(options);
  state_->meshtest_exe = fs::read_symlink("/proc/self/exe").string();
  for (const auto& o : plan.cases) {
    CaseNeeds& need = state_->needs[o.spec->id];
    bool every_phase_limited = true;
    for (const auto& p : o.spec->phases) {
      need.nproc = std::max(need.nproc, p.nproc);
      every_phase_limited &= p.timeout_s > 0;
      need.time_limit_s += p.timeout_s + 60;  // start-up and teardown of a step
    }
    if (!every_phase_limited) need.time_limit_s = 0;
  }
}

SlurmLauncher::~SlurmLauncher() {
  for (auto& [id, a] : state_->allocations) state_->release(*a);
  state_->allocations.clear();
}

Launcher SlurmLauncher::launcher() {
  std::shared_ptr<State> state = state_;
  Launcher l;
  l.start = [state](const LaunchSpec& spec) -> std::unique_ptr<PhaseProcess> {
    auto it = state->allocations.find(spec.case_id);
    std::shared_ptr<Allocation> a =
        it != state->allocations.end()
            ? it->second
            : state->allocate(spec.case_id, (fs::path(spec.log_dir).parent_path() / "salloc.log").string());
    return std::make_unique<SlurmPhase>(state, a, spec);
  };
  l.sweep_orphans = [](const std::set<pid_t>& keep) { sweep_orphans(keep); };
  l.has_room = [state] { return state->pending() < state->opt.max_pending; };
  l.case_ended = [state](const std::string& case_id) { state->case_ended(case_id); };
  return l;
}

}  // namespace meshtest
