#pragma once
// Text tables for the terminal and the Chrome-trace export.
#include <string>
#include <utility>
#include <vector>

#include "runtime/metrics.hpp"

namespace actorpipe {

/// One row per run: schedule, mean step time, final loss, theoretical and
/// measured bubble, peak activation memory per stage, test accuracy.
std::string format_comparison(const std::vector<train_result>& runs);

/// The analytic bubble table for the (S, M) pairs given.
std::string format_bubble_table(const std::vector<std::pair<int, int>>& cases);

/// The (S, M) pairs of the reference notebook's bubble table.
std::vector<std::pair<int, int>> reference_bubble_cases();

/// Chrome-trace JSON (Perfetto and chrome://tracing open it): one track per
/// stage, one complete event per fired op, the step and microbatch in args.
std::string chrome_trace_json(const train_result& run);

/// "12.3 KiB" style.
std::string human_bytes(int64_t bytes);

}  // namespace actorpipe
