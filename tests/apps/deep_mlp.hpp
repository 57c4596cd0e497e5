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

/// The deep MLP for 40 steps of at least 4 ms an op (about 2 s of
/// training) at pp `stages` x dp `dp`, healing on (`heartbeat_s`), a
/// checkpoint every 4 steps in `ckpt`.
inline std::string deep_mlp_healing_config(int stages, int dp, int heartbeat_s, const std::string& ckpt) {
  std::string text = deep_mlp_model_and_data() +
                     "train:\n  steps: 40\n  batch_size: 48\n  optimizer: {type: adam, lr: 0.01}\n"
                     "  clip_grad_norm: 1.0\n  seed: 7\n";
  if (dp > 1) text += "parallel: {dp: " + std::to_string(dp) + ", allreduce: gloo}\n";
  text += "pipeline:\n  stages: " + std::to_string(stages) +
          "\n  schedule: 1f1b\n  microbatches: 4\n  devices: auto\n  intra_op_threads: 1\n  pace_ms: 4\n"
          "supervision: {max_restarts: 2, heartbeat_timeout_s: " + std::to_string(heartbeat_s) +
          "}\ncheckpoint: {every: 4, dir: " + ckpt + "}\n";
  return text;
}

}  // namespace actorpipe::testing_util
