#pragma once
// On-disk checkpoints at step boundaries: one torch.load-readable file per
// checkpoint, named by the steps done (DIR/step_00000010.pt holds the
// state after 10 updates, its meta.step 9: the last update's 0-based
// index, as the logs' "after step 9" counts). A file's step is its
// meta.step, never its name: the names an older actorpipe wrote
// (step_00000009.pt for the same state) still load and still sort in
// order among the new ones. Written atomically (a temporary file, fsync,
// rename) with a checksum over its contents, so a torn or corrupted file
// is found, named, and skipped.
//
// A file holds plain tensors only (torch.load reads it as a dict):
//   meta.step                    int64 [1]
//   meta.optimizer               uint8, the type's name ("adam", "adamw", "sgd")
//   model.<param>                the weights, by global name ("model.0.weight")
//   optimizer.<param>.<field>    Adam, AdamW: step (int64 [1]), exp_avg, exp_avg_sq,
//                                max_exp_avg_sq (amsgrad); SGD: momentum_buffer
//   meta.checksum                int64 [1], FNV-1a over everything else
// The optimizer's state is keyed by parameter name, so a checkpoint resumes
// under any split of the model into stages.
#include <memory>
#include <string>
#include <vector>

#include "runtime/files/state_dict.hpp"

namespace actorpipe {

struct optimizer_state_copy;

struct checkpoint {
  int64_t step = -1;  ///< the last step whose update the weights include
  std::string path;   ///< the file it was loaded from (empty: in memory)
  named_tensors weights;  ///< global names ("0.weight"), CPU
  std::string optimizer_type;  ///< "adam" | "adamw" | "sgd"
  /// The optimizer's state, with parameter names: one copy per stage rank
  /// (taken at a step boundary), or one for the whole model (from disk).
  std::vector<std::shared_ptr<const optimizer_state_copy>> optimizer;
};

/// Writes `c` into `dir` (created if missing) and returns the file's path.
/// A failed write throws io_error and leaves earlier files alone.
std::string save_checkpoint(const std::string& dir, const checkpoint& c);

/// Removes the checkpoints in `dir` older than the `keep_last` newest up to
/// `step` (the 0-based index of the update the newest holds; keep_last 0
/// keeps every one); files of later steps are left alone.
/// Returns the paths removed.
std::vector<std::string> prune_checkpoints(const std::string& dir, int64_t step, int keep_last);

/// The newest checkpoint in `dir` that loads and whose checksum matches.
/// Every newer file that failed is described in `*problems` (file and
/// reason). Throws std::runtime_error when no file in `dir` loads, naming
/// each file tried and why it failed.
checkpoint load_latest_checkpoint(const std::string& dir, std::vector<std::string>* problems = nullptr);

/// The step_NNNNNNNN.pt files in `dir` with the numbers in their names
/// (steps done; an older actorpipe's names are one less), newest first
/// (whether they load is not checked). Throws std::runtime_error when the
/// directory cannot be read.
std::vector<std::pair<int64_t, std::string>> checkpoint_files(const std::string& dir);

/// Loads one checkpoint file; throws std::runtime_error naming the file.
checkpoint load_checkpoint(const std::string& path);

/// The optimizer state of one stage from `c`: for each of `params` (global
/// name, tensor) in order, its state by name. Throws std::invalid_argument
/// saying what differs: the optimizer type against `type`, a parameter
/// with no state where others have some, a state tensor's shape.
std::shared_ptr<const optimizer_state_copy> optimizer_state_for(
    const checkpoint& c, const std::vector<std::pair<std::string, at::Tensor>>& params, const std::string& type);

}  // namespace actorpipe
