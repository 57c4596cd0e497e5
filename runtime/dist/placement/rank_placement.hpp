#pragma once
// Which process (rank) runs which stage actor in a multi-process run.
//
// The dp x pp stage actors, ordered (replica, stage) -- index
// replica * pp + stage -- are dealt to the world's ranks in equal
// consecutive blocks of dp * pp / world actors. So with world <= dp a rank
// holds whole pipelines, and with world > dp each pipeline is cut into
// world / dp runs of consecutive stages:
//   dp 1, pp 4, world 4: rank r holds stage r.
//   dp 1, pp 4, world 2: rank 0 holds stages 0-1, rank 1 stages 2-3.
//   dp 2, pp 2, world 4: rank 2 holds (replica 1, stage 0).
//   dp 2, pp 4, world 2: rank r holds all of replica r.
// (Not to be confused with runtime/schedule/placement.hpp, which places virtual
// stages on pipeline stages inside one replica.)
#include <string>
#include <vector>

namespace actorpipe {

/// One stage actor: stage `stage` of data-parallel replica `replica`.
struct stage_slot {
  int replica = 0;
  int stage = 0;
  bool operator==(const stage_slot& o) const { return replica == o.replica && stage == o.stage; }
};

/// The ranks of a stage's pipeline neighbours in its own replica; -1 at
/// the ends (no previous stage for stage 0, no next one for the last).
struct pipeline_neighbours {
  int prev = -1;
  int next = -1;
};

/// Throws rank_env_error unless dp, pp and world are positive and world
/// divides dp * pp, in the form
///   "WORLD_SIZE 3 does not divide parallel.dp 2 x pipeline stages 4".
void check_rank_placement(int dp, int pp, int world);

/// dp x pp stage actors over `world` ranks: a value, which rank 0's
/// supervisor computes for each generation and the other ranks read (the
/// store carries it as encode() writes it). The default is the one at the
/// top of this file.
class rank_placement {
 public:
  /// The default: equal consecutive blocks. Checks with check_rank_placement.
  rank_placement(int dp, int pp, int world);

  /// A run's first placement: the default over `workers` ranks; with a
  /// coordinator `apart`, rank 0 holds no stage and the blocks go to ranks
  /// 1 .. workers (world workers + 1).
  static rank_placement first(int dp, int pp, int workers, bool apart);

  /// Any placement: `owners[replica * pp + stage]` runs that stage actor.
  /// Throws std::invalid_argument for a size other than dp * pp or an
  /// owner outside 0 .. world - 1.
  static rank_placement of_owners(int dp, int pp, int world, std::vector<int> owners);

  /// "dp pp world owner... [hosts host...]" and back; decode throws
  /// std::invalid_argument for anything else.
  std::string encode() const;
  static rank_placement decode(const std::string& text);

  int dp() const { return dp_; }
  int pp() const { return pp_; }
  int world() const { return world_; }
  /// Stage actors per rank under the default placement: dp * pp / world.
  int actors_per_rank() const { return dp_ * pp_ / world_; }

  /// The rank that runs (replica, stage).
  int owner(int replica, int stage) const;
  /// The stage actors `rank` runs, in (replica, stage) order.
  std::vector<stage_slot> owned(int rank) const;
  /// Ranks of the previous and next stage of the same replica, -1 at the
  /// ends. A neighbour whose rank equals owner(replica, stage) is in-process.
  pipeline_neighbours neighbours(int replica, int stage) const;
  /// Whether (replica, stage)'s link to `neighbour_rank` leaves the process
  /// (false for -1, the end of the pipeline).
  bool remote(int replica, int stage, int neighbour_rank) const {
    return neighbour_rank >= 0 && neighbour_rank != owner(replica, stage);
  }
  /// The ranks holding `stage` across all replicas, ascending and without
  /// repeats: the group that allreduces the stage's gradients. A rank that
  /// holds several replicas of the stage appears once (it sums them
  /// in-process first).
  std::vector<int> stage_group(int stage) const;
  /// The stage of the same replica whose process keeps a copy of
  /// (replica, stage)'s boundary state, for healing a process when no
  /// other replica holds the stage (dp = 1): the nearest earlier stage that
  /// runs in another process. When every earlier stage runs in the same
  /// one: on rank 0, -1 (the supervisor lives there, and its death ends
  /// the run); elsewhere (a coordinator apart holds no stage), the nearest
  /// later stage in another process, so that stage 0's process can be
  /// lost too. -1 when the whole replica runs in one process.
  /// Where the ranks' hosts are known (set_hosts) and not all one, a stage
  /// in a process on another host comes first, by the same rule: a host
  /// lost whole (its link down for good) then takes no copy of its stages
  /// with it.
  int keeper(int replica, int stage) const;

  /// The host of each rank (equal numbers: one machine), or none (empty).
  /// Throws std::invalid_argument for a size other than world().
  void set_hosts(std::vector<int> hosts);
  const std::vector<int>& hosts() const { return hosts_; }

 private:
  void check_slot(int replica, int stage) const;

  int dp_;
  int pp_;
  int world_;
  std::vector<int> owners_;  // by replica * pp + stage
  std::vector<int> hosts_;   // by rank; empty: not known
};

}  // namespace actorpipe
