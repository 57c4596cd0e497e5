#include "runtime/dist/placement/rank_placement.hpp"

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <string>

#include "runtime/config/config.hpp"

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
  for (int i = 0; i < dp * pp; ++i) owners_.push_back(i / actors_per_rank());
}

rank_placement rank_placement::first(int dp, int pp, int workers, bool apart) {
  rank_placement p(dp, pp, workers);
  if (!apart) return p;
  std::vector<int> owners = p.owners_;
  for (int& o : owners) ++o;
  return of_owners(dp, pp, workers + 1, std::move(owners));
}

rank_placement rank_placement::of_owners(int dp, int pp, int world, std::vector<int> owners) {
  if (dp < 1 || pp < 1 || world < 1 || owners.size() != static_cast<size_t>(dp) * static_cast<size_t>(pp))
    throw std::invalid_argument("rank_placement: " + std::to_string(owners.size()) + " owners for dp " +
                                std::to_string(dp) + " x pp " + std::to_string(pp));
  for (int o : owners)
    if (o < 0 || o >= world)
      throw std::invalid_argument("rank_placement: owner " + std::to_string(o) + " is not a rank below world " +
                                  std::to_string(world));
  rank_placement p(1, 1, 1);
  p.dp_ = dp;
  p.pp_ = pp;
  p.world_ = world;
  p.owners_ = std::move(owners);
  return p;
}

std::string rank_placement::encode() const {
  std::string s = std::to_string(dp_) + " " + std::to_string(pp_) + " " + std::to_string(world_);
  for (int o : owners_) s += " " + std::to_string(o);
  if (!hosts_.empty()) {
    s += " hosts";
    for (int h : hosts_) s += " " + std::to_string(h);
  }
  return s;
}

rank_placement rank_placement::decode(const std::string& text) {
  std::istringstream is(text);
  int dp = 0, pp = 0, world = 0;
  if (!(is >> dp >> pp >> world) || dp < 1 || pp < 1 || world < 1 || dp > 1 << 20 || pp > 1 << 20)
    throw std::invalid_argument("rank_placement: '" + text + "' does not parse");
  std::vector<int> owners, hosts;
  bool in_hosts = false;
  for (std::string word; is >> word;) {
    if (word == "hosts" && !in_hosts) {
      in_hosts = true;
      continue;
    }
    size_t used = 0;
    int v = -1;
    try {
      v = std::stoi(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != word.size()) throw std::invalid_argument("rank_placement: '" + text + "' does not parse");
    (in_hosts ? hosts : owners).push_back(v);
  }
  rank_placement p = of_owners(dp, pp, world, std::move(owners));
  if (in_hosts) {
    try {
      p.set_hosts(std::move(hosts));
    } catch (const std::invalid_argument&) {
      throw std::invalid_argument("rank_placement: '" + text + "' does not parse");
    }
  }
  return p;
}

void rank_placement::set_hosts(std::vector<int> hosts) {
  if (!hosts.empty() && static_cast<int>(hosts.size()) != world_)
    throw std::invalid_argument("rank_placement: " + std::to_string(hosts.size()) + " hosts for " +
                                std::to_string(world_) + " ranks");
  hosts_ = std::move(hosts);
}

void rank_placement::check_slot(int replica, int stage) const {
  if (replica < 0 || replica >= dp_ || stage < 0 || stage >= pp_)
    throw std::out_of_range("rank_placement: no stage actor (" + std::to_string(replica) + ", " +
                            std::to_string(stage) + ") with dp " + std::to_string(dp_) + ", pp " + std::to_string(pp_));
}

int rank_placement::owner(int replica, int stage) const {
  check_slot(replica, stage);
  return owners_[static_cast<size_t>(replica * pp_ + stage)];
}

std::vector<stage_slot> rank_placement::owned(int rank) const {
  if (rank < 0 || rank >= world_)
    throw std::out_of_range("rank_placement: rank " + std::to_string(rank) + " is not below world " +
                            std::to_string(world_));
  std::vector<stage_slot> out;
  for (int i = 0; i < dp_ * pp_; ++i)
    if (owners_[static_cast<size_t>(i)] == rank) out.push_back({i / pp_, i % pp_});
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
  // The rule, for stages whose process is `apart` from this one's.
  auto nearest = [&](auto apart) {
    for (int k = stage - 1; k >= 0; --k)
      if (apart(owner(replica, k))) return k;
    if (mine == 0) return -1;
    for (int k = stage + 1; k < pp_; ++k)
      if (apart(owner(replica, k))) return k;
    return -1;
  };
  if (!hosts_.empty())
    if (const int k = nearest([&](int q) { return hosts_[static_cast<size_t>(q)] != hosts_[static_cast<size_t>(mine)]; });
        k >= 0)
      return k;
  return nearest([&](int q) { return q != mine; });
}

std::vector<int> rank_placement::stage_group(int stage) const {
  check_slot(0, stage);
  std::vector<int> ranks;
  for (int r = 0; r < dp_; ++r) ranks.push_back(owner(r, stage));
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

}  // namespace actorpipe
