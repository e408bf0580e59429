#include "run/launch.h"
#include "run/fork_server.h"
#include "run/ports.h"
#include "contract/rank_environment.h"

#include <boost/process.hpp>
#include <boost/process/extend.hpp>
#include <nlohmann/json.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace bp = boost::process;
namespace fs = std::filesystem;

namespace meshtest {

struct RankGroup::Impl {
  pid_t process_group = 0;  // the first rank's pid, once started; every rank joins it
  std::vector<bp::child> children;
  std::vector<bool> reaped;
};

namespace {

namespace rank_env = contract::rank_environment;

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::string find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    if (::access(name.c_str(), X_OK) != 0) throw LaunchError("cannot run '" + name + "': " + std::strerror(errno));
    return name;
  }
  const auto found = bp::search_path(name);
  if (found.empty()) throw LaunchError("cannot run '" + name + "': not found on PATH");
  return found.string();
}

// In an exec'd rank before its exec: the ranks' process group (a new one for the first), and
// death with this process.
struct RankSetup {
  pid_t process_group;
  template <class Executor>
  void operator()(Executor&) const {
    ::setpgid(0, process_group);
    die_with_parent();
  }
};

std::vector<std::string> as_strings(const bp::environment& env) {
  std::vector<std::string> out;
  for (const auto& entry : env) out.push_back(entry.get_name() + "=" + entry.to_string());
  return out;
}

// Starts one rank as a fork of `program`'s fork server; nullopt when it has none (then exec).
std::optional<pid_t> fork_one(const LaunchSpec& spec, const std::string& program, const bp::environment& env,
                              const std::string& work_dir, pid_t process_group, const std::string& log) {
  const int null_in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const int out = log.empty() ? -1 : ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (null_in < 0 || (!log.empty() && out < 0)) {
    if (null_in >= 0) ::close(null_in);
    throw LaunchError("cannot open " + (log.empty() ? std::string("/dev/null") : log) + ": " + std::strerror(errno));
  }
  const int stdio[3] = {null_in, out < 0 ? 1 : out, out < 0 ? 2 : out};
  std::vector<std::string> argv = spec.argv;
  argv.front() = program;
  const auto pid = fork_rank(program, spec.fork_server, argv, as_strings(env), work_dir, process_group, stdio);
  ::close(null_in);
  if (out >= 0) ::close(out);
  return pid;
}

// What every launcher gives a rank: meshtest's environment, `extra` on top, then
// torchrun's variables for `place` and, with a log folder, the rank's files in it.
// set()/get(), never operator[]/find()/count(): Boost 1.74's find compares key= with
// every entry for the key's length, reading past the end of shorter ones (ASan, ci/sanitize.sh).
bp::environment rank_environment(const RankPlace& place, const std::string& log_dir,
                                 const std::vector<std::pair<std::string, std::string>>& extra) {
  bp::environment env = boost::this_process::environment();
  env.erase("TORCHELASTIC_USE_AGENT_STORE");  // rank 0 must host the store itself
  if (env.get("OMP_NUM_THREADS").empty()) env.set("OMP_NUM_THREADS", "1");
  if (env.get("TORCH_NCCL_ASYNC_ERROR_HANDLING").empty()) env.set("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
  for (const auto& [k, v] : extra) env.set(k, v);
  const std::string r = std::to_string(place.rank);
  env.set(rank_env::kRank, r);
  env.set(rank_env::kLocalRank, std::to_string(place.local_rank));
  env.set(rank_env::kRoleRank, r);
  env.set(rank_env::kGroupRank, std::to_string(place.group_rank));
  env.set(rank_env::kRoleName, "default");
  env.set(rank_env::kWorldSize, std::to_string(place.world));
  env.set(rank_env::kLocalWorldSize, std::to_string(place.local_world));
  env.set(rank_env::kRoleWorldSize, std::to_string(place.world));
  env.set(rank_env::kGroupWorldSize, std::to_string(place.group_world));
  env.set(rank_env::kMasterAddr, place.master_addr);
  env.set(rank_env::kMasterPort, std::to_string(place.master_port));
  env.set(rank_env::kRestartCount, "0");
  env.set(rank_env::kMaxRestarts, "0");
  // A Python trainer decorated with torch.distributed.elastic's @record writes its
  // uncaught exception here; the harness quotes it (rank_error_message()).
  if (!log_dir.empty()) {
    env.set(rank_env::kErrorFile, rank_error_file(log_dir, place.rank));
    fs::remove(rank_error_file(log_dir,
                               place.rank));  // an earlier attempt's (a lost port race) must not be quoted for this one
    env.set(rank_env::kCollectiveFile, rank_collective_file(log_dir, place.rank));
    fs::remove(rank_collective_file(log_dir, place.rank));
  }
  return env;
}

}  // namespace

RankGroup::RankGroup(LaunchSpec spec) : spec_(std::move(spec)), impl_(std::make_unique<Impl>()) {
  if (spec_.argv.empty()) throw LaunchError("empty command");
  if (spec_.nproc < 1) throw LaunchError("nproc must be at least 1");
  const std::string program = find_program(spec_.argv.front());
  const std::vector<std::string> args(spec_.argv.begin() + 1, spec_.argv.end());
  if (spec_.master_port == 0) {
    try {
      spec_.master_port = reserve_store_port();
    } catch (const std::runtime_error& e) {
      throw LaunchError(e.what());
    }
  }
  if (!spec_.log_dir.empty()) fs::create_directories(spec_.log_dir);
  const std::string work_dir = spec_.work_dir.empty() ? fs::current_path().string() : spec_.work_dir;

  started_ = std::chrono::steady_clock::now();
  result_.started_at = wall_clock_s();
  result_.exits.resize(static_cast<size_t>(spec_.nproc));
  for (int rank = 0; rank < spec_.nproc; ++rank) {
    RankPlace place;
    place.rank = place.local_rank = rank;
    place.world = place.local_world = spec_.nproc;
    place.master_port = spec_.master_port;
    bp::environment env = rank_environment(place, spec_.log_dir, spec_.env);
    const std::string r = std::to_string(rank);
    if (!spec_.gpus.empty()) {
      std::string ids;
      for (const auto& g : spec_.gpus) ids += (ids.empty() ? "" : ",") + g;
      env.set("CUDA_VISIBLE_DEVICES", ids);
    }
    std::error_code ec;
    const std::optional<pid_t> forked = spec_.fork_server.empty()
                                            ? std::nullopt
                                            : fork_one(spec_, program, env, work_dir, impl_->process_group,
                                                       spec_.log_dir.empty() ? "" : log_path(rank));
    if (forked) {
      pid_t pid = *forked;
      impl_->children.emplace_back(pid);
    } else if (spec_.log_dir.empty()) {
      // Ranks share meshtest's stdout/stderr (limit_handles would close them).
      impl_->children.emplace_back(bp::exe = program, bp::args = args, env, bp::start_dir = work_dir,
                                   bp::std_in < bp::null, bp::extend::on_exec_setup = RankSetup{impl_->process_group},
                                   ec);
    } else {
      const std::string log = log_path(rank);
      std::ofstream(log, std::ios::trunc).close();  // Boost opens without O_TRUNC
      impl_->children.emplace_back(bp::exe = program, bp::args = args, env, bp::start_dir = work_dir,
                                   (bp::std_out & bp::std_err) > log, bp::std_in < bp::null, bp::limit_handles,
                                   bp::extend::on_exec_setup = RankSetup{impl_->process_group}, ec);
    }
    if (!ec) {
      // The child joins the group itself too, but Boost may return before it has run that far,
      // and rank 0 may by then have ended and been reaped by poll(), taking the group with it
      // (a rank outside the group outlives every killpg: the soak hung so). Here rank 0 is at
      // worst a zombie, which keeps the group.
      const pid_t pid = impl_->children.back().id();
      if (impl_->process_group == 0) impl_->process_group = pid;
      ::setpgid(pid, impl_->process_group);
    }
    impl_->reaped.push_back(false);
    if (ec) {
      impl_->children.pop_back();
      impl_->reaped.pop_back();
      stop("rank " + r + " could not be started: " + ec.message());
      while (!poll()) ::usleep(1000);
      throw LaunchError("cannot start '" + program + "' (rank " + r + "): " + ec.message());
    }
  }
}

RankGroup::~RankGroup() {
  if (!impl_) return;
  bool alive = false;
  for (size_t i = 0; i < impl_->children.size(); ++i) alive |= !impl_->reaped[i];
  if (alive) {
    if (impl_->process_group > 0) ::killpg(impl_->process_group, SIGKILL);
    for (size_t i = 0; i < impl_->children.size(); ++i) {
      if (impl_->reaped[i]) continue;
      std::error_code ec;
      impl_->children[i].wait(ec);
    }
  }
  for (auto& c : impl_->children) c.detach();
}

namespace {
volatile std::sig_atomic_t g_placed_rank_stop = 0;
void on_placed_rank_stop(int) { g_placed_rank_stop = 1; }
}  // namespace

RankExit run_placed_rank(const RankPlace& place, const std::string& log_dir, const std::vector<std::string>& argv,
                         bool* stopped) {
  if (argv.empty()) throw LaunchError("empty command");
  const std::string program = find_program(argv.front());
  const std::vector<std::string> args(argv.begin() + 1, argv.end());
  struct sigaction sa {};
  sa.sa_handler = on_placed_rank_stop;  // no SA_RESTART: waitpid returns EINTR
  sigemptyset(&sa.sa_mask);
  sigset_t stops;
  sigemptyset(&stops);
  for (int sig : {SIGTERM, SIGINT}) ::sigaction(sig, &sa, nullptr), sigaddset(&stops, sig);
  ::sigprocmask(SIG_UNBLOCK, &stops, nullptr);  // a stop the caller held back arrives now

  fs::create_directories(log_dir);
  RankExit e;
  e.rank = place.rank;
  if (g_placed_rank_stop) {  // stopped before it started
    *stopped = true;
    e.signal = SIGTERM;
    return e;
  }
  const std::string log = rank_log_path(log_dir, place.rank);
  std::ofstream(log, std::ios::trunc).close();  // Boost opens without O_TRUNC
  std::error_code ec;
  bp::child child(bp::exe = program, bp::args = args, rank_environment(place, log_dir, {}),
                  (bp::std_out & bp::std_err) > log, bp::std_in < bp::null, bp::limit_handles,
                  bp::extend::on_exec_setup = DieWithParent{}, ec);
  if (ec)
    throw LaunchError("cannot start '" + program + "' (rank " + std::to_string(place.rank) + "): " + ec.message());
  const pid_t pid = child.id();
  child.detach();  // reaped here, with the raw status
  *stopped = false;
  int status = 0;
  for (;;) {
    if (g_placed_rank_stop && !*stopped) {
      *stopped = true;
      ::kill(pid, SIGTERM);
    }
    const pid_t w = ::waitpid(pid, &status, 0);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) throw LaunchError(std::string("waiting for the rank: ") + std::strerror(errno));
  }
  *stopped = *stopped || g_placed_rank_stop;  // a stop that came while it ended
  if (WIFSIGNALED(status))
    e.signal = WTERMSIG(status);
  else if (WIFEXITED(status))
    e.exit_code = WEXITSTATUS(status);
  return e;
}

std::string RankGroup::error_file(int rank) const {
  return spec_.log_dir.empty() ? "" : rank_error_file(spec_.log_dir, rank);
}

std::string RankGroup::log_path(int rank) const {
  return spec_.log_dir.empty() ? "" : rank_log_path(spec_.log_dir, rank);
}

std::vector<pid_t> RankGroup::pids() const {
  std::vector<pid_t> out;
  for (const auto& c : impl_->children) out.push_back(c.id());
  return out;
}

void RankGroup::stop(const std::string& reason) {
  if (stopping_ || done_) return;
  stopping_ = true;
  result_.stopped_because = reason;
  if (impl_->process_group > 0) ::killpg(impl_->process_group, SIGTERM);
  kill_at_ = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                    std::chrono::duration<double>(spec_.grace_s));
}

bool RankGroup::poll() {
  if (done_) return true;
  bool all_reaped = true;
  for (size_t i = 0; i < impl_->children.size(); ++i) {
    if (impl_->reaped[i]) continue;
    std::error_code ec;
    if (impl_->children[i].running(ec) && !ec) {
      all_reaped = false;
      continue;
    }
    impl_->reaped[i] = true;
    const int status = impl_->children[i].native_exit_code();
    RankExit& e = result_.exits[i];
    e.rank = static_cast<int>(i);
    if (WIFSIGNALED(status))
      e.signal = WTERMSIG(status);
    else if (WIFEXITED(status))
      e.exit_code = WEXITSTATUS(status);
    if (!e.ok() && result_.first_failure.rank < 0 && !stopping_) {
      result_.first_failure = e;
      stop("rank " + std::to_string(i) + " failed first (" + e.describe() + ")");
    }
  }
  if (!all_reaped && !stopping_)
    if (const auto why = past_timeout(spec_.timeout_s, seconds_since(started_), result_)) stop(*why);
  if (!all_reaped && stopping_ && !result_.killed && std::chrono::steady_clock::now() >= kill_at_) {
    if (impl_->process_group > 0) ::killpg(impl_->process_group, SIGKILL);
    result_.killed = true;
  }
  if (all_reaped) {
    done_ = true;
    result_.duration_s = seconds_since(started_);
    result_.ended_at = wall_clock_s();
  }
  return all_reaped;
}

bool lost_port_race(const RankGroup& group) {
  if (group.result().ok() || group.spec().log_dir.empty()) return false;
  return lost_port_race(group.spec().log_dir, group.spec().nproc);
}

std::string stop_reason(int signal) { return "meshtest received signal " + std::to_string(signal); }

double wall_clock_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::optional<std::string> past_timeout(double timeout_s, double elapsed_s, LaunchResult& result) {
  if (timeout_s <= 0 || elapsed_s <= timeout_s) return std::nullopt;
  result.timed_out = true;
  std::ostringstream why;
  why << "timed out after " << timeout_s << " s";
  return why.str();
}

void become_subreaper() { ::prctl(PR_SET_CHILD_SUBREAPER, 1); }

void die_with_parent() { ::prctl(PR_SET_PDEATHSIG, SIGKILL); }

int sweep_orphans(const std::set<pid_t>& tracked) {
  const pid_t self = ::getpid();
  const std::set<pid_t> servers = fork_server_pids();
  int killed = 0;
  DIR* proc = ::opendir("/proc");
  if (!proc) return 0;
  std::vector<pid_t> victims;
  while (dirent* entry = ::readdir(proc)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(entry->d_name));
    if (pid <= 0 || tracked.count(pid) || servers.count(pid)) continue;
    std::ifstream stat("/proc/" + std::string(entry->d_name) + "/stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const size_t paren = line.rfind(')');  // the command name may hold spaces and ')'
    if (paren == std::string::npos) continue;
    std::istringstream rest(line.substr(paren + 1));
    std::string state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == self) victims.push_back(pid);
  }
  ::closedir(proc);
  for (pid_t pid : victims) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    ++killed;
  }
  return killed;
}

}  // namespace meshtest
