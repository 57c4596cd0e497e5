#pragma once
// The directory actor a process publishes, and every process connected
// (directory.cpp).
#include <string>
#include <vector>

#include "actors/process/links.hpp"

namespace actorpipe::rank_detail {

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
generation_peers connect_ranks(process_runtime& rt, process_context& cx, uint32_t g, const generation_links& links,
                               const std::vector<caf::actor>& mine, const std::vector<std::string>& mine_on);

}  // namespace actorpipe::rank_detail
