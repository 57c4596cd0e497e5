#pragma once
// A run's durable record in etcd (`launch --coordinator etcd://...`): the
// coordinator holds the run's name under a lease, and writes what a
// standby would need to take over -- the generation, its members and
// placement, the step it resumed after and the last decided step -- when
// one of them changes, from a thread of its own (a step never waits on
// etcd): a new generation and the end at once, a newer decided step at
// most every `decided_every` (a standby asks the stages which boundary
// they hold anyway; the record's step only says how far the run got).
// Keys, under /actorpipe/runs/<run>/:
//   coordinator  who holds the run ("HOST:PORT pid N"), with the lease: it
//                goes when the coordinator's lease expires or is revoked
//   record       the record, JSON, without a lease: it outlives the
//                coordinator ("finished": true once the run ended)
// The lease is renewed every third of its TTL. When no renewal sent in
// the last three quarters of a TTL succeeded (etcd lost, or this
// coordinator cut off) the coordinator must stop commanding -- before the
// lease can expire and a standby win -- : `lost` is called once, with why.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "runtime/dist/coord/etcd_client.hpp"

namespace actorpipe {

/// The key of `what` for run `run`.
std::string run_key(const std::string& run, const std::string& what);

/// The line that refuses run `run`, held by `holder` in etcd at `members`
/// ("HOST:PORT,..."): the launcher's before it starts anything, the
/// coordinator's when another took the name in between.
std::string run_held_line(const std::string& run, const std::string& holder, const std::string& members);

class run_record {
public:
  /// Takes run `run` in etcd at `url` for `holder`, under a lease of
  /// `ttl_s` seconds. Throws etcd_error when etcd does not serve it, and
  /// run_taken when a live coordinator holds the run already.
  run_record(const std::string& url, const std::string& run, const std::string& holder, int64_t ttl_s,
             std::function<void(const std::string&)> lost,
             std::chrono::milliseconds decided_every = std::chrono::milliseconds(500));
  /// Marks the record finished (finish() not called: as it was), revokes
  /// the lease, and stops the thread.
  ~run_record();
  run_record(const run_record&) = delete;
  run_record& operator=(const run_record&) = delete;

  struct run_taken : etcd_error {
    using etcd_error::etcd_error;
  };

  /// A generation formed: its number, members (the RANKs users see),
  /// placement and partition (as the run prints them), and the step it
  /// resumed after.
  /// `takeover`: what a standby needs to take the generation over
  /// (actors/supervisor/takeover.cpp), kept as it is.
  void generation(uint32_t number, const std::string& members, const std::string& placement, const std::string& parts,
                  int64_t resumed_after, const std::string& takeover = "");
  /// The driver decided `step` (every live stage will hold it).
  void decided(int64_t step);
  /// The run ended with `code`.
  void finish(int code);
  /// Writes what is left (the end, after finish()) and revokes the lease,
  /// then stops the thread; the destructor's work, for a process that may
  /// leave without running destructors. While etcd elects a leader (a
  /// member lost just before) it tries again, within the lease's time and
  /// 3 s, as long as etcd still keeps the lease; otherwise it says on
  /// stderr what was not written. A second call returns at once.
  void close();

private:
  void loop();
  void close_out(std::string text);

  etcd_client client_;
  std::string run_, holder_;
  int64_t ttl_s_;
  int64_t lease_ = 0;
  std::chrono::steady_clock::time_point granted_at_{};
  std::function<void(const std::string&)> lost_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false, dirty_ = false, urgent_ = false, finished_ = false;
  std::chrono::milliseconds decided_every_;
  std::string generation_;  // the generation's fields, JSON members without braces
  int64_t decided_ = -1;
  int exit_code_ = -1;
  std::thread thread_;
};

}  // namespace actorpipe
