#pragma once
// Data sets (csv, csv.gz, torch.save'd tensors, synthetic), the train/test
// split and the per-step batch and microbatch slicing.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "runtime/config/config.hpp"

namespace actorpipe {

/// Features are float32 [N, F]; labels are int64 [N].
struct dataset {
  at::Tensor train_x, train_y, test_x, test_y;
  int64_t features = 0;
  int64_t classes = 0;  ///< 1 + the largest label seen
};

struct batch {
  at::Tensor x;  ///< float32 [n, F]
  at::Tensor y;  ///< int64 [n]
};

/// Loads cfg.data. Throws config_error (naming the file and the key) for a
/// missing or malformed file, or features that do not match model.layers[0].in.
dataset load_dataset(const config& cfg);

/// The batch of optimizer step `step` (0-based): consecutive slices of
/// train.batch_size rows, drop_last, wrapping to a new epoch; with
/// data.shuffle each epoch is a fresh permutation seeded by (seed, epoch).
batch batch_for_step(const dataset& data, const config& cfg, int64_t step);

/// Splits like torch.chunk(batch, microbatches): ceil(n / m) rows per chunk,
/// the last one smaller. May return fewer than m chunks (see chunk_count).
std::vector<batch> split_microbatches(const batch& b, int microbatches);

/// How many chunks torch.chunk returns for n rows split m ways.
int64_t chunk_count(int64_t n, int64_t m);

}  // namespace actorpipe
