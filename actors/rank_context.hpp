#pragma once
// Inside the multi-process trainer (actors/rank_trainer.*; not a public
// header): what a rank keeps for the whole process, what it joins for one
// generation, and the steps of a generation, each in a unit of its own:
//
//   rank_links.cpp      the rendezvous, the data plane, the tensor channels, the replica
//                       and tie groups, the time origin (joining)
//   rank_directory.cpp  the directory actor a rank publishes; connecting to
//                       every rank's; serving until rank 0 says stop or heal
//   rank_stages.cpp     this process's stage actors: where each starts from
//                       (the config, disk, its own memory, a donor's), the
//                       copies donated and received, spawned and stopped
//   rank_forming.cpp    a generation that forms while one of its processes
//                       is lost: rank 0's watch calls it off, every rank
//                       puts its context back and takes the next plan
//   rank_heal.cpp       rank 0, after a generation failed: who is gone,
//                       what the others hold, heal or give up, and telling
//                       every rank
//   rank_host.cpp       rank 0's generations under the supervisor actor
//   rank_trainer.cpp    a rank: rank 0 supervises, the others follow
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

#include "actors/attempt_setup.hpp"
#include "actors/generation_host.hpp"
#include "actors/stage_actor.hpp"
#include "actors/supervision.hpp"
#include "runtime/dist/boundary_memory.hpp"
#include "runtime/dist/collectives.hpp"
#include "runtime/dist/heal_plan.hpp"
#include "runtime/dist/rank_placement.hpp"
#include "runtime/model/model.hpp"
#include "runtime/dist/transport/kv_store.hpp"
#include "runtime/dist/transport/rendezvous.hpp"
#include "runtime/dist/transport/shared_segments.hpp"
#include "runtime/dist/transport/tensor_channel.hpp"

namespace actorpipe {
class data_plane;
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
struct rank_runtime {
  kv_store_ptr store;
  std::vector<std::shared_ptr<tensor_channel>> channels;
  std::vector<group_map> groups;
  caf::actor_system_config sc;
  std::unique_ptr<caf::actor_system> sys;
};

// What stays for the whole process: the actor system, this rank's
// directory, its place, and (rank 0) the supervision of every generation.
struct rank_context {
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
  // (runtime/dist/join.hpp).
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

// -- rank_links.cpp ----------------------------------------------------------------

/// Every rank's actor system alike: the payload types, the middleman, the
/// sharing scheduler and the heartbeats.
void configure(caf::actor_system_config& sc, milliseconds heartbeat_timeout);
/// "rank 2/4"
std::string where_of(const rank_env& env);
/// host:port -> (host, port)
std::pair<std::string, uint16_t> split_endpoint(const std::string& e);
/// The processes of replica d's stages.
std::vector<int> processes_of(const rank_placement& places, int d);
/// The store key of generation g's heal plan, and generation g's prefix.
std::string heal_key(const rank_env& env, uint32_t g);
std::string gen_prefix(const rank_env& env, uint32_t g);
/// The generation this process starts in: 0, or ACTORPIPE_GENERATION when
/// the launcher started it again.
uint32_t start_generation();
/// Rank 0's line to the launcher (ACTORPIPE_LAUNCHER_FD); false when there
/// is no launcher to hear it.
bool tell_launcher(const std::string& line);
/// Whether a launcher hears rank 0 (it can start a lost process again).
bool launcher_present();
/// The faults a generation runs with: those that end a stage and fired in
/// an earlier generation are gone.
config without_fired(const config& cfg, int64_t fired_through);
double ms_between(clock_type::time_point a, clock_type::time_point b);

/// What this process joined for one generation.
struct generation_links {
  std::string prefix;  // the generation's store prefix
  rendezvous_result met;
  std::shared_ptr<tensor_channel> channel;  // state handed over to a process started again (null otherwise)
  /// Activations and gradients to and from the processes this one's stages
  /// exchange them with.
  std::shared_ptr<data_plane> plane;
  /// dp 1 with healing: the boundary copies' own channel (null otherwise),
  /// and this process's machine id and every rank's (by rank; "" for one
  /// that holds no stage), for copies through shared memory.
  std::shared_ptr<tensor_channel> copies;
  std::string machine;
  std::vector<std::string> machines;
  group_map groups, ties;
  clock_type::time_point origin;  // trace time zero, rank 0's first
  clock_type::time_point met_at, grouped_at;
};

/// Generation g's rendezvous: every rank's endpoint, one config digest,
/// the store (made by rank 0's first, or the agent's). Throws
/// rendezvous_error.
rendezvous_result meet(rank_runtime& rt, rank_context& cx, uint32_t g);

/// Generation g's tensor channels, replica and tie groups and time origin,
/// after the rendezvous `met`. Throws rendezvous_error.
/// The tensor channel (links.channel) forms only when `hands_over`.
generation_links form_links(rank_runtime& rt, rank_context& cx, uint32_t g, const config& cfg, rendezvous_result met,
                            bool hands_over);

/// At dp 1, the segments a slot's copies go through to its keeper on the
/// same machine (null: the keeper is elsewhere, or none). The ring the
/// last generation used for this slot and keeper serves again, unless the
/// keeper was started again (its predecessor's holds never end) or
/// something from before still holds the ring; `rings` holds the last
/// generation's, cx.copy_rings gets this one's.
std::shared_ptr<segment_ring> segments_for(rank_context& cx, const kv_store_ptr& store, const generation_links& links,
                                           uint32_t g, int index, int keeper_process, bool keeper_restarted,
                                           std::map<std::pair<int, int>, std::shared_ptr<segment_ring>>& rings);

/// Once every slot has its ring: the free segments of the last
/// generation's rings that no slot uses again (`rings`, which would unlink
/// them) go to this generation's new rings, a slot's own first. They are
/// faulted in already, and a new ring's first copy (the generation's start,
/// before its first step) would otherwise fault in a copy's worth of new
/// pages: 34 ms for a 45 MB stage on dev-2c, against 5 for the copy.
void adopt_spare_segments(rank_context& cx, std::map<std::pair<int, int>, std::shared_ptr<segment_ring>>& rings);

// -- rank_directory.cpp --------------------------------------------------------------

/// The directory this rank publishes: rank 0 learns every rank's stages
/// from it, and asks it what its process holds when healing; stop and heal
/// go to `waiter`.
caf::actor spawn_directory(caf::actor_system& sys, caf::actor waiter, std::shared_ptr<boundary_memory> boundary);

/// Every rank's directory (this rank's own at its place), every stage of
/// the generation in slot order (rank 0 only; others: their own) and each
/// one's device as its rank resolved it.
struct generation_peers {
  std::vector<caf::actor> dirs;
  std::vector<caf::actor> all;
  std::vector<std::string> all_on;
};

/// One direct CAF connection per pair of ranks, this rank's stages
/// registered with rank 0, and every rank connected (a store barrier).
generation_peers connect_ranks(rank_runtime& rt, rank_context& cx, uint32_t g, const generation_links& links,
                               const std::vector<caf::actor>& mine, const std::vector<std::string>& mine_on);

// -- rank_stages.cpp -------------------------------------------------------------------

/// This process's stage actors of one generation, and each one's device.
/// However the generation ends, they go with this (their destructor stops
/// them and waits, bounded).
struct rank_stages {
  rank_stages(caf::scoped_actor& self) : self(self) {}
  ~rank_stages();
  rank_stages(const rank_stages&) = delete;
  rank_stages& operator=(const rank_stages&) = delete;

  caf::scoped_actor& self;
  std::vector<caf::actor> actors;
  std::vector<std::string> devices;
  std::shared_ptr<std::atomic<bool>> abandon = std::make_shared<std::atomic<bool>>(false);
};

/// A heal from memory: this process's own layers only (their weights are
/// about to be overwritten), built on threads of their own while the
/// channel and the groups form; by replica. Empty otherwise.
using layers_building = std::map<int, std::future<std::vector<layer>>>;
layers_building build_own_layers(const rank_context& cx, const heal_plan& hp, const config& cfg);

/// Builds and spawns this process's stages of generation g: from the
/// config or disk (`rp`), from this process's boundary memory, or (a
/// process started again) from the copies its donors send; a donor among
/// the survivors sends first. Throws rendezvous_error.
void spawn_rank_stages(rank_runtime& rt, rank_context& cx, const heal_plan& hp, const config& cfg,
                       const train_options& opts, const resume_point& rp, const generation_links& links,
                       layers_building building, rank_stages& out);

// -- rank_trainer.cpp -------------------------------------------------------------------

/// This process's part of generation hp.generation, joined: the plan (a
/// process started again reads it from the store), the config without the
/// faults that fired, the links, where its stages started, the stages, and
/// every rank connected.
struct joined_generation {
  heal_plan hp;
  config cfg;
  generation_links links;
  resume_point rp;
  std::unique_ptr<rank_stages> stages;
  generation_peers peers;
};
/// For g > 0, every rank passes generation g's gate (rank_forming.cpp)
/// before it builds its stages, and waits for rank 0's word that the
/// generation formed at the end; rank 0 calls `commit` (which throws
/// forming_aborted when its watch called the generation off) and gives it.
joined_generation join_generation(rank_runtime& rt, rank_context& cx, heal_plan hp, const train_options& opts,
                                  const std::function<void()>& commit = {});

// -- rank_forming.cpp ----------------------------------------------------------------------

/// What join_generation changes in a rank's context: put back when the
/// generation it began is called off (the process then serves the
/// generation before it, as far as rank 0's next plan is concerned).
struct context_before {
  rank_env env;
  std::string where;
  std::vector<int> members;
  rank_placement places;
  std::vector<std::pair<int, int>> parts, moved_from;
  bool fresh;
  int joined;  // rank 0: the joiners taken in before (put_back leaves cx.joined be)
};
context_before before_forming(const rank_context& cx);
void put_back(rank_context& cx, const context_before& before);

/// Generation g's keys in the store: rank 0's reason for calling it off,
/// rank 0's word that it formed (one or the other, never both), and the
/// gate every rank passes before its stages touch its boundary memory
/// (rank 0 closes it by adding gate_closed: the sum tells who passed).
std::string called_off_key(const rank_env& env, uint32_t g);
std::string formed_key(const rank_env& env, uint32_t g);
std::string gate_key(const rank_env& env, uint32_t g);
constexpr int64_t gate_closed = int64_t{1} << 40;

/// The store armed with a generation's called-off key while it forms,
/// disarmed however the forming ends (null store, "" key: nothing).
struct armed {
  armed(const kv_store_ptr& store, const std::string& key) : store(store) {
    if (store) store->arm(key);
  }
  ~armed() {
    if (store) store->arm("");
  }
  armed(const armed&) = delete;
  armed& operator=(const armed&) = delete;
  kv_store_ptr store;
};

/// A rank other than 0 whose forming of generation g threw: whether rank 0
/// called g off (seen by its store at once, or within the heartbeat
/// timeout and 2 s: a peer lost can fail this rank's connect before rank 0
/// sees it).
bool called_off(const rank_runtime& rt, const rank_context& cx, uint32_t g);

/// What rank 0's watch saw lost while a generation formed.
struct forming_loss {
  std::vector<int> old;      ///< processes of the generation before, by their rank there
  std::vector<int> joiners;  ///< processes that joined, by RANK
  std::string why;
  int64_t passed = 0;  ///< processes past the gate when it closed
};

/// Rank 0 while generation g forms: a thread watches its members, those of
/// the generation before on their directories (a process killed is seen at
/// once, one stopped or cut off after supervision.heartbeat_timeout_s),
/// those that joined on their alive/<RANK> counts (standing still for
/// `beat_limit`), and those the launcher started again for it (`restarted`:
/// rank q, its RANK) on the same counts once they have begun to beat (a
/// process that starts takes seconds; one that dies before its first beat
/// is not seen). A restarted one lost counts among `old`. On a loss it
/// closes the gate and calls g off, unless rank 0 committed first.
class forming_watch {
public:
  forming_watch(caf::actor_system& sys, kv_store_ptr client, const rank_env& env, uint32_t g,
                std::vector<std::pair<int, caf::actor>> old, std::vector<int> joiners,
                std::vector<std::pair<int, int>> restarted, std::function<std::string(int)> name_of,
                milliseconds beat_limit);
  ~forming_watch();
  forming_watch(const forming_watch&) = delete;
  forming_watch& operator=(const forming_watch&) = delete;

  /// Rank 0, formed: from now on the watch calls nothing off. Throws
  /// forming_aborted when it already has.
  void commit();
  /// Rank 0, its forming failed: what the watch saw lost, waiting up to
  /// `grace` for it; nullopt: nothing.
  std::optional<forming_loss> lost(milliseconds grace);

private:
  struct shared;
  std::shared_ptr<shared> s_;
  std::thread thread_;
};

/// The RANK process q of this generation was started with.
int home_rank(const rank_context& cx, int q);
/// Rank 0: the tickets of the joiners that asked (in `store`) and wait to
/// be taken in, in order, less those whose RANK is in `lost`.
std::vector<int> live_joiner_tickets(const kv_store& store, const rank_context& cx, const std::set<int>& lost);
/// Rank q of this generation as a user knows it: the RANK its process was
/// started with ("c" for a coordinator apart, rank_env::apart).
std::string shown_rank(const rank_context& cx, int q);

/// Whether the run goes on without the processes that are gone rather than
/// wait for replacements (supervision.replace_timeout_s: 0, or above 0
/// where no launcher can start one).
bool goes_on_without(const rank_context& cx);

// -- rank_heal.cpp -----------------------------------------------------------------------

/// Rank 0, once generation hp.generation failed: the ranks whose process
/// is gone, sorted, seen on their directories (which cx.self monitors; a
/// connection lost closes every proxy of it at once, so up to 300 ms, and
/// 20 ms more once one is among them whose host, by its endpoint, holds
/// other live ranks and not rank 0).
std::vector<int> gone_ranks(rank_context& cx, const std::vector<caf::actor>& dirs,
                            const std::vector<std::string>& endpoints);

/// Rank 0: heals after `failure` (restartable, within supervision's
/// limits, from memory or disk, the dead started again by the launcher):
/// the next plan, written to the store, its notice in `log`, every
/// survivor told. nullopt: give up (`failure` then names the processes
/// gone).
std::optional<heal_plan> heal(rank_context& cx, const kv_store_ptr& store, const generation_peers& peers,
                              const heal_plan& hp, const config& cfg, const std::vector<int>& dead,
                              run_failure& failure, supervision_log& log);

/// Rank 0, once generation hp.generation ended at a step boundary for the
/// processes that asked to join (run_errc::regroup): the next plan, with
/// them taken in (grow_placement), written to the store, each joiner and
/// every rank told. nullopt: `failure` says why not.
std::optional<heal_plan> regroup(rank_context& cx, const kv_store_ptr& store, const generation_peers& peers,
                                 const heal_plan& hp, run_failure& failure, supervision_log& log);

/// Rank 0, once generation hp.generation ended at a step boundary for a
/// rebalance (pipeline.rebalance, `why`): the next plan, with the layers
/// re-partitioned as `parts` over the same processes, written to the
/// store, every rank told. nullopt: `failure` says why not.
std::optional<heal_plan> repartition(rank_context& cx, const kv_store_ptr& store, const generation_peers& peers,
                                     const heal_plan& hp, const std::vector<std::pair<int, int>>& parts,
                                     const std::string& why, run_failure& failure, supervision_log& log);

/// Rank 0, once the watch called generation `aborted` off for `loss`
/// (cx put back as it was before it, `dead` the processes of the
/// generation before that are gone, the lost among them): the next plan
/// over what is left of the generation before, written to the store,
/// every rank of it told. Without a loss of those processes (only a
/// process that joined), they go on as they were; otherwise a heal over
/// the survivors. nullopt: `failure` says why not.
std::optional<heal_plan> call_off(rank_context& cx, const kv_store_ptr& store, const generation_peers& peers,
                                  const heal_plan& was, const heal_plan& aborted, const config& cfg,
                                  const std::vector<int>& dead, const forming_loss& loss, run_failure& failure,
                                  supervision_log& log);

/// Rank 0: the run is over, every other rank told `code` and waited for
/// (those not in `dead`; 5 s at most).
void stop_ranks(rank_context& cx, const kv_store_ptr& store, const generation_links& links,
                const generation_peers& peers, const std::vector<int>& dead, int code);

// -- rank_takeover.cpp ----------------------------------------------------------------------

/// What a generation leaves in the run's record in etcd for a standby to
/// take over from (launch --coordinator etcd://): its plan, placement,
/// members, joiners, every rank's directory endpoint, this coordinator's
/// takeover number and the trace's time zero. JSON text.
std::string takeover_state(const rank_context& cx, const heal_plan& hp, const std::vector<std::string>& endpoints,
                           uint32_t epoch, clock_type::time_point origin);

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

/// Rank 0 taking the run over: connects to every rank of the record's
/// generation, tells each the new store (fenced by the epoch), asks what
/// each holds and heals from the newest boundary every slot holds, as
/// after a failure (the ranks that do not answer are gone). The next plan,
/// written to the store, every rank told; nullopt: `failure` says why not.
/// `asked` is when the ranks had answered.
std::optional<heal_plan> take_over(rank_context& cx, const kv_store_ptr& store, const takeover_start& t,
                                   run_failure& failure, supervision_log& log,
                                   std::chrono::system_clock::time_point& asked);

}  // namespace actorpipe::rank_detail
