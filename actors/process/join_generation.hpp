#pragma once
// One generation joined by this process: the plan, the links, the stages,
// every process connected (join_generation.cpp).
#include <functional>
#include <memory>

#include "actors/process/directory.hpp"
#include "actors/process/process_stages.hpp"

namespace actorpipe::rank_detail {

/// This process's part of generation hp.generation, joined: the plan (a
/// process started again reads it from the store), the config without the
/// faults that fired, the links, where its stages started, the stages, and
/// every rank connected.
struct joined_generation {
  heal_plan hp;
  config cfg;
  generation_links links;
  resume_point rp;
  std::unique_ptr<process_stages> stages;
  generation_peers peers;
};
/// For g > 0, every rank passes generation g's gate (rank_forming.cpp)
/// before it builds its stages, and waits for rank 0's word that the
/// generation formed at the end; rank 0 calls `commit` (which throws
/// forming_aborted when its watch called the generation off) and gives it.
joined_generation join_generation(process_runtime& rt, process_context& cx, heal_plan hp, const train_options& opts,
                                  const std::function<void()>& commit = {});

}  // namespace actorpipe::rank_detail
