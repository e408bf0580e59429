#include "fork_server.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "contract/fork_server.h"

namespace meshtrain {

namespace {

size_t thread_count() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& task : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

// In the rank, before anything else runs: what an exec would have set up. Never returns.
[[noreturn]] void become_rank(const contract::ForkRequest& r, const int fds[3], int go,
                              int (*program_main)(int, char**)) {
  // Wait until the middle process has exited and meshtest has adopted this one, so that the
  // death signal below is armed against meshtest rather than against the middle process.
  char byte;
  while (::read(go, &byte, 1) < 0 && errno == EINTR) {
  }
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != r.reaper) ::_exit(127);  // meshtest is gone, or did not adopt this rank
  for (int i = 0; i < 3; ++i)
    if (::dup2(fds[i], i) < 0) ::_exit(127);
  ::close_range(3, ~0U, 0);  // the socket, the pipe, the request's originals: an exec's limit_handles
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction current {};
    if (::sigaction(sig, nullptr, &current) == 0 && current.sa_handler != SIG_DFL) ::signal(sig, SIG_DFL);
  }
  if (!r.work_dir.empty() && ::chdir(r.work_dir.c_str()) != 0) {
    std::fprintf(stderr, "meshtrain: error: cannot enter %s: %s\n", r.work_dir.c_str(), std::strerror(errno));
    ::_exit(127);
  }
  ::clearenv();
  for (const auto& kv : r.env) {
    const size_t eq = kv.find('=');
    if (eq != std::string::npos && eq > 0) ::setenv(kv.substr(0, eq).c_str(), kv.c_str() + eq + 1, 1);
  }
  std::vector<std::string> args = r.argv;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // An exception escaping meshtrain_main ends the process as it would the binary: terminate.
  const int code = [&]() noexcept { return program_main(static_cast<int>(args.size()), argv.data()); }();
  // Output flushed as exit() would; LibTorch's static destructors are skipped: they would walk
  // (and so copy, page by page) the operator tables this process shares with the server.
  std::fflush(nullptr);
  std::cout.flush();
  std::cerr.flush();
  ::_exit(code);
}

// Forks the rank (through a middle process, so that meshtest adopts it) and returns its pid.
pid_t fork_rank(const contract::ForkRequest& r, const int fds[3], int (*program_main)(int, char**)) {
  int report[2], go[2];
  if (::pipe2(report, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  if (::pipe2(go, O_CLOEXEC) != 0) {
    ::close(report[0]), ::close(report[1]);
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  }
  std::fflush(nullptr);
  std::cout.flush();
  std::cerr.flush();
  const pid_t middle = ::fork();
  if (middle == 0) {
    ::close(report[0]);
    ::close(go[1]);
    const pid_t rank = ::fork();
    if (rank == 0) {
      ::close(report[1]);
      ::setpgid(0, r.process_group);
      become_rank(r, fds, go[0], program_main);
    }
    if (rank > 0) ::setpgid(rank, r.process_group == 0 ? rank : r.process_group);  // before meshtest learns the pid
    const int sent = rank > 0 ? rank : -errno;
    (void)!::write(report[1], &sent, sizeof sent);
    ::_exit(0);
  }
  ::close(report[1]);
  ::close(go[0]);
  int got = 0;
  ssize_t n = -1;
  if (middle > 0)
    while ((n = ::read(report[0], &got, sizeof got)) < 0 && errno == EINTR) {
    }
  const int fork_errno = errno;
  ::close(report[0]);
  if (middle > 0)
    while (::waitpid(middle, nullptr, 0) < 0 && errno == EINTR) {
    }
  ::close(go[1]);  // the rank is meshtest's now: it may go on
  if (middle < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(fork_errno));
  if (n != static_cast<ssize_t>(sizeof got) || got <= 0)
    throw std::runtime_error(std::string("fork: ") + std::strerror(got < 0 ? -got : EIO));
  return got;
}

}  // namespace

int serve_forks(int socket, int (*program_main)(int argc, char** argv)) {
  if (const size_t threads = thread_count(); threads != 1) {
    contract::send_fork_reply(socket, {0, "the fork server has " + std::to_string(threads) +
                                              " threads; a fork copies only the caller, so it needs one"});
    return 1;
  }
  ::signal(SIGPIPE, SIG_IGN);  // a peer gone shows as an error from send, not a signal
  contract::send_fork_reply(socket, {});
  for (;;) {
    contract::ForkRequest request;
    int fds[3] = {-1, -1, -1};
    try {
      if (!contract::receive_fork_request(socket, request, fds)) return 0;  // meshtest is done
    } catch (const std::runtime_error& e) {
      contract::send_fork_reply(socket, {0, e.what()});
      continue;
    }
    contract::ForkReply reply;
    try {
      reply.pid = fork_rank(request, fds, program_main);
    } catch (const std::runtime_error& e) {
      reply.error = e.what();
    }
    for (int fd : fds) ::close(fd);
    contract::send_fork_reply(socket, reply);
  }
}

}  // namespace meshtrain
