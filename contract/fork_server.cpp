#include "contract/fork_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace contract {

namespace {

constexpr size_t kMaxMessage = 1 << 20;  // an environment of a megabyte is already absurd

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error("fork server: " + what + ": " + std::strerror(errno));
}

void send_message(int socket, const std::string& text, const int* fds, int nfds) {
  if (text.size() > kMaxMessage)
    throw std::runtime_error("fork server: a message of " + std::to_string(text.size()) + " bytes (at most " +
                             std::to_string(kMaxMessage) + ")");
  const int buffer = static_cast<int>(2 * kMaxMessage);
  ::setsockopt(socket, SOL_SOCKET, SO_SNDBUF, &buffer, sizeof buffer);
  iovec iov{const_cast<char*>(text.data()), text.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(3 * sizeof(int))] = {};
  if (nfds > 0) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
    std::memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
  }
  while (::sendmsg(socket, &msg, MSG_NOSIGNAL) < 0)
    if (errno != EINTR) fail("send");
}

// One message into `text` and up to nfds descriptors into `fds` (*got of them); false at end of stream.
bool receive_message(int socket, std::string& text, int* fds, int nfds, int* got) {
  text.assign(kMaxMessage, '\0');
  iovec iov{text.data(), text.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(3 * sizeof(int))] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  while ((n = ::recvmsg(socket, &msg, MSG_CMSG_CLOEXEC)) < 0)
    if (errno != EINTR) fail("receive");
  *got = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const int count = static_cast<int>((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    for (int i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      if (*got < nfds)
        fds[(*got)++] = fd;
      else
        ::close(fd);
    }
  }
  if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
    for (int i = 0; i < *got; ++i) ::close(fds[i]);
    throw std::runtime_error("fork server: a message was cut short");
  }
  if (n == 0) return false;
  text.resize(static_cast<size_t>(n));
  return true;
}

}  // namespace

void send_fork_request(int socket, const ForkRequest& r, const int fds[3]) {
  const nlohmann::json j = {{"argv", r.argv},
                            {"env", r.env},
                            {"work_dir", r.work_dir},
                            {"process_group", r.process_group},
                            {"reaper", r.reaper}};
  send_message(socket, j.dump(), fds, 3);
}

bool receive_fork_request(int socket, ForkRequest& r, int fds[3]) {
  std::string text;
  int got = 0;
  if (!receive_message(socket, text, fds, 3, &got)) return false;
  try {
    if (got != 3) throw std::runtime_error("a request came with " + std::to_string(got) + " of its 3 descriptors");
    const auto j = nlohmann::json::parse(text);
    r.argv = j.at("argv").get<std::vector<std::string>>();
    r.env = j.at("env").get<std::vector<std::string>>();
    r.work_dir = j.at("work_dir").get<std::string>();
    r.process_group = j.at("process_group").get<pid_t>();
    r.reaper = j.at("reaper").get<pid_t>();
    if (r.argv.empty()) throw std::runtime_error("a request without argv");
  } catch (const std::exception& e) {
    for (int i = 0; i < got; ++i) ::close(fds[i]);
    throw std::runtime_error(std::string("fork server: malformed request: ") + e.what());
  }
  return true;
}

void send_fork_reply(int socket, const ForkReply& reply) {
  send_message(socket, nlohmann::json{{"pid", reply.pid}, {"error", reply.error}}.dump(), nullptr, 0);
}

ForkReply receive_fork_reply(int socket) {
  std::string text;
  int got = 0;
  if (!receive_message(socket, text, nullptr, 0, &got))
    throw std::runtime_error("fork server: it closed its socket without a reply");
  try {
    const auto j = nlohmann::json::parse(text);
    return ForkReply{j.at("pid").get<pid_t>(), j.at("error").get<std::string>()};
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("fork server: malformed reply: ") + e.what());
  }
}

}  // namespace contract
