#pragma once
// Three etcd members on loopback (or one in each of several network
// namespaces: hosts as far as the network goes), as a user starts a cluster (one data
// directory each, a static initial cluster), on ports the kernel gave out a
// moment before (runtime/dist/transport/net_address.hpp: free_port). Every
// member is SIGKILLed and reaped when it goes away, in every path; one can
// be killed on purpose. Needs Debian's etcd-server (scripts/setup.sh).
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "runtime/dist/coord/etcd_client.hpp"
#include "runtime/dist/transport/net_address.hpp"

namespace actorpipe::testing_util {

inline const char* etcd_binary() { return "/usr/bin/etcd"; }

class etcd_cluster {
public:
  /// Starts `n` members under `dir` and waits (up to 20 s) until they
  /// serve a write; ok() says whether they did, why() why not.
  explicit etcd_cluster(const std::filesystem::path& dir, int n = 3) : etcd_cluster(dir, std::vector<host>(n)) {}

  /// Where a member runs: a network namespace (`ip netns exec NS`, with
  /// `ip` the binary's path) and the address it listens on there; empty:
  /// here, on loopback.
  struct host {
    std::string netns, addr, ip;
  };
  /// One member on each of `hosts`, as users spread a cluster over machines.
  etcd_cluster(const std::filesystem::path& dir, const std::vector<host>& hosts) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    std::string initial;
    for (size_t i = 0; i < hosts.size(); ++i) {
      member m;
      m.name = "m" + std::to_string(i);
      m.where = hosts[i];
      if (m.where.addr.empty()) m.where.addr = "127.0.0.1";
      // Free here a moment ago; a fresh namespace has every port free.
      m.client = free_port("127.0.0.1");
      m.peer = free_port("127.0.0.1");
      initial += (i ? "," : "") + m.name + "=http://" + m.where.addr + ":" + std::to_string(m.peer);
      members_.push_back(m);
    }
    const pid_t parent = ::getpid();
    for (auto& m : members_) {
      const std::string client = "http://" + m.where.addr + ":" + std::to_string(m.client);
      const std::string peer = "http://" + m.where.addr + ":" + std::to_string(m.peer);
      std::vector<std::string> args = {etcd_binary(),
                                       "--name", m.name,
                                       "--data-dir", (dir / m.name).string(),
                                       "--listen-client-urls", client, "--advertise-client-urls", client,
                                       "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                                       "--initial-cluster", initial, "--initial-cluster-state", "new",
                                       "--initial-cluster-token", dir.filename().string(),
                                       "--logger", "zap", "--log-outputs", (dir / (m.name + ".log")).string()};
      if (!m.where.netns.empty()) args.insert(args.begin(), {m.where.ip, "netns", "exec", m.where.netns});
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      m.pid = ::fork();
      if (m.pid == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != parent) _exit(126);
        ::execv(argv[0], argv.data());
        _exit(127);
      }
    }
    etcd_client probe(endpoints(), std::chrono::milliseconds(1000));
    for (int i = 0; i < 100; ++i) {
      try {
        probe.put("/actorpipe-test/ready", "1");
        ok_ = true;
        return;
      } catch (const std::exception& e) {
        why_ = e.what();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }

  ~etcd_cluster() {
    for (int i = 0; i < static_cast<int>(members_.size()); ++i) kill(i);
  }
  etcd_cluster(const etcd_cluster&) = delete;
  etcd_cluster& operator=(const etcd_cluster&) = delete;

  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }

  /// Every member's client address, in order.
  std::vector<etcd_endpoint> endpoints() const {
    std::vector<etcd_endpoint> out;
    for (const auto& m : members_) out.push_back({m.where.addr, m.client});
    return out;
  }
  /// "etcd://127.0.0.1:P0,127.0.0.1:P1,..."
  std::string url() const {
    std::string s = "etcd://";
    for (const auto& e : endpoints()) s += (s.size() > 7 ? "," : "") + e.text();
    return s;
  }

  /// SIGKILLs member i and reaps it (nothing when it is gone already).
  void kill(int i) {
    auto& m = members_.at(static_cast<size_t>(i));
    if (m.pid <= 0) return;
    ::kill(m.pid, SIGKILL);
    ::waitpid(m.pid, nullptr, 0);
    m.pid = -1;
  }

private:
  struct member {
    std::string name;
    host where;
    uint16_t client = 0, peer = 0;
    pid_t pid = -1;
  };
  std::vector<member> members_;
  bool ok_ = false;
  std::string why_ = "not started";
};

}  // namespace actorpipe::testing_util
