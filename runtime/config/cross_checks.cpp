// The rules between sections, each a named check run once every section is
// read (so the order the sections are read in does not matter), and the
// defaults that depend on several sections. Each check fails at the key
// the rule is about, through the marks the readers recorded.
#include "runtime/config/sections.hpp"

#include "runtime/policies/registry.hpp"

#include <climits>

namespace actorpipe::config_detail {

namespace {

const schedule_traits& schedule_of(const config& cfg) { return *find_schedule(cfg.pipeline.schedule); }

// -- data vs model --

void synthetic_features_match_the_model(const reader& r) {
  const auto& d = r.cfg().data;
  const read_facts& f = r.facts();
  if (d.kind == "synthetic" && d.features != 0 && d.features != f.input_width)
    r.fail_key("data.synthetic.features", std::to_string(d.features) + " does not match " + f.input_key + " " +
                                              std::to_string(f.input_width));
}

void synthetic_classes_fit_the_model(const reader& r) {
  const auto& d = r.cfg().data;
  const read_facts& f = r.facts();
  if (d.kind != "synthetic") return;
  if (d.classes != 0 && d.classes > f.output_width)
    r.fail_key("data.synthetic.classes", std::to_string(d.classes) + " exceeds the " + std::to_string(f.output_width) +
                                             " outputs of " + f.output_key);
  if (d.classes == 0 && f.output_width < 2)
    r.fail_key(f.output_key, "synthetic data needs at least 2 classes, but the model has " +
                                 std::to_string(f.output_width) + " output");
}

// -- parallel vs train --

void replicas_fit_the_batch(const reader& r) {
  const int dp = r.cfg().parallel.dp;
  const int64_t batch = r.cfg().train.batch_size;
  if (dp > batch)
    r.fail_key("parallel.dp", std::to_string(dp) + " replicas exceed train.batch_size " + std::to_string(batch) +
                                  "; every replica needs a sample");
  if (int64_t n = torch_chunk_count(batch, dp); n != dp)
    r.fail_key("parallel.dp", "torch.chunk splits train.batch_size " + std::to_string(batch) + " into " +
                                  std::to_string(n) + " slices, not " + std::to_string(dp));
}

// -- pipeline vs model --

void partition_covers_the_layers(const reader& r) {
  const auto& ranges = r.facts().partition;
  if (ranges.empty()) return;
  const int64_t layers = static_cast<int64_t>(r.cfg().model.layers.size());
  for (size_t i = 0; i < ranges.size(); ++i)
    if (const int64_t last = ranges[i].second; last >= layers)
      r.fail_key(item("pipeline.partition", i), "layer " + std::to_string(last) + " does not exist; model.layers has " +
                                                    std::to_string(layers) + " layers (0.." + std::to_string(layers - 1) +
                                                    ")");
  if (const int64_t last = ranges.back().second; last != layers - 1)
    r.fail_key("pipeline.partition", "covers layers 0.." + std::to_string(last) + " but model.layers has " +
                                         std::to_string(layers) + " layers; the last range must end at layer " +
                                         std::to_string(layers - 1));
}

void stages_fit_the_layers(const reader& r) {
  const auto& p = r.cfg().pipeline;
  const int64_t layers = static_cast<int64_t>(r.cfg().model.layers.size());
  const int v = p.virtual_stages;
  if (!r.facts().partition.empty() || int64_t{p.stages} * v <= layers) return;
  if (v == 1)
    r.fail_key("pipeline.stages", std::to_string(p.stages) + " exceeds the " + std::to_string(layers) +
                                      " layers of model.layers");
  r.fail_key("pipeline.virtual_stages", std::to_string(p.stages) + " stages x " + std::to_string(v) +
                                            " virtual stages exceed the " + std::to_string(layers) +
                                            " layers of model.layers");
}

// -- the microbatches vs train, parallel and the final stage count --

void microbatches_fit_the_batch(const reader& r) {
  const auto& p = r.cfg().pipeline;
  const int64_t batch = r.cfg().train.batch_size;
  if (schedule_of(r.cfg()).one_microbatch) return;
  if (p.microbatches > batch)
    r.fail_key("pipeline.microbatches",
               std::to_string(p.microbatches) + " exceeds train.batch_size " + std::to_string(batch));
  if (int64_t n = torch_chunk_count(batch, p.microbatches); n != p.microbatches)
    r.fail_key("pipeline.microbatches", "torch.chunk splits train.batch_size " + std::to_string(batch) + " into " +
                                            std::to_string(n) + " chunks, not " + std::to_string(p.microbatches));
}

void microbatches_fill_two_weight_versions(const reader& r) {
  const auto& p = r.cfg().pipeline;
  const schedule_traits& sched = schedule_of(r.cfg());
  if (!sched.one_microbatch && sched.microbatches_at_least_stages && p.microbatches < p.stages)
    r.fail_key("pipeline.microbatches", sched.display + " needs at least as many microbatches as stages (" +
                                            std::to_string(p.stages) + ") so that two weight versions suffice; got " +
                                            std::to_string(p.microbatches));
}

void stream_fits_an_int(const reader& r) {
  const auto& p = r.cfg().pipeline;
  const int64_t steps = r.cfg().train.steps;
  const schedule_traits& sched = schedule_of(r.cfg());
  if (sched.one_microbatch) return;
  // Both at most 2^31: the product fits int64. The stages count the
  // stream's microbatches in an int.
  if (!sched.flushes && p.microbatches * steps > INT_MAX)
    r.fail_key("train.steps", sched.display + " streams every step's microbatches as one: " + std::to_string(steps) +
                                  " steps x " + std::to_string(p.microbatches) + " microbatches exceed " +
                                  std::to_string(INT_MAX));
}

void microbatches_in_stage_groups(const reader& r) {
  const auto& p = r.cfg().pipeline;
  const schedule_traits& sched = schedule_of(r.cfg());
  if (!sched.one_microbatch && sched.microbatches_in_stage_groups && p.microbatches % p.stages != 0)
    r.fail_key("pipeline.microbatches", p.schedule + " runs microbatches in groups of pipeline.stages (" +
                                            std::to_string(p.stages) + "); " + std::to_string(p.microbatches) +
                                            " is not a multiple");
}

void replica_shares_split_into_microbatches(const reader& r) {
  const auto& p = r.cfg().pipeline;
  const int64_t batch = r.cfg().train.batch_size;
  const int dp = r.cfg().parallel.dp;
  if (dp <= 1 || schedule_of(r.cfg()).one_microbatch) return;
  // Each replica splits its own share of the batch (torch.chunk into dp).
  const int64_t share = ceil_div(batch, dp);
  for (int64_t n : {share, batch - share * (dp - 1)})
    if (int64_t k = torch_chunk_count(n, p.microbatches); k != p.microbatches)
      r.fail_key("pipeline.microbatches", "a replica's share of train.batch_size (" + std::to_string(n) + " of " +
                                              std::to_string(batch) + " over parallel.dp " + std::to_string(dp) +
                                              ") splits into " + std::to_string(k) + " chunks, not " +
                                              std::to_string(p.microbatches));
}

// -- what a schedule without a flush cannot do --

void replicas_need_a_flush(const reader& r) {
  const schedule_traits& sched = schedule_of(r.cfg());
  if (r.cfg().parallel.dp > 1 && !sched.flushes)
    r.fail_key("parallel.dp", sched.display + " runs one replica; its stages step on their own, with no "
                                              "allreduce point");
}

void clipping_needs_a_flush(const reader& r) {
  const schedule_traits& sched = schedule_of(r.cfg());
  if (!sched.flushes && r.cfg().train.clip_grad_norm > 0)
    r.fail_key(r.cfg().marks.count("train.clip_grad_norm") ? "train.clip_grad_norm" : "pipeline.schedule",
               sched.display + " steps each stage on its own, with no global gradient norm to clip by; "
                               "leave train.clip_grad_norm out");
}

void checkpoints_need_a_flush(const reader& r) {
  const schedule_traits& sched = schedule_of(r.cfg());
  if (!r.cfg().checkpoint.dir.empty() && !sched.flushes)
    r.fail_key("checkpoint", sched.display + " has no step boundary where every stage's weights are one "
                                             "version; checkpoints need a synchronous schedule");
}

// -- devices and threads vs parallel --

void device_lists_match_the_replicas(const reader& r) {
  const auto& lists = r.cfg().replica_devices;
  const int dp = r.cfg().parallel.dp;
  if (!lists.empty() && static_cast<int>(lists.size()) != dp)
    r.fail_key("pipeline.devices", std::to_string(lists.size()) + " device lists for parallel.dp " + std::to_string(dp) +
                                       "; give one list per replica (or one flat list for all)");
}

void shared_threads_run_one_replica(const reader& r) {
  const int dp = r.cfg().parallel.dp;
  if (r.cfg().pipeline.threads == "shared" && dp > 1)
    r.fail_key("pipeline.threads", "shared: the allreduce over parallel.dp " + std::to_string(dp) +
                                       " replicas blocks a stage's thread until its peers join; use dedicated");
}

void nccl_needs_cuda_stages(const reader& r) {
  if (r.cfg().parallel.allreduce != "nccl") return;
  for (const auto& replica : planned_devices(r.cfg(), r.env()))
    for (const auto& d : replica)
      if (d.rfind("cuda:", 0) != 0)
        r.fail_key("parallel.allreduce", "nccl sums CUDA tensors only, but a stage is on " + d + "; use gloo or auto");
}

// -- faults vs pipeline and parallel --

void fault_stages_exist(const reader& r) {
  const int stages = r.cfg().pipeline.stages;
  const auto& faults = r.facts().faults;
  for (size_t i = 0; i < faults.size(); ++i) {
    const std::pair<const char*, std::optional<int64_t>> indices[] = {
        {"from", faults[i].from}, {"to", faults[i].to}, {"stage", faults[i].stage}};
    for (const auto& [name, x] : indices)
      if (x && *x >= stages)
        r.fail_key(item("faults.inject", i) + "." + name, "stage " + std::to_string(*x) +
                                                              " does not exist (pipeline.stages " +
                                                              std::to_string(stages) + ")");
  }
}

void fault_replicas_exist(const reader& r) {
  const int dp = r.cfg().parallel.dp;
  const auto& faults = r.facts().faults;
  for (size_t i = 0; i < faults.size(); ++i)
    if (const auto& x = faults[i].replica; x && *x >= dp)
      r.fail_key(item("faults.inject", i) + ".replica",
                 "replica " + std::to_string(*x) + " does not exist (parallel.dp " + std::to_string(dp) + ")");
}

void fault_microbatches_exist(const reader& r) {
  const int microbatches = r.cfg().pipeline.microbatches;
  const auto& faults = r.facts().faults;
  for (size_t i = 0; i < faults.size(); ++i)
    if (const auto& x = faults[i].microbatch; x && *x >= microbatches)
      r.fail_key(item("faults.inject", i) + ".microbatch", std::to_string(*x) + " is not below pipeline.microbatches " +
                                                               std::to_string(microbatches));
}

}  // namespace

const std::vector<cross_check>& cross_checks() {
  static const std::vector<cross_check> checks{
      {"synthetic_features_match_the_model", synthetic_features_match_the_model},
      {"synthetic_classes_fit_the_model", synthetic_classes_fit_the_model},
      {"replicas_fit_the_batch", replicas_fit_the_batch},
      {"partition_covers_the_layers", partition_covers_the_layers},
      {"stages_fit_the_layers", stages_fit_the_layers},
      {"microbatches_fit_the_batch", microbatches_fit_the_batch},
      {"microbatches_fill_two_weight_versions", microbatches_fill_two_weight_versions},
      {"stream_fits_an_int", stream_fits_an_int},
      {"microbatches_in_stage_groups", microbatches_in_stage_groups},
      {"replica_shares_split_into_microbatches", replica_shares_split_into_microbatches},
      {"replicas_need_a_flush", replicas_need_a_flush},
      {"clipping_needs_a_flush", clipping_needs_a_flush},
      {"device_lists_match_the_replicas", device_lists_match_the_replicas},
      {"shared_threads_run_one_replica", shared_threads_run_one_replica},
      {"nccl_needs_cuda_stages", nccl_needs_cuda_stages},
      {"checkpoints_need_a_flush", checkpoints_need_a_flush},
      {"fault_stages_exist", fault_stages_exist},
      {"fault_replicas_exist", fault_replicas_exist},
      {"fault_microbatches_exist", fault_microbatches_exist},
  };
  return checks;
}

void resolve(reader& r) {
  config& cfg = r.cfg();
  const read_facts& f = r.facts();
  if (cfg.data.kind == "synthetic") {
    cfg.data.features = f.input_width;
    if (cfg.data.classes == 0) cfg.data.classes = f.output_width;
  }
  auto& p = cfg.pipeline;
  for (const auto& [first, last] : f.partition) p.partition.emplace_back(static_cast<int>(first), static_cast<int>(last));
  cfg.replica_devices = planned_devices(cfg, r.env());
  p.devices = cfg.replica_devices.front();
  if (p.threads.empty()) p.threads = p.devices.front() == "null" && cfg.parallel.dp == 1 ? "shared" : "dedicated";
  if (p.recompute.empty()) p.recompute.assign(p.stages, f.recompute_all);
}

}  // namespace actorpipe::config_detail
