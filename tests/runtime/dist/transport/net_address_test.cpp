// cut_connections_to: a read blocked on a connection to a peer that
// answers nothing ends at once when the connections to that peer are cut;
// a connection to another port is left alone.
#include "runtime/dist/transport/net_address.hpp"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <future>

namespace actorpipe {
namespace {

// A client socket connected to a listener on 127.0.0.1 (the listener's
// fd, the client's fd, the port); the accepted end stays in the backlog
// and answers nothing.
struct silent_peer {
  int listener = -1, client = -1;
  uint16_t port = 0;
  silent_peer() {
    std::tie(listener, port) = bind_any_port("127.0.0.1", true, "test");
    client = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(client, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) client = -1;
  }
  ~silent_peer() {
    if (client >= 0) ::close(client);
    if (listener >= 0) ::close(listener);
  }
};

TEST(CutConnections, ABlockedReadEndsAtOnceAndOtherPortsAreLeftAlone) {
  silent_peer cut, kept;
  ASSERT_GE(cut.client, 0);
  ASSERT_GE(kept.client, 0);
  auto blocked = std::async(std::launch::async, [fd = cut.client] {
    char c = 0;
    return ::recv(fd, &c, 1, 0);
  });
  EXPECT_EQ(blocked.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout);
  EXPECT_EQ(cut_connections_to("127.0.0.1", cut.port), 1);
  ASSERT_EQ(blocked.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_LE(blocked.get(), 0);
  // The other connection still works: nothing to read, and no end seen.
  char c = 0;
  EXPECT_EQ(::recv(kept.client, &c, 1, MSG_DONTWAIT), -1);
  EXPECT_EQ(errno, EAGAIN);
  EXPECT_EQ(cut_connections_to("no-such-host.invalid", cut.port), 0);
}

// free_port draws below the kernel's ephemeral range, where no bind to
// port 0 or connect elsewhere on the host can take it in the meantime; the
// port it gives binds.
TEST(FreePort, IsBelowTheEphemeralRangeAndBinds) {
  int low = 32768;
  if (FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    ASSERT_EQ(std::fscanf(f, "%d", &low), 1);
    std::fclose(f);
  }
  if (low <= 4096) GTEST_SKIP() << "the ephemeral range starts at " << low;
  for (int i = 0; i < 20; ++i) {
    const uint16_t port = free_port("127.0.0.1");
    EXPECT_LT(port, low);
    EXPECT_GE(port, low / 2);
    EXPECT_TRUE(port < 29400 || port > 29600) << port;
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in at{};
    at.sin_family = AF_INET;
    at.sin_port = htons(port);
    at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&at), sizeof at), 0) << port;
    ::close(fd);
  }
}

}  // namespace
}  // namespace actorpipe
