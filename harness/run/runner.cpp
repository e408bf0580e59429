#include "run/runner.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <set>

#include "run/fork_server.h"
#include "run/run_loop.h"
#include "run/slurm.h"

namespace meshtest {

volatile std::sig_atomic_t g_stop_signal = 0;

namespace {

void on_stop_signal(int sig) { g_stop_signal = sig; }

// A real phase: its ranks as processes.
class RankGroupProcess : public PhaseProcess {
 public:
  explicit RankGroupProcess(const LaunchSpec& spec) : group_(spec) {}
  bool poll() override { return group_.poll(); }
  void stop(const std::string& reason) override { group_.stop(reason); }
  const RankGroup::Result& result() const override { return group_.result(); }
  bool lost_port_race() const override { return meshtest::lost_port_race(group_); }
  std::vector<pid_t> pids() const override { return group_.pids(); }

 private:
  RankGroup group_;
};

}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}

RunResult run_cases(const Plan& plan, const RunOptions& opt, const HistorySource& history) {
  const auto t0 = std::chrono::steady_clock::now();
  auto now_s = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  Launcher launcher{
      [](const LaunchSpec& spec) -> std::unique_ptr<PhaseProcess> { return std::make_unique<RankGroupProcess>(spec); },
      [](const std::set<pid_t>& keep) { sweep_orphans(keep); }};
  std::unique_ptr<SlurmLauncher> slurm;  // outlives the loop: its destructor cancels what is left
  if (opt.launcher == "slurm") {
    slurm = std::make_unique<SlurmLauncher>(plan, opt.slurm);
    launcher = slurm->launcher();
  }
  RunLoop loop(plan, opt, std::move(launcher), history);
  while (loop.turn(now_s(), g_stop_signal)) {
    if (opt.progress) {
      std::fprintf(stderr, "\r\033[K%s", loop.progress_line(now_s()).c_str());
      std::fflush(stderr);
    }
    ::usleep(2000);
  }
  if (opt.progress) std::fprintf(stderr, "\r\033[K");
  stop_fork_servers();
  sweep_orphans({});
  return std::move(loop).result(now_s());
}

int launch_command(const LaunchSpec& spec) {
  become_subreaper();
  install_stop_handlers();
  RankGroup group(spec);
  while (!group.poll()) {
    if (g_stop_signal != 0) group.stop(stop_reason(g_stop_signal));
    ::usleep(2000);
  }
  sweep_orphans({});
  const auto& r = group.result();
  if (r.ok()) return 0;
  std::fprintf(stderr, "meshtest launch: %s\n", r.stopped_because.c_str());
  for (const auto& e : r.exits) std::fprintf(stderr, "  rank %d: %s\n", e.rank, e.describe().c_str());
  if (g_stop_signal != 0) return 128 + g_stop_signal;
  if (r.timed_out) return 124;
  if (r.first_failure.signal != 0) return 128 + r.first_failure.signal;
  return r.first_failure.exit_code != 0 ? r.first_failure.exit_code : 1;
}

}  // namespace meshtest
