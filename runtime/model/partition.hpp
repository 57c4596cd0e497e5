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

/// The last dimension of layer `index`'s output (what crosses the boundary
/// after it, both ways): a linear's out, a width-keeping layer's input's,
/// an lm_head's vocab; 0 where the specs do not say.
int64_t output_width(const std::vector<struct layer_spec>& layers, int index);

/// The most bytes one microbatch's activation (float32, with its int64
/// targets) or gradient holds at any boundary between two of `parts`: an
/// estimate for sizing buffers, never a limit.
int64_t largest_boundary_bytes(const struct config& cfg, const partition_t& parts);

}  // namespace actorpipe
