#pragma once
// Which op of a step first produced a NaN or an infinity. Each op adds one
// device-side reduction of its output; they are read once, when the step
// reports, so the firing path never waits for the device. LibTorch only.
#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "messages/ops.hpp"

namespace actorpipe {

class finite_watch {
public:
  void clear() {
    sums_.clear();
    at_ns_.clear();
  }
  /// Op `op`'s output `t`, produced at trace time `at_ns`.
  void add(op_id op, const at::Tensor& t, int64_t at_ns);

  struct first_bad {
    op_id op;
    int64_t at_ns = 0;
  };
  /// The first op whose output was not finite, if any (reads the device).
  std::optional<first_bad> first() const;

private:
  std::vector<std::pair<op_id, at::Tensor>> sums_;
  std::vector<int64_t> at_ns_;
};

}  // namespace actorpipe
