#include "run/ports.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <set>

namespace {

bool bindable(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

TEST(StorePort, FreeOutsideTheEphemeralRangeAndNeverHandedOutTwiceWhileHeld) {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int lo = 0, hi = 0;
  range >> lo >> hi;
  std::set<int> ours;
  for (int i = 0; i < 100; ++i) {
    const int port = meshtest::reserve_store_port();
    EXPECT_TRUE(port < lo || port > hi) << port << " lies in the ephemeral range " << lo << "-" << hi;
    EXPECT_TRUE(bindable(port)) << port;
    EXPECT_TRUE(ours.insert(port).second) << port << " handed out twice";
  }

  // Another process (a second meshtest) never gets a port this one holds.
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(fds[0]);
    for (int i = 0; i < 2000; ++i) {
      const int port = meshtest::reserve_store_port();
      if (::write(fds[1], &port, sizeof port) != sizeof port) ::_exit(2);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  int port = 0, read_back = 0;
  while (::read(fds[0], &port, sizeof port) == sizeof port) {
    ++read_back;
    EXPECT_EQ(ours.count(port), 0u) << "the other process got " << port << ", which this one holds";
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_EQ(read_back, 2000);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}
