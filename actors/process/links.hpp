#pragma once
// What a process joins for one generation (links.cpp), and the small
// helpers every unit of the process room uses.
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "actors/process/process_context.hpp"

namespace actorpipe::rank_detail {

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
rendezvous_result meet(process_runtime& rt, process_context& cx, uint32_t g);

/// Generation g's tensor channels, replica and tie groups and time origin,
/// after the rendezvous `met`. Throws rendezvous_error.
/// The tensor channel (links.channel) forms only when `hands_over`.
generation_links form_links(process_runtime& rt, process_context& cx, uint32_t g, const config& cfg, rendezvous_result met,
                            bool hands_over);

/// At dp 1, the segments a slot's copies go through to its keeper on the
/// same machine (null: the keeper is elsewhere, or none). The ring the
/// last generation used for this slot and keeper serves again, unless the
/// keeper was started again (its predecessor's holds never end) or
/// something from before still holds the ring; `rings` holds the last
/// generation's, cx.copy_rings gets this one's.
std::shared_ptr<segment_ring> segments_for(process_context& cx, const kv_store_ptr& store, const generation_links& links,
                                           uint32_t g, int index, int keeper_process, bool keeper_restarted,
                                           std::map<std::pair<int, int>, std::shared_ptr<segment_ring>>& rings);

/// Once every slot has its ring: the free segments of the last
/// generation's rings that no slot uses again (`rings`, which would unlink
/// them) go to this generation's new rings, a slot's own first. They are
/// faulted in already, and a new ring's first copy (the generation's start,
/// before its first step) would otherwise fault in a copy's worth of new
/// pages: 34 ms for a 45 MB stage on dev-2c, against 5 for the copy.
void adopt_spare_segments(process_context& cx, std::map<std::pair<int, int>, std::shared_ptr<segment_ring>>& rings);

}  // namespace actorpipe::rank_detail
