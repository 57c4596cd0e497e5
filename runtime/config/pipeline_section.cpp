// pipeline: the schedule and what it decides (chunks, microbatch shape),
// stages and partition, sim times, threads and recomputation. Devices are
// in devices_section.cpp; what the pipeline needs of the model, the batch
// and the replicas, and the microbatch shape the schedule needs of the final
// stage count, are in cross_checks.cpp.
#include "runtime/config/sections.hpp"

#include "runtime/policies/registry.hpp"

#include <cstdint>

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

/// Contiguous [first, last] ranges from layer 0; whether they stay within
/// model.layers is a cross-section check.
void read_partition(reader& r, const entry& e) {
  const std::string path = "pipeline.partition";
  const Node& list = e.value;
  if (!list.IsSequence())
    r.fail(reader::value_mark(e), path, "expected a list of [first, last] layer ranges, found " + describe(list));
  if (list.size() == 0) r.fail_key(path, "is empty; give one [first, last] range per stage");
  int64_t next = 0;  // the first layer the next range must start at
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
    const int64_t first = bounds[0], last = bounds[1];
    if (first != next)
      r.fail(range, key, i == 0 ? "the first range must start at layer 0, found " + std::to_string(first)
                                : "starts at layer " + std::to_string(first) + " but the previous range ended at layer " +
                                      std::to_string(next - 1) + "; ranges must be contiguous");
    if (last < first)
      r.fail(range, key, "ends at layer " + std::to_string(last) + ", before its start " + std::to_string(first));
    r.facts().partition.emplace_back(first, last);
    next = last == INT64_MAX ? last : last + 1;  // no layer follows; the model check says so
  }
}

/// stages, or the partition's ranges over the virtual stages.
void read_stages(reader& r, const section& s) {
  auto& p = r.cfg().pipeline;
  const int v = p.virtual_stages;
  const bool has_stages = r.read_small_int(s, "stages", p.stages);
  if (has_stages) r.at_least("pipeline.stages", p.stages, 1);
  const entry* pe = s.find("partition");
  if (!pe) return;
  read_partition(r, *pe);
  const int ranges = static_cast<int>(r.facts().partition.size());
  if (v == 1 && has_stages && p.stages != ranges)
    r.fail_key("pipeline.stages", std::to_string(p.stages) + " does not match the " + std::to_string(ranges) +
                                      " ranges of pipeline.partition");
  if (ranges % v != 0 || (has_stages && int64_t{p.stages} * v != ranges))
    r.fail_key("pipeline.partition", std::to_string(ranges) + " ranges, but " +
                                         (has_stages ? std::to_string(p.stages) : std::string("the")) + " stages x " +
                                         std::to_string(v) + " virtual stages need one range per virtual stage");
  p.stages = ranges / v;
}

/// all, none, or one true/false per stage.
void read_recompute(reader& r, const entry& re) {
  const std::string key = "pipeline.recompute";
  auto& p = r.cfg().pipeline;
  if (re.value.IsScalar() && (re.value.Scalar() == "all" || re.value.Scalar() == "none")) {
    r.facts().recompute_all = re.value.Scalar() == "all";
  } else if (re.value.IsSequence()) {
    if (static_cast<int>(re.value.size()) != p.stages)
      r.fail_key(key, std::to_string(re.value.size()) + " values for " + std::to_string(p.stages) +
                          " stages; give one true/false per stage, or all / none");
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

/// sim_ms (the sim device's op times) and threads, which depend on the device.
void read_device_options(reader& r, const section& s) {
  auto& p = r.cfg().pipeline;
  const std::string device = first_device(r.cfg(), r.env());
  if (const entry* se = s.find("sim_ms")) {
    const section ss = r.read_map(se->value, "pipeline.sim_ms", {"F", "B", "W"});
    static const std::vector<field<pipeline_config>> times{
        {"F", &pipeline_config::sim_f_ms, rule::ms()},
        {"B", &pipeline_config::sim_b_ms, rule::ms()},
        {"W", &pipeline_config::sim_w_ms, rule::ms()},
    };
    r.read_fields(ss, p, times);
    if (device != "sim") r.fail_key("pipeline.sim_ms", "only the sim device takes op times; pipeline.devices is " + device);
  }
  r.read_choice(s, "threads", "threads mode", {"dedicated", "shared"}, p.threads);
  if (p.threads == "shared" && device != "null")
    r.fail_key("pipeline.threads", "shared runs the stages on CAF's scheduler, which only the null device's ops "
                                   "never block; a stage on " + device + " needs its own thread (dedicated)");
}

}  // namespace

void read_pipeline(reader& r, const entry* e) {
  auto& p = r.cfg().pipeline;
  const section s = r.read_map(e ? e->value : Node(), "pipeline",
                               {"stages", "partition", "schedule", "microbatches", "devices", "intra_op_threads",
                                "pace_ms", "lockstep", "virtual_stages", "max_inflight", "recompute", "sim_ms", "threads"});
  r.read_choice(s, "schedule", "schedule", known_schedules(), p.schedule);
  const schedule_traits& sched = *find_schedule(p.schedule);
  read_chunks(r, s, sched);
  read_stages(r, s);
  if (r.read_small_int(s, "microbatches", p.microbatches)) r.at_least("pipeline.microbatches", p.microbatches, 1);
  if (sched.one_microbatch) p.microbatches = 1;  // the whole batch as one microbatch
  if (const entry* de = s.find("devices")) read_devices(r, *de);
  read_device_options(r, s);
  static const std::vector<field<pipeline_config>> fields{
      // Each stage starts a pool this big; past the cores it only contends.
      {"intra_op_threads", &pipeline_config::intra_op_threads, rule::at_least(0, 1024)},
      {"pace_ms", &pipeline_config::pace_ms, rule::ms()},
      {"lockstep", &pipeline_config::lockstep},
  };
  r.read_fields(s, p, fields);
  if (const entry* re = s.find("recompute")) read_recompute(r, *re);
}

}  // namespace actorpipe::config_detail
