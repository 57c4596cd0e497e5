#pragma once
// The simulator's cost model fitted from a measured run: the median F, B
// and W time of each stage in a Chrome trace (`actorpipe train --trace`),
// as op costs in ms and a factor per stage.
#include <string>

#include "runtime/schedule/simulator.hpp"

namespace actorpipe {

struct fitted_cost {
  cost_model cost;          ///< f, b, w: the stages' mean of their medians (ms); stage_factor: each stage's F+B+W over the mean
  std::vector<double> f, b, w;  ///< per stage, median ms (0 where the trace has no such op)
  size_t ops = 0;               ///< op events read
};

/// Fits from the text of a trace over `stages` stages (replica d, stage r
/// on track d * stages + r; every replica's ops count for their stage).
/// Throws std::invalid_argument, naming `source`, for text that is not such
/// a trace, a stage with no forward or backward, or a track beyond the
/// stages.
fitted_cost fit_cost(const std::string& trace_json, int stages, const std::string& source);

}  // namespace actorpipe
