// The rules between sections, each a named check run once every section is
// read, so the order the sections are read in does not matter; then the
// defaults that depend on several sections. The pipeline's own checks are
// in pipeline_checks.cpp and device_checks.cpp.
#include "runtime/config/checks.hpp"
#include "runtime/config/sections.hpp"

#include "runtime/schedule/policies/registry.hpp"

#include <optional>
#include <utility>

namespace actorpipe::config_detail {

const std::vector<cross_check>& cross_checks() {
  static const std::vector<cross_check> checks{
      {"text_data_matches_the_model", text_data_matches_the_model},
      {"synthetic_features_match_the_model", synthetic_features_match_the_model},
      {"synthetic_classes_fit_the_model", synthetic_classes_fit_the_model},
      {"replicas_fit_the_batch", replicas_fit_the_batch},
      {"partition_ranges_cover_the_layers", partition_ranges_cover_the_layers},
      {"stages_match_the_partition", stages_match_the_partition},
      {"stages_fit_the_layers", stages_fit_the_layers},
      {"microbatches_fit_the_batch", microbatches_fit_the_batch},
      {"microbatches_fill_two_weight_versions", microbatches_fill_two_weight_versions},
      {"stream_fits_an_int", stream_fits_an_int},
      {"microbatches_in_stage_groups", microbatches_in_stage_groups},
      {"schedule_shape_fits", schedule_shape_fits},
      {"replica_shares_split_into_microbatches", replica_shares_split_into_microbatches},
      {"replicas_need_a_flush", replicas_need_a_flush},
      {"clipping_needs_a_flush", clipping_needs_a_flush},
      {"tie_needs_a_flush", tie_needs_a_flush},
      {"device_lists_match_the_replicas", device_lists_match_the_replicas},
      {"devices_match_the_stages", devices_match_the_stages},
      {"measuring_devices_run_every_stage", measuring_devices_run_every_stage},
      {"auto_device_fits_the_local_rank", auto_device_fits_the_local_rank},
      {"sim_times_need_the_sim_device", sim_times_need_the_sim_device},
      {"shared_threads_need_the_null_device", shared_threads_need_the_null_device},
      {"shared_threads_run_one_replica", shared_threads_run_one_replica},
      {"nccl_needs_cuda_stages", nccl_needs_cuda_stages},
      {"recompute_matches_the_stages", recompute_matches_the_stages},
      {"checkpoints_need_a_flush", checkpoints_need_a_flush},
      {"rebalance_needs_a_flush", rebalance_needs_a_flush},
      {"rebalance_runs_one_chunk_per_stage", rebalance_runs_one_chunk_per_stage},
      {"rebalance_needs_two_stages", rebalance_needs_two_stages},
      {"fault_stages_exist", fault_stages_exist},
      {"fault_replicas_exist", fault_replicas_exist},
      {"fault_microbatches_exist", fault_microbatches_exist},
      {"replacements_need_restarts", replacements_need_restarts},
      {"rebalance_needs_restarts", rebalance_needs_restarts},
      {"eval_needs_a_held_out_split", eval_needs_a_held_out_split},
      {"eval_needs_a_model_that_computes", eval_needs_a_model_that_computes},
  };
  return checks;
}

// -- data vs model -------------------------------------------------------------

// Tokens in: the text and tokens kinds and an embedding go together. Bytes
// are 256 tokens; a tokenizer's or a token file's vocabulary is checked
// against the embedding when the data loads.
void text_data_matches_the_model(const reader& r) {
  const auto& d = r.cfg().data;
  const auto& layers = r.cfg().model.layers;
  const auto& first = layers.front();
  const bool embeds = first.type == "embedding" || first.type == "token_embedding";
  const bool sequences = d.kind == "text" || d.kind == "tokens";
  if (sequences && !embeds)
    r.fail_key("data.kind", d.kind + " gives tokens; the model's first layer must be an embedding or a "
                            "token_embedding, not " + first.type);
  if (!sequences && embeds)
    r.fail_key(first.key + ".type", "an embedding takes tokens; use data.kind text or tokens, not " + d.kind);
  if (!embeds) return;
  if (d.kind == "text" && d.tokenizer.empty()) {
    if (first.vocab != 256)
      r.fail_key(first.key + ".vocab", "is " + std::to_string(first.vocab) + "; data.kind text has 256 byte tokens "
                                       "(give data.tokenizer for subword tokens)");
    for (const auto& l : layers)
      if (l.type == "lm_head" && l.vocab != 256)
        r.fail_key(l.key + ".vocab", "is " + std::to_string(l.vocab) + "; data.kind text has 256 byte tokens");
  }
  for (const auto& l : layers)
    if (l.type == "lm_head" && l.vocab != first.vocab)
      r.fail_key(l.key + ".vocab", std::to_string(l.vocab) + " differs from " + first.key + ".vocab " +
                                       std::to_string(first.vocab) + ": the logits name the same tokens");
  if (first.type == "embedding" && d.seq_len > first.max_seq)
    r.fail_key("data.seq_len", std::to_string(d.seq_len) + " exceeds " + first.key + ".max_seq " +
                                   std::to_string(first.max_seq));
}

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

// -- parallel vs train -----------------------------------------------------------

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

// -- what a schedule without a flush cannot do -------------------------------------

void replicas_need_a_flush(const reader& r) {
  const schedule_traits& sched = *find_schedule(r.cfg().pipeline.schedule);
  if (r.cfg().parallel.dp > 1 && !sched.flushes)
    r.fail_key("parallel.dp", sched.display + " runs one replica; its stages step on their own, with no "
                                              "allreduce point");
}

void clipping_needs_a_flush(const reader& r) {
  const schedule_traits& sched = *find_schedule(r.cfg().pipeline.schedule);
  if (!sched.flushes && r.cfg().train.clip_grad_norm > 0)
    r.fail_key(r.cfg().marks.count("train.clip_grad_norm") ? "train.clip_grad_norm" : "pipeline.schedule",
               sched.display + " steps each stage on its own, with no global gradient norm to clip by; "
                               "leave train.clip_grad_norm out");
}

void tie_needs_a_flush(const reader& r) {
  const schedule_traits& sched = *find_schedule(r.cfg().pipeline.schedule);
  const auto& m = r.cfg().model;
  if (!sched.flushes && m.tie_head >= 0)
    r.fail_key(m.layers[static_cast<size_t>(m.tie_head)].key + ".tie",
               sched.display + " steps each stage on its own, with no point where the tied copies' gradients "
                               "meet; use tie: false or a synchronous schedule");
}

void checkpoints_need_a_flush(const reader& r) {
  const schedule_traits& sched = *find_schedule(r.cfg().pipeline.schedule);
  if (!r.cfg().checkpoint.dir.empty() && !sched.flushes)
    r.fail_key("checkpoint", sched.display + " has no step boundary where every stage's weights are one "
                                             "version; checkpoints need a synchronous schedule");
}

void rebalance_needs_a_flush(const reader& r) {
  const schedule_traits& sched = *find_schedule(r.cfg().pipeline.schedule);
  if (r.cfg().pipeline.rebalance.every > 0 && !sched.flushes)
    r.fail_key("pipeline.rebalance", sched.display + " has no step boundary where every stage's weights are one "
                                                     "version to move; rebalancing needs a synchronous schedule");
}

// -- supervision ---------------------------------------------------------------------

// Going on without a lost process is a restart: without any allowed, a
// death ends the run and the key would do nothing.
void replacements_need_restarts(const reader& r) {
  const auto& sv = r.cfg().supervision;
  if (r.cfg().marks.count("supervision.replace_timeout_s") && sv.max_restarts == 0)
    r.fail_key("supervision.replace_timeout_s", "needs supervision.max_restarts > 0: going on without a lost "
                                                 "process is a restart, and with none allowed a death ends the run");
  if (r.cfg().marks.count("supervision.shrink") && !r.cfg().marks.count("supervision.replace_timeout_s"))
    r.fail_key("supervision.shrink", "needs supervision.replace_timeout_s: without it a lost process is started "
                                     "again, and the run never goes on without one");
}

// Moving the layers re-places the stages from their step-boundary copies,
// which only a supervisor allowed restarts keeps.
void rebalance_needs_restarts(const reader& r) {
  if (r.cfg().pipeline.rebalance.every > 0 && r.cfg().supervision.max_restarts == 0)
    r.fail_key("pipeline.rebalance", "needs supervision.max_restarts > 0: the layers move through the stages' "
                                     "step-boundary copies, which the supervisor keeps only when restarts are allowed");
}

// -- faults vs pipeline and parallel -------------------------------------------------

void fault_stages_exist(const reader& r) {
  const int stages = r.cfg().pipeline.stages;
  const auto& faults = r.facts().faults;
  for (size_t i = 0; i < faults.size(); ++i) {
    const std::pair<const char*, std::optional<int64_t>> indices[] = {
        {"from", faults[i].from}, {"to", faults[i].to}, {"stage", faults[i].stage}};
    for (const auto& [name, x] : indices)
      if (x && *x >= stages)
        r.fail_key(item("faults.inject", i) + "." + name,
                   "stage " + std::to_string(*x) + " does not exist (pipeline.stages " + std::to_string(stages) + ")");
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
      r.fail_key(item("faults.inject", i) + ".microbatch",
                 std::to_string(*x) + " is not below pipeline.microbatches " + std::to_string(microbatches));
}

// -- eval vs data and devices ---------------------------------------------------------

void eval_needs_a_held_out_split(const reader& r) {
  const auto& c = r.cfg();
  if (c.eval.every > 0 && c.data.test_fraction <= 0)
    r.fail_key("eval.every", "evaluates the held-out split, and data.test_fraction " + num(c.data.test_fraction) +
                                 " holds none out (set data.test_fraction above 0)");
}

void eval_needs_a_model_that_computes(const reader& r) {
  const auto& c = r.cfg();
  const std::string first = !c.replica_devices.empty() ? c.replica_devices.front().front()
                            : !c.pipeline.devices.empty() ? c.pipeline.devices.front()
                                                          : std::string();
  if (c.eval.every > 0 && is_measuring_device(first))
    r.fail_key("eval.every", "the " + first + " device computes no model, so there is nothing to evaluate");
}

// -- defaults across sections ------------------------------------------------------

void resolve(reader& r) {
  config& cfg = r.cfg();
  const read_facts& f = r.facts();
  if (cfg.data.kind == "synthetic") {
    cfg.data.features = f.input_width;
    if (cfg.data.classes == 0) cfg.data.classes = f.output_width;
  }
  auto& p = cfg.pipeline;
  for (const auto& [first, last] : f.partition) p.partition.emplace_back(static_cast<int>(first), static_cast<int>(last));
  p.auto_devices = devices_auto(cfg, f);
  cfg.replica_devices = planned_devices(cfg, r.env());
  p.devices = cfg.replica_devices.front();
  if (p.threads.empty()) p.threads = p.devices.front() == "null" && cfg.parallel.dp == 1 ? "shared" : "dedicated";
  if (!f.recompute_list) p.recompute.assign(p.stages, f.recompute_all);
}

}  // namespace actorpipe::config_detail
