#pragma once
// A shrink that cuts the model again over the processes left, instead of
// doubling a survivor up (shrink_placement): the next generation's stage
// count, its placement, its partition, and where each new stage's layers
// come from. A pure decision over the rank placement, as heal_plan.hpp's.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/dist/placement/heal_plan.hpp"
#include "runtime/model/partition.hpp"

namespace actorpipe {


/// The re-cut. `why_not` non-empty: there is none to make, and the caller
/// shrinks as before (shrink_placement: a survivor may double up); it says
/// why.
struct recut {
  rank_placement places{1, 1, 1};  ///< dp x stages over the survivors, renumbered 0 .. n-1
  std::vector<int> kept;           ///< the old rank of each new one
  partition_t parts;               ///< the layers of each new stage
  /// New slot index (replica * stages + stage) -> its pieces, in layer order
  /// (holders by their old rank).
  std::map<int, std::vector<recut_piece>> pieces;
  /// Some piece has no live holder: the next generation starts from disk.
  bool needs_disk = false;
  std::string why_not;
};

/// The processes `gone` (ranks of `places`) lost for good, `parts` the
/// partition they ran, `costs` each layer's measured (or static) cost:
/// every replica gets the same cut, of as many stages as the workers left
/// can each hold one of (floor(workers / dp)), at most `max_stages` (the
/// configured pipeline.stages) and at most one per layer, balanced by
/// `costs`. The i-th new slot (replica-major) goes to the i-th surviving
/// worker in rank order; a rank that held no stage (a coordinator apart)
/// holds none, and survivors past dp x stages hold none either. With
/// `from_disk`, every piece is read from disk (holder -1).
/// why_not: fewer workers than replicas, or as many stages as before
/// (nothing to re-cut). Throws std::invalid_argument when nobody survives,
/// or `parts` or `costs` do not fit `places`.
recut recut_placement(const rank_placement& places, const partition_t& parts, const std::vector<int>& gone,
                      const std::vector<int64_t>& costs, int max_stages, bool from_disk);

/// "stage 1 from rank 1's memory (layers 3-4), rank 0's (layer 5)": each
/// new stage's sources, for the re-placement line.
std::string describe_pieces(const recut& r, const std::vector<int>& shown_old_rank = {});

}  // namespace actorpipe
