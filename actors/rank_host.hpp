#pragma once
// Rank 0's generations of a multi-process run, for the supervisor actor
// (actors/generation_host.hpp). A generation is every rank's: each joins
// the rendezvous and builds its own stages (actors/rank_context.hpp); rank
// 0 then runs the driver over all of them. After a failure it finds the
// processes that are gone, asks the others what they hold, and heals from
// their memory (or disk) with the launcher starting the dead again, or
// gives up; at the end it tells every rank the exit code.
#include <memory>

#include "actors/generation_host.hpp"
#include "actors/rank_context.hpp"

namespace actorpipe {
class run_record;
}

namespace actorpipe::rank_detail {

/// What rank 0's host is made of (run_rank's set-up).
struct rank_start {
  const config& cfg;
  const train_options& opts;
  const rank_env& env;
  milliseconds timeout;
  attempt_plan plan;
  std::string host;  // this rank's address toward the master
  caf::actor dir;    // its published directory
  uint16_t port = 0;
  std::shared_ptr<boundary_memory> boundary;  // null: no healing
  /// A process that joined a running job (runtime/dist/join.hpp): its RANK
  /// and the generation it joins (the store is open already). -1: none.
  int home = -1;
  uint32_t generation = 0;
  /// Rank 0 under `launch --coordinator etcd://...`: the run's durable
  /// record (runtime/dist/coord/run_record.hpp); null: none.
  std::shared_ptr<run_record> record = nullptr;
  /// A coordinator that takes the run over (launch --coordinator etcd://,
  /// actors/rank_takeover.cpp); none: this run's first.
  std::optional<takeover_start> takeover = std::nullopt;
};

/// Built on the supervisor's own thread (it makes a scoped actor there).
std::unique_ptr<generation_host> make_rank_host(rank_runtime& rt, rank_start start);

}  // namespace actorpipe::rank_detail
