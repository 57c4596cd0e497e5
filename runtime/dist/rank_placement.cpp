#include "runtime/dist/rank_placement.hpp"

#include <stdexcept>
#include <string>

#include "runtime/dist/rank_env.hpp"

namespace actorpipe {

void check_rank_placement(int dp, int pp, int world) {
  if (dp < 1) throw rank_env_error("parallel.dp " + std::to_string(dp) + " is not a positive integer");
  if (pp < 1) throw rank_env_error("pipeline.stages " + std::to_string(pp) + " is not a positive integer");
  if (world < 1) throw rank_env_error("WORLD_SIZE " + std::to_string(world) + " is not a positive integer");
  if ((static_cast<long long>(dp) * pp) % world != 0)
    throw rank_env_error("WORLD_SIZE " + std::to_string(world) + " does not divide parallel.dp " + std::to_string(dp) +
                         " x pipeline stages " + std::to_string(pp));
}

rank_placement::rank_placement(int dp, int pp, int world) : dp_(dp), pp_(pp), world_(world) {
  check_rank_placement(dp, pp, world);
}

void rank_placement::check_slot(int replica, int stage) const {
  if (replica < 0 || replica >= dp_ || stage < 0 || stage >= pp_)
    throw std::out_of_range("rank_placement: no stage actor (" + std::to_string(replica) + ", " +
                            std::to_string(stage) + ") with dp " + std::to_string(dp_) + ", pp " + std::to_string(pp_));
}

int rank_placement::owner(int replica, int stage) const {
  check_slot(replica, stage);
  return (replica * pp_ + stage) / actors_per_rank();
}

std::vector<stage_slot> rank_placement::owned(int rank) const {
  if (rank < 0 || rank >= world_)
    throw std::out_of_range("rank_placement: rank " + std::to_string(rank) + " is not below world " +
                            std::to_string(world_));
  std::vector<stage_slot> out;
  const int per = actors_per_rank();
  for (int i = rank * per; i < (rank + 1) * per; ++i) out.push_back({i / pp_, i % pp_});
  return out;
}

pipeline_neighbours rank_placement::neighbours(int replica, int stage) const {
  check_slot(replica, stage);
  pipeline_neighbours n;
  if (stage > 0) n.prev = owner(replica, stage - 1);
  if (stage + 1 < pp_) n.next = owner(replica, stage + 1);
  return n;
}

int rank_placement::keeper(int replica, int stage) const {
  check_slot(replica, stage);
  const int mine = owner(replica, stage);
  for (int k = stage - 1; k >= 0; --k)
    if (owner(replica, k) != mine) return k;
  return -1;
}

std::vector<int> rank_placement::stage_group(int stage) const {
  check_slot(0, stage);
  std::vector<int> ranks;
  for (int r = 0; r < dp_; ++r) {
    const int rank = owner(r, stage);  // ascending in r
    if (ranks.empty() || ranks.back() != rank) ranks.push_back(rank);
  }
  return ranks;
}

}  // namespace actorpipe
