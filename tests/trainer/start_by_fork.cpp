// start_meshtrain as a fork of this test process, which links the trainer, running meshtrain_main
// (trainer/cli.h: what main() runs). The child gets what an exec would give it: this process
// must have one thread at the fork (a fork copies only the caller; checked), descriptors marked
// close-on-exec are closed, caught signals go back to their default, and the launcher variables
// are only those given. The binary itself runs in the CLI tests, the main job, the harness's
// tests and every shipped example.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <stdexcept>

#include "cli.h"
#include "run_meshtrain.h"

namespace meshtrain_test {

pid_t start_meshtrain(const std::vector<std::string>& args, const std::map<std::string, std::string>& vars,
                      const fs::path& out, const fs::path& err) {
  std::size_t threads = 0;
  for ([[maybe_unused]] const auto& task : fs::directory_iterator("/proc/self/task")) ++threads;
  if (threads != 1)
    throw std::runtime_error("start_meshtrain: this test process has " + std::to_string(threads) +
                             " threads; a fork copies only the caller, so ranks start only from a single thread");
  std::vector<int> close_on_exec;
  for (const auto& fd : fs::directory_iterator("/proc/self/fd")) {
    const int n = std::stoi(fd.path().filename().string());
    if (n > 2 && (::fcntl(n, F_GETFD) & FD_CLOEXEC)) close_on_exec.push_back(n);
  }
  std::fflush(nullptr);  // or the child would write this process's buffered output again
  std::cout.flush();
  std::cerr.flush();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid > 0) return pid;
  // The child: from here on only what an exec would have set up, then the trainer.
  for (int fd : close_on_exec) ::close(fd);
  const int out_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int err_fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (out_fd < 0 || err_fd < 0 || ::dup2(out_fd, 1) < 0 || ::dup2(err_fd, 2) < 0) ::_exit(127);
  ::close(out_fd);
  ::close(err_fd);
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction current {};
    if (::sigaction(sig, nullptr, &current) == 0 && current.sa_handler != SIG_IGN) ::signal(sig, SIG_DFL);
  }
  for (const auto& v : launcher_variables()) ::unsetenv(v.c_str());
  for (const auto& [k, v] : vars) ::setenv(k.c_str(), v.c_str(), 1);
  std::vector<std::string> argv_strings{"meshtrain"};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);
  int code = 0;
  try {
    code = meshtrain_main(static_cast<int>(argv_strings.size()), argv.data());
  } catch (...) {
    std::abort();  // what the binary's uncaught exception does, never back into the test's code
  }
  std::fflush(nullptr);
  std::cout.flush();
  std::cerr.flush();
  ::_exit(code);  // not exit(): the test process's static objects are the parent's to destroy
}

}  // namespace meshtrain_test
