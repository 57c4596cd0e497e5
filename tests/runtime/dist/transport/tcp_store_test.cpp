// make_tcp_store: a client whose store server goes away goes on, without
// a thread that spins. Each scene runs the server and the client in
// processes of their own (forked; killed in every path): libtorch 1.x's
// own watch-key listener, left as it is, ends the client (std::terminate)
// when the server is killed with the client's connections still in its
// accept queue, and spins a core for as long as the store lives when the
// server closes.
#include "runtime/dist/transport/tcp_store.hpp"

#include <gtest/gtest.h>
#include <torch/version.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

namespace actorpipe {
namespace {

using namespace std::chrono_literals;

// LibTorch 1.x's store has the listener; later versions' are made as they
// are.
#define REQUIRE_LISTENER()  \
  if (TORCH_VERSION_MAJOR != 1) \
  GTEST_SKIP() << "this LibTorch's TCPStore has no watch-key listener to quiet"

// A process that hosts a TCPStore server on a port the kernel gives out.
class server_process {
public:
  server_process() {
    int p[2];
    if (::pipe(p) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      c10d::TCPStoreOptions so;
      so.port = 0;
      so.isServer = true;
      so.waitWorkers = false;
      auto s = make_tcp_store("127.0.0.1", so);
      const uint16_t port = s->getPort();
      if (::write(p[1], &port, sizeof port) != sizeof port) ::_exit(3);
      for (;;) ::pause();
    }
    ::close(p[1]);
    if (::read(p[0], &port_, sizeof port_) != sizeof port_) port_ = 0;
    ::close(p[0]);
  }
  ~server_process() { kill(SIGKILL); }
  uint16_t port() const { return port_; }
  void kill(int signal) {
    if (pid_ <= 0) return;
    ::kill(pid_, signal);
    if (signal == SIGKILL) {
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }

private:
  pid_t pid_ = -1;
  uint16_t port_ = 0;
};

double cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec / 1e6;
}

// What the client process saw after the server went.
struct client_report {
  bool quieted = false;
  bool op_failed = false;    // a get on the store failed (as it must)
  double cpu_after_s = -1;   // CPU this process used in the 1.5 s after
  int status = -1;           // its wait status
};

// A client process: makes its store (`touch`: one op through it first),
// says so, waits for the word that the server was killed, then uses the
// store and measures its own CPU for 1.5 s.
client_report run_client(server_process& server, bool touch, int signal) {
  client_report r;
  int up[2], down[2];
  if (::pipe(up) != 0 || ::pipe(down) != 0) return r;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::close(up[0]);
    ::close(down[1]);
    client_report mine;
    c10d::TCPStoreOptions so;
    so.port = server.port();
    so.waitWorkers = false;
    so.timeout = 3000ms;
    auto s = make_tcp_store("127.0.0.1", so);
    if (touch) s->set("k", std::vector<uint8_t>{1});
    mine.quieted = listener_quieted(*s);
    char go = 0;
    if (::write(up[1], &mine, sizeof mine) != sizeof mine || ::read(down[0], &go, 1) != 1) ::_exit(3);
    const double t0 = cpu_seconds();
    std::this_thread::sleep_for(1500ms);
    mine.cpu_after_s = cpu_seconds() - t0;
    try {
      s->get("never");
    } catch (const std::exception&) {
      mine.op_failed = true;
    }
    if (::write(up[1], &mine, sizeof mine) != sizeof mine) ::_exit(3);
    s.reset();  // the store's destructor returns
    ::_exit(0);
  }
  ::close(up[1]);
  ::close(down[0]);
  if (::read(up[0], &r, sizeof r) == sizeof r) {
    if (signal == SIGSTOP) server.kill(SIGSTOP);
    server.kill(SIGKILL);
    if (::write(down[1], "g", 1) == 1) {
      client_report after;
      if (::read(up[0], &after, sizeof after) == sizeof after) r = after;
    }
  }
  ::close(up[0]);
  ::close(down[1]);
  // Bounded: a client that hangs is killed.
  for (int i = 0; i < 200; ++i) {
    if (::waitpid(pid, &r.status, WNOHANG) == pid) return r;
    std::this_thread::sleep_for(50ms);
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &r.status, 0);
  r.status = -2;
  return r;
}

std::string describe(int status) {
  if (status == -2) return "hung (killed after 10 s)";
  if (WIFEXITED(status)) return "exited " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("killed by ") + strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

TEST(TcpStore, AServerKilledWithTheClientsConnectionsInItsAcceptQueueLeavesTheClientRunning) {
  REQUIRE_LISTENER();
  server_process server;
  ASSERT_GT(server.port(), 0);
  server.kill(SIGSTOP);  // it accepts nothing: the connections wait in its queue
  const client_report r = run_client(server, false, SIGKILL);
  EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << describe(r.status);
  EXPECT_TRUE(r.quieted);
  EXPECT_TRUE(r.op_failed);
}

TEST(TcpStore, AServerThatClosesLeavesNoThreadSpinningInTheClient) {
  REQUIRE_LISTENER();
  server_process server;
  ASSERT_GT(server.port(), 0);
  const client_report r = run_client(server, true, SIGKILL);
  EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << describe(r.status);
  EXPECT_TRUE(r.quieted);
  EXPECT_TRUE(r.op_failed);
  std::printf("the client used %.3f s of CPU in the 1.5 s after its server closed\n", r.cpu_after_s);
  EXPECT_GE(r.cpu_after_s, 0);
  EXPECT_LT(r.cpu_after_s, 0.3) << "a thread spins on the closed connection";  // one that spins takes ~1.5 s
}

TEST(TcpStore, AQuietedStoreServesEveryOpAndRefusesAWatch) {
  c10d::TCPStoreOptions so;
  so.port = 0;
  so.isServer = true;
  so.waitWorkers = false;
  auto host = make_tcp_store("127.0.0.1", so);
  c10d::TCPStoreOptions co;
  co.port = host->getPort();
  co.waitWorkers = false;
  co.timeout = 3000ms;
  auto client = make_tcp_store("127.0.0.1", co);
  EXPECT_EQ(listener_quieted(*host), TORCH_VERSION_MAJOR == 1);
  EXPECT_EQ(listener_quieted(*client), TORCH_VERSION_MAJOR == 1);
  client->set("a", {7, 8});
  EXPECT_EQ(host->get("a"), (std::vector<uint8_t>{7, 8}));
  EXPECT_EQ(client->add("n", 5), 5);
  EXPECT_EQ(host->add("n", 2), 7);
  EXPECT_TRUE(client->check({"a", "n"}));
  EXPECT_FALSE(client->check({"b"}));
  std::thread later([&host] {
    std::this_thread::sleep_for(100ms);
    host->set("b", {1});
  });
  client->wait({"b"});
  later.join();
  EXPECT_EQ(client->compareSet("a", {7, 8}, {9}), (std::vector<uint8_t>{9}));
  EXPECT_TRUE(client->deleteKey("a"));
  EXPECT_EQ(host->getNumKeys(), 2);
#if TORCH_VERSION_MAJOR == 1
  try {
    client->watchKey("a", [](c10::optional<std::string>, c10::optional<std::string>) {});
    ADD_FAILURE() << "watchKey did not throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("watch-key listener is off"), std::string::npos) << e.what();
  }
#endif
}

}  // namespace
}  // namespace actorpipe
