#pragma once
// etcd as users start it: 3 members, one in each of 3 network namespaces
// on a bridge (hosts as far as the network goes; this process and what it
// runs reach them through the bridge's address here), where namespaces can
// be made (as root); otherwise 3 members on loopback ports
// (etcd_cluster.hpp). Each test file takes its own subnet. The members go
// before their namespaces, in every path.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tests/apps/two_namespaces.hpp"
#include "tests/runtime/dist/coord/etcd_cluster.hpp"

namespace actorpipe::testing_util {

class spread_cluster {
public:
  spread_cluster(const std::filesystem::path& dir, const std::string& subnet) {
    if (::geteuid() == 0 && !ip_binary().empty()) {
      ns_ = std::make_unique<bridged_namespaces>("ed", 'e', subnet, 3);
      if (ns_->ok) {
        std::vector<etcd_cluster::host> hosts;
        for (int i = 0; i < 3; ++i) hosts.push_back({ns_->hosts[static_cast<size_t>(i)], ns_->addr(i), ip_binary()});
        cluster_ = std::make_unique<etcd_cluster>(dir, hosts);
        std::printf("etcd: one member in each of 3 network namespaces (%s.1-3)\n", ns_->net.c_str());
        return;
      }
      ns_.reset();
    }
    cluster_ = std::make_unique<etcd_cluster>(dir);
    std::printf("etcd: 3 members on loopback ports (no network namespace here)\n");
  }
  etcd_cluster& operator*() { return *cluster_; }

private:
  std::unique_ptr<bridged_namespaces> ns_;  // declared first: destroyed last
  std::unique_ptr<etcd_cluster> cluster_;
};

}  // namespace actorpipe::testing_util
