#include "run/ports.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <deque>
#include <fstream>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace meshtest {
namespace {

constexpr int kLowestPort = 20000;  // below this sit well-known services; above 65535 nothing
constexpr size_t kHeldReservations = 256;

// The kernel's ephemeral range (Linux default 32768-60999).
std::pair<int, int> ephemeral_range() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int lo = 32768, hi = 60999;
  in >> lo >> hi;
  return {lo, hi};
}

// Ports in [kLowestPort, 65535] outside the ephemeral range, as [first, last] spans.
std::vector<std::pair<int, int>> candidate_spans() {
  const auto [lo, hi] = ephemeral_range();
  std::vector<std::pair<int, int>> spans;
  if (lo - 1 >= kLowestPort) spans.push_back({kLowestPort, lo - 1});
  if (hi + 1 <= 65535) spans.push_back({std::max(hi + 1, kLowestPort), 65535});
  return spans;
}

// An abstract unix socket named after the port: binding it is atomic across processes
// and the name disappears with the process. -1 if someone holds it.
int hold_reservation(int port) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket(AF_UNIX): ") + std::strerror(errno));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string name = "meshtest-store-port-" + std::to_string(port);
  std::memcpy(addr.sun_path + 1, name.data(), name.size());  // sun_path[0] == 0: abstract
  const socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Whether a TCP listener could bind the port on every address right now. `port` 0 asks
// the kernel for one (the fallback where no port lies outside the ephemeral range).
int try_bind_tcp(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t len = sizeof(addr);
  const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                     ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  ::close(fd);
  return bound ? ntohs(addr.sin_port) : -1;
}

}  // namespace

int reserve_store_port() {
  static std::mutex mu;
  static std::deque<int> held;  // reservation sockets, oldest first
  static std::mt19937 pick(std::random_device{}() ^ static_cast<unsigned>(::getpid()));
  static const std::vector<std::pair<int, int>> spans = candidate_spans();
  std::lock_guard<std::mutex> lock(mu);

  int size = 0;
  for (const auto& [first, last] : spans) size += last - first + 1;
  for (int attempt = 0; attempt < 512; ++attempt) {
    int port = 0;
    if (size > 0) {
      int k = std::uniform_int_distribution<int>(0, size - 1)(pick);
      for (const auto& [first, last] : spans) {
        if (k <= last - first) {
          port = first + k;
          break;
        }
        k -= last - first + 1;
      }
    } else {
      port = try_bind_tcp(0);
      if (port < 0) throw std::runtime_error(std::string("cannot find a free port: ") + std::strerror(errno));
    }
    const int reservation = hold_reservation(port);
    if (reservation < 0) continue;  // another meshtest (or this one, recently) has it
    if (try_bind_tcp(port) != port) {
      ::close(reservation);
      continue;
    }
    held.push_back(reservation);
    if (held.size() > kHeldReservations) {
      ::close(held.front());
      held.pop_front();
    }
    return port;
  }
  throw std::runtime_error("cannot find a free store port outside the ephemeral range");
}

}  // namespace meshtest
