#pragma once
// Splitting layers into contiguous stages.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace actorpipe {

/// Inclusive layer ranges, one per stage.
using partition_t = std::vector<std::pair<int, int>>;

/// Contiguous split of `costs` (e.g. parameter counts per layer) into
/// `stages` non-empty ranges that minimises the largest stage. Among optimal
/// splits, earlier stages take as many layers as they can, so a
/// parameterless activation stays with the layer before it.
/// Requires 1 <= stages <= costs.size().
partition_t balanced_partition(const std::vector<int64_t>& costs, int stages);

/// What a rebalance measured and decided (rank 0's supervisor, every
/// pipeline.rebalance.every steps).
struct rebalance_verdict {
  bool move = false;        ///< re-partition: the slowest stage is above threshold and the new split is faster
  partition_t parts;        ///< the new partition (== the old one when !move)
  int slowest = -1;         ///< the stage with the most busy time (the first of equals)
  double over_share = 0.0;  ///< its busy time over the mean's, minus 1 (0.5 = 50 % above its balanced share)
  double predicted = 1.0;   ///< the best split's slowest stage time over the old one's (model below),
                            ///< also when it does not move
  std::vector<double> speed;  ///< each stage's busy time per unit of cost, over the stages' mean
};

/// Each stage s ran layers parts[s] on its own process and was busy busy[s]
/// (any unit, summed over the same steps). Its speed factor is
/// busy[s] / cost(parts[s]) where cost sums `costs` (per layer, e.g.
/// multiply-adds; layers of cost 0 count as `floor` of the mean nonzero layer
/// cost, so that parameterless layers still cost time; when every layer costs
/// 0, every layer counts 1). A stage whose busy is 0 (it should not happen),
/// or whose layers cost 0 (floor 0), gets the mean factor of the others (1
/// when no stage has one).
/// The new partition keeps the stage count, gives every stage at least one
/// layer, and minimises the largest factor[s] * cost(range s) over contiguous
/// ranges (exact: dynamic programming over stages x layers). Splits within
/// 1e-12 (relative) of that minimum count as equal; among them it takes the
/// one whose stage ends moved least in all from the old ones, then the one
/// whose earlier stages take as many layers as they can (as
/// balanced_partition), so the answer is deterministic. It moves only when
/// over_share > threshold and predicted < 1 - threshold / 2 (so noise does not
/// make it oscillate). Throws std::invalid_argument for sizes that do not
/// agree, a negative cost or floor, a negative, non-finite or all-zero busy,
/// or a partition that is not contiguous from layer 0 to the last layer with
/// no empty stage.
rebalance_verdict rebalance_partition(const std::vector<int64_t>& costs, const partition_t& parts,
                                      const std::vector<double>& busy, double threshold, double floor = 0.05);

/// "0-2 | 3-5 | 6-8" (a single layer as "4"), for the log line.
std::string describe_partition(const partition_t& parts);

/// pipeline.partition, or the balanced split of cfg's layers over its
/// stages x virtual_stages virtual stages.
partition_t partition_for(const struct config& cfg);

/// The last dimension of layer `index`'s output (what crosses the boundary
/// after it, both ways): a linear's out, a width-keeping layer's input's,
/// an lm_head's vocab; 0 where the specs do not say.
int64_t output_width(const std::vector<struct layer_spec>& layers, int index);

/// The most bytes one microbatch's activation (float32, with its int64
/// targets) or gradient holds at any boundary between two of `parts`: an
/// estimate for sizing buffers, never a limit.
int64_t largest_boundary_bytes(const struct config& cfg, const partition_t& parts);

}  // namespace actorpipe
