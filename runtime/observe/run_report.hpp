#pragma once
// What a real run looked like: its measured timeline, its activation memory
// over a step, a JSON file of its figures, and one self-contained HTML page
// (inline SVG and CSS, no scripts, nothing fetched) for one run or several.
#include <string>
#include <vector>

#include "runtime/observe/metrics.hpp"

namespace actorpipe {

/// The measured timeline of step `step` (-1: the last), one lane per
/// (replica, stage), with the allreduce and the optimizer step as blocks.
/// `span_ms` > 0 fixes the time axis (to align several runs).
std::string run_timeline_svg(const train_result& r, int step = -1, double span_ms = 0.0);

/// The time from a step's start to the end of its last block (ms).
double step_span_ms(const train_result& r, int step = -1);

/// Activation bytes stashed per stage over step `step` (-1: the last), with
/// each stage's peak.
std::string memory_svg(const train_result& r, int step = -1);

/// Per-step metrics, per-stage busy / idle / peak memory, and the final
/// table's figures, under "config": the config file the run read.
std::string results_json(const train_result& r, const std::string& config_path);

/// One page: the config, the comparison table, loss curves, and for every
/// run its timeline (all on one time axis) and memory plot.
std::string html_report(const std::string& title, const std::string& config_text,
                        const std::vector<train_result>& runs);

}  // namespace actorpipe
