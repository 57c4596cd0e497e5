#pragma once
// This process's stage actors of one generation (process_stages.cpp).
#include <future>
#include <map>
#include <vector>

#include "actors/process/links.hpp"

namespace actorpipe::rank_detail {

/// This process's stage actors of one generation, and each one's device.
/// However the generation ends, they go with this (their destructor stops
/// them and waits, bounded).
struct process_stages {
  process_stages(caf::scoped_actor& self) : self(self) {}
  ~process_stages();
  process_stages(const process_stages&) = delete;
  process_stages& operator=(const process_stages&) = delete;

  caf::scoped_actor& self;
  std::vector<caf::actor> actors;
  std::vector<std::string> devices;
  std::shared_ptr<std::atomic<bool>> abandon = std::make_shared<std::atomic<bool>>(false);
};

/// A heal from memory: this process's own layers only (their weights are
/// about to be overwritten), built on threads of their own while the
/// channel and the groups form; by replica. Empty otherwise.
using layers_building = std::map<int, std::future<std::vector<layer>>>;
layers_building build_own_layers(const process_context& cx, const heal_plan& hp, const config& cfg);

/// Builds and spawns this process's stages of generation g: from the
/// config or disk (`rp`), from this process's boundary memory, or (a
/// process started again) from the copies its donors send; a donor among
/// the survivors sends first. Throws rendezvous_error.
void spawn_process_stages(process_runtime& rt, process_context& cx, const heal_plan& hp, const config& cfg,
                       const train_options& opts, const resume_point& rp, const generation_links& links,
                       layers_building building, process_stages& out);

}  // namespace actorpipe::rank_detail
