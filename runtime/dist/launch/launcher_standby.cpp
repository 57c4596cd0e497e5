#include "runtime/dist/launch/launcher_standby.hpp"

#include <nlohmann/json.hpp>

#include "runtime/dist/coord/run_record.hpp"

namespace actorpipe::launcher_detail {

namespace {

using clock = std::chrono::steady_clock;

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string ns_since_epoch(std::chrono::system_clock::time_point t) {
  return std::to_string(std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
}

}  // namespace

coordinator_standby::coordinator_standby(const launch_options& o) : o_(o) {
  if (!o_.etcd.empty() && o_.apart && !o_.join)
    etcd_ = std::make_unique<etcd_client>(parse_etcd_url(o_.etcd), std::chrono::milliseconds(1000));
}

void coordinator_standby::take_on(bool by_death, bool revoked, std::chrono::seconds first_after) {
  standing_by_ = true;
  by_death_ = by_death;
  revoked_ = revoked;
  lost_at_ = std::chrono::system_clock::now();
  until_ = clock::now() + std::chrono::seconds(60);
  from_ = clock::now() + first_after;
}

bool coordinator_standby::lost(const std::string& what, int code, pid_t pid, std::string& line) {
  line.clear();
  if (!etcd_) return false;
  if (code == standby_lost_exit) {  // another standby won
    line = what + ": another standby took the run over";
    return true;
  }
  bool revoked = false;
  try {
    const auto text = etcd_->get(run_key(o_.run_id, "record"));
    if (text && nlohmann::json::parse(*text).value("finished", false)) return false;
    int64_t lease = 0;
    holder_ = etcd_->get(run_key(o_.run_id, "coordinator"), lease).value_or("");
    // Its process is gone: it commands no more, so its lease goes now
    // rather than at its expiry (a process that stopped or was cut off
    // keeps its lease until it expires: look).
    if (lease != 0 && ends_with(holder_, " pid " + std::to_string(pid))) try {
        etcd_->revoke(lease);
        revoked = true;
      } catch (const std::exception&) {  // expired already
      }
  } catch (const std::exception& e) {
    line = what + "; etcd at " + o_.etcd.substr(7) + " does not answer (" + e.what() + "): no standby can take over";
    return false;
  }
  take_on(true, revoked, std::chrono::seconds(0));
  line = what + ": the run lost its coordinator; the standby here takes the run over " +
         (revoked ? std::string("now (its process is gone: its lease in etcd revoked)")
                  : std::string("once its lease in etcd expires")) +
         "; the workers wait, their boundaries in memory";
  return true;
}

coordinator_standby::seen coordinator_standby::look(bool coordinator_here, std::string& line) {
  if (!etcd_ || standing_by_ || clock::now() < next_look_) return seen::nothing;
  next_look_ = clock::now() + std::chrono::milliseconds(500);
  try {
    // Polled cheaply; an absence is confirmed by a read through the
    // leader (a member behind could miss the name).
    auto holder = etcd_->get_local(run_key(o_.run_id, "coordinator"));
    if (!holder && held_seen_) holder = etcd_->get(run_key(o_.run_id, "coordinator"));
    if (holder) {
      held_seen_ = true;
      holder_ = *holder;
      return seen::nothing;
    }
    if (!held_seen_) return seen::nothing;  // not taken yet
    const auto text = etcd_->get(run_key(o_.run_id, "record"));
    if (text && nlohmann::json::parse(*text).value("finished", false)) return seen::nothing;
  } catch (const std::exception&) {
    return seen::nothing;  // etcd does not answer: the coordinator's own lease says what to do
  }
  if (!coordinator_here) {
    // Another node's coordinator lost the run (its node stopped, hung or
    // was cut off): this node's standby takes over, a second after node
    // 0's could have (which, alive, wins the election).
    take_on(false, false, o_.node_rank > 0 ? std::chrono::seconds(1) : std::chrono::seconds(0));
    line = "the coordinator (" + holder_ +
           ") lost its lease in etcd (stopped, hung or cut off); the standby here takes the run over";
    return seen::taking_over;
  }
  take_on(false, false, std::chrono::seconds(0));
  line = "lost its lease in etcd (stopped, hung or cut off): killed it; the standby here takes the run over";
  return seen::kill_here;
}

coordinator_standby::step coordinator_standby::turn(std::string& line) {
  if (!standing_by_) return step::wait;
  std::optional<std::string> holder;
  try {
    holder = etcd_->get(run_key(o_.run_id, "coordinator"));
  } catch (const std::exception& e) {
    if (clock::now() < until_) return step::wait;
    standing_by_ = false;
    line = std::string("the standby gave up: etcd does not answer (") + e.what() + ")";
    return step::gave_up;
  }
  if (holder && *holder != holder_) {  // another standby won
    standing_by_ = false;
    line = "the run was taken over by the coordinator at " + *holder;
    return step::taken;
  }
  if (holder) return step::wait;           // the lease has not expired yet
  if (clock::now() < from_) return step::wait;  // another node's standby waits for node 0's
  // Seen dying: the lease ended now; else it had when the name was seen gone.
  expired_ = by_death_ ? std::chrono::system_clock::now() : lost_at_;
  standing_by_ = false;
  return step::start;
}

std::vector<std::string> coordinator_standby::takeover_env(std::vector<std::string> env,
                                                           const std::string& self_addr) const {
  for (auto& kv : env) {
    if (kv.rfind("MASTER_ADDR=", 0) == 0) kv = "MASTER_ADDR=" + self_addr;
    // The member that answered here last first: one cut off would cost
    // the new coordinator a timeout on each of its first calls.
    if (kv.rfind("ACTORPIPE_ETCD=", 0) == 0) kv = "ACTORPIPE_ETCD=" + etcd_->url_from_last();
  }
  env.push_back("ACTORPIPE_TAKEOVER=1");
  if (by_death_) env.push_back("ACTORPIPE_LOST_AT_NS=" + ns_since_epoch(lost_at_));  // else: when its lease expired
  if (revoked_) env.push_back("ACTORPIPE_LEASE_REVOKED=1");
  env.push_back("ACTORPIPE_EXPIRED_AT_NS=" + ns_since_epoch(expired_));
  return env;
}

std::string coordinator_standby::started(pid_t pid, uint16_t port, bool forked) {
  held_seen_ = false;
  return std::string("the lost coordinator's lease ") + (revoked_ ? "was revoked " : "expired ") +
         std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(expired_ - lost_at_).count()) +
         " ms after its loss; started a coordinator to take the run over (pid " + std::to_string(pid) +
         ", store port " + std::to_string(port) + (forked ? ", forked from the launcher)" : ")");
}

}  // namespace actorpipe::launcher_detail
