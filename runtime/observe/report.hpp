#pragma once
// Text tables for the terminal and the Chrome-trace export.
#include <string>
#include <utility>
#include <vector>

#include "runtime/observe/metrics.hpp"
#include "runtime/schedule/simulator.hpp"

namespace actorpipe {

/// One row per run: schedule, mean step time, final loss, theoretical and
/// measured bubble, peak activation memory per stage, test accuracy.
std::string format_comparison(const std::vector<train_result>& runs);

/// The analytic bubble table for the (S, M) pairs given.
std::string format_bubble_table(const std::vector<std::pair<int, int>>& cases);

/// The (S, M) pairs of the reference notebook's bubble table.
std::vector<std::pair<int, int>> reference_bubble_cases();

/// Chrome-trace JSON (Perfetto and chrome://tracing open it): one track per
/// stage, one complete event per fired op, the step and microbatch in args;
/// the config file the run read in otherData.config.
std::string chrome_trace_json(const train_result& run, const std::string& config_path);

/// The simulator's summary: makespan, simulated and analytic bubble, and
/// per stage busy time, bubble and peak stash.
std::string format_simulation(const sim_result& r, const cost_model& cost);

/// The simulated step as an SVG timeline.
std::string simulation_svg(const sim_result& r);

/// "12.3 KiB" style.
std::string human_bytes(int64_t bytes);

}  // namespace actorpipe
