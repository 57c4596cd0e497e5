// pipeline: the schedule and what it decides (chunks, one microbatch),
// stages and partition, sim times, threads, recomputation and rebalancing,
// each as written. Devices are in devices_section.cpp. The rules that need the
// final stage count, the devices, the model, the batch or the replicas are
// in cross_checks.cpp and pipeline_checks.cpp.
#include "runtime/config/sections.hpp"

#include "runtime/schedule/policies/registry.hpp"

namespace actorpipe::config_detail {

namespace {

/// virtual_stages and max_inflight, which only some schedules take.
void read_chunks(reader& r, const section& s, const schedule_traits& sched) {
  auto& p = r.cfg().pipeline;
  p.virtual_stages = sched.default_chunks;
  if (r.read_small_int(s, "virtual_stages", p.virtual_stages)) {
    r.at_least("pipeline.virtual_stages", p.virtual_stages, 1);
    if (sched.fixed_chunks > 1 && p.virtual_stages != sched.fixed_chunks)
      r.fail_key("pipeline.virtual_stages", p.schedule + " runs exactly " + std::to_string(sched.fixed_chunks) +
                                                " chunks per stage (" + sched.chunks_why + "), not " +
                                                std::to_string(p.virtual_stages));
    if (sched.fixed_chunks == 1 && p.virtual_stages != 1)
      r.fail_key("pipeline.virtual_stages",
                 "only the " + trainable_schedules_where([](const schedule_traits& t) { return t.fixed_chunks != 1; }) +
                     " schedules run several chunks per stage, not " + p.schedule);
  }
  if (r.read_small_int(s, "max_inflight", p.max_inflight)) {
    r.at_least("pipeline.max_inflight", p.max_inflight, 1);
    if (!sched.takes_max_inflight)
      r.fail_key("pipeline.max_inflight",
                 "only the " + trainable_schedules_where([](const schedule_traits& t) { return t.takes_max_inflight; }) +
                     " schedule takes a memory bound; " + p.schedule + " sets its own");
  }
}

/// The [first, last] ranges as written; whether they chain and cover the
/// model is a cross-section check.
void read_partition(reader& r, const entry& e) {
  const std::string path = "pipeline.partition";
  const Node& list = e.value;
  if (!list.IsSequence())
    r.fail(reader::value_mark(e), path, "expected a list of [first, last] layer ranges, found " + describe(list));
  if (list.size() == 0) r.fail_key(path, "is empty; give one [first, last] range per stage");
  for (size_t i = 0; i < list.size(); ++i) {
    const Node range = list[i];
    const std::string key = item(path, i);
    r.mark(key, range);
    if (!range.IsSequence() || range.size() != 2)
      r.fail(range, key, "expected a [first, last] layer range, found " +
                             (range.IsSequence() ? "a list of length " + std::to_string(range.size()) : describe(range)));
    int64_t bounds[2];
    for (size_t j = 0; j < 2; ++j) {
      const std::string bkey = item(key, j);
      r.mark(bkey, range[j]);
      bounds[j] = r.parse_int(entry{range[j], range[j]}, bkey);
    }
    r.facts().partition.emplace_back(bounds[0], bounds[1]);
  }
}

/// stages, or the partition's ranges over the virtual stages (whether the
/// two agree is a cross-section check, after the ranges').
void read_stages(reader& r, const section& s) {
  auto& p = r.cfg().pipeline;
  if (r.read_small_int(s, "stages", p.stages)) {
    r.at_least("pipeline.stages", p.stages, 1);
    r.facts().written_stages = p.stages;
  }
  if (const entry* pe = s.find("partition")) {
    read_partition(r, *pe);
    p.stages = static_cast<int>(r.facts().partition.size()) / p.virtual_stages;
  }
}

/// all, none, or one true/false per stage.
void read_recompute(reader& r, const entry& re) {
  const std::string key = "pipeline.recompute";
  auto& p = r.cfg().pipeline;
  if (re.value.IsScalar() && (re.value.Scalar() == "all" || re.value.Scalar() == "none")) {
    r.facts().recompute_all = re.value.Scalar() == "all";
  } else if (re.value.IsSequence()) {
    r.facts().recompute_list = true;  // one per stage: a cross-section check
    for (size_t i = 0; i < re.value.size(); ++i) {
      const Node n = re.value[i];
      const std::string k = item(key, i);
      r.mark(k, n);
      bool on = false;
      if (!n.IsScalar() || !YAML::convert<bool>::decode(n, on)) r.fail(n, k, "expected true or false, found " + describe(n));
      p.recompute.push_back(on);
    }
  } else {
    r.fail(reader::value_mark(re), key,
           "expected all, none or a list of true/false (one per stage), found " + describe(re.value));
  }
}

/// pipeline.rebalance. `every` is what turns it on, so a map without it is
/// refused rather than read as off.
void read_rebalance(reader& r, const entry& e) {
  using rc = pipeline_config::rebalance_config;
  auto& rb = r.cfg().pipeline.rebalance;
  const section s = r.read_map(e.value, "pipeline.rebalance");
  if (!s.has("every")) r.fail_key("pipeline.rebalance.every", "required: the steps between two comparisons");
  static const std::vector<field<rc>> fields{
      {"every", &rc::every, rule::count()},
      // Past 10 (the slowest stage 11 times its share) it would never fire.
      {"threshold", &rc::threshold, rule::positive()},
  };
  r.read_fields(s, rb, fields);
  if (rb.threshold > 10) r.fail_key("pipeline.rebalance.threshold", "must be at most 10, found " + num(rb.threshold));
}

}  // namespace

void read_pipeline(reader& r, const entry* e) {
  auto& p = r.cfg().pipeline;
  const section s = r.read_map(e ? e->value : Node(), "pipeline");
  r.read_choice(s, "schedule", "schedule", known_schedules(), p.schedule);
  const schedule_traits& sched = *find_schedule(p.schedule);
  read_chunks(r, s, sched);
  read_stages(r, s);
  if (r.read_small_int(s, "microbatches", p.microbatches)) r.at_least("pipeline.microbatches", p.microbatches, 1);
  if (sched.one_microbatch) p.microbatches = 1;  // the whole batch as one microbatch
  if (const entry* de = s.find("devices")) read_devices(r, *de);
  if (const entry* se = s.find("sim_ms")) {
    const section ss = r.read_map(se->value, "pipeline.sim_ms");
    static const std::vector<field<pipeline_config>> times{
        {"F", &pipeline_config::sim_f_ms, rule::ms()},
        {"B", &pipeline_config::sim_b_ms, rule::ms()},
        {"W", &pipeline_config::sim_w_ms, rule::ms()},
    };
    r.read_fields(ss, p, times);
  }
  static const std::vector<field<pipeline_config>> fields{
      {"threads", &pipeline_config::threads, rule::one_of("threads mode", {"dedicated", "shared"})},
      // Each stage starts a pool this big; past the cores it only contends.
      {"intra_op_threads", &pipeline_config::intra_op_threads, rule::at_least(0, 1024)},
      {"pace_ms", &pipeline_config::pace_ms, rule::ms()},
      {"lockstep", &pipeline_config::lockstep},
  };
  r.read_fields(s, p, fields);
  if (const entry* re = s.find("recompute")) read_recompute(r, *re);
  if (const entry* be = s.find("rebalance")) read_rebalance(r, *be);
}

}  // namespace actorpipe::config_detail
