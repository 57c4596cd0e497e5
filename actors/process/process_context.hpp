#pragma once
// The process room (actors/process/): one process's part of a multi-process
// run, whether rank 0 (whose supervisor decides, actors/supervisor/) or a
// worker under its agent. This header is what a process keeps for the whole
// run; each step of a generation has a unit of its own:
//
//   links.cpp            the rendezvous, the data plane, the tensor channels,
//                        the replica and tie groups, the time origin
//   directory.cpp        the directory actor a process publishes; connecting
//                        to every process's; serving until rank 0 says stop
//                        or heal
//   process_stages.cpp   this process's stage actors: where each starts from
//                        (the config, disk, its own memory, a donor's), the
//                        copies donated and received, spawned and stopped
//   join_generation.cpp  the steps above in order, for one generation
//   forming.cpp          a generation that forms while one of its processes
//                        is lost: every rank puts its context back and takes
//                        the next plan
//   worker_agent.cpp     a worker's agent: joins each generation, serves it
//   coordinator_watch.cpp  a worker that loses the coordinator says so
//
// Not a public header: actors/process_run.hpp is the entry point.
#include <caf/all.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "actors/attempt/attempt_setup.hpp"
#include "actors/attempt/generation_host.hpp"
#include "actors/stage/stage_actor.hpp"
#include "actors/attempt/restart_ledger.hpp"
#include "runtime/dist/placement/boundary_memory.hpp"
#include "runtime/dist/collectives/collectives.hpp"
#include "runtime/dist/placement/heal_plan.hpp"
#include "runtime/dist/placement/rank_placement.hpp"
#include "runtime/model/model.hpp"
#include "runtime/dist/transport/kv_store.hpp"
#include "runtime/dist/transport/rendezvous.hpp"
#include "runtime/dist/transport/shared_segments.hpp"
#include "runtime/dist/transport/tensor_channel.hpp"

namespace actorpipe {
class data_plane;
class run_record;
}

namespace actorpipe::rank_detail {

using clock_type = std::chrono::steady_clock;
using std::chrono::milliseconds;
using group_map = std::map<int, std::shared_ptr<allreduce_group>>;  // by slot index d * pp + r

// What outlives the stage actors of a rank: the store, every generation's
// channel and groups (an old one may still be inside a transfer or a
// collective that a dead peer never completes: kept for good), and the
// actor system, destroyed first (members go in reverse order), which waits
// for them.
struct process_runtime {
  kv_store_ptr store;
  std::vector<std::shared_ptr<tensor_channel>> channels;
  std::vector<group_map> groups;
  caf::actor_system_config sc;
  std::unique_ptr<caf::actor_system> sys;
};

// What stays for the whole process: the actor system, this rank's
// directory, its place, and (rank 0) the supervision of every generation.
struct process_context {
  const config& cfg;
  const train_options& opts;
  /// As this generation sees it: after a re-placement over fewer processes
  /// its rank and world size are its place among them (opts.ranks keeps
  /// the RANK it was started with).
  rank_env env;
  std::string where;
  milliseconds timeout;
  rank_placement places;
  attempt_plan plan;
  std::string host;
  caf::scoped_actor& self;
  caf::actor dir;
  uint16_t port = 0;
  resume_point rp0;  // generation 0's start (--resume)
  std::shared_ptr<boundary_memory> boundary;  // null: no healing
  // Rank 0 (its steps, notices and restarts are the supervisor's log).
  restart_ledger ledger{};
  /// The processes of this generation by rank, each as the RANK it was
  /// started with (empty: every one, in order).
  std::vector<int> members{};
  bool fresh = true;  // this process's first generation
  // Rank 0: the run's first WORLD_SIZE, and how many joiners it took in
  // (runtime/dist/launch/join.hpp).
  int world0 = 0;
  int joined = 0;
  // Rank 0: the RANKs of joiners lost before they were taken in (a
  // generation called off): their tickets are skipped.
  std::set<int> joiners_lost{};
  // A process that joined: its RANK (opts.ranks holds a stand-in); -1:
  // opts.ranks.rank.
  int home = -1;
  /// This generation moves layers between slots (pipeline.rebalance): the
  /// partition before (cx.plan.parts is the new one); empty: none move.
  std::vector<std::pair<int, int>> moved_from{};
  // Rank 0, healing: when the failure was seen and the replacement asked for.
  clock_type::time_point failed_at{}, asked_at{};
  // The newest step whose applies rank 0's driver sent in this generation
  // (dp > 1: every live stage will hold it).
  std::atomic<int64_t> decided{-2};
  // Rank 0: a called-off generation's re-partition had begun to rewrite
  // some process's boundary memory, so the next plan starts from disk.
  bool spoiled = false;
  // Rank 0 taking the run over (rank_takeover.cpp): the heal rolls to the
  // newest boundary every slot holds, whatever its log says.
  bool taking_over = false;
  // dp 1, copies through shared memory: each slot's segments, by slot and
  // keeper process, kept from one generation to the next (segments_for):
  // a new ring's segments are faulted in by its first copies, a step's
  // time several times over on two cores.
  std::map<std::pair<int, int>, std::shared_ptr<segment_ring>> copy_rings{};
};

/// A coordinator that takes a run over: the record as the one before left
/// it, this takeover's number, and when each part of it happened (the
/// coordinator before lost, its lease expired, the election won, the new
/// store listening; wall clock, as the launcher saw the first two).
struct takeover_start {
  std::string record;
  uint32_t epoch = 0;
  std::chrono::system_clock::time_point lost, expired, elected, stored;
  bool revoked = false;  // the lease ended at once (its process seen gone), not at its expiry
};

/// What a process starts its part of the run with (run_rank's set-up):
/// rank 0's host is made of it, and so is every other rank's agent.
struct process_start {
  const config& cfg;
  const train_options& opts;
  const rank_env& env;
  milliseconds timeout;
  attempt_plan plan;
  std::string host;  // this rank's address toward the master
  caf::actor dir;    // its published directory
  uint16_t port = 0;
  std::shared_ptr<boundary_memory> boundary;  // null: no healing
  /// A process that joined a running job (runtime/dist/launch/join.hpp): its RANK
  /// and the generation it joins (the store is open already). -1: none.
  int home = -1;
  uint32_t generation = 0;
  /// Rank 0 under `launch --coordinator etcd://...`: the run's durable
  /// record (runtime/dist/coord/run_record.hpp); null: none.
  std::shared_ptr<run_record> record = nullptr;
  /// A coordinator that takes the run over (launch --coordinator etcd://,
  /// actors/supervisor/takeover.cpp); none: this run's first.
  std::optional<takeover_start> takeover = std::nullopt;
  /// A process started again: ends its early beats (runtime/dist/launch/join.hpp)
  /// once its agent's coordinator watch beats instead. Empty: none.
  std::function<void()> beating = nullptr;
};

}  // namespace actorpipe::rank_detail
