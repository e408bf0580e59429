#include "run/fork_server.h"

#include <boost/process.hpp>
#include <boost/process/extend.hpp>

#include <fcntl.h>
#include <linux/close_range.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <chrono>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>

#include "contract/fork_server.h"
#include "contract/rank_environment.h"

namespace bp = boost::process;

namespace meshtest {

namespace {

struct Server {
  std::unique_ptr<bp::child> process;
  int socket = -1;  // -1: it could not start or has died; its ranks are exec'd
};

struct Servers {
  std::mutex mutex;
  std::map<std::string, Server> by_key;  // program, subcommand and environment
};

Servers& servers() {
  static Servers s;
  return s;
}

// In the server's child before its exec: its end of the socket as descriptor 3, every other
// descriptor closed at the exec, a process group of its own (a Ctrl-C for meshtest's group is
// meshtest's to handle; the server ends when meshtest closes its socket) and death with this
// process (as launch.h's die_with_parent).
struct ServerSetup {
  int socket;
  template <class Executor>
  void operator()(Executor&) const {
    if (socket == 3)
      ::fcntl(3, F_SETFD, 0);
    else
      ::dup2(socket, 3);
    ::close_range(4, ~0U, CLOSE_RANGE_CLOEXEC);
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  }
};

void close_server(Server& s) {
  if (s.socket >= 0) ::close(s.socket);
  s.socket = -1;
  if (s.process) {
    std::error_code ec;
    s.process->wait(ec);  // it exits when it reads the end of its socket
    s.process.reset();
  }
}

// True once `socket` holds a message or its peer has closed it; false when `seconds` pass first.
bool readable_within(int socket, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    pollfd p{socket, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::max<long long>(left.count(), 0)));
    if (ready > 0) return true;
    if (ready == 0) return false;
    if (errno != EINTR) throw std::runtime_error(std::string("poll: ") + std::strerror(errno));
  }
}

Server start_server(const std::string& program, const std::string& subcommand, const std::vector<std::string>& env,
                    double hello_seconds) {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0)
    throw std::runtime_error(std::string("socketpair: ") + std::strerror(errno));
  bp::environment server_env;
  for (const auto& kv : env) {
    const size_t eq = kv.find('=');
    if (eq != std::string::npos && eq > 0) server_env.set(kv.substr(0, eq), kv.substr(eq + 1));
  }
  Server s;
  s.socket = pair[0];
  std::error_code ec;
  s.process = std::make_unique<bp::child>(bp::exe = program, bp::args = {subcommand, "--fd", "3"}, server_env,
                                          bp::std_in<bp::null, bp::std_out> bp::null,
                                          bp::extend::on_exec_setup = ServerSetup{pair[1]}, ec);
  ::close(pair[1]);
  if (ec) {
    close_server(s);
    throw std::runtime_error("cannot start '" + program + " " + subcommand + "': " + ec.message());
  }
  // A server stuck as it loads (a driver that hangs, a program whose SUBCOMMAND is something else)
  // must not hold the run with the lock below: its ranks are exec'd, and meet the case's timeout.
  if (!readable_within(s.socket, hello_seconds)) {
    ::kill(s.process->id(), SIGKILL);
    close_server(s);
    throw std::runtime_error("it did not say it was ready within " + std::to_string(static_cast<int>(hello_seconds)) +
                             " s");
  }
  const contract::ForkReply hello = contract::receive_fork_reply(s.socket);  // throws if it died first
  if (!hello.error.empty()) {
    close_server(s);
    throw std::runtime_error(hello.error);
  }
  return s;
}

}  // namespace

const std::set<std::string>& per_rank_variables() {
  static const std::set<std::string> names(std::begin(contract::rank_environment::kAll),
                                           std::end(contract::rank_environment::kAll));
  return names;
}

std::optional<pid_t> fork_rank(const std::string& program, const std::string& subcommand,
                               const std::vector<std::string>& argv, const std::vector<std::string>& env,
                               const std::string& work_dir, pid_t process_group, const int stdio[3],
                               double hello_seconds) {
  std::vector<std::string> server_env;
  for (const auto& kv : env)
    if (!per_rank_variables().count(kv.substr(0, kv.find('=')))) server_env.push_back(kv);
  std::string key = program + '\0' + subcommand;
  for (const auto& kv : server_env) key += '\0' + kv;

  Servers& all = servers();
  std::lock_guard<std::mutex> lock(all.mutex);
  auto it = all.by_key.find(key);
  if (it == all.by_key.end()) {
    Server s;
    try {
      s = start_server(program, subcommand, server_env, hello_seconds);
    } catch (const std::runtime_error& e) {
      std::fprintf(stderr, "meshtest: note: %s starts each rank by exec: its fork server did not start (%s)\n",
                   program.c_str(), e.what());
    }
    it = all.by_key.emplace(key, std::move(s)).first;
  }
  Server& server = it->second;
  if (server.socket < 0) return std::nullopt;
  contract::ForkRequest request{argv, env, work_dir, process_group, ::getpid()};
  try {
    contract::send_fork_request(server.socket, request, stdio);
    const contract::ForkReply reply = contract::receive_fork_reply(server.socket);
    if (!reply.error.empty()) throw std::runtime_error(reply.error);
    return reply.pid;
  } catch (const std::runtime_error& e) {
    std::fprintf(stderr, "meshtest: note: %s starts each rank by exec from now on: its fork server failed (%s)\n",
                 program.c_str(), e.what());
    close_server(server);
    return std::nullopt;
  }
}

std::set<pid_t> fork_server_pids() {
  Servers& all = servers();
  std::lock_guard<std::mutex> lock(all.mutex);
  std::set<pid_t> pids;
  for (const auto& [key, s] : all.by_key)
    if (s.process) pids.insert(s.process->id());
  return pids;
}

void stop_fork_servers() {
  Servers& all = servers();
  std::lock_guard<std::mutex> lock(all.mutex);
  for (auto& [key, s] : all.by_key) close_server(s);
  all.by_key.clear();
}

}  // namespace meshtest
