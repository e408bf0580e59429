// meshtest's fork server against its peer, an exec per rank (docs/performance.md#ranks-as-forks):
// N ranks of one meshtrain command started each way, one at a time, with the CPU time of
// every process each way started (the server's own included) and the wall time.
// Usage: fork_bench MESHTRAIN N [ARG...]   (default ARG: describe --json)
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/process.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "run/fork_server.h"
#include "run/launch.h"

namespace bp = boost::process;

namespace {

double children_cpu_s() {
  rusage u{};
  ::getrusage(RUSAGE_CHILDREN, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct Cost {
  double cpu_s, wall_s;
};

template <class Start>
Cost measure(int n, Start start) {
  const double cpu0 = children_cpu_s(), wall0 = now_s();
  for (int i = 0; i < n; ++i) {
    const pid_t pid = start();
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "fork_bench: rank %d ended with status %d\n", i, status);
      std::exit(1);
    }
  }
  meshtest::stop_fork_servers();  // the server's own time counts
  return {children_cpu_s() - cpu0, now_s() - wall0};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: fork_bench MESHTRAIN N [ARG...]\n");
    return 2;
  }
  const std::string meshtrain = argv[1];
  const int n = std::atoi(argv[2]);
  std::vector<std::string> args(argv + 3, argv + argc);
  if (args.empty()) args = {"describe", "--json"};
  meshtest::become_subreaper();
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  const int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  const int stdio[3] = {null_fd, null_fd, null_fd};

  const Cost exec = measure(n, [&] {
    bp::child c(bp::exe = meshtrain, bp::args = args, bp::std_in<bp::null, bp::std_out> bp::null,
                bp::std_err > bp::null);
    const pid_t pid = c.id();
    c.detach();
    return pid;
  });
  std::vector<std::string> full{meshtrain};
  full.insert(full.end(), args.begin(), args.end());
  const Cost fork = measure(n, [&] {
    const auto pid = meshtest::fork_rank(meshtrain, "forkserver", full, env, "", 0, stdio);
    if (!pid) std::exit(1);
    return *pid;
  });
  std::printf("%d ranks of `meshtrain", n);
  for (const auto& a : args) std::printf(" %s", a.c_str());
  std::printf("`, one at a time\n");
  std::printf("%-26s %10s %10s %12s\n", "", "CPU s", "wall s", "CPU s/rank");
  std::printf("%-26s %10.2f %10.2f %12.3f\n", "exec per rank (peer)", exec.cpu_s, exec.wall_s, exec.cpu_s / n);
  std::printf("%-26s %10.2f %10.2f %12.3f\n", "fork server", fork.cpu_s, fork.wall_s, fork.cpu_s / n);
  std::printf("fork server / exec: CPU %.3f, wall %.3f\n", fork.cpu_s / exec.cpu_s, fork.wall_s / exec.wall_s);
  return 0;
}
