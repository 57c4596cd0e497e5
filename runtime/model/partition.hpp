#pragma once
// Splitting layers into contiguous stages.
#include <cstdint>
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

/// pipeline.partition, or the balanced split of cfg's layers over its
/// stages x virtual_stages virtual stages.
partition_t partition_for(const struct config& cfg);

}  // namespace actorpipe
