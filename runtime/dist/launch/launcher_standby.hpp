#pragma once
// Inside runtime/dist/launcher (not a public header): a launcher's standby
// for the coordinator under `launch --coordinator etcd://...`. It reads
// etcd and keeps the standby's state; the launcher does what it decides
// (kill the coordinator here, start one that takes the run over).
//   - The coordinator here died before the run finished: its lease is
//     revoked at once (a process that is gone commands no more) and the
//     standby takes over (lost).
//   - Every half second otherwise: whether the coordinator still holds the
//     run; once it held it, a name gone before the record says the run
//     finished is a lease that expired (stopped, hung or cut off): the one
//     here is killed, and the standby takes over; another node's standby a
//     second after node 0's could have (look).
//   - Standing by: once the name is free, a coordinator starts here on a
//     fresh store port; the election (taking the name) is its own (turn).
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/dist/coord/etcd_client.hpp"
#include "runtime/dist/launch/launcher.hpp"

namespace actorpipe::launcher_detail {

class coordinator_standby {
public:
  /// Inert (active() false) but for a run with etcd and a coordinator apart.
  explicit coordinator_standby(const launch_options& o);

  bool active() const { return etcd_ != nullptr; }
  /// The coordinator is lost and nothing took the run over yet.
  bool standing_by() const { return standing_by_; }

  /// The coordinator here (pid) ended with `code` before the run finished,
  /// as `what` says: true when the standby handles it (it took the loss
  /// on, or another standby won), `line` then said; false: the loss is as
  /// without etcd (`line` may say why).
  bool lost(const std::string& what, int code, pid_t pid, std::string& line);

  enum class seen { nothing, kill_here, taking_over };
  /// Every loop turn while not standing by (at most every 0.5 s it asks):
  /// kill_here: the coordinator here lost its lease (kill it: the standby
  /// takes over); taking_over: another node's did; `line` says which.
  seen look(bool coordinator_here, std::string& line);

  enum class step { wait, gave_up, taken, start };
  /// Every loop turn while standing by: wait; gave_up (etcd does not
  /// answer for a minute; `line` why); taken (another standby won; `line`);
  /// start (the name is free: start a coordinator with takeover_env).
  step turn(std::string& line);

  /// `env` (worker_env of rank 0) made a taking-over coordinator's: on
  /// this node's address, asking etcd's member that answered here last
  /// first, with the loss's times.
  std::vector<std::string> takeover_env(std::vector<std::string> env, const std::string& self_addr) const;
  /// The coordinator that takes over started (pid, store port, forked):
  /// its line.
  std::string started(pid_t pid, uint16_t port, bool forked);

private:
  void take_on(bool by_death, bool revoked, std::chrono::seconds first_after);

  const launch_options& o_;
  std::unique_ptr<etcd_client> etcd_;
  bool standing_by_ = false;
  std::string holder_;          // the lost coordinator's name in etcd
  bool by_death_ = false;       // seen dying (else: its lease expired)
  bool revoked_ = false;        // its lease revoked here (its process gone)
  bool held_seen_ = false;      // a coordinator has taken the run in etcd
  std::chrono::steady_clock::time_point next_look_{}, until_{}, from_{};
  std::chrono::system_clock::time_point lost_at_{}, expired_{};
};

}  // namespace actorpipe::launcher_detail
