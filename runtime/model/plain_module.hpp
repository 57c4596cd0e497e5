#pragma once
// The model as one plain torch::nn::Sequential with the layers' initial
// weights: the single-module baseline that tests and benchmarks hold the
// pipeline against. Dropout is torch's own (its masks follow torch's RNG,
// not the pipeline's order-free seeds).
#include <torch/nn/modules/container/sequential.h>

#include <vector>

#include "runtime/model/model.hpp"

namespace actorpipe {

/// Throws std::invalid_argument for a layer type it has no module for.
torch::nn::Sequential plain_sequential(const std::vector<layer>& layers);

}  // namespace actorpipe
