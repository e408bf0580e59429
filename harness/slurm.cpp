#include "slurm.h"

#include <boost/process.hpp>
#include <nlohmann/json.hpp>

#include <signal.h>
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

#include "plan.h"
#include "ports.h"
#include "run_loop.h"

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
    std::smatch m;
    if (std::regex_search(node, m, std::regex("NodeAddr=(\\S+)"))) return m[1];
  }
  return first;
}

// A pending job's reasons that no amount of waiting clears: the request cannot be met as submitted.
bool hopeless_reason(const std::string& reason) {
  static const std::set<std::string> never = {
      "PartitionConfig", "PartitionNodeLimit", "PartitionTimeLimit", "BadConstraints", "InvalidAccount",
      "InvalidQOS",      "QOSMaxCpuPerJobLimit", "QOSMaxGRESPerJob", "QOSMaxNodePerJobLimit", "AccountNotAllowed",
      "DependencyNeverSatisfied"};
  return never.count(reason) > 0;
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

int run_slurm_task(const std::string& log_dir, const std::vector<std::string>& command) {
  RankPlace place;
  try {
    place = rank_place_from_slurm();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "meshtest slurm-task: error: %s\n", e.what());
    return 1;
  }
  bool stopped = false;
  RankExit e;
  try {
    e = run_placed_rank(place, log_dir, command, &stopped);
  } catch (const std::exception& err) {
    std::fprintf(stderr, "meshtest slurm-task: error: rank %d: %s\n", place.rank, err.what());
    return 127;
  }
  const json record = {{"rank", place.rank},
                       {"node", env_or("SLURMD_NODENAME", "")},
                       {"exit_code", e.exit_code},
                       {"signal", e.signal},
                       {"stopped", stopped},
                       {"ended_ns", wall_ns()}};
  const std::string path = rank_exit_file(log_dir, place.rank);
  std::ofstream(path + ".tmp") << record.dump() << "\n";
  fs::rename(path + ".tmp", path);
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
    std::vector<std::string> args{"--no-shell", "--job-name=meshtest/" + case_id, "--nodes=" + std::to_string(shape.nodes),
                                  "--ntasks=" + std::to_string(need.nproc),
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
                                            (bp::std_out & bp::std_err) > log_path, bp::std_in < bp::null, ec);
    if (ec) a->refused = "cannot start salloc: " + ec.message();
    allocations[case_id] = a;
    return a;
  }

  // Moves an allocation on: learns its job id, sees it granted or refused, and asks
  // Slurm now and then why it still waits.
  void advance(Allocation& a) {
    if (a.granted || !a.refused.empty() || !a.salloc) return;
    if (a.job == 0) {
      std::smatch m;
      const std::string text = tail_of_file(a.log, 20);
      if (std::regex_search(text, m, std::regex("job allocation (\\d+)"))) a.job = std::stol(m[1]);
    }
    std::error_code ec;
    if (!a.salloc->running(ec)) {
      const int rc = a.salloc->exit_code();
      a.salloc.reset();
      if (a.job == 0) {
        std::smatch m;
        const std::string text = tail_of_file(a.log, 20);
        if (std::regex_search(text, m, std::regex("job allocation (\\d+)"))) a.job = std::stol(m[1]);
      }
      if (rc == 0 && a.job != 0) a.granted = true;
      else a.refused = "Slurm refused the allocation: " + slurm_reason(a.log);
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
        a.refused = "Slurm cannot start job " + std::to_string(a.job) + ": it waits for " + reason +
                    ", which does not clear";
        release(a);
      }
    }
  }

  void release(Allocation& a) {
    if (a.salloc) {
      std::error_code ec;
      if (a.salloc->running(ec)) ::kill(a.salloc->id(), SIGTERM);  // salloc withdraws a pending request
      a.salloc->wait(ec);
      a.salloc.reset();
    }
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
      if (!stopping_ && spec_.timeout_s > 0 &&
          std::chrono::duration<double>(Clock::now() - started_).count() > spec_.timeout_s) {
        result_.timed_out = true;
        std::ostringstream why;
        why << "timed out after " << spec_.timeout_s << " s";
        stop(why.str());
      }
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
    stop_ns_ = wall_ns();
    result_.stopped_because = reason;
    kill_at_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(spec_.grace_s));
    if (srun_) scancel(alloc_->job, "TERM");  // every rank of the step; the allocation stays until case_ended
    else if (!alloc_->granted) state_->release(*alloc_);
  }

  const RankGroup::Result& result() const override { return result_; }
  bool lost_port_race() const override { return srun_ran_ && !result_.ok() && meshtest::lost_port_race(spec_.log_dir, spec_.nproc); }
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
    std::vector<std::string> args{"--jobid=" + std::to_string(alloc_->job), "--nodes=" + std::to_string(shape.nodes),
                                  "--ntasks=" + std::to_string(spec_.nproc),
                                  "--ntasks-per-node=" + std::to_string(shape.tasks_per_node), "--kill-on-bad-exit=1",
                                  "--chdir=" + (spec_.work_dir.empty() ? fs::current_path().string() : spec_.work_dir)};
    if (state_->opt.gpus) args.push_back("--gpus-per-node=" + std::to_string(shape.tasks_per_node));
    args.insert(args.end(), state_->opt.srun_args.begin(), state_->opt.srun_args.end());
    args.insert(args.end(), {"--", state_->meshtest_exe, "slurm-task", "--dir", fs::absolute(spec_.log_dir).string(), "--"});
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
    srun_ = std::make_unique<bp::child>(program, bp::args = args, env,
                                        (bp::std_out & bp::std_err) > (fs::path(spec_.log_dir) / "srun.log").string(),
                                        bp::std_in < bp::null, ec);
    if (ec) {
      srun_.reset();
      finish_unstarted("cannot start srun: " + ec.message());
      return;
    }
    srun_ran_ = true;
  }

  // After srun: each rank's own record; the first to fail on its own, not stopped by Slurm or meshtest.
  void collect(int srun_exit) {
    done_ = true;
    result_.duration_s = std::chrono::duration<double>(Clock::now() - started_).count();
    bool any_started = false;
    long long first_end = 0;
    for (int r = 0; r < spec_.nproc; ++r) {
      RankExit& e = result_.exits[r];
      std::ifstream in(rank_exit_file(spec_.log_dir, r));
      json record;
      try {
        if (in) record = json::parse(in);
      } catch (const std::exception&) {
      }
      if (record.is_object()) {
        any_started = true;
        e.exit_code = record.value("exit_code", 0);
        e.signal = record.value("signal", 0);
        const long long ended = record.value("ended_ns", 0LL);
        const bool on_its_own = !record.value("stopped", false) && (!stopping_ || ended < stop_ns_);
        if (!e.ok() && on_its_own && (first_end == 0 || ended < first_end)) {
          first_end = ended;
          result_.first_failure = e;
        }
      } else {
        any_started |= fs::exists(rank_log_path(spec_.log_dir, r));
        e.signal = SIGKILL;  // Slurm ended it before it could say how
      }
    }
    if (!any_started) {
      if (!stopping_)
        launch_error_ = "srun started no rank (exit " + std::to_string(srun_exit) +
                        "): " + slurm_reason((fs::path(spec_.log_dir) / "srun.log").string());
      return;
    }
    const bool any_failed = std::any_of(result_.exits.begin(), result_.exits.end(), [](const RankExit& e) { return !e.ok(); });
    if (!any_failed || stopping_) return;
    // The allocation outlives its steps, so a job that no longer runs was ended by Slurm
    // (time limit, scancel from outside, a node lost). Its SIGTERM may reach a trainer
    // before the rank's task hears it, so no rank is taken to have failed on its own.
    std::string out;
    std::smatch state, reason;
    for (int tries = 0; tries < 20; ++tries) {  // COMPLETING passes in a second or two; its end state says why
      run_client({"scontrol", "-o", "show", "job", std::to_string(alloc_->job)}, &out);
      if (!std::regex_search(out, state, std::regex("JobState=(\\S+)")) || state[1] != "COMPLETING") break;
      ::usleep(100000);
    }
    std::regex_search(out, reason, std::regex("Reason=(\\S+)"));
    const std::string job_state = state.empty() ? "unknown" : state[1].str();
    if (job_state == "RUNNING" && result_.first_failure.rank >= 0) return;  // a rank failed: srun stopped the others
    result_.first_failure = RankExit{};
    result_.stopped_because = "Slurm ended job " + std::to_string(alloc_->job) + " (JobState=" + job_state +
                              (reason.empty() ? "" : " Reason=" + reason[1].str()) + ")";
    // Right after the limit the job may still be COMPLETING, with the reason already set.
    result_.timed_out = job_state == "TIMEOUT" || (!reason.empty() && reason[1] == "TimeLimit");
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
  long long stop_ns_ = 0;
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
