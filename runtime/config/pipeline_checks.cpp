// The pipeline's cross-section checks: its partition and stages against the
// model, its microbatches against the batch, the replicas and the final
// stage count (the schedule's microbatch shape); what rebalancing needs of
// the stages.
#include "runtime/config/checks.hpp"

#include "runtime/schedule/policies/registry.hpp"

#include <climits>

namespace actorpipe::config_detail {

namespace {

const schedule_traits& schedule_of(const reader& r) { return *find_schedule(r.cfg().pipeline.schedule); }

int64_t layer_count(const reader& r) { return static_cast<int64_t>(r.cfg().model.layers.size()); }

}  // namespace

// -- partition and stages vs model -----------------------------------------------

void partition_ranges_cover_the_layers(const reader& r) {
  const std::string path = "pipeline.partition";
  const auto& ranges = r.facts().partition;
  if (ranges.empty()) return;
  const int64_t layers = layer_count(r);
  int64_t next = 0;  // the first layer the next range must start at
  for (size_t i = 0; i < ranges.size(); ++i) {
    const auto [first, last] = ranges[i];
    const std::string key = item(path, i);
    if (first != next)
      r.fail_key(key, i == 0 ? "the first range must start at layer 0, found " + std::to_string(first)
                             : "starts at layer " + std::to_string(first) + " but the previous range ended at layer " +
                                   std::to_string(next - 1) + "; ranges must be contiguous");
    if (last < first)
      r.fail_key(key, "ends at layer " + std::to_string(last) + ", before its start " + std::to_string(first));
    if (last >= layers)
      r.fail_key(key, "layer " + std::to_string(last) + " does not exist; model.layers has " + std::to_string(layers) +
                          " layers (0.." + std::to_string(layers - 1) + ")");
    next = last + 1;
  }
  if (next != layers)
    r.fail_key(path, "covers layers 0.." + std::to_string(next - 1) + " but model.layers has " + std::to_string(layers) +
                         " layers; the last range must end at layer " + std::to_string(layers - 1));
}

void stages_match_the_partition(const reader& r) {
  const auto& written = r.facts().written_stages;
  const int ranges = static_cast<int>(r.facts().partition.size());
  const int v = r.cfg().pipeline.virtual_stages;
  if (ranges == 0) return;
  if (v == 1 && written && *written != ranges)
    r.fail_key("pipeline.stages", std::to_string(*written) + " does not match the " + std::to_string(ranges) +
                                      " ranges of pipeline.partition");
  if (ranges % v != 0 || (written && int64_t{*written} * v != ranges))
    r.fail_key("pipeline.partition", std::to_string(ranges) + " ranges, but " +
                                         (written ? std::to_string(*written) : std::string("the")) + " stages x " +
                                         std::to_string(v) + " virtual stages need one range per virtual stage");
}

void stages_fit_the_layers(const reader& r) {
  const auto& p = r.cfg().pipeline;
  const int64_t layers = layer_count(r);
  const int v = p.virtual_stages;
  if (!r.facts().partition.empty() || int64_t{p.stages} * v <= layers) return;
  if (v == 1)
    r.fail_key("pipeline.stages", std::to_string(p.stages) + " exceeds the " + std::to_string(layers) +
                                      " layers of model.layers");
  r.fail_key("pipeline.virtual_stages", std::to_string(p.stages) + " stages x " + std::to_string(v) +
                                            " virtual stages exceed the " + std::to_string(layers) +
                                            " layers of model.layers");
}

// -- microbatches vs train, parallel and the final stage count ---------------------

void microbatches_fit_the_batch(const reader& r) {
  const auto& p = r.cfg().pipeline;
  const int64_t batch = r.cfg().train.batch_size;
  if (schedule_of(r).one_microbatch) return;
  if (p.microbatches > batch)
    r.fail_key("pipeline.microbatches",
               std::to_string(p.microbatches) + " exceeds train.batch_size " + std::to_string(batch));
  if (int64_t n = torch_chunk_count(batch, p.microbatches); n != p.microbatches)
    r.fail_key("pipeline.microbatches", "torch.chunk splits train.batch_size " + std::to_string(batch) + " into " +
                                            std::to_string(n) + " chunks, not " + std::to_string(p.microbatches));
}

void microbatches_fill_two_weight_versions(const reader& r) {
  const auto& p = r.cfg().pipeline;
  const schedule_traits& sched = schedule_of(r);
  if (!sched.one_microbatch && sched.microbatches_at_least_stages && p.microbatches < p.stages)
    r.fail_key("pipeline.microbatches", sched.display + " needs at least as many microbatches as stages (" +
                                            std::to_string(p.stages) + ") so that two weight versions suffice; got " +
                                            std::to_string(p.microbatches));
}

void stream_fits_an_int(const reader& r) {
  const auto& p = r.cfg().pipeline;
  const int64_t steps = r.cfg().train.steps;
  const schedule_traits& sched = schedule_of(r);
  // Both at most 2^31: the product fits int64. The stages count the
  // stream's microbatches in an int.
  if (!sched.one_microbatch && !sched.flushes && p.microbatches * steps > INT_MAX)
    r.fail_key("train.steps", sched.display + " streams every step's microbatches as one: " + std::to_string(steps) +
                                  " steps x " + std::to_string(p.microbatches) + " microbatches exceed " +
                                  std::to_string(INT_MAX));
}

void microbatches_in_stage_groups(const reader& r) {
  const auto& p = r.cfg().pipeline;
  const schedule_traits& sched = schedule_of(r);
  if (!sched.one_microbatch && sched.microbatches_in_stage_groups && p.microbatches % p.stages != 0)
    r.fail_key("pipeline.microbatches", p.schedule + " runs microbatches in groups of pipeline.stages (" +
                                            std::to_string(p.stages) + "); " + std::to_string(p.microbatches) +
                                            " is not a multiple");
}

// A schedule's own limits on the shape (DualPipeV: even stages, M >= 2S).
void schedule_shape_fits(const reader& r) {
  const auto& p = r.cfg().pipeline;
  const schedule_traits& sched = schedule_of(r);
  if (sched.one_microbatch || !sched.shape_error) return;
  const std::string why = sched.shape_error(p.stages, p.microbatches);
  if (why.empty()) return;
  // The stage count is wrong when the schedule would refuse any M for it.
  const bool stages_wrong = !sched.shape_error(p.stages, INT_MAX / 2).empty();
  r.fail_key(stages_wrong ? "pipeline.stages" : "pipeline.microbatches", why);
}

void replica_shares_split_into_microbatches(const reader& r) {
  const auto& p = r.cfg().pipeline;
  const int64_t batch = r.cfg().train.batch_size;
  const int dp = r.cfg().parallel.dp;
  if (dp <= 1 || schedule_of(r).one_microbatch) return;
  // Each replica splits its own share of the batch (torch.chunk into dp).
  const int64_t share = ceil_div(batch, dp);
  for (int64_t n : {share, batch - share * (dp - 1)})
    if (int64_t k = torch_chunk_count(n, p.microbatches); k != p.microbatches)
      r.fail_key("pipeline.microbatches", "a replica's share of train.batch_size (" + std::to_string(n) + " of " +
                                              std::to_string(batch) + " over parallel.dp " + std::to_string(dp) +
                                              ") splits into " + std::to_string(k) + " chunks, not " +
                                              std::to_string(p.microbatches));
}

// -- rebalancing vs the stages -------------------------------------------------------

void rebalance_runs_one_chunk_per_stage(const reader& r) {
  const auto& p = r.cfg().pipeline;
  if (p.rebalance.every > 0 && p.virtual_stages != 1)
    r.fail_key("pipeline.rebalance", "re-partitions one chunk per stage; pipeline.virtual_stages is " +
                                         std::to_string(p.virtual_stages) + " (" + p.schedule + ")");
}

void rebalance_needs_two_stages(const reader& r) {
  const auto& p = r.cfg().pipeline;
  if (p.rebalance.every > 0 && p.stages < 2)
    r.fail_key("pipeline.rebalance", "moves layers between stages; pipeline.stages is " + std::to_string(p.stages));
}

}  // namespace actorpipe::config_detail
