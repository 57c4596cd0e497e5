#pragma once
// Two hosts as far as the network goes, for tests on one machine: two
// network namespaces joined by a veth pair, `<net>.1` in `a` and `<net>.2`
// in `b`. Each test file names its own and takes its own subnet, so files
// running at once never meet. The destructor deletes both namespaces
// (which removes the veth ends) in every path, and the host-side veth in
// case it never moved.
#include <unistd.h>

#include <string>
#include <vector>

#include "tests/apps/child_process.hpp"

namespace actorpipe::testing_util {

inline std::string ip_binary() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"})
    if (::access(p, X_OK) == 0) return p;
  return "";
}

/// `ip args...`; "" on success, else what it printed and its exit code.
inline std::string ip(const std::vector<std::string>& args) {
  child_limits limits;
  limits.timeout_s = 30;
  const auto r = run_child(ip_binary(), args, limits);
  if (r.code == 0) return "";
  std::string cmd = "ip";
  for (const auto& a : args) cmd += " " + a;
  return cmd + " -> exit " + std::to_string(r.code) + ": " + r.err + r.out;
}

class two_namespaces {
public:
  /// Namespaces `<tag>A_PID` and `<tag>B_PID`, veth ends `<link>A PID` and
  /// `<link>B PID` (one letter each: under IFNAMSIZ), on `<subnet>.N` with N
  /// from the pid.
  two_namespaces(const std::string& tag, char link, const std::string& subnet) {
    const std::string id = std::to_string(getpid());
    a = tag + "A_" + id;
    b = tag + "B_" + id;
    va = std::string(1, link) + "A" + id;
    vb = std::string(1, link) + "B" + id;
    net = subnet + "." + std::to_string(getpid() % 250);
    if (ip_binary().empty()) {
      why = "no ip binary";
      return;
    }
    ip({"netns", "del", a});  // leftovers of a killed run with the same pid
    ip({"netns", "del", b});
    ip({"link", "del", va});
    if (!(why = ip({"netns", "add", a})).empty()) return;
    made_a = true;
    if (!(why = ip({"netns", "add", b})).empty()) return;
    made_b = true;
    for (const auto& step : std::vector<std::vector<std::string>>{
             {"link", "add", va, "type", "veth", "peer", "name", vb},
             {"link", "set", va, "netns", a},
             {"link", "set", vb, "netns", b},
             {"-n", a, "addr", "add", net + ".1/24", "dev", va},
             {"-n", b, "addr", "add", net + ".2/24", "dev", vb},
             {"-n", a, "link", "set", va, "up"},
             {"-n", b, "link", "set", vb, "up"},
             {"-n", a, "link", "set", "lo", "up"},
             {"-n", b, "link", "set", "lo", "up"},
         }) {
      if (!(setup_error = ip(step)).empty()) return;
    }
    ok = true;
  }
  ~two_namespaces() {
    if (made_a) ip({"netns", "del", a});
    if (made_b) ip({"netns", "del", b});
    if (!ok) ip({"link", "del", va});  // gone already when it reached a namespace
  }
  two_namespaces(const two_namespaces&) = delete;
  two_namespaces& operator=(const two_namespaces&) = delete;

  std::string a, b, va, vb, net;
  bool ok = false;
  std::string why;          ///< a namespace could not be made: skip
  std::string setup_error;  ///< the namespaces exist but the link failed: fail

private:
  bool made_a = false, made_b = false;
};

/// N hosts as far as the network goes: namespaces `<tag>0_PID` ..
/// `<tag>{N-1}_PID`, each with one veth end on `<net>.{i+1}/24`, whose other
/// end is on a bridge in this (the root) namespace holding `<net>.254`: every
/// host reaches every other, and this process reaches them all (to ask an
/// etcd member, say). cut(i) sets host i's link down. The destructor
/// deletes the namespaces (and so the veth pairs) and the bridge in every
/// path.
class bridged_namespaces {
public:
  bridged_namespaces(const std::string& tag, char link, const std::string& subnet, int n) {
    const std::string id = std::to_string(getpid());
    net = subnet + "." + std::to_string(getpid() % 250);
    bridge = std::string(1, link) + "br" + id;
    if (ip_binary().empty()) {
      why = "no ip binary";
      return;
    }
    for (int i = 0; i < n; ++i) {
      hosts.push_back(tag + std::to_string(i) + "_" + id);
      ends.push_back(std::string(1, link) + std::to_string(i) + "h" + id);
      peers.push_back(std::string(1, link) + std::to_string(i) + "b" + id);
      ip({"netns", "del", hosts.back()});  // leftovers of a killed run with the same pid
      ip({"link", "del", peers.back()});
    }
    ip({"link", "del", bridge});
    if (!(why = ip({"link", "add", bridge, "type", "bridge"})).empty()) return;
    made_bridge = true;
    for (const auto& step : std::vector<std::vector<std::string>>{{"addr", "add", net + ".254/24", "dev", bridge},
                                                                 {"link", "set", bridge, "up"}})
      if (!(setup_error = ip(step)).empty()) return;
    for (int i = 0; i < n; ++i) {
      if (!(why = ip({"netns", "add", hosts[static_cast<size_t>(i)]})).empty()) return;
      made.push_back(hosts[static_cast<size_t>(i)]);
      const std::string& h = hosts[static_cast<size_t>(i)];
      const std::string& e = ends[static_cast<size_t>(i)];
      const std::string& p = peers[static_cast<size_t>(i)];
      for (const auto& step : std::vector<std::vector<std::string>>{
               {"link", "add", e, "type", "veth", "peer", "name", p},
               {"link", "set", e, "netns", h},
               {"link", "set", p, "master", bridge},
               {"link", "set", p, "up"},
               {"-n", h, "addr", "add", addr(i) + "/24", "dev", e},
               {"-n", h, "link", "set", e, "up"},
               {"-n", h, "link", "set", "lo", "up"},
           })
        if (!(setup_error = ip(step)).empty()) return;
    }
    ok = true;
  }
  ~bridged_namespaces() {
    for (const auto& h : made) ip({"netns", "del", h});
    for (const auto& p : peers) ip({"link", "del", p});  // gone already with its namespace's end
    if (made_bridge) ip({"link", "del", bridge});
  }
  bridged_namespaces(const bridged_namespaces&) = delete;
  bridged_namespaces& operator=(const bridged_namespaces&) = delete;

  /// Host i's address.
  std::string addr(int i) const { return net + "." + std::to_string(i + 1); }
  /// Host i's link down (""), or what `ip` said.
  std::string cut(int i) const { return ip({"-n", hosts.at(static_cast<size_t>(i)), "link", "set", ends.at(static_cast<size_t>(i)), "down"}); }

  std::vector<std::string> hosts, ends, peers;
  std::string net, bridge;
  bool ok = false;
  std::string why;          ///< a namespace could not be made: skip
  std::string setup_error;  ///< the namespaces exist but a link failed: fail

private:
  std::vector<std::string> made;
  bool made_bridge = false;
};

}  // namespace actorpipe::testing_util
