#pragma once
// On-disk checkpoints at step boundaries: one torch.load-readable file per
// checkpoint (DIR/step_00000009.pt holds the weights after step 9), written
// atomically (a temporary file, fsync, rename) with a checksum over its
// contents, so a torn or corrupted file is found, named, and skipped.
#include <memory>
#include <string>
#include <vector>

#include "runtime/state_dict.hpp"

namespace actorpipe {

struct optimizer_state_copy;

struct checkpoint {
  int64_t step = -1;  ///< the last step whose update the weights include
  named_tensors weights;  ///< global names ("0.weight"), CPU
  /// Per stage rank: the optimizer's state (torch::serialize archive bytes).
  std::vector<std::string> optimizer;
  /// Or, in memory only (a supervised run's last step boundary), per stage
  /// rank a copy of its state tensors; save_checkpoint needs `optimizer`.
  std::vector<std::shared_ptr<const optimizer_state_copy>> optimizer_copies;
};

/// Writes `c` into `dir` (created if missing) and returns the file's path.
/// A failed write throws std::runtime_error and leaves earlier files alone.
std::string save_checkpoint(const std::string& dir, const checkpoint& c);

/// The newest checkpoint in `dir` that loads and whose checksum matches.
/// Every newer file that failed is described in `*problems` (file and
/// reason). Throws std::runtime_error when no file in `dir` loads.
checkpoint load_latest_checkpoint(const std::string& dir, std::vector<std::string>* problems = nullptr);

/// Loads one checkpoint file; throws std::runtime_error naming the file.
checkpoint load_checkpoint(const std::string& path);

}  // namespace actorpipe
