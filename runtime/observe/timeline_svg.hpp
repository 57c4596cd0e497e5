#pragma once
// An SVG timeline: one lane per stage, one block per op (F, B, W in
// distinct colours, the microbatch on the block), idle time left empty and
// each lane's bubble written at its end. Self-contained: no scripts, no
// fonts or styles from elsewhere.
#include <cstdint>
#include <string>
#include <vector>

#include "messages/ops.hpp"

namespace actorpipe {

/// What a block stands for: an op, or a step's allreduce or optimizer step.
enum class block_kind : uint8_t { op, allreduce, optimizer };

struct timeline_block {
  op_id op;
  double start = 0.0;
  double end = 0.0;
  block_kind kind = block_kind::op;
  bool input_grad = false;  ///< a split backward's B: drawn as I
};

struct timeline_lane {
  std::string name;  ///< "stage 0"
  std::vector<timeline_block> blocks;
};

/// Renders lanes over [0, span]; `unit` names the time unit on the axis.
/// Each lane's bubble is over `bubble_span` (0: span), so a run drawn on a
/// longer shared axis keeps its own figure.
std::string timeline_svg(const std::string& title, const std::vector<timeline_lane>& lanes,
                         double span, const std::string& unit, double bubble_span = 0.0);

}  // namespace actorpipe
