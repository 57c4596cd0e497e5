#pragma once
// The model and data the multi-process tests train: deep enough for 4
// stages x 2 chunks, with dropout (its masks come from the seed, per layer
// and microbatch: a rank or a moved stage that drew them differently would
// show in the weights).
#include <string>

namespace actorpipe::testing_util {

inline std::string deep_mlp_model_and_data() {
  return
      "model:\n"
      "  layers:\n"
      "    - {type: linear, in: 16, out: 32}\n"
      "    - {type: relu}\n"
      "    - {type: dropout, p: 0.1}\n"
      "    - {type: linear, in: 32, out: 32}\n"
      "    - {type: relu}\n"
      "    - {type: dropout, p: 0.1}\n"
      "    - {type: linear, in: 32, out: 32}\n"
      "    - {type: tanh}\n"
      "    - {type: linear, in: 32, out: 32}\n"
      "    - {type: relu}\n"
      "    - {type: linear, in: 32, out: 4}\n"
      "data:\n"
      "  kind: synthetic\n"
      "  synthetic: {samples: 512, features: 16, classes: 4}\n"
      "  test_fraction: 0.25\n";
}

}  // namespace actorpipe::testing_util
